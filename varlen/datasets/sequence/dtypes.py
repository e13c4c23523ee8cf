"""The dtype each field is served in: the one it is stored in, or the one ``dtypes`` names; and the one notice
a float64 field gets when it meets a model whose parameters are of lower precision.

A table written from float64 values (``.tolist()`` of float32 arrays, a CSV, JSON) serves float64, and a
float32 ``Linear`` stops on "mat1 and mat2 must have the same dtype": ``dtypes={"signal": "float32"}``
casts the field as each batch is gathered (the stored table is left as it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from varlen.datasets.sequence.fields import FieldSpec

__all__ = ["check_dtypes", "float64_notice", "served_specs"]


def check_dtypes(dtypes: Mapping[str, Any] | None, specs: Mapping[str, FieldSpec], owner: str) -> dict[str, np.dtype]:
    """``dtypes`` (field -> a numpy dtype or its name) checked against the served fields.

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


def served_specs(specs: Mapping[str, FieldSpec], dtypes: Mapping[str, np.dtype]) -> dict[str, FieldSpec]:
    """``specs`` with each field's dtype the one it is served in."""
    return {name: replace(spec, dtype=dtypes.get(name, spec.dtype)) for name, spec in specs.items()}


def _model_dtype(model: Any) -> torch.dtype | None:
    """The floating dtype of ``model``'s parameters (float32 where there are several), None without any or
    with float64 among them."""
    found = {p.dtype for p in model.parameters() if p.is_floating_point()} if model is not None else set()
    if not found or torch.float64 in found:
        return None
    return torch.float32 if torch.float32 in found else sorted(found, key=str)[0]


def float64_notice(owner: str, specs: Mapping[str, FieldSpec], model: Any) -> str | None:
    """What to tell a user whose float64 fields meet ``model`` (a ``torch.nn.Module``), or None."""
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
