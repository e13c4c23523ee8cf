"""A text table's labels as classes: the class name of a label, and the checked class list of a column.

Labels may be ints, integral floats (what a column with one blank cell becomes), bools or strings;
each becomes a class name (:func:`label_key`). Without ``class_names`` the classes are the training
labels' names, sorted (:func:`class_list`, :func:`column_classes`), after a check that the column
says one thing (:func:`varlen.labels.check_labels`): a column mixing numbers with words, or spelling
one number two ways, is refused with examples and their places (a file's line, or a row from 1: see
:mod:`~varlen.datasets.text.places`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from varlen.datasets.text.places import Places
from varlen.errors import DataError
from varlen.labels import check_labels

__all__ = ["check_classes", "class_list", "column_classes", "label_key"]


def _rows_from_one(rows: Sequence[int]) -> list[str]:
    """Rows named as a table without lines names them (the default places)."""
    return [f"row {int(r) + 1}" for r in rows]


def label_key(label: Any) -> str | None:
    """A label as its class name: ints (and integral floats, which a column with one blank cell
    becomes) as ``"1"``, other values as text; None for a missing or non-finite label."""
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
    """The sorted class names of distinct ``values`` (first met at ``rows``), checked (see the module)."""
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
    try:
        return [str(v) for v in sorted(int(v) for v in names)]
    except ValueError:
        return sorted(names)


def class_list(
    labels: Sequence[Any],
    source: str = "labels",
    column: str = "label",
    rows: Sequence[int] | None = None,
    places: Places = _rows_from_one,
) -> list[str]:
    """The stable class list of some labels: sorted numerically when all are ints, else as strings.

    Raises:
        DataError: the labels mix numbers with words or spell one number two ways (naming ``source``,
            ``column`` and the places of the rows: ``rows[i]`` of ``labels[i]``, default ``i``).
    """
    rows = range(len(labels)) if rows is None else rows
    return _classes(list(labels), list(rows), source, column, places)


def column_classes(
    labels: Any, source: str, column: str, rows: np.ndarray | None = None, places: Places = _rows_from_one
) -> list[str]:
    """:func:`class_list` of a pyarrow (chunked) array, read once in Arrow: its distinct values only
    become Python objects (a column of 2 M labels costs one pass). ``rows``: each entry's row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(labels, pa.ChunkedArray):
        labels = labels.combine_chunks() if labels.num_chunks else pa.array([], labels.type)
    encoded = labels.dictionary_encode()
    indices = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    ids, first = np.unique(indices, return_index=True)
    first, ids = first[ids >= 0], ids[ids >= 0]
    values = encoded.dictionary.take(pa.array(ids, pa.int64())).to_pylist()
    return _classes(values, (first if rows is None else np.asarray(rows)[first]).tolist(), source, column, places)


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
