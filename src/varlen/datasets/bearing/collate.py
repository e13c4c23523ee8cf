"""`BearingCollator`: names the fields of a batch of windows (the dataset's fetch has gathered and padded it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.shape_policy import pad_length
from varlen.datasets.bearing.dataset import WindowBatch
from varlen.datasets.bearing.storage import RecordingBuffer, gather_windows

__all__ = ["BearingCollator"]

#: the batch's keys, in order
FIELDS = ("index", "signals", "lengths", "mask", "labels", "recording_ids", "window_index", "starts")


class BearingCollator(PadsToWidths):
    """The model's fields of a batch of windows.

    Returns a dict: `signals` `[B, C, W]` float32 (zeros after each window's length),
    `lengths` `[B]`, `mask` `[B, W]` bool keep-mask (True = real sample, the varlen
    convention), `labels`, `recording_ids`, `window_index`, `starts` and `index`.
    A `WindowBatch` (the loader's batched fetch from
    `BearingWindows`) is only named; a list of `dataset[i]`
    dicts is joined and padded here first, with the same one-gather path. A class (not a
    closure) so it pickles into loader workers.

    Args:
        pad_to_multiple_of: round `W` up to this multiple, for lists of samples that carry no padded length
            (`pad_to`; a fetched batch was padded by its dataset).
    """

    def __init__(self, pad_to_multiple_of: int | None = None) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: WindowBatch | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Name a fetched batch's fields, or pad a list of samples first."""
        batch = samples if isinstance(samples, WindowBatch) else self.pad_samples(samples)
        return {name: getattr(batch, name) for name in FIELDS}

    def pad_samples(self, samples: Sequence[Mapping[str, Any]]) -> WindowBatch:
        """Single samples (`dataset[i]` dicts) copied once into one buffer and gathered like a fetched batch."""
        signals = [np.asarray(s["signal"], dtype=np.float32) for s in samples]
        lengths = np.fromiter((s.shape[1] for s in signals), np.int64, len(signals))
        padding = pad_to(samples, self.pad_to_multiple_of)
        width = pad_length(int(lengths.max()), padding) if len(signals) else 0
        store = RecordingBuffer.join(signals, slack=width)
        windows = store.windows(np.arange(len(signals)), np.zeros(len(signals), np.int64), lengths)
        padded = gather_windows(windows, store.channels, np.arange(len(signals)), padding)

        def field(key: str) -> torch.Tensor:
            return torch.from_numpy(np.fromiter((s[key] for s in samples), np.int64, len(samples)))

        return WindowBatch(
            index=field("index"),
            signals=torch.from_numpy(padded.signals),
            lengths=torch.from_numpy(padded.lengths),
            mask=torch.from_numpy(padded.mask),
            labels=field("label"),
            recording_ids=field("recording_id"),
            window_index=field("window_index"),
            starts=field("start"),
        )
