"""Faults a cache meets on real machines, made in a test without root: bytes flipped in a built file,
a table a build with a bug wrote."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import varlen.tables as tables
from varlen.batching import Ragged


def flip_bytes(path: Path, count: int = 16, at: float = 0.5) -> None:
    """Invert ``count`` bytes of ``path`` in place, from ``at`` of its size (the middle): what a bad
    disk, a faulty copy or a stray write does. Its modification time changes, as a write's does."""
    start = int(path.stat().st_size * at)
    with open(path, "r+b") as handle:
        handle.seek(start)
        data = handle.read(count)
        handle.seek(start)
        handle.write(bytes(b ^ 0xFF for b in data))


def rewrite(path: Path, **changes: Callable[[Any], Any]) -> None:
    """Write the varlen table at ``path`` again, as a build would (the same version and key; a valid
    checksum where tables record one), with ``changes[name](column)`` in place of column ``name``:
    what a build with a bug would have written."""
    table = tables.MappedTable(path)
    columns = {}
    for name in table.columns:
        kind = table.batch.schema.field(name).type
        column = table.ragged(name) if pa.types.is_large_list(kind) else table.numpy(name)
        columns[name] = changes[name](column) if name in changes else column
    tables.write_table(path, columns, version=table.version, key=table.key)


def with_value(rows: Ragged, position: int, value: int) -> Ragged:
    """``rows`` with its values' element ``position`` (the first of a trailing row) set to ``value``."""
    values = np.array(rows.values)
    values.reshape(len(values), -1)[position, 0] = value
    return Ragged(values, rows.starts, rows.lengths, rows.groups)
