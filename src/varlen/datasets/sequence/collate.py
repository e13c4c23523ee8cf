"""`SequenceCollator`: a fetched `SequenceBatch` as the batch, or single samples padded the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, with_widths
from varlen.batching.pad_collate import PadCollate
from varlen.datasets.sequence.dataset import SIZES, SequenceBatch
from varlen.datasets.sequence.packed import pack_arrays

__all__ = ["SequenceCollator"]


class SequenceCollator(PadsToWidths):
    """The batch of `SequenceDataset`: what its `__getitems__` fetched
    (already padded), or a list of `dataset[i]` samples (streamed chunks, a mixture's single samples)
    padded by `PadCollate` into the same keys: `index`, per
    variable-length field `<field>` / `<field>_mask` / `<field>_lengths`, the fixed fields, `labels`.

    Args:
        fields: the variable-length fields (padded, with masks, in every batch).
        pad_values: per field, the value padding writes (default 0).
        pad_to_multiple_of: round each padded length up to this multiple.
        size_fields: the fields whose lengths are the size axes, in order: each pads to the length its axis's
            batch carries (`pad_to`); default: the first field.
        dtypes: field -> the dtype single samples' values are served in (default: as they come).
    """

    def __init__(
        self,
        fields: Sequence[str],
        pad_values: Mapping[str, float | int] | None = None,
        pad_to_multiple_of: int | None = None,
        size_fields: Sequence[str] | None = None,
        dtypes: Mapping[str, Any] | None = None,
    ) -> None:
        self.fields = tuple(fields)
        self.dtypes = {k: torch.from_numpy(np.empty(0, np.dtype(d))).dtype for k, d in (dtypes or {}).items()}
        self.size_fields = tuple(size_fields) if size_fields is not None else self.fields[:1]
        axes = {name: axis for axis, name in enumerate(self.size_fields)}
        self.pad = PadCollate(self.fields, pad_values, pad_to_multiple_of, axes)
        self.pad_values = dict(pad_values or {})
        self.packing: int | None = None  # a packed row's length (SequenceDataModule's layout="packed")

    def __call__(self, fetched: SequenceBatch | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if isinstance(fetched, Mapping):
            return dict(fetched)
        samples = with_widths([{k: v for k, v in sample.items() if k != SIZES} for sample in fetched], fetched)
        if self.packing is not None:  # the one variable-length field end to end, the rest as single values
            (name,) = self.fields
            rest = PadCollate((), self.pad_values)([{k: v for k, v in s.items() if k != name} for s in samples])
            fill = self.pad_values.get(name, 0)
            batch = rest | pack_arrays(name, [s[name] for s in samples], self.packing, fill, self.dtypes.get(name))
        else:
            batch = self.pad(samples)
        if "label" in batch:
            batch["labels"] = batch.pop("label")
        for name, dtype in self.dtypes.items():
            if name in batch and torch.is_tensor(batch[name]):
                batch[name] = batch[name].to(dtype)
        return batch
