"""Faults a cache meets on real machines, made in a test without root: bytes flipped in a built file,
a disk that fills up in the middle of a write."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import varlen.storage.tables as tables
from varlen.batching import Ragged


def flip_bytes(path: Path, count: int = 16, at: float = 0.5) -> None:
    """Invert `count` bytes of `path` in place, from `at` of its size (the middle): what a bad
    disk, a faulty copy or a stray write does. Its modification time changes, as a write's does."""
    start = int(path.stat().st_size * at)
    with open(path, "r+b") as handle:
        handle.seek(start)
        data = handle.read(count)
        handle.seek(start)
        handle.write(bytes(b ^ 0xFF for b in data))


def rewrite(path: Path, **changes: Callable[[Any], Any]) -> None:
    """Write the varlen table at `path` again, as a build would (the same version and key; a valid
    checksum where tables record one), with `changes[name](column)` in place of column `name`:
    what a build with a bug would have written."""
    table = tables.MappedTable(path)
    columns = {}
    for name in table.columns:
        kind = table.batch.schema.field(name).type
        column = table.ragged(name) if pa.types.is_large_list(kind) else table.numpy(name)
        columns[name] = changes[name](column) if name in changes else column
    tables.write_table(path, columns, version=table.version, key=table.key)


def with_value(rows: Ragged, position: int, value: int) -> Ragged:
    """`rows` with its values' element `position` (the first of a trailing row) set to `value`."""
    values = np.array(rows.values)
    values.reshape(len(values), -1)[position, 0] = value
    return Ragged(values, rows.starts, rows.lengths, rows.groups)


class FullDisk:
    """A disk with `room` bytes left for the cache's writes (a table's scratch files, opened with
    `open` in `varlen.storage.tables`, and the table itself, written through `pyarrow.OSFile`): the
    write that would pass it writes what fits and raises `OSError(ENOSPC)`, as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room = room

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FullDisk:
        monkeypatch.setattr(tables, "open", self.open, raising=False)
        monkeypatch.setattr(pa, "OSFile", self.open)
        return self

    def open(self, path: str | Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = open(path, mode, *args, **kwargs)  # noqa: SIM115
        return handle if set(mode) <= {"r", "b", "t"} else _Filling(handle, self)


class _Filling:
    """A file on a `FullDisk`."""

    def __init__(self, handle: Any, disk: FullDisk) -> None:
        self.handle, self.disk = handle, disk

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if size > self.disk.room:
            self.handle.write(memoryview(data).cast("B")[: self.disk.room])
            self.disk.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.disk.room -= size
        return self.handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()
