"""A mistyped argument or config key answered in one line: the class, the unknown name and the closest valid
one, instead of jsonargparse's account of every type a value could have been.

`varlen fit --data.init_args.max_token 100` (or `size_feld:` in a config) reads
`varlen: error: TextClassificationDataModule takes no argument 'max_token': did you mean 'max_tokens'?
(varlen fit --data.help TextClassificationDataModule lists them)`, status 2, for every command the parser
reads (fit, validate, test, predict, inspect, tune, optimize). So is a value of the wrong kind: a Literal's
choices, an option's types (`--trainer.max_epochs: 'x' is not an int or None`), a class path naming no class.
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
#: a class's argument given a value it does not take (a Literal's choices, a type)
_CLASS_VALUE = re.compile(
    r"Problem with given class_path '(?P<path>[\w.]+)':\s*Parser key \"(?P<name>\w+)\":\s*(?P<why>[^\n]+)"
)
_LITERAL = re.compile(r"Expected a typing\.Literal\[(?P<choices>.*)\]\. Got value: (?P<value>.*)")
#: a class path that names no class
_NOT_A_CLASS = re.compile(r"Expected a dot import path string: (?P<value>\S+)")
#: a plain option of a union type (int | None) given a value of none of them
_UNION = re.compile(
    r'Parser key "(?P<key>[\w.]+)":\s*Does not validate against any of the Union subtypes\s*'
    r"Subtypes: \[(?P<types>[^\]]*)\].*Given value: (?P<value>[^\n]*)",
    re.S,
)


def unknown_name(name: str, known: Iterable[str]) -> str:
    """`'name'`, and the closest of `known` where one is close: `: did you mean 'x'?`."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"{name!r}" + (f": did you mean {close[0]!r}?" if close else "")


def _parameters(path: str) -> list[str]:
    """The arguments a class takes: its own and those it hands on (a DataModule's signature lists the base's)."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        return _handed_on(cls)
    except (ImportError, AttributeError, TypeError, ValueError):
        return []


def _handed_on(cls: type) -> list[str]:
    """A class's arguments: its signature's, and where that takes `**kwargs` (a model that hands its base's
    on), its bases' `__init__`'s too, as jsonargparse follows them."""
    names: list[str] = []
    for init in [cls, *(klass.__dict__["__init__"] for klass in cls.__mro__ if "__init__" in klass.__dict__)]:
        parameters = inspect.signature(init).parameters
        names += [p for p in parameters if p not in ("self", "args", "kwargs") and p not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            break
    return names


def one_line(message: str, command: str, options: Iterable[str] = ()) -> str | None:
    """The one line for jsonargparse's `message` (None: not a mistyped name; the message stands as it is).

    Args:
        message: what jsonargparse would print after `error:`.
        command: the command line's start, e.g. `varlen fit` (the help it points to).
        options: the options the parser knows (`--trainer.max_epochs`), for unrecognised ones.
    """
    found = _CLASS_OPTION.search(message)
    if found is not None:
        path, name = found["path"], found["name"]
        cls = path.rpartition(".")[2]
        key = _KEY.search(message)
        group = f"--{key['key']}.help {cls}" if key else "--help"
        return f"{cls} takes no argument {unknown_name(name, _parameters(path))} ({command} {group} lists them)"
    line = _wrong_value(message, command)
    if line is not None:
        return line
    found = _UNRECOGNIZED.search(message)
    if found is not None:
        given = found["names"].strip().split()[0]
        known = [o for o in options if o.startswith("--")]
        flag = given.split("=")[0]
        return f"{command} takes no option {unknown_name(flag, known)} ({command} --help lists them)"
    return None


def _wrong_value(message: str, command: str) -> str | None:
    """A value of the wrong kind in one line: what was given and what is allowed (None: not such a message)."""
    found = _CLASS_VALUE.search(message)
    if found is not None:
        cls, key = found["path"].rpartition(".")[2], _KEY.search(message)
        literal = _LITERAL.match(found["why"])
        why = f"'{literal['value']}' is not one of {literal['choices']}" if literal else found["why"]
        group = f"--{key['key']}.help {cls}" if key else "--help"
        return f"{cls}'s {found['name']}: {why} ({command} {group} lists them)"
    found, key = _NOT_A_CLASS.search(message), _KEY.search(message)
    if found is not None and key is not None:
        return (
            f"--{key['key']}: '{found['value']}' is not a class: give a class's name or its dotted path "
            f"({command} --help lists the installed ones)"
        )
    found = _UNION.search(message)
    if found is not None and "class_path" not in message:
        types = [re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1", t.strip()) for t in found["types"].split(",")]
        names = " or ".join("None" if t == "NoneType" else t for t in types)
        article = "an" if names[:1].lower() in "aeiou" else "a"
        return f"--{found['key']}: '{found['value']}' is not {article} {names} ({command} --help lists the options)"
    return None
