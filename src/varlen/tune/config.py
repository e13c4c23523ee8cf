"""The config `varlen tune` measures, read as `varlen fit` reads it, and the copy it writes.

Only what tune needs is read here: the YAML files of `--config` merged in order, then the
`--data.*` / `--trainer.*` / `--model.*` arguments of the command line set into it (jsonargparse's
spelling: `--data.init_args.name`, or `--data.name` for an `init_args` value). The DataModule
and model are built by the caller from the same arguments (`varlen.cli.dispatch`), so they agree.

The copy `write_config` writes is the user's first `--config` file edited in place (`varlen.tune.yaml_edit`,
ruamel.yaml's round trip): its comments, key order, quoting and layout kept, only the values tune picked (and
those the command line or later `--config` files changed) set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from varlen.tune.yaml_edit import edited_yaml

__all__ = ["command_config", "config_files", "epochs_and_batches", "write_config"]

SECTIONS = ("data", "model", "trainer")


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def _arguments(argv: Sequence[str]) -> list[tuple[str, str]]:
    """`(name, value)` of each `--name=value` or `--name value` argument."""
    found, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "=" in arg:
            found.append(tuple(arg[2:].split("=", 1)))
        elif arg.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            found.append((arg[2:], argv[i + 1]))
            i += 1
        i += 1
    return found


def command_config(argv: Sequence[str]) -> dict[str, Any]:
    """The `--config` files merged in order, with the command line's section arguments set into them."""
    config: dict[str, Any] = {}
    for name, value in _arguments(argv):
        if name == "config":
            config = _merge(config, yaml.safe_load(Path(value).read_text(encoding="utf-8")) or {})
            continue
        path = name.split(".")
        if path[0] not in SECTIONS or len(path) < 2:
            continue
        if path[0] in ("data", "model") and path[1] not in ("class_path", "init_args"):
            path = [path[0], "init_args", *path[1:]]
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = yaml.safe_load(value)
    return config


def epochs_and_batches(config: Mapping[str, Any], batches: int) -> tuple[int, int]:
    """The run's epochs (`trainer.max_epochs`; 1 when unset or endless) and batches per epoch (a
    loader's `batches`, cut by `trainer.limit_train_batches`)."""
    trainer = config.get("trainer") or {}
    epochs = trainer.get("max_epochs")
    epochs = int(epochs) if isinstance(epochs, int) and epochs > 0 else 1
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, int) and not isinstance(limit, bool):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = int(batches * limit)
    return epochs, max(batches, 1)


def config_files(argv: Sequence[str]) -> list[Path]:
    """The `--config` files of `argv`, in order."""
    return [Path(value) for name, value in _arguments(argv) if name == "config"]


def write_config(
    path: str | Path,
    config: Mapping[str, Any],
    init_args: Mapping[str, Any],
    note: str,
    source: str | Path | None = None,
) -> Path:
    """A copy of `config` with `init_args` set in its `data.init_args`, headed by `note` (comment lines).

    With `source` (the first `--config` file) the copy is that file edited (`edited_yaml`): every line
    holding no value that changed is kept byte for byte. Without one, `config` is dumped as YAML."""
    out = dict(config)
    if isinstance(out.get("data"), str):  # `data: ClassName`, jsonargparse's short form: its init_args go beside
        out["data"] = {"class_path": out["data"]}
    out = _merge(out, {"data": {"init_args": dict(init_args)}})
    path = Path(path)
    if source is not None:
        text = edited_yaml(Path(source).read_text(encoding="utf-8"), out, note)
    else:
        text = "".join(f"# {line}\n" for line in note.splitlines())
        text += yaml.safe_dump(out, sort_keys=False, default_flow_style=False)
    path.write_text(text, encoding="utf-8")
    return path
