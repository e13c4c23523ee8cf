"""`BearingCollator`: windows padded to the batch's longest (only tail windows are shorter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching import lengths_to_mask, round_up

__all__ = ["BearingCollator"]


class BearingCollator:
    """Pads windows to the batch's longest and stacks the rest.

    Returns a dict: ``signals`` ``[B, C, W]`` float32 (zeros after each window's length),
    ``lengths`` ``[B]``, ``mask`` ``[B, W]`` bool keep-mask (True = real sample, the varlen
    convention), ``labels``, ``recording_ids``, ``window_index``, ``starts`` and ``index``.
    A class (not a closure) so it pickles into loader workers.

    Args:
        pad_to_multiple_of: round ``W`` up to this multiple.
    """

    def __init__(self, pad_to_multiple_of: int | None = None) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        lengths = np.array([s["signal"].shape[1] for s in samples], dtype=np.int64)
        width = round_up(int(lengths.max()), self.pad_to_multiple_of)
        signals = np.zeros((len(samples), samples[0]["signal"].shape[0], width), dtype=np.float32)
        # The core pad_sequences pads the LEADING axis ([T, ...]); windows are ragged on their
        # LAST axis ([C, W]), and the model wants [B, C, W]. Transposing in and out would add a
        # strided copy of the whole batch, so each window is written into its row directly: one
        # slice copy per window, the same thing pad_sequences does for long rows.
        for row, sample in zip(signals, samples, strict=True):
            row[:, : sample["signal"].shape[1]] = sample["signal"]
        lengths_t = torch.from_numpy(lengths)
        return {
            "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
            "signals": torch.from_numpy(signals),
            "lengths": lengths_t,
            "mask": lengths_to_mask(lengths_t, width),
            "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
            "recording_ids": torch.tensor([s["recording_id"] for s in samples], dtype=torch.long),
            "window_index": torch.tensor([s["window_index"] for s in samples], dtype=torch.long),
            "starts": torch.tensor([s["start"] for s in samples], dtype=torch.long),
        }
