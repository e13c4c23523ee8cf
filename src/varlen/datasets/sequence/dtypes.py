"""The dtype each field is served in: the one it is stored in, or the one `dtypes` names; and the one notice
a float64 field gets when it meets a model whose parameters are of lower precision.

A table written from float64 values (`.tolist()` of float32 arrays, a CSV, JSON) serves float64, and a
float32 `Linear` stops on "mat1 and mat2 must have the same dtype": `dtypes={"signal": "float32"}`
casts the field as each batch is gathered (the stored table is left as it is). A cast never wraps or overflows
(130.0 to int8 is -126, 1e5 to float16 is `inf`): `check_ranges` refuses, before the first batch, a field
whose values a cast cannot hold, naming the row, the value, the field's values as stored and the dtype's range.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from varlen.batching.ragged import Ragged
from varlen.datasets.sequence.fields import FieldSpec
from varlen.errors import DataError

__all__ = ["check_dtypes", "check_ranges", "dtype_range", "float64_notice", "out_of_range", "served_specs"]


def check_dtypes(dtypes: Mapping[str, Any] | None, specs: Mapping[str, FieldSpec], owner: str) -> dict[str, np.dtype]:
    """`dtypes` (field -> a numpy dtype or its name) checked against the served fields.

    Raises:
        ValueError: a name that is no served field (naming those), or a dtype that is not one of numbers.
    """
    if not dtypes:
        return {}
    unknown = sorted(set(dtypes) - set(specs))
    if unknown:
        raise ValueError(f"{owner}: dtypes name {unknown}, which are no served field (those are {list(specs)})")
    out = {}
    for name, value in dtypes.items():
        try:
            dtype = np.dtype(value)
        except TypeError as error:
            raise ValueError(f"{owner}: dtypes[{name!r}] = {value!r} is no numpy dtype (e.g. 'float32')") from error
        if dtype.kind not in "biuf":
            raise ValueError(
                f"{owner}: dtypes[{name!r}] = {value!r}: give a dtype of numbers (e.g. 'float32', 'int64')"
            )
        out[name] = dtype
    return out


@functools.cache
def dtype_range(dtype: np.dtype) -> tuple[int | float, int | float]:
    """The least and greatest values `dtype` holds (booleans: 0 and 1; floats: the finite ones)."""
    if dtype.kind == "b":
        return 0, 1
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return (int(info.min), int(info.max)) if dtype.kind in "iu" else (float(info.min), float(info.max))


def _span(values: np.ndarray) -> tuple[Any, Any] | None:
    """The least and greatest finite value of `values` (None: none)."""
    finite = np.isfinite(values) if values.dtype.kind == "f" else None
    if not values.size or (finite is not None and not finite.any()):
        return None
    low = values.min(initial=np.inf, where=finite) if finite is not None else values.min()
    high = values.max(initial=-np.inf, where=finite) if finite is not None else values.max()
    return low.item(), high.item()


def out_of_range(values: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """Which entries (first axis) of `values` hold a finite value `dtype` cannot hold, None when none do
    (a cast that cannot lose range is not looked at; non-finite values are the row checks')."""
    values = np.asarray(values)
    if values.dtype.kind not in "biuf" or np.can_cast(values.dtype, dtype, "safe"):
        return None
    span, (low, high) = _span(values), dtype_range(dtype)
    if span is None or (span[0] >= low and span[1] <= high):
        return None
    whole = np.trunc(values) if values.dtype.kind == "f" and dtype.kind in "iub" else values  # 127.5 is int8's 127
    bad = (whole < low) | (whole > high)
    bad = bad.reshape(len(values), -1).any(axis=1) if bad.ndim > 1 else bad
    return bad if bad.any() else None


def check_ranges(
    fields: Mapping[str, np.ndarray | Ragged],
    dtypes: Mapping[str, np.dtype],
    where: str,
    place: Callable[[int], str] = lambda row: f"row {row}",
) -> None:
    """Refuse a cast of a field (`dtypes`) whose values it cannot hold: it would wrap (ints) or overflow to
    `inf` (floats) silently. Run before the row checks, which read the values as stored (a token id's
    vocabulary too). One pass over each cast field's values; the rows only when one is out.

    Raises:
        DataError: naming `where`, the first such row (`place`), its value, the field's values as stored
            (their span), the dtype and its range, and the way out.
    """
    for name, dtype in dtypes.items():
        column = fields.get(name)
        values = column.values if isinstance(column, Ragged) else column
        bad = None if values is None else out_of_range(values, dtype)
        if bad is None:
            continue
        entry = int(np.flatnonzero(bad)[0])
        row = entry
        if isinstance(column, Ragged):  # rows stored back to back
            row = int(np.searchsorted(column.starts + column.lengths, entry, side="right"))
        flat = np.asarray(values[entry]).reshape(-1, 1)
        value = flat[out_of_range(flat, dtype)][0, 0].item()
        low, high = _span(values)
        floor, ceiling = dtype_range(dtype)
        raise DataError(
            f"{where}, {place(row)}: column {name!r} holds {value!r}, which dtypes={{{name!r}: {dtype.name!r}}} cannot "
            f"hold ({dtype.name} holds {floor:g}..{ceiling:g}; the column's values as stored span {low!r}..{high!r}): "
            f"the cast would {'wrap' if dtype.kind in 'iub' else 'overflow to inf'} silently; give a dtype that holds "
            "them, or leave the field out of dtypes"
        )


def served_specs(specs: Mapping[str, FieldSpec], dtypes: Mapping[str, np.dtype]) -> dict[str, FieldSpec]:
    """`specs` with each field's dtype the one it is served in."""
    return {name: replace(spec, dtype=dtypes.get(name, spec.dtype)) for name, spec in specs.items()}


def _model_dtype(model: Any) -> torch.dtype | None:
    """The floating dtype of `model`'s parameters (float32 where there are several), None without any or
    with float64 among them."""
    found = {p.dtype for p in model.parameters() if p.is_floating_point()} if model is not None else set()
    if not found or torch.float64 in found:
        return None
    return torch.float32 if torch.float32 in found else sorted(found, key=str)[0]


def float64_notice(owner: str, specs: Mapping[str, FieldSpec], model: Any) -> str | None:
    """What to tell a user whose float64 fields meet `model` (a `torch.nn.Module`), or None."""
    fields = [name for name, spec in specs.items() if spec.dtype == np.float64]
    dtype = _model_dtype(model) if fields else None
    if dtype is None:
        return None
    name = str(dtype).removeprefix("torch.")
    cast = ", ".join(f"{field!r}: {name!r}" for field in fields)
    return (
        f"{owner}: field(s) {fields} are served as float64, the dtype they are stored in, and the model's "
        f"parameters are {name} (a layer stops on 'mat1 and mat2 must have the same dtype'): pass "
        f"dtypes={{{cast}}} to cast them as batches are made, or store them as {name} "
        "(varlen.write_arrays keeps each array's dtype)"
    )
