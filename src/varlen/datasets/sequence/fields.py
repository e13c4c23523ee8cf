"""What each column of a user's table is, told from its Arrow type: a variable-length field, a fixed one, or
neither (left out).

* `list<number>`: a variable-length field, one value per element (`[T]`);
* `list<fixed_size_list<number, k>>` (what varlen and Hugging Face `Sequence(..., length=k)` write),
  or `list<list<number>>` whose inner lists all hold `k` values (`.tolist()` of `[T, k]`
  arrays): a variable-length field of `[T, k]` elements;
* a number, or `fixed_size_list<number, k>`: a fixed field (`[]`, `[k]`);
* anything else (strings, dates, structs): not served, except as the label.

A variable-length field of integers, one per element, is read as token ids: its vocabulary is its largest id + 1
(`vocab_size`), refused past `MAX_VOCAB` (values read as ids would make an embedding of terabytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from varlen.errors import DataError

#: the most ids a field of token ids may hold (its largest + 1): an embedding past it is values read as ids
MAX_VOCAB = 2**24

__all__ = ["MAX_VOCAB", "FieldSpec", "field_specs", "is_list", "served_fields", "storage", "trailing_of", "vocab_size"]


@dataclass(frozen=True)
class FieldSpec:
    """One served column.

    Attributes:
        name: the column.
        ragged: variable-length (padded in a batch, with a mask) or fixed (stacked).
        dtype: the numpy dtype of its values.
        trailing: each element's shape (`()` for numbers).
    """

    name: str
    ragged: bool
    dtype: np.dtype
    trailing: tuple[int, ...]

    @property
    def token_ids(self) -> bool:
        """Integer values one per element: read by a model as ids (an embedding), not as features."""
        return self.ragged and self.trailing == () and self.dtype.kind in "iu"

    @property
    def feature_dim(self) -> int:
        """Values per element (1 for numbers)."""
        return int(np.prod(self.trailing, dtype=np.int64))


def storage(kind: pa.DataType) -> pa.DataType:
    """An extension type's storage type (Hugging Face's arrays), else the type itself."""
    return kind.storage_type if isinstance(kind, pa.ExtensionType) else kind


def is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def trailing_of(kind: pa.DataType) -> tuple[tuple[int, ...], pa.DataType] | None:
    """`(shape, number type)` of nested fixed-size lists of numbers (`((), type)` for a number), else None."""
    shape = []
    kind = storage(kind)
    while pa.types.is_fixed_size_list(kind):
        shape.append(kind.list_size)
        kind = storage(kind.value_type)
    return (tuple(shape), kind) if _number(kind) else None


def _inner_size(column: pa.ChunkedArray, name: str, where: str) -> int:
    """The values per element of a `list<list<number>>` column, read from its first non-empty element."""
    for chunk in column.chunks:
        inner = chunk.flatten()
        lengths = pc.list_value_length(inner).drop_null()
        if len(lengths):
            return int(lengths[0].as_py())
    raise DataError(
        f"{where}: column {name!r} holds lists of lists with no element in its first rows: cannot tell each "
        "element's size; store it as fixed-size lists (list<fixed_size_list<float, k>>)"
    )


def _spec(name: str, kind: pa.DataType, column: pa.ChunkedArray, where: str) -> FieldSpec | None:
    kind = storage(kind)
    fixed = trailing_of(kind)
    if fixed is not None:
        return FieldSpec(name, False, np.dtype(fixed[1].to_pandas_dtype()), fixed[0])
    if not is_list(kind):
        return None
    value = storage(kind.value_type)
    inner = trailing_of(value)
    if inner is not None:
        return FieldSpec(name, True, np.dtype(inner[1].to_pandas_dtype()), inner[0])
    if is_list(value) and (number := trailing_of(value.value_type)) is not None and number[0] == ():
        return FieldSpec(name, True, np.dtype(number[1].to_pandas_dtype()), (_inner_size(column, name, where),))
    return None


def field_specs(table: pa.Table, leave_out: set[str], where: str) -> tuple[dict[str, FieldSpec], list[str]]:
    """The served columns of `table` by name, in its order, and the columns it cannot serve.

    Args:
        table: the source, or its first rows (enough to tell a `list<list>` column's element size).
        leave_out: columns handled otherwise (the label).
        where: the source, for messages.
    """
    specs, unserved = {}, []
    for name, kind in zip(table.column_names, table.schema.types, strict=True):
        if name in leave_out:
            continue
        spec = _spec(name, kind, table.column(name), where)
        if spec is None:
            unserved.append(name)
        else:
            specs[name] = spec
    return specs, unserved


def served_fields(
    head: pa.Table, leave_out: set[str], fields: Sequence[str] | None, where: str, reserved: Sequence[str]
) -> tuple[dict[str, FieldSpec], dict[str, str]]:
    """The columns served (`fields`, else every numeric one), checked against the batch's own keys
    (`reserved`, `<field>_mask`, `<field>_lengths`), and the columns not served, each with why (its
    values' type, or `fields`), which the report names.

    Raises:
        ValueError: `fields` naming columns that are not numeric.
        DataError: no variable-length column, or a column named as a batch's own key.
    """
    specs, left = field_specs(head, leave_out, where)
    unserved = {name: f"{head.schema.field(name).type} values" for name in left}
    if fields is not None:
        unknown = sorted(set(fields) - set(specs))
        if unknown:
            raise ValueError(f"fields {unknown} are not numeric columns of {where} (those are {list(specs)})")
        unserved.update({name: "not in fields" for name in specs if name not in fields})
        specs = {name: specs[name] for name in fields}
    if not any(spec.ragged for spec in specs.values()):
        raise DataError(
            f"{where}: no variable-length column (a list of numbers per row) among {head.column_names}: "
            "give each sample's sequence as a list or array column"
        )
    derived = {f"{n}_{suffix}" for n, s in specs.items() if s.ragged for suffix in ("mask", "lengths")}
    clash = sorted((set(reserved) | derived) & set(specs))
    if clash:
        raise DataError(
            f"{where}: column(s) {clash} share a name with a batch's own keys ({list(reserved)}, <field>_mask, "
            "<field>_lengths): rename them, or leave them out with fields=[...]"
        )
    return specs, unserved


def vocab_size(column: pa.ChunkedArray, name: str, where: str) -> int:
    """A token-id field's vocabulary: its largest id + 1 (1 without any).

    Raises:
        DataError: an id past `MAX_VOCAB` (values read as ids: an embedding of terabytes), naming the field,
            its largest value and both ways out.
    """
    values = pc.list_flatten(column)
    if pa.types.is_floating(values.type):  # a float field served as ints (dtypes): non-finite rows are bad rows
        values = pc.filter(values, pc.is_finite(values))
    largest = pc.max(values).as_py()
    if largest is not None and int(largest) >= MAX_VOCAB:
        raise DataError(
            f"{where}: column {name!r} is read as token ids (integers, one per element) and its largest is "
            f"{int(largest):,}: an embedding of {int(largest) + 1:,} rows, past {MAX_VOCAB:,}. Values, not ids? serve "
            f"them as features: dtypes={{{name!r}: 'float32'}}; ids? number them from 0 (0..n-1)"
        )
    return 1 if largest is None else int(largest) + 1
