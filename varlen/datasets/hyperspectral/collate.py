"""`HyperspectralCollator`: pixel samples padded to the batch's largest band count, normalised in place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching import lengths_to_mask, pad_sequences, round_up

__all__ = ["HyperspectralCollator"]


class HyperspectralCollator:
    """Pad a list of pixel samples (from :class:`~varlen.datasets.hyperspectral.HyperspectralPixels`) into a batch.

    Only the selected bands of each patch are copied (one gather per sample straight into the
    preallocated batch array) and normalised there in place: no batch-sized temporaries.

    Args:
        pad_to_multiple_of: round the band axis up to a multiple of this (8 for tensor cores).

    Returns (from a call):
        ``spectra`` float32 ``[B, K, P, P]`` (``[B, K]`` for spectra, P = 1), zero where padded;
        ``wavelengths`` float32 ``[B, K]`` in nm (0 where padded); ``bands`` int64 ``[B, K]``
        (-1 where padded); ``band_mask`` bool ``[B, K]``, **True = real band** (keep convention;
        use :func:`varlen.batching.blocked_mask` for attention); ``lengths`` int64 ``[B]``;
        ``labels`` int64 ``[B]`` (0-based classes); ``scene``, ``index`` int64 ``[B]``;
        ``coords`` int64 ``[B, 2]``.
    """

    def __init__(self, pad_to_multiple_of: int | None = None) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        multiple = self.pad_to_multiple_of
        counts = np.array([len(s["bands"]) for s in samples], dtype=np.int64)
        width = round_up(int(counts.max()), multiple)
        spatial = samples[0]["patch"].shape[:-1]
        per_band = (-1,) + (1,) * len(spatial)
        out = np.zeros((len(samples), width, *spatial), dtype=np.float32)
        for i, s in enumerate(samples):  # one gather per sample (its bands of its patch view), normalised in place
            row = out[i, : counts[i]]
            row[...] = np.moveaxis(np.take(s["patch"], s["bands"], axis=-1), -1, 0)
            row -= s["mean"].reshape(per_band)
            row /= s["std"].reshape(per_band)
        lengths = torch.from_numpy(counts)
        return {
            "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
            "spectra": torch.from_numpy(out),
            "wavelengths": pad_sequences([s["wavelengths"] for s in samples], 0.0, multiple, torch.float32).values,
            "bands": pad_sequences([s["bands"] for s in samples], -1, multiple, torch.long).values,
            "band_mask": lengths_to_mask(lengths, width),
            "lengths": lengths,
            "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
            "scene": torch.tensor([s["scene"] for s in samples], dtype=torch.long),
            "coords": torch.tensor([s["coords"] for s in samples], dtype=torch.long),
        }

    def __repr__(self) -> str:
        return f"HyperspectralCollator(pad_to_multiple_of={self.pad_to_multiple_of})"
