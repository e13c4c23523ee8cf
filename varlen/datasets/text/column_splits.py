"""Splits that a table marks itself, in a column: ``is_valid`` True / False, or ``train`` / ``validation`` / ``test``.

Many shared CSVs carry their split (fastai's ``is_valid``, a ``split`` or ``fold`` column in a
Kaggle dump): a DataModule given ``split_column`` uses it instead of carving validation out, so
its numbers are comparable with everyone else's on that file. Every value must name a split:
an unknown value is an error that names the file, the column and the rows, never a guess.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from varlen.datasets.text.readers import TextTable
from varlen.errors import DataError

__all__ = ["SPLIT_SPELLINGS", "split_by_column", "split_of"]

#: accepted spellings (compared stripped and lower-cased) of each split's value
SPLIT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "train": ("train", "training", "trn"),
    "val": ("validation", "valid", "val", "dev", "development"),
    "test": ("test", "testing", "tst"),
}
#: boolean values (a bool column, or these strings, or the integers 1 / 0): True = validation (fastai's is_valid)
BOOLEAN_SPELLINGS = {"true": "val", "false": "train"}
_LOOKUP = {spelling: split for split, names in SPLIT_SPELLINGS.items() for spelling in names} | BOOLEAN_SPELLINGS
#: row numbers shown per value in an error
SHOWN = 5


def accepted() -> str:
    """The accepted spellings, for error messages."""
    names = "; ".join(f"{split}: {'/'.join(names)}" for split, names in SPLIT_SPELLINGS.items())
    return f"{names}; or True/False (1/0), True = validation (any case)"


def split_of(value: Any) -> str | None:
    """The split a column value names (``"train"``, ``"val"``, ``"test"``), or None for an unknown value."""
    if isinstance(value, (bool, np.bool_)):
        return "val" if value else "train"
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return "val" if value else "train"
    if isinstance(value, (float, np.floating)) and value in (0.0, 1.0):  # an int column with a blank cell
        return "val" if value else "train"
    if isinstance(value, str):
        return _LOOKUP.get(value.strip().lower())
    return None


def _shown(value: Any) -> str:
    blank = value is None or (isinstance(value, str) and not value.strip())
    blank = blank or (isinstance(value, (float, np.floating)) and np.isnan(value))
    return "an empty cell" if blank else repr(value)


def _rows(rows: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:SHOWN])
    return f"row {shown}" if len(rows) == 1 else f"{len(rows)} rows ({shown}{', ...' if len(rows) > SHOWN else ''})"


def split_by_column(table: TextTable, column: str) -> dict[str, TextTable]:
    """The rows of ``table`` by the split its column ``column`` names (only the splits it names).

    Args:
        table: rows read with their split values (``table.splits``).
        column: the column's name, for error messages.

    Raises:
        DataError: a value names no split (naming the value and its rows), or no row is left for
            training (naming the values found and their counts).
    """
    if table.splits is None:
        raise ValueError(f"{table.name}: the table was read without its split column {column!r}")
    found: dict[str, list[int]] = defaultdict(list)
    unknown: dict[str, list[int]] = defaultdict(list)
    for i, value in enumerate(table.splits):
        split = split_of(value)
        (found[split] if split else unknown[_shown(value)]).append(i)
    if unknown:
        what = "; ".join(f"{value} in {_rows(table.rows[rows])}" for value, rows in unknown.items())
        raise DataError(
            f"{table.name}: split column {column!r} has values that name no split: {what}; accepted: {accepted()}"
        )
    if not found.get("train"):
        counts = ", ".join(f"{len(rows):,} {split}" for split, rows in found.items())
        raise DataError(
            f"{table.name}: split column {column!r} leaves the train split empty (all {len(table):,} rows are "
            f"{counts}: {_rows(table.rows)}); mark the training rows {SPLIT_SPELLINGS['train'][0]!r} or False"
        )
    return {split: table.select(rows) for split, rows in found.items()}
