"""Lazy scenario modules: a package names its classes, and imports a module only when asked."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping

from varlen._extras import MissingExtraError

__all__ = ["lazy_scenarios"]


def lazy_scenarios(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[..., dict[str, MissingExtraError]], Callable[[str], object]]:
    """`import_all` (the scenario modules whose extra is installed, for the CLI) and a module `__getattr__`.

    `import_all(only)` imports the modules of the public names in `only` (None: every module), and returns
    the modules left out, each with the `MissingExtraError` that names its extra; asking
    for one of their classes raises that error again.
    """

    def import_all(only: Iterable[str] | None = None) -> dict[str, MissingExtraError]:
        missing = {}
        modules = set(names.values()) if only is None else {names[name] for name in only if name in names}
        for module in sorted(modules):
            try:
                importlib.import_module(f"{package}.{module}")
            except MissingExtraError as error:  # that scenario is not installed: not offered
                missing[module] = error
        return missing

    def getattr_(name: str) -> object:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return import_all, getattr_
