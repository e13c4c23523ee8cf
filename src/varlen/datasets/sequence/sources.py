"""Where a split's data comes from, read as a pyarrow Table: a Parquet or Arrow IPC file (file or stream
format, memory-mapped), a CSV or JSON Lines file (`lines`), a Hugging Face
`datasets.Dataset` (its Arrow table, rows as selected), a
`pyarrow.Table`, or a mapping of column name -> values (a list of arrays per sample: variable-length
along their first axis; an array `[N, *trailing]` or a list of numbers or strings: fixed).

`datasets` is never imported here: a Dataset is recognised by its type's module and read through its
own `with_format("arrow")`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from varlen.batching.ragged import Ragged
from varlen.datasets.sequence.lines import LINE_TABLES, layout_of, read_line_table, record_lines
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.labels import classlabel_names
from varlen.storage.cache import file_hash
from varlen.storage.tables import to_arrow

__all__ = ["ARROW", "PARQUET", "Source", "described", "is_path", "mapping_table", "source_of"]

PARQUET = (".parquet", ".pq")
ARROW = (".arrow", ".feather", ".ipc")
Kind = Literal["path", "huggingface", "table", "mapping"]


def _is_huggingface(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "datasets" and hasattr(value, "with_format")


def _scalars(values: Sequence[Any]) -> bool:
    return all(v is None or np.ndim(v) == 0 for v in values)


def _ragged_column(name: str, values: Sequence[Any], where: str) -> pa.Array:
    """One array per sample (None: missing) as a large list column, the arrays joined once."""
    rows = [None if v is None else np.asarray(v) for v in values]
    present = [r for r in rows if r is not None]
    for row, array in enumerate(rows):
        if array is not None and (array.ndim == 0 or array.shape[1:] != present[0].shape[1:]):
            raise DataError(
                f"{where}, row {row}: column {name!r} holds an array of shape {array.shape} where row "
                f"{rows.index(present[0])} has {present[0].shape}: a field's arrays may differ in their first axis only"
            )
        if array is not None and array.dtype.kind not in "biuf":
            raise DataError(f"{where}, row {row}: column {name!r} holds {array.dtype} values: give numbers")
    empty = np.zeros((0, *present[0].shape[1:]), present[0].dtype) if present else np.zeros(0, np.float32)
    storage = to_arrow(Ragged.from_arrays([empty if r is None else r for r in rows]))
    if len(present) == len(rows):
        return storage
    mask = pa.array([r is None for r in rows])
    return pa.LargeListArray.from_arrays(storage.offsets, storage.values, mask=mask)


def _mapping_column(name: str, value: Any, where: str) -> pa.Array | pa.ChunkedArray:
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return pa.array(value.tolist()) if value.dtype.kind == "U" else to_arrow(value)
    values = list(value)
    if _scalars(values):
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise DataError(f"{where}: column {name!r}: {error}: give one kind of value per column") from error
    return _ragged_column(name, values, where)


def mapping_table(columns: Mapping[str, Any], where: str) -> pa.Table:
    """A mapping of column -> values (see the module docstring) as a Table; arrays are joined once per column.

    Raises:
        DataError: columns of different lengths, or a field's arrays of other trailing shapes (naming the row).
    """
    arrays = {str(name): _mapping_column(str(name), value, where) for name, value in columns.items()}
    rows = {name: len(array) for name, array in arrays.items()}
    if len(set(rows.values())) > 1:
        raise DataError(f"{where}: columns have different numbers of rows {rows}: give every column one entry a sample")
    return pa.table(arrays)


def _read_ipc(path: Path) -> pa.Table:
    """An Arrow IPC file (file or stream format), memory-mapped: its buffers are views of the file."""
    try:
        return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()


@dataclass(frozen=True)
class Source:
    """One split's input, told apart by kind.

    Attributes:
        value: what the user gave.
        kind: `path`, `huggingface`, `table` or `mapping`.
        where: how messages name it (the file, or the split and the kind).
    """

    value: Any
    kind: Kind
    where: str
    #: a CSV / JSON Lines file's record lines, read once a message names one
    _lines: list[list[int]] = field(default_factory=list, compare=False, repr=False)

    @property
    def in_memory(self) -> bool:
        """Held as given (a table or mapping), not read from files into a cache table."""
        return self.kind in ("table", "mapping")

    def path(self) -> Path:
        """The file (an existing Parquet, Arrow IPC, CSV or JSON Lines file), else a DatasetNotFoundError /
        DataError."""
        path = Path(self.value).expanduser()
        if not path.is_file():
            raise DatasetNotFoundError(
                "sequence data",
                path,
                "give an existing Parquet, Arrow IPC, CSV or JSON Lines file (or leave train unset: synthetic data)",
            )
        if path.suffix.lower() not in PARQUET + ARROW and layout_of(path) is None:
            raise DataError(
                f"{path}: not a Parquet ({', '.join(PARQUET)}), Arrow IPC ({', '.join(ARROW)}), CSV or JSON Lines "
                f"({', '.join(s for s in LINE_TABLES if s != '.csv')}) file (compressed: .gz, .bz2, .xz, .zst)"
            )
        return path

    def place(self, row: int) -> str:
        """How a message names row `row` (from 0) of the source: `line N` in a CSV / JSON Lines file (as an
        editor shows it), else `row N`."""
        layout = layout_of(self.value) if self.kind == "path" else None
        if layout is None:
            return f"row {row}"
        if not self._lines:
            self._lines.append(record_lines(self.path(), layout))
        lines = self._lines[0]
        return f"line {lines[row]}" if 0 <= row < len(lines) else f"row {row}"

    def read(self, rows: int | None = None) -> pa.Table:
        """The whole table, or its first `rows`.

        Raises:
            DatasetNotFoundError: a path that does not exist.
            DataError: a file that cannot be read as its format (naming it and the reader's error).
        """
        if self.kind == "huggingface":
            arrow = self.value.with_format("arrow")
            return arrow[: len(self.value) if rows is None else rows]
        if self.kind == "table":
            table = self.value if isinstance(self.value, pa.Table) else pa.Table.from_batches([self.value])
        elif self.kind == "mapping":
            table = mapping_table(self.value, self.where)
        else:
            table = self._read_file(rows)
        return table if rows is None else table.slice(0, rows)

    def _read_file(self, rows: int | None) -> pa.Table:
        path = self.path()
        if layout_of(path) is not None:
            return read_line_table(path, rows)
        try:
            if path.suffix.lower() not in PARQUET:
                return _read_ipc(path)
            if rows is None:
                return pq.read_table(path, memory_map=True)
            batches = pq.ParquetFile(path).iter_batches(batch_size=max(rows, 1))
            first = next(batches, None)
            return pq.read_schema(path).empty_table() if first is None else pa.Table.from_batches([first])
        except (pa.ArrowException, OSError) as error:
            kind = "Parquet" if path.suffix.lower() in PARQUET else "Arrow IPC"
            raise DataError(f"{path}: not a readable {kind} file ({type(error).__name__}: {error})") from error

    def column(self, name: str) -> pa.ChunkedArray:
        """One column, read alone where the format allows (Parquet's columns, a mapped IPC file)."""
        if self.kind == "path" and self.path().suffix.lower() in PARQUET:
            try:
                return pq.read_table(self.path(), columns=[name], memory_map=True).column(name)
            except (pa.ArrowException, OSError) as error:
                raise DataError(f"{self.path()}: column {name!r} unreadable ({error})") from error
        if self.kind == "huggingface":
            return self.value.with_format("arrow")[name]
        if self.kind == "path" and layout_of(self.path()) is not None:
            return read_line_table(self.path(), columns=[name]).column(name)
        return self.read().column(name)

    def identity(self) -> str:
        """What a cache table of it is keyed by: the file's content hash, the Dataset's fingerprint."""
        if self.kind == "huggingface":
            return f"huggingface:{self.value._fingerprint}"
        return f"file:{file_hash(self.path())}"

    def schema(self) -> pa.Schema | None:
        """Its columns' types and metadata (a file's read alone); None for a mapping, CSV or JSON Lines (no
        metadata)."""
        if self.kind == "huggingface":
            return self.value.features.arrow_schema
        if self.kind == "table":
            return self.value.schema
        if self.kind == "mapping" or layout_of(self.path()) is not None:
            return None
        path = self.path()
        try:
            if path.suffix.lower() in PARQUET:
                return pq.read_schema(path)
            return _read_ipc(path).schema
        except (pa.ArrowException, OSError) as error:
            raise DataError(f"{path}: its schema is unreadable ({error})") from error

    def class_names(self, label: str) -> list[str] | None:
        """A Hugging Face `ClassLabel` column's names (its ids are their positions), else None: read from
        the features `datasets` writes in a schema (a `Dataset`, its `.arrow` and Parquet files, its
        `data.table`), see `varlen.prepare.labels.classlabel_names`."""
        return classlabel_names(self.schema(), label)


def source_of(value: Any, split: str) -> Source:
    """`value` (a split's argument) as a `Source`.

    Raises:
        TypeError: a value of no kind above (naming the split and what is accepted).
    """
    if isinstance(value, (str, os.PathLike)):
        return Source(value, "path", str(value))
    if _is_huggingface(value):
        return Source(value, "huggingface", f"split {split!r} (Hugging Face Dataset)")
    if isinstance(value, (pa.Table, pa.RecordBatch)):
        return Source(value, "table", f"split {split!r} (pyarrow table)")
    if isinstance(value, Mapping):
        return Source(value, "mapping", f"split {split!r} (in-memory columns)")
    raise TypeError(
        f"{split}: got {type(value).__name__}; give a Parquet, Arrow IPC, CSV or JSON Lines path, a "
        "datasets.Dataset, a pyarrow.Table or a mapping of column name -> values"
    )


def is_path(value: Any) -> bool:
    """A split given as a file's path (kept in the hyperparameters), not as data in memory."""
    return isinstance(value, (str, os.PathLike))


def described(value: Any) -> str:
    """What an in-memory split is, for the hyperparameters (never its data)."""
    if isinstance(value, Mapping):
        return f"<in-memory mapping of columns {sorted(map(str, value))}>"
    rows = value.num_rows if isinstance(value, (pa.Table, pa.RecordBatch)) else len(value)
    return f"<in-memory {type(value).__name__} of {rows} rows>"
