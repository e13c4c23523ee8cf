"""Tokenised texts over unpadded storage: one flat array of token ids plus offsets.

A sample is a view into that array; nothing is padded until the collate sees the batch. The
loader's batched fetch (``__getitems__``) gathers a whole batch's ids in one numpy step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["TextRows", "TokenizedTexts"]


@dataclass
class TextRows:
    """Several unpadded texts, back to back: what the collate pads.

    Attributes:
        index: dataset index of each text.
        ids: their token ids, concatenated.
        lengths: tokens of each text.
        labels: class id of each text.
        type_ids: token type ids aligned with ``ids``, or None.
    """

    index: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    type_ids: np.ndarray | None = None

    @classmethod
    def from_samples(cls, samples: Sequence[dict[str, Any]]) -> TextRows:
        """Join single samples (``dataset[i]`` dicts)."""
        return cls(
            index=np.fromiter((s["index"] for s in samples), np.int64, len(samples)),
            ids=np.concatenate([s["input_ids"] for s in samples]),
            lengths=np.fromiter((len(s["input_ids"]) for s in samples), np.int64, len(samples)),
            labels=np.fromiter((s["label"] for s in samples), np.int64, len(samples)),
            type_ids=np.concatenate([s["token_type_ids"] for s in samples]) if "token_type_ids" in samples[0] else None,
        )


@dataclass
class TokenizedTexts(torch.utils.data.Dataset):
    """Unpadded token ids of many texts: one flat id array, offsets, labels, source rows.

    Attributes:
        ids: all token ids, concatenated.
        offsets: ``[N + 1]``; text ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.
        labels: class id per text.
        rows: row of each text in its source table (to map predictions back to the file).
        type_ids: token type ids aligned with ``ids`` (pairs), or None.
    """

    ids: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    rows: np.ndarray
    type_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.lengths = np.diff(self.offsets)  # computed once: the sampler reads it every epoch

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        start, end = self.offsets[i], self.offsets[i + 1]
        sample = {"index": i, "input_ids": self.ids[start:end], "label": int(self.labels[i])}
        if self.type_ids is not None:
            sample["token_type_ids"] = self.type_ids[start:end]
        return sample

    def __getitems__(self, indices: Sequence[int]) -> TextRows:
        """Several texts at once, for the loader's batched fetch: one gather, no per-text work."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.offsets[indices + 1] - self.offsets[indices]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        gather = np.repeat(self.offsets[indices] - (ends - lengths), lengths) + np.arange(total)
        return TextRows(
            index=indices,
            ids=self.ids[gather],
            lengths=lengths,
            labels=self.labels[indices],
            type_ids=None if self.type_ids is None else self.type_ids[gather],
        )
