"""What a command line may say, saved for the light entry: each command's keys with their types (`--trainer.*`,
`--seed_everything`, `--epoch_lines`...), each DataModule's and model's arguments with their types and Literal
choices, the class names a `class_path` may give, and the arguments a DataModule refuses below 1 (its budget).

Lightning's import alone takes seconds, so a mistyped key or a wrong value is answered from this file
(`varlen.cli.precheck`) before it. It is written by a full parse (`record_schema`, from the parser LightningCLI
built, and jsonargparse's own reading of each imported class's signature), beside the saved help and keyed as
it is (`varlen.cli.saved_help.install_key`: the installed packages, varlen's own files), so another install or an
edited class makes another schema. Classes that a later parse imports are added to it.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path

from varlen.cli.commands import TRAINER
from varlen.cli.saved_help import install_key

__all__ = ["SECTIONS", "load_schema", "record_schema", "schema_path", "type_tree"]

#: the sections a `class_path` chooses the class of, and the package whose scenario table names them
SECTIONS = {"data": "varlen.datamodules", "model": "varlen.models"}
#: options that are no key of a config
_NOT_KEYS = ("help", "print_config")


def schema_path() -> Path:
    """`<cache folder>/schema/<install>/schema.json`."""
    from varlen.storage.cache import default_cache_dir

    return default_cache_dir() / "schema" / install_key("schema") / "schema.json"


def load_schema() -> dict | None:
    """The saved schema of this install (None: none saved yet, or unreadable)."""
    try:
        return json.loads(schema_path().read_text(encoding="utf-8"))
    except (OSError, RuntimeError, ValueError):
        return None


def record_schema(parser) -> None:
    """Save what `parser` (LightningCLI's, with its subcommands) and the imported scenario classes take, where
    the saved schema lacks it. A cache: one that cannot be made or written keeps nothing, silently."""
    try:
        path = schema_path()
        schema = load_schema() or {"commands": {}, "classes": {}, "names": {}}
        if _add(schema, parser):
            _save(path, schema)
    except Exception:  # noqa: BLE001 - the schema only speeds up an error; never fail a command for it
        return


def _add(schema: dict, parser) -> bool:
    """Add the commands and classes `schema` lacks; True where it changed."""
    changed = False
    commands = getattr(getattr(parser, "commands", None), "_name_parser_map", {})
    for name in TRAINER:
        if name in commands and name not in schema["commands"]:
            schema["commands"][name] = _keys(commands[name])
            changed = True
    for section, package in SECTIONS.items():
        module = sys.modules.get(package)
        if module is None:
            continue
        known = schema["classes"].setdefault(section, {})
        if section not in schema["names"]:
            schema["names"][section] = _class_names(module)
            changed = True
        for name, where in getattr(module, "SCENARIOS", {}).items():
            if name not in known and f"{package}.{where}" in sys.modules:
                with contextlib.suppress(Exception):  # a class jsonargparse cannot read: left to the full parse
                    known[name] = _class_entry(getattr(module, name), f"{package}.{name}")
                    changed = True
    return changed


def _keys(parser) -> dict[str, object]:
    """Each key of `parser` (`trainer.max_epochs`) and its type (`type_tree`); a section: `"group"`."""
    keys: dict[str, object] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in _NOT_KEYS or action.dest.endswith(".help"):
            continue
        if action.dest == "config":
            keys[action.dest] = "config"
        elif hasattr(action, "_typehint"):
            keys[action.dest] = type_tree(action._typehint)
        else:
            keys[action.dest] = "group" if type(action).__name__ == "_ActionConfigLoad" else "any"
    return keys


def _class_entry(cls: type, path: str) -> dict:
    """A class's arguments as jsonargparse reads them (following `**kwargs` into its bases), the paths that
    name it, and the arguments it refuses below 1 with the words it refuses them in."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, fail_untyped=False)
    return {
        "args": _keys(parser),
        "paths": sorted({path, f"{cls.__module__}.{cls.__qualname__}"}),
        "positive": _positive(cls),
    }


def _positive(cls: type) -> dict[str, str]:
    """`batch_size` and `max_tokens`, where the DataModule's own budget check (`_plan_spec`) refuses 0, with
    its words (`max_tokens must be >= 1`)."""
    check = getattr(cls, "_plan_spec", None)
    positive: dict[str, str] = {}
    for name, given in (("batch_size", (0, None)), ("max_tokens", (None, 0))):
        try:
            check(*given) if check is not None else None
        except ValueError as error:
            positive[name] = str(error).split(", got")[0]
    return positive


def _class_names(package: types.ModuleType) -> list[str]:
    """Every name a class path of `package` may end in: its public names and every class its modules define
    (read from their source, nothing imported), so that none a full parse accepts is refused."""
    names = {name for name in dir(package) if not name.startswith("_")}
    folder = Path(package.__file__).parent
    for source in folder.glob("*.py"):
        with contextlib.suppress(OSError, SyntaxError, ValueError):
            tree = ast.parse(source.read_text(encoding="utf-8"))
            names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    return sorted(names)


def type_tree(hint: object) -> object:
    """A type as JSON the light check reads: `"int"`, `"float"`, `"bool"`, `"str"`, `"none"`, `{"literal": [...]}`,
    `{"union": [...]}`, `{"seq": ...}`; `"any"` for what it cannot judge (a class, a path, a dict)."""
    simple = {int: "int", float: "float", bool: "bool", str: "str", type(None): "none"}
    if isinstance(hint, type) and hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        ok = all(isinstance(a, str | int | float | bool) for a in args)
        return {"literal": list(args)} if ok else "any"
    if origin in (typing.Union, types.UnionType):
        return {"union": [type_tree(a) for a in args]}
    if origin in (list, Sequence) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return {"seq": type_tree(args[0])} if args else "any"
    return "any"


def _save(path: Path, schema: dict) -> None:
    """Write `schema` whole, and remove the schemas of other installs."""
    for other in path.parent.parent.glob("*"):
        if other != path.parent:
            shutil.rmtree(other, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps(schema, sort_keys=True), encoding="utf-8")
    os.replace(part, path)
