"""A source's served columns as numpy: each variable-length field a `Ragged` whose
values and offsets are the Arrow list's own buffers (zero-copy), each fixed field `[N, *trailing]`,
the labels as they are, and which rows miss a value (an Arrow null: filled, and marked for the checks).

A `SequenceColumns` mapped from a cache table (`SequenceColumns.mapped`) pickles as the
table's path: a spawned loader worker maps the file again. One built in memory pickles its arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from varlen.batching.ragged import Ragged
from varlen.datasets.sequence.fields import FieldSpec, is_list
from varlen.errors import DataError
from varlen.storage.tables import MappedTable, as_numpy

__all__ = ["MISSING", "SequenceColumns", "table_columns"]

#: the prefix of a cache table's column marking the rows where a column's value is missing
MISSING = "varlen:missing:"


@dataclass
class SequenceColumns:
    """The served columns of one source (see the module docstring).

    Attributes:
        rows: rows of the source.
        ragged: variable-length fields by name.
        fixed: fixed fields by name, `[rows, *trailing]`.
        labels: the label column as stored (numbers, or strings), or None.
        missing: column -> `[rows]` bool, where its value is missing (only columns missing one).
        table: the cache table it was mapped from (it then pickles as the table's path).
    """

    rows: int
    ragged: dict[str, Ragged] = field(default_factory=dict)
    fixed: dict[str, np.ndarray] = field(default_factory=dict)
    labels: np.ndarray | None = None
    missing: dict[str, np.ndarray] = field(default_factory=dict)
    table: MappedTable | None = None
    label_name: str | None = None

    @classmethod
    def mapped(cls, table: MappedTable, label: str | None) -> SequenceColumns:
        """The columns of a cache table (`varlen.datasets.sequence.store.cached_columns`): views of the file."""
        out = cls(len(table), table=table, label_name=label)
        for name in table.columns:
            if name.startswith(MISSING):
                out.missing[name[len(MISSING) :]] = table.numpy(name).astype(bool)
            elif name == label:
                out.labels = table.numpy(name)
            elif pa.types.is_large_list(table.batch.schema.field(name).type):
                out.ragged[name] = table.ragged(name)
            else:
                out.fixed[name] = table.numpy(name)
        return out

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.table is None:
            return super().__reduce_ex__(protocol)
        return (SequenceColumns.mapped, (self.table, self.label_name))

    def arrays(self) -> dict[str, np.ndarray | Ragged]:
        """Every column to write in a cache table (missing marks as uint8), the label under its name."""
        out: dict[str, np.ndarray | Ragged] = {name: _compact(r) for name, r in self.ragged.items()}
        out.update(self.fixed)
        if self.labels is not None and self.label_name is not None:
            out[self.label_name] = self.labels
        out.update({MISSING + name: rows.astype(np.uint8) for name, rows in self.missing.items()})
        return out


def _compact(ragged: Ragged) -> Ragged:
    """Rows back to back from element 0 (what a list column holds): the values sliced, not copied."""
    if not len(ragged.starts):
        return Ragged(ragged.values[:0], ragged.starts, ragged.lengths)
    first = int(ragged.starts[0])
    return Ragged(ragged.values[first:], ragged.starts - first, ragged.lengths)


def _storage(array: pa.Array) -> pa.Array:
    """An extension array's storage (Hugging Face's arrays), else the array."""
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _one(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one array (chunks joined: a copy only where there are several)."""
    return _storage(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)


def _filled(array: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """`array` without nulls (numbers filled with 0, fixed-size lists rebuilt without validity, whose
    `flatten` would skip null slots) and which entries held one (None: none did)."""
    array = _storage(array)
    missing = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        child, inner = _filled(array.values.slice(array.offset * size, len(array) * size))
        if inner is not None and size:
            inner = inner.reshape(-1, size).any(axis=1)
            missing = inner if missing is None else missing | inner
        return pa.FixedSizeListArray.from_arrays(child, size), missing
    if missing is not None:
        array = pc.fill_null(array, pa.scalar(False if pa.types.is_boolean(array.type) else 0, array.type))
    return array, missing


def _rows_of(elements: np.ndarray | None, offsets: np.ndarray) -> np.ndarray | None:
    """The rows holding the flagged elements (`[rows]` bool), or None."""
    if elements is None or not elements.any():
        return None
    rows = np.zeros(len(offsets) - 1, bool)
    rows[np.searchsorted(offsets, np.flatnonzero(elements), side="right") - 1] = True
    return rows


def _ragged(spec: FieldSpec, column: pa.ChunkedArray, where: str) -> tuple[Ragged, np.ndarray | None]:
    array = _one(column)
    missing = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    offsets = as_numpy(array.offsets).astype(np.int64)
    used = _storage(array.values).slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets -= offsets[0]
    if is_list(used.type):  # list<list<number>>: every inner list must hold the field's element size
        size = spec.trailing[0]
        sizes = pc.list_value_length(used).fill_null(-1).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(sizes != size)
        if len(bad):
            row = int(np.searchsorted(offsets, bad[0], side="right") - 1)
            raise DataError(
                f"{where}, row {row}: column {spec.name!r} has an element of {max(int(sizes[bad[0]]), 0)} values "
                f"where its elements hold {size}: every element of a field must have one shape"
            )
        values, elements = _filled(used.flatten())
        elements = None if elements is None else elements.reshape(-1, size).any(axis=1)
        values = as_numpy(values).reshape(-1, size)
    else:
        values, elements = _filled(used)
        values = as_numpy(values)
    inner = _rows_of(elements, offsets)
    missing = inner if missing is None else missing if inner is None else missing | inner
    return Ragged.from_offsets(values, offsets), missing


def _labels(column: pa.ChunkedArray, name: str, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    array = _one(column)
    if pa.types.is_dictionary(array.type):  # categories (pandas' written to Parquet)
        array = array.dictionary_decode()
    missing = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return np.asarray(pc.fill_null(array, "").to_pylist(), dtype=str), missing
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_boolean(array.type):
        return as_numpy(_filled(array)[0]), missing
    raise DataError(f"{where}: label column {name!r} is {array.type}: give labels as numbers or strings")


def table_columns(table: pa.Table, specs: Mapping[str, FieldSpec], label: str | None, where: str) -> SequenceColumns:
    """`table`'s served columns (`specs`, and the `label` column where there is one) as numpy.

    Raises:
        DataError: a `list<list>` field whose elements differ in size, or a label column of other
            values than numbers or strings (naming `where`, the row and the column).
    """
    out = SequenceColumns(table.num_rows, label_name=label)
    for name, spec in specs.items():
        if spec.ragged:
            out.ragged[name], missing = _ragged(spec, table.column(name), where)
        else:
            values, missing = _filled(_one(table.column(name)))
            out.fixed[name] = as_numpy(values)
        if missing is not None and missing.any():
            out.missing[name] = missing
    if label is not None and label in table.column_names:
        out.labels, missing = _labels(table.column(label), label, where)
        if missing is not None and missing.any():
            out.missing[label] = missing
    return out
