"""Lazy scenario modules: a package names its classes, and imports a module only when asked."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_scenarios(package: str, names: Mapping[str, str]) -> tuple[Callable[[], None], Callable[[str], object]]:
    """``import_all`` (every scenario module, for the CLI) and a module ``__getattr__``."""

    def import_all() -> None:
        for module in sorted(set(names.values())):
            importlib.import_module(f"{package}.{module}")

    def getattr_(name: str) -> object:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return import_all, getattr_
