"""A class's own refusal of its arguments, said in one line: a DataModule or a model that raises `ValueError` or
`TypeError` in its `__init__` (`max_tokens must be >= 1`) while LightningCLI instantiates the config's classes
reaches the user through jsonargparse as some 85 lines of traceback. `refusals` turns it into a `ConfigError`
naming the class, the argument and where its arguments are listed; `varlen` prints that alone, status 2."""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from collections.abc import Iterator

from varlen.cli.commands import SUMMARIES
from varlen.cli.schema import SECTIONS
from varlen.cli.typos import parameters
from varlen.errors import ConfigError, data_error_in, raised_chain

__all__ = ["refusal_line", "refusals"]

#: the class jsonargparse was instantiating, as its message names it
_CLASS = re.compile(r"class_path[=\s]'(?P<path>[\w.]+)'")


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Instantiate the config's classes inside: a `ValueError` or `TypeError` (not a `DataError`, which says
    its own file and row) comes out as a `ConfigError` of one line, raised from it."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if data_error_in(error) is not None:
            raise
        raise ConfigError(refusal_line(error, _command())) from error


def refusal_line(error: BaseException, command: str) -> str:
    """`Class's argument: the class's own words (varlen fit --data.help Class lists them)`."""
    chain = raised_chain(error)
    root = str(chain[-1]).strip().splitlines()[0] if str(chain[-1]).strip() else type(chain[-1]).__name__
    said = "\n".join(str(e) for e in chain)
    found = _CLASS.search(said)
    if found is None:
        return f"a class of the config refused its arguments: {root} ({command} --help lists them)"
    path = found["path"]
    cls = path.rpartition(".")[2]
    argument = _argument(root, parameters(path))
    argument = f"'s {argument}" if argument else ""
    section = _section(path)
    where = f"--{section}.help {cls}" if section else "--help"
    return f"{cls}{argument}: {root} ({command} {where} lists them)"


def _argument(said: str, names: list[str]) -> str | None:
    """The argument `said` is about: the first it names as a word, else the longest inside a word
    (`max_batch_size must be >= 1`: `batch_size`, the argument that became it)."""
    words = [(m.start(), name) for name in names if (m := re.search(rf"\b{re.escape(name)}\b", said))]
    if words:
        return min(words)[1]
    inside = [name for name in names if name in said]
    return max(inside, key=len) if inside else None


def _section(path: str) -> str | None:
    """`data` or `model`: the section whose base class the class at `path` extends (None: neither)."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    for section, package in SECTIONS.items():
        base = getattr(sys.modules.get(package), "VarLenDataModule" if section == "data" else "VarLenModule", None)
        if isinstance(cls, type) and isinstance(base, type) and issubclass(cls, base):
            return section
    return None


def _command() -> str:
    """`varlen fit` (or the command this process runs), for the help the line points to."""
    named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in SUMMARIES else None
    return f"varlen {named}" if named else "varlen"
