"""What a scenario serves, built once per node and mapped by every process: Arrow IPC tables.

The files are Arrow IPC streams, the layout Hugging Face `datasets` writes and maps.

A DataModule's `prepare_data` (one process per node) writes the arrays its datasets serve (token
ids, atoms and bonds, caption tokens, features...) as one Arrow IPC file per table, one row per
sample; `setup` in every rank, and every loader worker under any start method, maps the file
read-only and reads its columns as zero-copy numpy views. A list column is exactly
`Ragged`'s values plus offsets (a list of lists: two ragged levels; a
fixed-size list: trailing dimensions), so the files also open in pyarrow
(`pyarrow.ipc.open_stream`) and in Hugging Face `datasets` (`Dataset.from_file`).

* `write_table` writes columns that are in memory; `TableBuilder` writes a table a
  few rows at a time (ragged values go to scratch files as they come), so building one never holds
  more than a batch of rows. Both write one record batch, atomically, with the format version, the
  content key and a checksum of the data (`varlen.storage.checksums`) in the schema's metadata.
* `open_table` maps a file, or returns None with a warning when it is cut short, of another
  format version, built from other inputs, or its data no longer match their checksum (verified
  once per file per node), or the caller's `check` finds a value the data must not hold: the
  caller builds it again, never uses it.
* A `MappedTable` pickles as its path: a dataset sent to a spawned worker carries no
  array, and the worker maps the file again.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from varlen import notices
from varlen.batching.ragged import CHECK_CHUNK, Ragged
from varlen.errors import DataError
from varlen.storage.cache import DISK_ERRNOS, atomic_write, disk_error, scratch, sweep_scratch
from varlen.storage.checksums import ChecksumError, table_checksum, verify

__all__ = ["MappedTable", "TableBuilder", "as_numpy", "first_outside", "ids_outside", "open_table", "write_table"]

VERSION_FIELD = b"varlen.version"
KEY_FIELD = b"varlen.key"
CHECKSUM_FIELD = b"varlen.checksum"

Column = np.ndarray | Ragged


# -- numpy / Ragged -> Arrow --------------------------------------------------------------------------


def _values(values: np.ndarray) -> pa.Array:
    """`[total, *trailing]` as Arrow (fixed-size lists for the trailing dimensions), zero-copy."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind == "U":
        return pa.array(values.tolist(), pa.string())
    out = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, int(size))
    return out


def _offsets(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Offsets of rows stored back to back (what a list column needs), or an error."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    if not np.array_equal(starts, offsets[:-1]):
        raise ValueError("a Ragged column must have its rows back to back in values (compact it with .take)")
    return offsets


def to_arrow(column: Column) -> pa.Array:
    """A column as Arrow: a numpy array `[N, *trailing]`, or a `Ragged` of N samples as a
    large list column (a list of lists with two levels)."""
    if not isinstance(column, Ragged):
        return _values(np.asarray(column))
    rows = pa.LargeListArray.from_arrays(pa.array(_offsets(column.starts, column.lengths)), _values(column.values))
    if column.groups is None:
        return rows
    return pa.LargeListArray.from_arrays(pa.array(np.asarray(column.groups, np.int64)), rows)


def _schema(arrays: Mapping[str, pa.Array], version: str, key: str) -> pa.Schema:
    fields = [pa.field(name, array.type, nullable=False) for name, array in arrays.items()]
    return pa.schema(fields, metadata={VERSION_FIELD: version.encode(), KEY_FIELD: key.encode()})


def _write(path: Path, arrays: Mapping[str, pa.Array], version: str, key: str) -> Path:
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"every column of a table needs one entry per sample; got {lengths}")
    batch = pa.record_batch(list(arrays.values()), schema=_schema(arrays, version, key))
    metadata = {**batch.schema.metadata, CHECKSUM_FIELD: table_checksum(batch).encode()}
    batch = batch.replace_schema_metadata(metadata)

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)

    return atomic_write(path, write, size=batch.nbytes)


def write_table(path: str | Path, columns: Mapping[str, Column], *, version: str, key: str) -> Path:
    """Write `columns` (one entry per sample each) as one Arrow IPC table at `path`, atomically.

    Args:
        path: the file (its folder is created).
        columns: name -> numpy array `[N, *trailing]` or `Ragged` of N samples.
        version: the format version of the caller's table (a reader of another version rebuilds).
        key: the content key of what it was built from (`varlen.storage.cache.cache_key`).
    """
    return _write(Path(path), {name: to_arrow(column) for name, column in columns.items()}, version, key)


class TableBuilder:
    """Writes a table a few rows at a time: memory holds one batch of rows, never the table.

    The values of each ragged column are appended to a scratch file as rows come, with their
    lengths; `finish` maps the scratch files and writes the one record batch from them
    (zero-copy), then removes them. A failed build removes them too: `abandon`, or use the
    builder as a context manager (an exception inside abandons it).

    Args:
        path, version, key: as `write_table`.
        ragged: name -> (dtype, trailing shape) of each ragged (one level) column.
        rows: the rows the table will hold, when known: a full disk's error then says about how
            much space the build needs (its scratch, then the table).

    Raises:
        DataError: the folder cannot be written, or fills up (naming it; the scratch is removed).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        version: str,
        key: str,
        ragged: Mapping[str, tuple[np.dtype | type, tuple[int, ...]]],
        rows: int | None = None,
    ) -> None:
        self.path, self.version, self.key, self.expected = Path(path), version, key, rows
        self.ragged = {name: (np.dtype(dtype), tuple(shape)) for name, (dtype, shape) in ragged.items()}
        self._scratch = scratch(self.path, ".build", folder=True)  # swept by a later build if this one is killed
        self._files: dict[str, Any] = {}
        try:
            for name in self.ragged:
                self._files[name] = open(self._scratch / f"{name}.bin", "wb")  # noqa: SIM115
        except OSError as error:
            self.abandon()
            raise disk_error(self.path.parent, error) from error
        self._lengths: dict[str, list[np.ndarray]] = {name: [] for name in self.ragged}
        self._plain: dict[str, list[np.ndarray]] = {}
        self.rows, self._written, self._held = 0, 0, 0  # rows; bytes of scratch; bytes of the other columns

    def __enter__(self) -> TableBuilder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self.abandon()

    def append(self, **columns: Sequence[np.ndarray] | np.ndarray) -> None:
        """Add rows: a sequence of arrays per ragged column (one per row), an array per other column."""
        counts = {name: len(value) for name, value in columns.items()}
        self._names = getattr(self, "_names", None) or set(columns)
        if set(columns) != self._names or not set(self.ragged) <= self._names:
            raise ValueError(f"columns {sorted(columns)}: every append needs {sorted(self._names | set(self.ragged))}")
        if len(set(counts.values())) != 1:
            raise ValueError(f"append needs the same number of rows in every column; got {counts}")
        self.rows += next(iter(counts.values()), 0)
        for name, rows in columns.items():
            if name in self.ragged:
                dtype, shape = self.ragged[name]
                lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
                values = np.concatenate([np.asarray(r, dtype).reshape(-1, *shape) for r in rows]) if len(rows) else []
                self._spill(name, np.ascontiguousarray(values, dtype).tobytes())
                self._lengths[name].append(lengths)
            else:
                self._plain.setdefault(name, []).append(np.asarray(rows))
                self._held += self._plain[name][-1].nbytes

    def _spill(self, name: str, data: bytes) -> None:
        """Append `data` to column `name`'s scratch file; a full disk abandons the build (a DataError)."""
        try:
            self._files[name].write(data)
        except OSError as error:
            self.abandon()
            if error.errno not in DISK_ERRNOS:
                raise
            raise self._full(error, len(data)) from error
        self._written += len(data)

    def _full(self, error: OSError, pending: int = 0) -> DataError:
        """A full disk's DataError, with about the bytes the whole build needs (its scratch, then the table
        beside it) from the rows so far and `expected`; without it, at least those of the rows so far."""
        so_far = 2 * (self._written + pending) + self._held
        if not self.expected or not self.rows:
            return disk_error(self.path.parent, error, so_far, floor=True)
        return disk_error(self.path.parent, error, int(so_far / self.rows * max(self.expected, self.rows)))

    def finish(self) -> Path:
        """Write the table and remove the scratch files; returns the table's path."""
        try:
            arrays: dict[str, pa.Array] = {}
            for name, (dtype, shape) in self.ragged.items():
                try:
                    self._files[name].close()  # flushes: where a full disk may show first
                except OSError as error:
                    if error.errno not in DISK_ERRNOS:
                        raise
                    raise self._full(error) from error
                lengths = np.concatenate(self._lengths[name]) if self._lengths[name] else np.zeros(0, np.int64)
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
                size = int(offsets[-1]) * int(np.prod(shape, dtype=np.int64))
                if size:
                    mapped = np.memmap(self._scratch / f"{name}.bin", dtype=dtype, mode="r", shape=(size,))
                else:
                    mapped = np.zeros(0, dtype)
                values = _values(np.asarray(mapped).reshape(-1, *shape))
                arrays[name] = pa.LargeListArray.from_arrays(pa.array(offsets), values)
            for name, parts in self._plain.items():
                arrays[name] = _values(np.concatenate(parts))
            return _write(self.path, arrays, self.version, self.key)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Remove the scratch files without writing the table (a build that failed half-way)."""
        for handle in self._files.values():
            with contextlib.suppress(OSError):  # a full disk's unflushed bytes: dropped with the file
                handle.close()
        shutil.rmtree(self._scratch, ignore_errors=True)


# -- Arrow -> numpy / Ragged ------------------------------------------------------------------------


def as_numpy(array: pa.Array) -> np.ndarray:
    """Values of an Arrow array as numpy, zero-copy: fixed-size lists become trailing dimensions."""
    shape = []
    while pa.types.is_fixed_size_list(array.type):
        shape.append(array.type.list_size)
        array = array.flatten()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return np.asarray(array.to_pylist(), dtype=str)  # small columns (names, scaffolds): a copy
    return _view(array).reshape(-1, *shape)


def _view(array: pa.Array) -> np.ndarray:
    """A primitive array without nulls as a numpy view of its data buffer. Not `to_numpy`: on some
    arrays (a list's offsets) it imports pandas, a second and ~30 MiB in every new worker."""
    if array.null_count or pa.types.is_boolean(array.type):  # nulls, or bits: not a plain buffer
        return array.to_numpy(zero_copy_only=False)
    dtype = np.dtype(array.type.to_pandas_dtype())
    view = np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize)
    view.flags.writeable = False  # a view of the mapped file: nothing writes into it
    return view


class MappedTable:
    """An Arrow IPC table mapped read-only; its columns as zero-copy numpy arrays and `Ragged`.

    Its data are checked against the checksum recorded when it was built (`varlen.storage.checksums.verify`:
    once per file per process, and per node where the file takes a marker) unless `verify=False`
    (`open_table` checks the version and key first). Pickles as its path: a process that
    receives it maps the file again (and verifies it, unless a process of the node did).

    Raises:
        ChecksumError: the data differ from what was written (a DataError naming the file).
    """

    def __init__(self, path: str | Path, verify: bool = True) -> None:
        self.path = Path(path)
        reader = pa.ipc.open_stream(pa.memory_map(str(self.path), "r"))
        batches = list(reader)
        if len(batches) != 1:
            raise ValueError(f"{self.path}: a varlen table holds one record batch, found {len(batches)}")
        self.batch = batches[0]
        metadata = reader.schema.metadata or {}
        self.version = metadata.get(VERSION_FIELD, b"").decode()
        self.key = metadata.get(KEY_FIELD, b"").decode()
        self.checksum = metadata.get(CHECKSUM_FIELD, b"").decode()
        if verify:
            self.verify()

    def verify(self) -> None:
        """Check the data against the recorded checksum (see the class docstring)."""
        verify(self.path, self.batch, self.checksum)

    def __reduce__(self) -> tuple[Any, ...]:
        return (MappedTable, (str(self.path),))

    def __len__(self) -> int:
        return self.batch.num_rows

    @property
    def columns(self) -> list[str]:
        return self.batch.schema.names

    def numpy(self, name: str) -> np.ndarray:
        """Column `name` as a read-only numpy view `[N, *trailing]` (strings: a copy)."""
        return as_numpy(self.batch.column(name))

    def ragged(self, name: str, lengths: np.ndarray | None = None) -> Ragged:
        """List column `name` as `Ragged` (two levels for a list of lists): views of the file.

        The rows' lengths are computed from the offsets (`[R]` int64, a private copy) unless
        `lengths` gives them (e.g. a stored int64 length column: then a process holds nothing per
        sample of its own), which must equal the offsets' (a longer one would read the next row).

        Raises:
            DataError: naming the file and column, when `lengths` differ from the offsets, or rows
                reach outside the values.
        """
        column = self.batch.column(name)
        groups = None
        if pa.types.is_large_list(column.type) and pa.types.is_large_list(column.type.value_type):
            groups = _view(column.offsets)
            column = column.values
        offsets = _view(column.offsets)
        if lengths is not None and (row := _first_other_length(offsets, lengths)) is not None:
            found = "no row" if row >= len(offsets) - 1 else f"{int(offsets[row + 1] - offsets[row])} elements"
            raise DataError(
                f"{self.path}: row {row} of column {name!r} holds {found}, its length column says "
                f"{int(lengths[row]) if row < len(lengths) else 'none'}: remove the file to build it again"
            )
        try:
            if lengths is None:
                return Ragged.from_offsets(as_numpy(column.values), offsets, groups)
            return Ragged(as_numpy(column.values), offsets[:-1], lengths, groups)
        except ValueError as error:
            raise DataError(f"{self.path}: column {name!r}: {error}: remove the file to build it again") from error


def _first_other_length(offsets: np.ndarray, lengths: np.ndarray) -> int | None:
    """The first row whose `lengths` entry differs from its offsets' span, or None (checked a chunk of
    rows at a time: temporaries stay small in a new worker)."""
    if len(lengths) != len(offsets) - 1:
        return min(len(lengths), len(offsets) - 1)
    for start in range(0, len(lengths), CHECK_CHUNK):
        spans = np.diff(offsets[start : start + CHECK_CHUNK + 1])
        differ = np.flatnonzero(spans != lengths[start : start + CHECK_CHUNK])
        if len(differ):
            return start + int(differ[0])
    return None


def first_outside(values: np.ndarray, low: int, high: int | np.ndarray) -> int | None:
    """The first row of `values` (`[N, *trailing]`) with an element outside `[low, high)` (`high`
    one bound, or one per row), or None: a table's ids or indices checked before they are served, a
    chunk of rows at a time (temporaries stay small)."""
    values = np.asarray(values)
    width = int(np.prod(values.shape[1:], dtype=np.int64))
    flat = values.reshape(-1)
    for row in range(0, len(values), CHECK_CHUNK):
        part = flat[row * width : (row + CHECK_CHUNK) * width]
        if np.ndim(high) == 0:
            if not len(part) or (part.min() >= low and part.max() < high):
                continue
            bad = np.flatnonzero((part < low) | (part >= high))
        else:
            bound = np.repeat(np.asarray(high)[row : row + CHECK_CHUNK], width)
            bad = np.flatnonzero((part < low) | (part >= bound))
        if len(bad):
            return row + int(bad[0]) // width
    return None


def ids_outside(ids: Ragged, size: int) -> tuple[int, int] | None:
    """The first token id outside `[0, size)` (a vocabulary: an embedding given such an id fails, on
    a GPU as a device-side assert) as `(row, id)`, or None."""
    position = first_outside(ids.values, 0, size)
    if position is None:
        return None
    return int(np.searchsorted(ids.starts + ids.lengths, position, side="right")), int(ids.values[position])


def open_table(
    path: str | Path, *, version: str, key: str, check: Callable[[MappedTable], str | None] | None = None
) -> MappedTable | None:
    """The table at `path` mapped, or None when it must be (re)built.

    None without a word when the file does not exist; None with a warning when it is cut short or
    unreadable, of another format `version`, built from other inputs (another `key`), its data
    differ from their checksum, or `check(table)` (what the caller's values must satisfy: ids
    inside a vocabulary, indices inside their arrays) says what is wrong with it.
    """
    path = Path(path)
    sweep_scratch(path.parent)  # what killed builds left here: a table another process built is not built again
    if not path.is_file():
        return None
    try:
        table = MappedTable(path, verify=False)
    except (OSError, ValueError, pa.ArrowException) as error:
        reason = f"unreadable ({type(error).__name__}: {error})"
    else:
        if table.version != version:
            reason = f"of format version {table.version!r}, expected {version!r}"
        elif table.key != key:
            reason = f"built from other inputs (key {table.key!r}, expected {key!r})"
        else:
            reason = _problem(table, check)
            if reason is None:
                return table
    notices.warn(f"cache {path} is {reason}; building it again")
    return None


def _problem(table: MappedTable, check: Callable[[MappedTable], str | None] | None) -> str | None:
    """What is wrong with a table of the right version and key: its checksum, else `check`'s finding."""
    try:
        table.verify()
    except ChecksumError as error:
        return error.reason
    return None if check is None else check(table)
