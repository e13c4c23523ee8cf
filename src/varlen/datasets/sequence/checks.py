"""A source's rows checked before they are split: each bad row goes through `report.bad` (raised, or
skipped and counted), one reason per row, in row order.

A row is bad when a served column's value is missing (an Arrow null), a size field is empty (or, packed, longer
than the row), a float value is not finite, a token id lies outside the vocabulary, or its label is missing,
unknown (not a class of the training data) or, for regression, not finite. Every check is vectorised over the
column; only bad rows are visited one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.sequence.columns import SequenceColumns
from varlen.prepare.report import DataReport

__all__ = ["RowRules", "class_ids", "usable_rows"]


@dataclass(frozen=True)
class RowRules:
    """What a row must satisfy.

    Attributes:
        size_fields: fields that must not be empty.
        label: the label column (None: none).
        classes: the label values of the classes, in id order (None: regression, or no label).
        token_field: a field of token ids, checked against `vocab_size`.
        vocab_size: ids must lie in `[0, vocab_size)`.
        row_length: a packed layout's row (`max_tokens`): a size field longer than it is bad
            (`varlen.datamodules.packing`); None: any length.
    """

    size_fields: tuple[str, ...]
    label: str | None = None
    classes: np.ndarray | None = None
    token_field: str | None = None
    vocab_size: int | None = None
    row_length: int | None = None


def class_ids(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Each label's position in `classes` (int64), `-1` where it is none of them."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iub" and classes.dtype.kind not in "iub":
        labels = labels.astype(str)  # ids named by their text (classes given as names)
    if labels.dtype.kind not in "iub" and classes.dtype.kind in "iub":
        classes = classes.astype(str)
    order = np.argsort(classes, kind="stable")
    found = np.searchsorted(classes, labels, sorter=order).clip(0, max(len(classes) - 1, 0))
    ids = order[found] if len(classes) else np.zeros(len(labels), np.int64)
    known = (classes[ids] == labels) if len(classes) else np.zeros(len(labels), bool)
    return np.where(known, ids, -1).astype(np.int64)


def _element_rows(ragged: Ragged, elements: np.ndarray) -> np.ndarray:
    """The rows holding the elements at these positions of `values` (rows stored back to back)."""
    return np.searchsorted(ragged.starts + ragged.lengths, elements, side="right")


def _non_finite(values: np.ndarray) -> np.ndarray:
    """Positions (first axis) of the entries of `values` holding a non-finite number."""
    if values.dtype.kind != "f" or not len(values):
        return np.zeros(0, np.int64)
    bad = ~np.isfinite(values)
    return np.flatnonzero(bad.reshape(len(values), -1).any(axis=1) if bad.ndim > 1 else bad)


def _problems(columns: SequenceColumns, rules: RowRules) -> list[tuple[np.ndarray, str]]:
    """`(rows, reason)` of each check, in the order a row's first reason is taken."""
    found = []
    for name, rows in columns.missing.items():
        what = "label" if name == rules.label else "value"
        found.append((np.flatnonzero(rows), f"missing {what} in column {name!r}"))
    for name in rules.size_fields:
        found.append((np.flatnonzero(columns.ragged[name].lengths == 0), f"empty sequence in column {name!r}"))
        if rules.row_length is not None:
            reason = f"longer than max_tokens={rules.row_length} in column {name!r}, the packed row: raise max_tokens"
            found.append((np.flatnonzero(columns.ragged[name].lengths > rules.row_length), reason))
    for name, ragged in columns.ragged.items():
        found.append((_element_rows(ragged, _non_finite(ragged.values)), f"non-finite value in column {name!r}"))
    for name, values in columns.fixed.items():
        found.append((_non_finite(values), f"non-finite value in column {name!r}"))
    if rules.token_field is not None and rules.vocab_size is not None:
        ragged = columns.ragged[rules.token_field]
        outside = np.flatnonzero((ragged.values < 0) | (ragged.values >= rules.vocab_size))
        reason = f"token id outside the vocabulary (0..{rules.vocab_size - 1}) in column {rules.token_field!r}"
        found.append((_element_rows(ragged, outside), reason))
    if rules.label is not None and columns.labels is not None:
        if rules.classes is not None:
            unknown = class_ids(columns.labels, rules.classes) < 0
            found.append((np.flatnonzero(unknown), f"unknown label in column {rules.label!r}"))
        else:
            found.append(
                (_non_finite(columns.labels.astype(np.float64)), f"non-finite label in column {rules.label!r}")
            )
    return found


def usable_rows(
    columns: SequenceColumns,
    rules: RowRules,
    report: DataReport,
    where: str,
    split: str,
    place: Callable[[int], str] = lambda row: f"row {row}",
) -> np.ndarray:
    """The rows of `columns` that pass every check, sorted; each bad row is reported once (its first
    reason, in row order) under `split` of `report`, named by `place` (`line N` of a CSV).

    Raises:
        DataError: under `on_bad="raise"`, at the first bad row (naming `where`, the row and why).
    """
    first: dict[int, str] = {}
    for rows, reason in _problems(columns, rules):
        for row in np.unique(rows).tolist():
            first.setdefault(row, reason)
    for row in sorted(first):
        label = ""
        if columns.labels is not None and first[row].startswith("unknown label"):
            label = f" (label {columns.labels[row].item()!r})"
        report.bad(f"{where}, {place(row)}{label}", first[row], split=split)
    keep = np.ones(columns.rows, bool)
    keep[list(first)] = False
    return np.flatnonzero(keep)
