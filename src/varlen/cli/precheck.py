"""A command line checked against the saved schema (`varlen.cli.schema`) before Lightning is imported: a mistyped
key, a value of the wrong type, a Literal outside its choices, a class path naming no class, a budget below 1 or
an empty config is answered in one line, in well under a second, with the closest valid name.

It refuses only what it can decide: a key, a class or a value it cannot judge (a class's argument of a class not
yet in the schema, a path, a nested class) passes, and the full parse (`varlen.cli.typos`) answers for it; a
config the full parse accepts is never refused here. The lines are those the full parse prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from varlen.cli.commands import TRAINER
from varlen.cli.schema import SECTIONS, load_schema
from varlen.cli.typos import closest_key, empty_config, missing_config, not_one_of, types_said, unknown_name

__all__ = ["CHECKED", "precheck"]

#: the commands whose arguments go to `varlen fit`'s parser (inspect, optimize and tune: after their own options)
CHECKED = (*TRAINER, "inspect", "optimize", "tune")
#: a class section's own keys (the rest are the class's arguments)
_CLASS_KEYS = ("class_path", "init_args", "dict_kwargs", "__path__")


class Refused(Exception):
    """One line that says what is wrong (raised inside the check, returned by `precheck`)."""


def precheck(argv: Sequence[str]) -> str | None:
    """The one line for what the saved schema refuses in `argv` (`fit --config x.yaml ...`); None where it
    refuses nothing, or no schema is saved yet."""
    if not argv or argv[0] not in CHECKED or any(_undecided_flag(arg) for arg in argv[1:]):
        return None
    schema = load_schema()
    keys = schema and schema["commands"].get(argv[0] if argv[0] in TRAINER else "fit")
    if not keys:
        return None
    try:
        _Check(f"varlen {argv[0]}", keys, schema, own=argv[0] in TRAINER).run(argv[1:])
    except Refused as refused:
        return str(refused)
    return None


def _undecided_flag(arg: str) -> bool:
    """A help, a printed config or a list appended to: the full parse answers."""
    flag = arg.split("=")[0]
    return flag in ("-h", "--help", "--print_config") or flag.endswith((".help", "+"))


class _Check:
    """One command line's sources, in order, against the schema of its command."""

    def __init__(self, command: str, keys: dict, schema: dict, own: bool) -> None:
        self.command, self.keys, self.schema, self.own = command, keys, schema, own
        self.sections: dict[str, list[tuple[str, str, object]]] = {s: [] for s in SECTIONS}  # (where, key, value)

    def run(self, args: Sequence[str]) -> None:
        for where, key, value in self._given(list(args)):
            self._key(where, key, value)
        for section in SECTIONS:
            self._section(section)

    def _given(self, args: list[str]) -> Iterator[tuple[str, str, object]]:
        """Each `(where, key, value)` the command line gives: a config's keys, then an option's, in order."""
        while args:
            arg = args.pop(0)
            flag, equals, value = arg.partition("=")
            if not flag.startswith("--") and flag != "-c":
                continue  # a positional, or an own option's value (inspect --out DIR): not the parser's
            if not equals:
                value = args.pop(0) if args and not args[0].startswith("--") else None
            if flag in ("-c", "--config"):
                yield from _config(value)
            elif self.own or flag[2:].split(".")[0] in (*SECTIONS, "trainer"):
                yield "", flag[2:], _loaded(value) if isinstance(value, str) else value

    def _key(self, where: str, key: str, value: object) -> None:
        """A key and its value against the command's keys; a class section's is kept for `_section`."""
        section = key.split(".")[0]
        if section in SECTIONS:
            self._class_given(where, key, value)
        elif key in self.keys:
            if self.keys[key] == "group" and isinstance(value, dict):
                for inner, given in value.items():
                    self._key(where, f"{key}.{inner}", given)
            elif self.keys[key] != "group":
                self._value(where, key, self.keys[key], value, None)
        elif not any(key.startswith(f"{k}.") for k, kind in self.keys.items() if kind != "group"):  # in a class
            self._unknown(where, key)

    def _unknown(self, where: str, key: str) -> None:
        keys = [k for k in self.keys if k != "config"]
        if where:
            raise Refused(f"{self.command} takes no key {closest_key(key, keys)} ({where}; {self._help()} lists them)")
        option = closest_key(key, keys).replace("'", "'--", 1).replace("mean '", "mean '--")
        raise Refused(f"{self.command} takes no option {option} ({self._help()} lists them)")

    def _class_given(self, where: str, key: str, value: object) -> None:
        """`data: {class_path: ..., init_args: {...}}`, `--data NAME`, `--data.class_path`, `--data.init_args.X`."""
        section, _, rest = key.partition(".")
        given = self.sections[section]
        if not rest:
            if isinstance(value, str):
                given.append((where, "class_path", value))
            elif isinstance(value, dict):
                for inner, item in value.items():
                    self._class_given(where, f"{section}.{inner}", item)
            else:
                given.append((where, "?", value))  # a list, a number: the full parse says what it is
        elif rest == "init_args" and isinstance(value, dict):
            given += [(where, name, item) for name, item in value.items()]
        elif rest.startswith("init_args."):
            given.append((where, rest.partition(".")[2], value))
        elif rest == "class_path" or rest.split(".")[0] not in _CLASS_KEYS:
            given.append((where, rest, value))

    def _section(self, section: str) -> None:
        """The classes a section names, then (one class named) each of its arguments."""
        given = self.sections[section]
        if any(name == "?" for _, name, _ in given):
            return
        paths = [(where, value) for where, name, value in given if name == "class_path"]
        named = [self._class(section, where, path) for where, path in paths]  # a name no class has: refused
        if not named or None in named or len({cls for cls, _ in named}) != 1:
            return  # no class named, one the schema cannot judge, or several (the full parse merges them)
        cls, entry = named[0]
        for where, name, value in given:
            if name != "class_path":
                self._argument(section, cls, entry, where, name, value)

    def _class(self, section: str, where: str, path: object) -> tuple[str, dict] | None:
        """The `(name, entry)` of the class `path` names; None: one the schema cannot judge. A name no class has
        is refused, with the closest."""
        if not isinstance(path, str) or Path(path).suffix in (".yaml", ".yml", ".json"):
            return None
        module, _, name = path.rpartition(".")
        known = self.schema["classes"].get(section, {})
        if name in known and (not module or path in known[name]["paths"]):
            return name, known[name]
        if (module and module != SECTIONS[section]) or name in self.schema["names"].get(section, ()):
            return None  # another package's class, or one of varlen's the schema has not read yet
        close = unknown_name(name, known or self.schema["names"].get(section, ()))
        said = close.partition(": ")[2] or "give a class's name or its dotted path"
        at = f"{where}; " if where else ""
        raise Refused(
            f"--{section}: {path!r} is not a class: {said} ({at}{self.command} --help lists the installed ones)"
        )

    def _argument(self, section: str, cls: str, entry: dict, where: str, name: str, value: object) -> None:
        args = entry["args"]
        help_ = f"{where}; " if where else ""
        help_ += f"{self.command} --{section}.help {cls}"
        head = name.split(".")[0]  # `stream.x`: only `stream` is judged, what is inside it the full parse judges
        if head not in args and not any(k.startswith(f"{head}.") for k in args):
            raise Refused(f"{cls} takes no argument {unknown_name(head, args)} ({help_} lists them)")
        if name in args:
            self._value(where, name, args[name], value, (cls, help_))
        floor = entry.get("positive", {}).get(name)
        numbers = value if isinstance(value, list) else [value]
        if floor and all(isinstance(n, int) and not isinstance(n, bool) for n in numbers) and min(numbers or [1]) < 1:
            raise Refused(f"{cls}'s {name}: {floor}, got {value} ({help_} lists them)")

    def _value(self, where: str, key: str, tree: object, value: object, owner: tuple[str, str] | None) -> None:
        """Refuse `value` where no type of `tree` takes it."""
        if _accepts(tree, value) is not False:
            return
        choices = _choices(tree)
        why = not_one_of(value, choices) if choices is not None else f"'{value}' is not {_said(tree)}"
        if owner is not None:
            raise Refused(f"{owner[0]}'s {key}: {why} ({owner[1]} lists them)")
        at = f"{where}; " if where else ""
        raise Refused(f"{key if where else '--' + key}: {why} ({at}{self._help()} lists the options)")

    def _help(self) -> str:
        return f"{self.command} --help"


def _config(path: str | None) -> Iterator[tuple[str, str, object]]:
    """A config file's top-level keys; an empty one is refused (a file it cannot read: the full parse says)."""
    import yaml

    if path is None:
        return  # `--config` and nothing: the full parse says it
    try:
        text = Path(path).read_text(encoding="utf-8") if Path(path).is_file() else None
        loaded = yaml.safe_load(path if text is None else text)  # not a file: a config given inline, or absent
    except (OSError, ValueError, yaml.YAMLError):
        return
    if text is None and not isinstance(loaded, dict):
        raise Refused(missing_config(path))
    if text is not None and loaded is None:
        raise Refused(empty_config(path))
    if isinstance(loaded, dict):
        for key, value in loaded.items():
            yield path, str(key), value


def _loaded(value: str) -> object:
    """A command-line value as jsonargparse reads it (YAML: `5` an int, `[1, 2]` a list, `abc` a string)."""
    import yaml

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _number_like(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return value.strip().lower() in ("inf", "-inf", "nan")
    return True


def _accepts(tree: object, value: object) -> bool | None:
    """True: `tree` takes `value`; False: it surely does not; None: the full parse decides."""
    if isinstance(tree, dict) and "union" in tree:
        found = [_accepts(t, value) for t in tree["union"]]
        return True if True in found else (None if None in found else False)
    if isinstance(tree, dict) and "literal" in tree:
        if value in tree["literal"] or str(value) in map(str, tree["literal"]):
            return True
        return False if isinstance(value, str | int | float | bool) else None
    if isinstance(tree, dict) and "seq" in tree:
        if isinstance(value, list):
            found = [_accepts(tree["seq"], v) for v in value]
            return False if False in found else (None if None in found else True)
        return False if isinstance(value, str | dict) else None
    if tree in ("int", "float", "bool"):
        return _accepts_scalar(tree, value)
    if tree == "none":
        return value is None
    return None if tree == "str" and not isinstance(value, str) else True


def _accepts_scalar(tree: str, value: object) -> bool | None:
    if isinstance(value, list | dict):
        return False
    if isinstance(value, bool):
        return True if tree == "bool" else None
    if isinstance(value, int):
        return True if tree in ("int", "float") else None
    if isinstance(value, float):
        return True if tree == "float" else None
    if isinstance(value, str):
        if tree == "bool":
            return None if value.strip().lower() in ("true", "false", "yes", "no", "on", "off", "1", "0") else False
        return None if _number_like(value) else False
    return None


def _choices(tree: object) -> list | None:
    """A Literal's choices (with None where the union takes it), where the type is nothing else."""
    members = tree["union"] if isinstance(tree, dict) and "union" in tree else [tree]
    if not all(isinstance(m, dict) and "literal" in m or m == "none" for m in members):
        return None
    return [c for m in members if m != "none" for c in m["literal"]]


def _said(tree: object) -> str:
    """A type as a sentence says it: `an int or None`, `a bool or one of 'always'`."""
    members = tree["union"] if isinstance(tree, dict) and "union" in tree else [tree]
    names = []
    for member in members:
        if isinstance(member, dict) and "literal" in member:
            names.append("one of " + ", ".join(repr(c) for c in member["literal"]))
        elif isinstance(member, dict) and "seq" in member:
            names.append(f"list[{member['seq'] if isinstance(member['seq'], str) else '...'}]")
        else:
            names.append({"none": "NoneType"}.get(member, member))
    said = types_said(n for n in names if not n.startswith("one of "))
    literal = [n for n in names if n.startswith("one of ")]
    return " or ".join([said, *literal]) if said else " or ".join(literal)
