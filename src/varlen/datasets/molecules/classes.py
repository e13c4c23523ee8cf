"""Both classes in every evaluation split: a classification split without them gives no ROC-AUC.

A scaffold split can leave one class only in validation or test (MoleculeNet's BBBP in its file
order: 204 positives and 0 negatives in each), and ROC-AUC is then undefined: torchmetrics
returns 0.0 with a warning, a number a user might publish. `check_classes` finds such
tasks right after splitting and raises a `DataError` naming the split, the
target column and the class counts, or warns when asked to go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from varlen import notices
from varlen.errors import DataError

__all__ = ["SINGLE_CLASS", "SingleClass", "check_classes", "class_counts", "single_class_problems"]

SingleClass = Literal["raise", "warn"]
SINGLE_CLASS = ("raise", "warn")
#: the splits whose metrics are reported (train may be one-sided without making a number undefined)
EVALUATED = ("val", "test")


def class_counts(targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Negatives and positives per task of 0/1 `targets [N, T]` (NaN = missing, not counted)."""
    targets = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)
    return (targets == 0).sum(axis=0), (targets == 1).sum(axis=0)


def single_class_problems(
    targets: np.ndarray, positions: Mapping[str, np.ndarray], columns: Sequence[str]
) -> list[str]:
    """One line per (evaluated split, task) with fewer than two classes, giving the counts."""
    problems = []
    for split in EVALUATED:
        part = positions.get(split)
        if part is None or not len(part):
            continue
        negatives, positives = class_counts(targets[part])
        for column, neg, pos in zip(columns, negatives.tolist(), positives.tolist(), strict=True):
            if neg == 0 or pos == 0:
                counts = f"{neg} of class 0, {pos} of class 1"
                held = "no label" if neg + pos == 0 else "one class only"
                problems.append(f"the {split} split holds {held} for task {column!r} ({counts})")
    return problems


def check_classes(
    path: Path,
    targets: np.ndarray,
    positions: Mapping[str, np.ndarray],
    columns: Sequence[str],
    split: str,
    policy: SingleClass = "raise",
) -> None:
    """Raise (or warn) when a validation or test split lacks a class in some task.

    Raises:
        DataError: under `policy="raise"`, naming the file, split, task and counts.
    """
    if policy not in SINGLE_CLASS:
        raise ValueError(f"single_class must be one of {SINGLE_CLASS}, got {policy!r}")
    problems = single_class_problems(targets, positions, columns)
    if not problems:
        return
    hint = (
        "Use split='scaffold_balanced' (it deals the small scaffold sets at random)"
        if split == "scaffold"
        else "Try another seed, larger val/test fractions or more molecules"
    )
    message = f"{path}: " + "; ".join(problems) + f" (split={split!r}): ROC-AUC is undefined there."
    if policy == "raise":
        raise DataError(f"{message} {hint}, or pass single_class='warn' to go on (the ROC-AUC is then logged as NaN)")
    notices.warn(f"{message} The model logs it as NaN.")
