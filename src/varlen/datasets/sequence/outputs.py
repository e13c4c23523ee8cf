"""What a user's `transform` returns, checked as what is read is checked: a transform's output is data too.

A returned sample must hold every served field, each a numeric array of the field's served shape (a
variable-length field `[length, *trailing]`, a fixed one `trailing`) whose values its served dtype holds (a
cast never wraps or overflows) and that are finite (every sample read is: the row checks); a size field keeps at
least one element and at most the stored length (the batch was planned at it); the label stays, a class id of
the task's classes or a finite regression target. Anything else is a `DataError` naming
the split, the sample, the field, what was expected and what came, and the transform: whatever `on_bad` says,
since a transform that returns a wrong sample is a bug to fix, not a bad row of the data (skipping it would also
change the epoch's batches, planned before the transform runs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from varlen.datasets.sequence.dtypes import dtype_range
from varlen.datasets.sequence.fields import FieldSpec
from varlen.errors import DataError

__all__ = ["OutputRules", "checked_output"]

#: the key of a sample's label
LABEL = "label"


@dataclass(frozen=True)
class OutputRules:
    """What a transformed sample must be.

    Attributes:
        specs: each served field by name, with its served dtype.
        size_fields: the fields whose lengths the batch was planned at.
        task: `classification`, `regression` or None (no labels).
        num_classes: the classes a label is an id of (classification).
    """

    specs: Mapping[str, FieldSpec]
    size_fields: tuple[str, ...] = ()
    task: str | None = None
    num_classes: int | None = None


def _array(value: Any) -> np.ndarray:
    """A returned value as numpy (a tensor's values; bfloat16 as float32)."""
    if torch.is_tensor(value):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return np.asarray(value)


def _shape(spec: FieldSpec) -> str:
    return f"[length{''.join(f', {k}' for k in spec.trailing)}]" if spec.ragged else f"{list(spec.trailing)}"


def _field(name: str, value: Any, spec: FieldSpec, stored: int | None) -> tuple[np.ndarray, str | None]:
    """The field cast to its served dtype, or why it cannot be (None: it can)."""
    array = _array(value)
    if array.dtype.kind not in "biuf":
        return array, f"field {name!r} holds {array.dtype} values where {spec.dtype} numbers are served"
    shape = array.shape[1:] if spec.ragged else array.shape
    if (spec.ragged and array.ndim == 0) or tuple(shape) != spec.trailing:
        return array, (
            f"field {name!r} has shape {list(array.shape)} where {_shape(spec)} is served: return each field in "
            "its shape (an axis dropped or resized breaks the batch)"
        )
    if stored is not None and not 0 < len(array) <= stored:
        return array, (
            f"size field {name!r} has length {len(array)} where it was planned at {stored}: a transform may "
            "shorten a size field (a crop), never lengthen it (the batch's budget counts the stored length) nor "
            "empty it (an empty sample is a bad row)"
        )
    why = _values(name, array, spec.dtype) if array.size else None
    return (array, why) if why is not None else (array.astype(spec.dtype, copy=False), None)


def _values(name: str, array: np.ndarray, dtype: np.dtype) -> str | None:
    """Why `array`'s values cannot be served as `dtype` (non-finite, or past its range), None: they can. Two
    reductions: its least and greatest value (a NaN is either), the elements only to name a bad one."""
    float_ = array.dtype.kind == "f"
    checked = float_ or not np.can_cast(array.dtype, dtype, "safe")
    least, most = (array.min().item(), array.max().item()) if checked else (0, 0)
    if float_ and not (np.isfinite(least) and np.isfinite(most)):
        where = np.flatnonzero(~np.isfinite(array).reshape(len(array) if array.ndim else 1, -1).any(axis=1))
        first = f" (first at element {int(where[0])})" if array.ndim else ""
        return f"field {name!r} holds a non-finite value{first} where the sample read was finite"
    if not checked or np.can_cast(array.dtype, dtype, "safe"):
        return None
    low, high = dtype_range(dtype)
    cut = math.trunc if float_ and dtype.kind in "iub" else float  # 127.5 is int8's 127
    if cut(least) >= low and cut(most) <= high:
        return None
    return (
        f"field {name!r} holds {most if cut(most) > high else least!r}, which its served dtype {dtype} cannot hold "
        f"({low:g}..{high:g}): the cast would wrap or overflow"
    )


def _label(value: Any, rules: OutputRules) -> tuple[Any, str | None]:
    """The label as served (a class id, int64; a target, float32), or why it cannot be."""
    array = _array(value)
    if array.ndim != 0 or array.dtype.kind not in "iuf":
        return value, f"label is {value!r} ({type(value).__name__}) where one number is served"
    number = array.item()
    if rules.task == "regression":
        if not np.isfinite(np.float32(number)):
            return value, f"label {number!r} is not a finite float32 (a regression target)"
        return np.float32(number), None
    classes = rules.num_classes or 0
    if not math.isfinite(number) or number != int(number) or not 0 <= number < classes:
        return value, f"label {number!r} is no class id (0..{classes - 1}: the {classes} classes, in class_names order)"
    return np.int64(number), None


def checked_output(
    out: Mapping[str, Any], stored: Mapping[str, int], labelled: bool, rules: OutputRules, where: str
) -> dict[str, Any]:
    """`out` with every field and the label cast to what is served.

    Args:
        out: what the transform returned (a mapping).
        stored: each size field's stored length (read before the call: a transform may change its input).
        labelled: whether the sample it was given had a label.
        rules: what a sample must be.
        where: the split, the sample and the transform, for the message.

    Raises:
        DataError: the first reason the sample cannot be served, after `where`.
    """
    sample, why = dict(out), None
    for name, spec in rules.specs.items():
        if name not in sample:
            why = f"returned no field {name!r}: return every field, changed or not"
        else:
            sample[name], why = _field(name, sample[name], spec, stored.get(name))
        if why is not None:
            break
    if why is None and labelled:
        if LABEL not in sample:
            why = f"returned no {LABEL!r}: return the sample's label too"
        else:
            sample[LABEL], why = _label(sample[LABEL], rules)
    if why is not None:
        raise DataError(f"{where}: {why} (a transform's output is checked as the data read is)")
    return sample
