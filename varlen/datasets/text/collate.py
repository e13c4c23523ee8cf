"""`TextCollator`: pads a batch of token ids with the tokenizer's pad id, with a keep mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from varlen.batching.collate import pad_flat
from varlen.datasets.text.dataset import TextRows

__all__ = ["TextCollator"]


class TextCollator:
    """Pads token ids with the tokenizer's pad id and builds ``attention_mask`` (1 = real token).

    Args:
        pad_token_id: the tokenizer's ``pad_token_id`` (never assume 0).
        with_token_type_ids: also return ``token_type_ids`` (padded with 0) for models taking them.
        pad_to_multiple_of: round the padded length up (8 suits tensor cores).
    """

    def __init__(self, pad_token_id: int, with_token_type_ids: bool = False, pad_to_multiple_of: int | None = None):
        if pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
        self.pad_token_id = int(pad_token_id)
        self.with_token_type_ids = with_token_type_ids
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: TextRows | Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad a batch: :class:`TextRows` (the loader's batched fetch) or a list of samples."""
        rows = samples if isinstance(samples, TextRows) else TextRows.from_samples(samples)
        ids = pad_flat(rows.ids, rows.lengths, self.pad_token_id, self.pad_to_multiple_of, dtype=torch.long)
        batch = {
            "index": torch.from_numpy(rows.index),
            "input_ids": ids.values,
            "attention_mask": ids.mask.long(),
            "labels": torch.from_numpy(rows.labels),
        }
        if self.with_token_type_ids:
            if rows.type_ids is not None:
                batch["token_type_ids"] = pad_flat(
                    rows.type_ids, rows.lengths, 0, self.pad_to_multiple_of, dtype=torch.long
                ).values
            else:
                batch["token_type_ids"] = torch.zeros_like(ids.values)
        return batch
