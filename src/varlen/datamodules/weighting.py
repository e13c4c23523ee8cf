"""Per-sample weights of a training split (`sample_weights`): class balance or a weight column.

`"balanced"` weighs each training sample by the inverse of its class's count in the training
split, so every class is served equally often per epoch (the sampler draws by these weights,
`BucketBatchSampler`). A column name takes the weights from the data's
own per-row column, checked here so that a bad value names the file and row, not a sample index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from varlen.datasets.mixture import SourceMixture
from varlen.errors import DataError

__all__ = ["BALANCED", "balanced_weights", "check_sample_weights", "checked_column", "served_shares", "weights_of"]

BALANCED = "balanced"


def check_sample_weights(value: str | None, owner: str, shuffle: bool, columns: bool) -> str | None:
    """`value` if it is None, `"balanced"` or (where the data has weight columns) a column name.

    Raises:
        ValueError: another value, a column where `columns` is False, or weights without shuffle.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{owner}: sample_weights must be None, {BALANCED!r} or a column name, got {value!r}")
    if value != BALANCED and not columns:
        raise ValueError(
            f"{owner}: sample_weights={value!r}: this data has no per-row weight column; use {BALANCED!r} or None"
        )
    if not shuffle:
        raise ValueError(f"{owner}: sample_weights={value!r} draws the training samples every epoch: it needs shuffle")
    return value


def balanced_weights(labels: np.ndarray, where: str) -> np.ndarray:
    """Inverse class frequency: `labels` are class ids, `-1` for a sample without a label.

    Labelled samples share their part of the split equally between the classes present (weight
    `labelled / (N * classes * count[class])`); an unlabelled one (a task's missing target)
    keeps its plain share `1 / N`. So an epoch serves each class as often, and unlabelled
    samples as often as the file holds them.

    Raises:
        DataError: no labelled sample in `where`.
    """
    labels = np.asarray(labels, dtype=np.int64)
    labelled = labels >= 0
    if not labelled.any():
        raise DataError(f"{where}: no sample has a label: sample_weights='balanced' has no class to balance")
    counts = np.bincount(labels[labelled])
    present = int((counts > 0).sum())
    share = labelled.sum() / len(labels) / present  # of each class present
    weights = np.full(len(labels), 1.0 / len(labels))
    weights[labelled] = share / counts[labels[labelled]]
    return weights


def checked_column(values: np.ndarray, column: str, where: Callable[[int], str]) -> np.ndarray:
    """`values` of a weight `column` as float64, refused where one is missing, not finite or
    negative (naming the row: `where(i)` for value `i`), or where all are zero.

    Raises:
        DataError: naming the column, the first bad row, its value and how many there are.
    """
    values = np.asarray(values, dtype=np.float64)
    problems = ((np.isnan(values), "missing or not a number"), (np.isinf(values), "infinite"), (values < 0, "negative"))
    for bad, what in problems:
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"{where(first)}: sample weight column {column!r} is {what} ({values[first]:g}); weights must be "
                f"finite and >= 0 ({int(bad.sum())} such row(s))"
            )
    if not values.any():
        raise DataError(f"sample weight column {column!r} is 0 on every training row: there is nothing to draw")
    return values


def served_shares(order: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Class ids (`-1`: unlabelled), their share of the served `order` (indices, repeats
    counted) and their share of the split's samples `labels`."""
    labels = np.asarray(labels, dtype=np.int64)
    classes, held = np.unique(labels, return_counts=True)
    served = np.unique(labels[np.asarray(order, dtype=np.int64)], return_counts=True)
    served_counts = np.zeros(len(classes))
    served_counts[np.searchsorted(classes, served[0])] = served[1]
    return classes, served_counts / max(len(order), 1), held / max(len(labels), 1)


def weights_of(dm: Any, dataset: Any) -> np.ndarray | None:
    """The per-sample weights of `dm`'s training `dataset` (None: unweighted): a mixture's from its sources'
    shares, else from `dm.sample_weights` (inverse class frequency, or the weight column)."""
    if isinstance(dataset, SourceMixture):
        return dm._mixture_weights(dataset)
    if dm.sample_weights is None:
        return None
    where = f"{type(dm).__name__} train split" + (f" of source {dm.source_name!r}" if dm.source_name else "")
    if dm.sample_weights == BALANCED:
        labels = dm.class_labels(dataset)
        if labels is None:
            raise DataError(f"{where}: its samples have no classes to balance")
        return balanced_weights(labels, where)
    return dm.weight_column(dataset, dm.sample_weights)
