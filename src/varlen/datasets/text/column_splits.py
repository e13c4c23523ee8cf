"""Splits that a table marks itself, in a column: `is_valid` True / False, or `train` / `validation` / `test`.

Many shared CSVs carry their split (fastai's `is_valid`, a `split` or `fold` column in a
Kaggle dump): a DataModule given `split_column` uses it instead of carving validation out, so
its numbers are comparable with everyone else's on that file. Every value must name a split:
an unknown value is an error that names the file, the column and the rows, never a guess.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from varlen.datasets.text.places import Places, RowPlaces
from varlen.datasets.text.readers import TextTable
from varlen.errors import DataError

__all__ = ["SPLITS", "SPLIT_SPELLINGS", "split_by_column", "split_marks", "split_of"]

#: the splits a column may name, in code order (see `split_marks`)
SPLITS = ("train", "val", "test")
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
    """The split a column value names (`"train"`, `"val"`, `"test"`), or None for an unknown value."""
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


def _rows(rows: np.ndarray, places: Places) -> str:
    """`"line 4"`, or `"3 rows (lines 4, 8, 12)"`."""
    shown = places(rows[:SHOWN])
    if len(rows) == 1:
        return shown[0]
    words = {place.split()[0] for place in shown}  # "line", or "row"
    numbers = ", ".join(place.split()[1] for place in shown) if len(words) == 1 else ", ".join(shown)
    prefix = f"{words.pop()}s " if len(words) == 1 else ""
    return f"{len(rows)} rows ({prefix}{numbers}{', ...' if len(rows) > SHOWN else ''})"


def split_marks(
    values: Iterable[Any],
    name: str,
    column: str,
    rows: np.ndarray | None = None,
    places: Places | None = None,
) -> np.ndarray:
    """The split each value names, as codes (positions in `SPLITS`: 0 train, 1 val, 2 test).

    Args:
        values: the split column's values, in row order (any iterable: a file's column is read a
            slice at a time).
        name: the table's name, for error messages.
        column: the column's name, for error messages.
        rows: the row number of each value (default: its position).
        places: how messages name rows (default: `"row N"`, from 1; see `places`).

    Raises:
        DataError: a value names no split (naming the value and its rows), or no row is left for
            training (naming the values found and their counts).
    """
    codes = {split: k for k, split in enumerate(SPLITS)}
    marks: list[int] = []
    unknown: dict[str, list[int]] = defaultdict(list)
    for i, value in enumerate(values):
        split = split_of(value)
        if split is None:
            unknown[_shown(value)].append(i)
        marks.append(codes.get(split, -1))
    found = np.asarray(marks, dtype=np.int8)
    rows = np.arange(len(found), dtype=np.int64) if rows is None else np.asarray(rows)
    places = places or RowPlaces()
    if unknown:
        what = "; ".join(f"{value} in {_rows(rows[positions], places)}" for value, positions in unknown.items())
        raise DataError(
            f"{name}: split column {column!r} has values that name no split: {what}; accepted: {accepted()}"
        )
    if not np.any(found == 0):
        found_per_split = zip(SPLITS, np.bincount(found, minlength=3), strict=True)
        counts = ", ".join(f"{n:,} {split}" for split, n in found_per_split if n)
        raise DataError(
            f"{name}: split column {column!r} leaves the train split empty (all {len(found):,} rows are "
            f"{counts}: {_rows(rows, places)}); mark the training rows {SPLIT_SPELLINGS['train'][0]!r} or False"
        )
    return found


def split_by_column(table: TextTable, column: str) -> dict[str, TextTable]:
    """The rows of `table` by the split its column `column` names (only the splits it names).

    Args:
        table: rows read with their split values (`table.splits`).
        column: the column's name, for error messages.

    Raises:
        DataError: as `split_marks`.
    """
    if table.splits is None:
        raise ValueError(f"{table.name}: the table was read without its split column {column!r}")
    marks = split_marks(table.splits, table.name, column, table.rows, table.places)
    present = list(dict.fromkeys(marks.tolist()))  # in the order the rows first name them
    return {SPLITS[k]: table.select(np.flatnonzero(marks == k)) for k in present}
