"""`SequenceCollator`: a fetched :class:`SequenceBatch` as the batch, or single samples padded the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from varlen.batching.pad_collate import PadCollate
from varlen.datasets.sequence.dataset import SIZES, SequenceBatch

__all__ = ["SequenceCollator"]


class SequenceCollator:
    """The batch of :class:`~varlen.datasets.sequence.SequenceDataset`: what its ``__getitems__`` fetched
    (already padded), or a list of ``dataset[i]`` samples (streamed chunks, a mixture's single samples)
    padded by :class:`~varlen.batching.pad_collate.PadCollate` into the same keys: ``index``, per
    variable-length field ``<field>`` / ``<field>_mask`` / ``<field>_lengths``, the fixed fields, ``labels``.

    Args:
        fields: the variable-length fields (padded, with masks, in every batch).
        pad_values: per field, the value padding writes (default 0).
        pad_to_multiple_of: round each padded length up to this multiple.
    """

    def __init__(
        self,
        fields: Sequence[str],
        pad_values: Mapping[str, float | int] | None = None,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        self.fields = tuple(fields)
        self.pad = PadCollate(self.fields, pad_values, pad_to_multiple_of)

    def __call__(self, fetched: SequenceBatch | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if isinstance(fetched, Mapping):
            return dict(fetched)
        batch = self.pad([{k: v for k, v in sample.items() if k != SIZES} for sample in fetched])
        if "label" in batch:
            batch["labels"] = batch.pop("label")
        return batch
