"""A text table's labels as classes: the class name of a label, and the checked class list of a column.

Labels may be ints, integral floats (what a column with one blank cell becomes), bools or strings;
each becomes a class name (`label_key`). Without `class_names` the classes are the training
labels' names in `varlen.prepare.labels.class_order` (`class_list`, `column_classes`), after a
check that the column says one thing (`varlen.prepare.labels.check_labels`): a column mixing numbers with
words, or spelling one number two ways, is refused with examples and their places (a file's line, or a row from 1: see
`places`). A Hugging Face `ClassLabel` column's ids are read as its names
(`named_labels`): its names are the classes, in id order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from varlen.datasets.text.places import Places
from varlen.errors import DataError
from varlen.prepare.labels import check_labels, class_order, distinct_labels

__all__ = ["check_classes", "class_list", "column_classes", "label_key", "named_labels"]


def _rows_from_one(rows: Sequence[int]) -> list[str]:
    """Rows named as a table without lines names them (the default places)."""
    return [f"row {int(r) + 1}" for r in rows]


def label_key(label: Any) -> str | None:
    """A label as its class name: ints (and integral floats, which a column with one blank cell
    becomes) as `"1"`, other values as text; None for a missing or non-finite label."""
    if label is None:
        return None
    if isinstance(label, (float, np.floating)):
        if not np.isfinite(label):
            return None
        if label.is_integer():
            return str(int(label))
    if isinstance(label, (bool, int, np.integer)):
        return str(int(label))
    return str(label).strip() or None


def _classes(values: Sequence[Any], rows: Sequence[int], source: str, column: str, places: Places) -> list[str]:
    """The sorted class names of distinct `values` (first met at `rows`), checked (see the module)."""
    first: dict[str, int] = {}
    for value, row in zip(values, rows, strict=True):
        key = label_key(value)
        if key is not None and (key not in first or row < first[key]):
            first[key] = int(row)
    names = sorted(first, key=first.get)
    try:
        check_labels(names, [""] * len(names), source, column)
    except DataError:  # refused: now the places are worth finding (a file's lines cost a pass over it)
        check_labels(names, places([first[name] for name in names]), source, column)
    return class_order(names)


def class_list(
    labels: Sequence[Any],
    source: str = "labels",
    column: str = "label",
    rows: Sequence[int] | None = None,
    places: Places = _rows_from_one,
) -> list[str]:
    """The stable class list of some labels: `varlen.prepare.labels.class_order` (by number when all spell
    numbers, else as text).

    Raises:
        DataError: the labels mix numbers with words or spell one number two ways (naming `source`,
            `column` and the places of the rows: `rows[i]` of `labels[i]`, default `i`).
    """
    rows = range(len(labels)) if rows is None else rows
    return _classes(list(labels), list(rows), source, column, places)


def column_classes(
    labels: Any, source: str, column: str, rows: np.ndarray | None = None, places: Places = _rows_from_one
) -> list[str]:
    """`class_list` of a pyarrow (chunked) array, read once in Arrow: its distinct values only
    become Python objects (a column of 2 M labels costs one pass). `rows`: each entry's row."""
    values, first = distinct_labels(labels)
    return _classes(values, (first if rows is None else np.asarray(rows)[first]).tolist(), source, column, places)


def named_labels(ids: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """A `ClassLabel` column's stored ids as its names, so that they are matched as names are (`-1`, what
    `datasets` stores for no label, is None); an id beyond the names stays an id, marked so that no name
    matches it (the row is then an unknown label, named in the message); a value that is no id stays as is."""

    def name(v: Any) -> Any:
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            return v
        return None if v == -1 else names[v] if 0 <= v < len(names) else f"{v} (no name in the ClassLabel)"

    return [name(v) for v in ids]


def check_classes(classes: Sequence[str], name: str, column: str) -> list[str]:
    """Refuse fewer than two classes (a classifier with one class learns nothing), naming the source."""
    classes = list(classes)
    if len(classes) < 2:
        held = f"only the class {classes[0]!r}" if classes else "no usable label"
        raise DataError(
            f"{name}: the label column {column!r} holds {held}; a classifier needs two classes or more "
            "(check label_column, or give class_names)"
        )
    return classes
