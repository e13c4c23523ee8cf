"""Tables that already hold token ids: used as they are, never tokenised again.

A table with an `input_ids` column (a list of integers per row, as `datasets`' `map` with a
tokenizer leaves it; optionally `token_type_ids`; `attention_mask` is not read: the collate makes
its own) is read as ids: its text columns (`text_column`, `text_pair_column`) are not read,
even when it has them, and its duplicates are found by equal ids. The ids must come from the
tokenizer the DataModule is given (`tokenizer_name_or_path`, whose pad id pads them and whose
vocabulary the model embeds): an id outside that vocabulary is refused, naming the row, the id and
the vocabulary's size. A row longer than `max_length` is truncated as the tokenizer truncates a
single text (its first ids, and its closing special token, `[SEP]`, kept last) and counted in the
report: a pair's ids are cut at their end too, not from the longer side as the tokenizer cuts pairs
(tokenise pairs with `truncation=True` to have them cut so). A row of special tokens only (or none)
is an empty text. Windows (`overflow="windows"`) need texts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.readers import TextColumns
from varlen.errors import DataError
from varlen.storage.tables import ids_outside

__all__ = ["IDS", "TYPE_IDS", "encode_ids", "table_columns"]

#: the column of token ids, and that of their type ids (what a Hugging Face tokenizer names them)
IDS, TYPE_IDS = "input_ids", "token_type_ids"


def _integer_lists(kind: Any) -> bool:
    import pyarrow as pa

    lists = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    return lists and pa.types.is_integer(kind.value_type)


def table_columns(
    given: TextColumns, schema: Any, name: str, label_optional: bool = False
) -> tuple[TextColumns, str | None]:
    """The columns a table is read with, and its token type id column: `given` (less the label when it
    is optional and missing), or, when the table has an `input_ids` column, that column as the text.

    Raises:
        DataError: `input_ids` (or `token_type_ids`) is not a column of integer lists (a CSV cell).
    """
    names = list(schema.names)
    if label_optional and given.label not in names:
        given = given._replace(label=None)
    if IDS not in names:
        return given, None
    for column in (IDS, TYPE_IDS):
        if column in names and not _integer_lists(kind := schema.field(column).type):
            raise DataError(
                f"{name}: column {column!r} holds {kind}, not lists of integer token ids; a table of token ids "
                "must be Parquet, Arrow, JSON (Lines) or a datasets.Dataset (a CSV cell is text), or rename the "
                "column to have the text column tokenised"
            )
    return TextColumns(IDS, None, given.label), (TYPE_IDS if TYPE_IDS in names else None)


def _flat(rows: Sequence[Sequence[int]], lengths: np.ndarray, column: str, where: Callable[[int], str]) -> np.ndarray:
    """The rows' ids as one int64 array (a missing id refused, naming its row)."""
    try:
        return np.fromiter(itertools.chain.from_iterable(rows), np.int64, int(lengths.sum()))
    except TypeError:  # a null inside a row
        row = next(i for i, ids in enumerate(rows) if any(v is None for v in ids))
        raise DataError(f"{where(row)}: column {column!r} holds a missing id (null), not an integer") from None


def _truncate(ids: Sequence[int], max_length: int, special: set[int]) -> list[int]:
    """The first `max_length` ids; a closing special token (`[SEP]`) stays last, as the tokenizer keeps it."""
    if ids[-1] in special:
        return [*ids[: max_length - 1], ids[-1]]
    return list(ids[:max_length])


def encode_ids(
    tokenizer: Any,
    rows: Sequence[Sequence[int]],
    type_rows: Sequence[Sequence[int]] | None,
    max_length: int,
    keep_type_ids: bool,
    where: Callable[[int], str],
) -> tuple[dict[str, list[list[int]]], np.ndarray, np.ndarray]:
    """Rows of token ids checked and truncated: `(fields, truncated, empty)`, one entry per row.

    `where(i)` names row `i` of `rows` in messages.

    Raises:
        DataError: an id outside the tokenizer's vocabulary or missing, or token type ids of another length.
    """
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    flat = _flat(rows, lengths, IDS, where)
    vocabulary = len(tokenizer)
    found = ids_outside(Ragged.from_offsets(flat, np.concatenate([[0], np.cumsum(lengths)])), vocabulary)
    if found is not None:
        raise DataError(
            f"{where(found[0])}: token id {found[1]} is outside the tokenizer's vocabulary of {vocabulary:,} ids; "
            "the ids must come from the tokenizer given as tokenizer_name_or_path (the one the model embeds)"
        )
    if type_rows is not None:
        other = np.flatnonzero(np.fromiter(map(len, type_rows), np.int64, len(type_rows)) != lengths)
        if len(other):
            i = int(other[0])
            raise DataError(f"{where(i)}: {len(type_rows[i])} token type ids for {lengths[i]} input ids")
    special = set(tokenizer.all_special_ids)
    content = ~np.isin(flat, list(special))
    empty = np.bincount(np.repeat(np.arange(len(rows)), lengths), weights=content, minlength=len(rows)) == 0
    over = lengths > max_length
    fields = {IDS: [list(ids) for ids in rows]}
    if keep_type_ids:
        fields[TYPE_IDS] = [list(t) for t in type_rows] if type_rows is not None else [[0] * n for n in lengths]
    for i in np.flatnonzero(over):
        ids = rows[i]
        fields[IDS][i] = _truncate(ids, max_length, special)
        if keep_type_ids:  # the same positions
            kept = fields[TYPE_IDS][i]
            fields[TYPE_IDS][i] = [*kept[: max_length - 1], kept[-1]] if ids[-1] in special else kept[:max_length]
    return fields, over, empty
