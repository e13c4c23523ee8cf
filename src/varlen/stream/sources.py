"""A config's streamed sources, each written by one `varlen optimize --config C`: the main source's training
split and every extra source's, each built alone (the config's data with its streams, sources and weights
off, and the source's own arguments on) and written where the config reads it (`stream:`), or into
`--output`'s folder of the source's name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ALONE", "streamed_sources"]

#: what makes a streamed config's DataModule one source read from its files
ALONE = ("--data.init_args.stream=null", "--data.init_args.sources=null", "--data.init_args.source_weights=null")


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _place(stream: Any) -> str | None:
    """Where a `stream` setting reads: a folder or URL, or the `url` of its mapping form."""
    if isinstance(stream, Mapping):
        stream = stream.get("url") or stream.get("path")
    return None if stream in (None, "") else str(stream)


def streamed_sources(config: Mapping[str, Any], output: str | Path | None = None) -> list[tuple[str, str, list[str]]]:
    """`(name, where to write, the --data arguments that build that source alone)` for each streamed source
    of `config` (a merged config, `varlen.tune.config.command_config`); [] for a config that streams
    nothing. With `output`, each goes to `output/<name>` instead of the place the config reads."""
    args = (config.get("data") or {}).get("init_args") or {}
    found = []
    main = _place(args.get("stream"))
    if main is not None:
        found.append(("main", main, list(ALONE)))
    for source in args.get("sources") or []:
        place = _place(source.get("stream"))
        if place is None:
            continue
        own = [f"--data.init_args.{k}={_value(v)}" for k, v in source.items() if k not in ("name", "stream")]
        found.append((str(source["name"]), place, [*ALONE, *own]))
    if output is not None:
        found = [(name, str(Path(output) / name), args) for name, _, args in found]
    return found
