"""Label maps: integer values, classes 1..C without gaps, and values a scene does not know.

A label map is `[H, W]` with 0 = unlabelled and 1..C the classes (a public scene may number its
classes otherwise, e.g. Salinas-A's 1, 10-14: `label_values`).
A value that is no class of the scene (negative, above C, a number the scene does not use) is bad
input: `known_labels` sends it through `report.bad` once per value, which raises under
`on_bad="raise"` and, under `"skip"`, leaves its pixels unlabelled and counts the value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from varlen.errors import DataError
from varlen.prepare.report import DataReport

__all__ = ["check_classes_present", "check_integer_labels", "count_classes", "known_labels", "present_values"]


def check_integer_labels(labels: np.ndarray, source: str) -> None:
    """Refuse NaN and fractional values in a label map stored as floats (MATLAB often does)."""
    if not np.issubdtype(labels.dtype, np.integer):
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            raise DataError(
                f"{source}: labels must be integers (0 = unlabelled), got {labels[r, c]} at row {r}, column {c}"
            )


def present_values(labels: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a label map: one counting pass for integer maps of a small range."""
    if labels.size and np.issubdtype(labels.dtype, np.integer):
        low, high = int(labels.min()), int(labels.max())
        if high - low < 1 << 20:
            return np.flatnonzero(np.bincount((labels.ravel() - low).astype(np.intp), minlength=1)) + low
    return np.unique(labels)


def check_classes_present(labels: np.ndarray, num_classes: int, source: str) -> None:
    """Every class 1..C has a labelled pixel (a gap would be a class the model can never learn)."""
    present = present_values(labels)
    present = present[(present > 0) & (present <= num_classes)]
    num_empty = num_classes - present.size
    if num_empty:
        # the ten smallest empty classes, without enumerating 1..C (C may be a stray 2**32)
        empty = np.setdiff1d(np.arange(1, min(num_classes, present.size + 10) + 1), present)[:10].tolist()
        more = f" and {num_empty - len(empty)} more" if num_empty > len(empty) else ""
        raise DataError(
            f"{source}: class(es) {empty}{more} have no labelled pixel; remap the labels to 1..C without gaps"
        )


def count_classes(labels: np.ndarray, source: str) -> int:
    """C of a map whose classes are 1..C: its largest value, once every class below it has pixels.

    Negative values are not classes; `known_labels` reports them when the scene is opened.
    """
    check_integer_labels(labels, source)
    top = int(labels.max(initial=0))
    if top < 1:
        raise DataError(f"{source}: no labelled pixel (every value is 0 = unlabelled, or negative); classes are 1..C")
    check_classes_present(labels, top, source)
    return top


def _describe(values: Sequence[int]) -> str:
    if list(values) == list(range(1, len(values) + 1)):
        return f"1..{len(values)}"
    return ", ".join(str(v) for v in values)


def known_labels(
    labels: np.ndarray, values: Sequence[int], source: str, report: DataReport | None = None
) -> np.ndarray:
    """The map as int32 classes 1..C in the order of `values` (0 stays unlabelled).

    Args:
        labels: `[H, W]` raw label map.
        values: the map value of each class, in class order.
        source: the file (for messages).
        report: where a value that is no class goes (`report.bad(..., item="label value")`);
            default: a raising one.

    Raises:
        DataError: fractional or NaN labels; under `on_bad="raise"`, a value that is no class.
    """
    report = report if report is not None else DataReport()
    check_integer_labels(labels, source)
    values = [int(v) for v in values]
    unknown = np.setdiff1d(present_values(labels), [0, *values])
    for value in unknown:
        hits = labels == value
        r, c = (int(v) for v in np.argwhere(hits)[0])
        report.bad(
            f"{source}: label {int(value)} at {int(hits.sum())} pixel(s), first at row {r}, column {c}",
            f"not one of the scene's classes ({_describe(values)}; 0 = unlabelled)",
            item="label value",
        )
    if unknown.size:  # under "skip": those pixels are unlabelled from here on
        labels = np.where(np.isin(labels, unknown), 0, labels)
    lut = np.zeros(max(values, default=0) + 1, dtype=np.int32)
    lut[values] = np.arange(1, len(values) + 1)
    return lut[labels.astype(np.int64, copy=False)]
