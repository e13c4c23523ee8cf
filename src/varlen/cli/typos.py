"""A mistyped argument or config key answered in one line: the class, the unknown name and the closest valid
one, instead of jsonargparse's account of every type a value could have been.

`varlen fit --data.init_args.max_token 100` (or `size_feld:` in a config) reads
`varlen: error: TextClassificationDataModule takes no argument 'max_token': did you mean 'max_tokens'?
(varlen fit --data.help TextClassificationDataModule lists them)`, status 2, for every command the parser
reads (fit, validate, test, predict, inspect, tune, optimize). So is a value of the wrong kind: a Literal's
choices, an option's types (`--trainer.max_epochs: 'x' is not an int or None`), a class path naming no class
(with the closest class's name), a config key no section takes (`trainer: {max_epoch: 1}`: did you mean
`trainer.max_epochs`?) and an empty config file. `varlen.cli.precheck` says the same lines before Lightning is
imported where a saved schema decides; these are what the full parse says of the rest.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from varlen.cli.schema import SECTIONS

__all__ = [
    "closest_key",
    "empty_config",
    "known_options",
    "missing_config",
    "not_one_of",
    "one_line",
    "parameters",
    "plain_line",
    "types_said",
    "unknown_name",
]

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
#: anything else wrong with a class path, in jsonargparse's words
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '(?P<path>[\w.]+)':\s*(?P<why>[^\n]+)")
#: a class path that names no class
_NOT_A_CLASS = re.compile(r"Expected a dot import path string: (?P<value>\S+)")
#: a plain option of a union type (int | None) given a value of none of them
_UNION = re.compile(
    r'Parser key "(?P<key>[\w.]+)":\s*Does not validate against any of the Union subtypes\s*'
    r"Subtypes: \[(?P<types>[^\n]*)\]\n.*?Given value: (?P<value>[^\n]*)",
    re.S,
)
#: the subcommand a message is about
_SUBCOMMAND = re.compile(r"Subcommand '(?P<name>[\w-]+)'")
#: a config key (from a file) no parser level knows
_NOT_ACCEPTED = re.compile(r"does not accept option '(?P<key>[\w.]+)'")
#: a class path whose module has no such name
_NO_ATTRIBUTE = re.compile(
    r"Problem with given class_path '(?P<path>[\w.]+)':\s*module '(?P<module>[\w.]+)' has no attribute"
)
#: a config file that holds no keys (jsonargparse says its text after the colon, an empty one nothing)
_EMPTY_CONFIG = re.compile(r"^Unexpected config:")
#: the classes a class path may name, where it names none (the scenario tables of varlen.datamodules, .models)


def known_options(parser, message: str) -> list[str]:
    """The options `parser` knows, and where `message` is about a subcommand's (`Subcommand 'fit' does not
    accept...`: the root parser says it), that subcommand's."""
    options = list(parser._option_string_actions)
    commands = getattr(getattr(parser, "commands", None), "_name_parser_map", {})
    named = _SUBCOMMAND.search(message)
    if named is not None and named["name"] in commands:
        options += list(commands[named["name"]]._option_string_actions)
    return options


def unknown_name(name: str, known: Iterable[str]) -> str:
    """`'name'`, and the closest of `known` where one is close: `: did you mean 'x'?`."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"{name!r}" + (f": did you mean {close[0]!r}?" if close else "")


def parameters(path: str) -> list[str]:
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
        signature = inspect.signature(init).parameters
        names += [p for p in signature if p not in ("self", "args", "kwargs") and p not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values()):
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
        return f"{cls} takes no argument {unknown_name(name, parameters(path))} ({command} {group} lists them)"
    line = _wrong_value(message, command) or _wrong_key(message, command, options)
    if line is not None:
        return line
    found = _UNRECOGNIZED.search(message)
    if found is not None:
        given = found["names"].strip().split()[0]
        known = [o for o in options if o.startswith("--")]
        flag = given.split("=")[0]
        return f"{command} takes no option {unknown_name(flag, known)} ({command} --help lists them)"
    return None


def _wrong_key(message: str, command: str, options: Iterable[str]) -> str | None:
    """A config key no section takes, or an empty config file, in one line (None: neither)."""
    found = _NOT_ACCEPTED.search(message)
    if found is not None:
        keys = [o[2:] for o in options if o.startswith("--") and not o.endswith(".help")]
        return f"{command} takes no key {closest_key(found['key'], keys)} ({command} --help lists them)"
    found = _NO_CONFIG.search(message)
    if found is not None:
        return missing_config(found["path"])
    if _EMPTY_CONFIG.search(message.strip()) is None:
        return None
    empty = [path for path in _configs(sys.argv[1:]) if _is_empty(path)]  # read only for this message
    return empty_config(empty[0]) if empty else None


#: a config file that is not there (jsonargparse names it whole)
_NO_CONFIG = re.compile(r"Parser key \"config\":\s*(?:File does not exist|Path is not a file): '(?P<path>[^']+)'")
#: a config to copy, named where a config is empty
_EXAMPLE = "configs/text_bert.yaml"


def empty_config(path: str) -> str:
    """`the config X is empty`, with a config to copy."""
    return f"the config {path} is empty: nothing to read (configs/ has examples: {_EXAMPLE})"


def missing_config(path: str) -> str:
    """`the config X is not a file`, with the closest config beside where it was looked for."""
    folder = Path(path).parent
    try:
        beside = [f.name for f in folder.iterdir() if f.suffix in (".yaml", ".yml", ".json")]
    except OSError:
        beside = []
    stems = {Path(name).stem: name for name in beside}  # `.yaml` alone makes every name close
    close = difflib.get_close_matches(Path(path).stem, list(stems), n=1, cutoff=0.6)
    hint = f": did you mean {str(folder / stems[close[0]])!r}?" if close else ""
    return f"the config {path} is not a file{hint} (configs/ has examples: {_EXAMPLE})"


def plain_line(message: str, command: str) -> str:
    """Any other jsonargparse error as one line: its first line (and the next, where the first ends in a
    colon), and where the options are listed."""
    found, key = _CLASS_PROBLEM.search(message), _KEY.search(message)
    if found is not None:  # e.g. a scenario whose extra is not installed: jsonargparse's words on it
        given = f"--{key['key']}: " if key else ""
        return f"{given}given class_path '{found['path']}': {found['why']} ({command} --help lists the installed ones)"
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()] or ["no usable arguments"]
    said = " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return f"{said} ({command} --help lists the options)"


def _configs(argv: list[str]) -> list[str]:
    """The config files a command line gives (`--config X`, `-c X`, `--config=X`)."""
    given = [a.partition("=")[2] for a in argv if a.startswith("--config=")]
    return given + [value for flag, value in zip(argv, argv[1:], strict=False) if flag in ("-c", "--config")]


def _is_empty(path: str) -> bool:
    """A file that holds no YAML value (nothing, or comments only)."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8")) is None
    except (OSError, ValueError, yaml.YAMLError):
        return False


def closest_key(key: str, keys: Iterable[str]) -> str:
    """`'key'` and the closest of `keys` beside it (`trainer.max_epoch`: `trainer.max_epochs`), or for an
    unknown section the closest section (`trainr.max_epochs`: `trainer`)."""
    keys = list(keys)
    parent, _, _ = key.rpartition(".")
    while parent and not any(k.startswith(f"{parent}.") for k in keys):  # an unknown section: its closest
        key, parent = parent, parent.rpartition(".")[0]
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    return unknown_name(key, siblings)


def types_said(types: Iterable[str]) -> str:
    """`['int', 'NoneType']` as `an int or None`: the kinds a value may be, as a sentence says them."""
    names = ["None" if t == "NoneType" else t for t in types]
    said = [n if n == "None" else f"{'an' if n[:1].lower() in 'aeiou' else 'a'} {n}" for n in names]
    if len(said) < 2:
        return "".join(said)
    return f"{', '.join(said[:-1])} or {said[-1]}"


def not_one_of(value: object, choices: Iterable[object]) -> str:
    """`'value' is not one of 'a', 'b'`, with the closest choice where one is close."""
    choices = list(dict.fromkeys(choices))  # a union of Literals may repeat a choice
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    listed = ", ".join(repr(c) for c in choices)
    return f"'{value}' is not one of {listed}" + (f": did you mean {close[0]!r}?" if close else "")


def _split_types(text: str) -> list[str]:
    """jsonargparse's `Subtypes: [...]` list as short names (`<class 'int'>`: `int`, `list[int]` as it is)."""
    parts, depth, part = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(part.strip())
            part = ""
        else:
            part += char
    parts.append(part.strip())
    return [re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1", p) for p in parts if p]


def _wrong_value(message: str, command: str) -> str | None:
    """A value of the wrong kind in one line: what was given and what is allowed (None: not such a message)."""
    found = _CLASS_VALUE.search(message)
    if found is not None:
        cls, key = found["path"].rpartition(".")[2], _KEY.search(message)
        literal, union = _LITERAL.match(found["why"]), _UNION.search(message, found.start())
        if literal is not None:
            why = not_one_of(literal["value"], [c.strip().strip("'") for c in literal["choices"].split(",")])
        elif union is not None:
            why = _not_of_types(union["value"], union["types"])
        else:
            why = found["why"]
        group = f"--{key['key']}.help {cls}" if key else "--help"
        return f"{cls}'s {found['name']}: {why} ({command} {group} lists them)"
    found, key = _NOT_A_CLASS.search(message) or _NO_ATTRIBUTE.search(message), _KEY.search(message)
    if found is not None and key is not None:
        given = found["value"] if "value" in found.re.groupindex else found["path"]
        return f"--{key['key']}: {_not_a_class(given, key['key'])} ({command} --help lists the installed ones)"
    found = _UNION.search(message)
    if found is not None and "class_path" not in message:
        why = _not_of_types(found["value"], found["types"])
        return f"--{found['key']}: {why} ({command} --help lists the options)"
    return None


def _not_of_types(value: str, types: str) -> str:
    """`'x' is not an int or None`; a union of Literals: `'x' is not one of ...`, with the closest."""
    names = _split_types(types)
    literals = [re.fullmatch(r"typing\.Literal\[(.*)\]", n) for n in names]
    choices = [c.strip().strip("'") for found in literals if found for c in found[1].split(",")]
    if all(found or n == "NoneType" for found, n in zip(literals, names, strict=True)) and choices:
        return not_one_of(value, choices)
    said = types_said(n for found, n in zip(literals, names, strict=True) if not found)
    return f"'{value}' is not {said}" + (f" or one of {', '.join(map(repr, choices))}" if choices else "")


def _not_a_class(given: str, section: str) -> str:
    """`'X' is not a class`, and the closest class of the section's package (its scenario table)."""
    names: list[str] = []
    if section in SECTIONS:
        try:
            names = list(getattr(importlib.import_module(SECTIONS[section]), "SCENARIOS", {}))
        except ImportError:
            names = []
    close = difflib.get_close_matches(given.rpartition(".")[2], names, n=1, cutoff=0.6)
    return f"'{given}' is not a class: " + (
        f"did you mean {close[0]!r}?" if close else "give a class's name or its dotted path"
    )
