"""A mistyped argument or config key answered in one line: the class, the unknown name and the closest valid
one, instead of jsonargparse's account of every type a value could have been.

``varlen fit --data.init_args.max_token 100`` (or ``size_feld:`` in a config) reads
``varlen: error: TextClassificationDataModule takes no argument 'max_token': did you mean 'max_tokens'?
(varlen fit --data.help TextClassificationDataModule lists them)``, status 2, for every command the parser
reads (fit, validate, test, predict, inspect, tune, optimize).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Iterable

__all__ = ["one_line", "unknown_name"]

#: jsonargparse's words for a class's argument it does not know, with the class's path
_CLASS_OPTION = re.compile(
    r"Problem with given class_path '(?P<path>[\w.]+)':\s*(?:Option|Key) '(?P<name>[\w.]+)' is not accepted"
)
#: an option or key no parser level knows
_UNRECOGNIZED = re.compile(r"unrecognized arguments?: (?P<names>.+)", re.IGNORECASE)
#: the parser key a problem is under ("data", "model", "trainer")
_KEY = re.compile(r'Parser key "(?P<key>[\w.]+)"')


def unknown_name(name: str, known: Iterable[str]) -> str:
    """``'name'``, and the closest of ``known`` where one is close: ``: did you mean 'x'?``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"{name!r}" + (f": did you mean {close[0]!r}?" if close else "")


def _parameters(path: str) -> list[str]:
    """The arguments a class takes: its own and those it hands on (a DataModule's signature lists the base's)."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        return [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, TypeError, ValueError):
        return []


def one_line(message: str, command: str, options: Iterable[str] = ()) -> str | None:
    """The one line for jsonargparse's ``message`` (None: not a mistyped name; the message stands as it is).

    Args:
        message: what jsonargparse would print after ``error:``.
        command: the command line's start, e.g. ``varlen fit`` (the help it points to).
        options: the options the parser knows (``--trainer.max_epochs``), for unrecognised ones.
    """
    found = _CLASS_OPTION.search(message)
    if found is not None:
        path, name = found["path"], found["name"]
        cls = path.rpartition(".")[2]
        key = _KEY.search(message)
        group = f"--{key['key']}.help {cls}" if key else "--help"
        return f"{cls} takes no argument {unknown_name(name, _parameters(path))} ({command} {group} lists them)"
    found = _UNRECOGNIZED.search(message)
    if found is not None:
        given = found["names"].strip().split()[0]
        known = [o for o in options if o.startswith("--")]
        flag = given.split("=")[0]
        return f"{command} takes no option {unknown_name(flag, known)} ({command} --help lists them)"
    return None
