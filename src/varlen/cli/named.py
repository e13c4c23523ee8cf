"""The scenarios a command line names, so that `varlen fit` imports only those: each brings its own heavy
packages (transformers, PyTorch Geometric with RDKit, pandas with SciPy), and a command that names the text
DataModule, or a config that does, needs none of the others'."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["named_scenarios"]

#: the most of a file read to look for a class's name (a config is a few kB)
MOST_BYTES = 1 << 20


def named_scenarios(argv: Sequence[str], classes: Iterable[str]) -> set[str] | None:
    """The names of `classes` (the scenario tables of `varlen.datamodules` and `varlen.models`) that
    `argv` or a file it gives (a config) writes; None: every scenario is needed, for a full help (it lists every
    DataModule), or where none is named (jsonargparse may look a short class name up among them)."""
    if any(arg in ("-h", "--help") for arg in argv):
        return None
    text = "\n".join([*argv, *(_read(arg.rpartition("=")[2]) for arg in argv)])
    found = {name for name in classes if re.search(rf"\b{re.escape(name)}\b", text)}
    return found or None


def _read(value: str) -> str:
    """The text of the file `value` names, if it is one (a config), else nothing."""
    try:
        path = Path(value)
        if not path.is_file() or path.stat().st_size > MOST_BYTES:
            return ""
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return ""
