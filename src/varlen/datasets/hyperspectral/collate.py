"""`HyperspectralCollator`: names the fields of a gathered pixel batch (or gathers a list of samples first)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.ragged import Ragged
from varlen.datasets.hyperspectral.gather import PixelBatch, normalize, read_patches

__all__ = ["HyperspectralCollator"]


class HyperspectralCollator(PadsToWidths):
    """The model's fields of a pixel batch.

    A `PixelBatch` (the loader's batched fetch,
    gathered by `HyperspectralPixels`) is only named. A
    list of `dataset[i]` dicts is gathered here first with the same one-read path: the band
    lists, statistics and wavelengths joined once into `Ragged` rows, the patches (views of the
    cube) joined once into one array.

    Args:
        pad_to_multiple_of: round the band axis up to a multiple of this (8 for tensor cores), for
            lists of samples that carry no padded length (`pad_to`; a fetched
            batch was padded by the dataset).

    Returns (from a call):
        `spectra` float32 `[B, K, P, P]` (`[B, K]` for spectra, P = 1), zero where padded;
        `wavelengths` float32 `[B, K]` in nm (0 where padded); `bands` int64 `[B, K]`
        (-1 where padded); `band_mask` bool `[B, K]`, **True = real band** (keep convention;
        use `varlen.batching.blocked_mask` for attention); `lengths` int64 `[B]`;
        `labels` int64 `[B]` (0-based classes); `scene`, `index` int64 `[B]`;
        `coords` int64 `[B, 2]`.
    """

    def __init__(self, pad_to_multiple_of: int | None = None) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: PixelBatch | Sequence[dict[str, Any]]) -> dict[str, Any]:
        batch = samples if isinstance(samples, PixelBatch) else self.gather_samples(samples)
        return {field.name: getattr(batch, field.name) for field in fields(PixelBatch)}

    def gather_samples(self, samples: Sequence[dict[str, Any]]) -> PixelBatch:
        """`dataset[i]` dicts as one batch, equal to the dataset's fetch of the same samples."""
        positions, padding = np.arange(len(samples)), pad_to(samples, self.pad_to_multiple_of)

        def padded(key: str, pad: float, dtype: torch.dtype | None = None):
            rows = Ragged.from_arrays([np.asarray(s[key]) for s in samples])
            return rows.pad(positions, pad, padding, dtype)

        band_rows = padded("bands", -1, torch.long)
        bands, mask = band_rows.values.numpy(), band_rows.mask.numpy()
        patches = [np.asarray(s["patch"]) for s in samples]
        spatial = patches[0].shape[:-1]
        side = spatial[0] if spatial else 1
        depth = np.fromiter((p.shape[-1] for p in patches), np.int64, len(patches))  # each one's cube bands
        sizes = np.fromiter((p.size for p in patches), np.int64, len(patches))
        flat = np.concatenate([p.reshape(-1) for p in patches])
        read = np.where(mask, bands, bands[:, :1])  # padded slots read the sample's first band, zeroed below
        raw = read_patches(flat, np.cumsum(sizes) - sizes, (side * depth, depth, 1), read, side)
        mean = padded("mean", 0.0, torch.float32).values.numpy()
        std = padded("std", 1.0, torch.float32).values.numpy()
        spectra = normalize(raw.reshape(len(samples), bands.shape[1], *spatial), mean, std, mask)
        column = lambda key: torch.tensor(np.array([s[key] for s in samples]), dtype=torch.long)  # noqa: E731
        return PixelBatch(
            index=column("index"),
            spectra=torch.from_numpy(spectra),
            wavelengths=padded("wavelengths", 0.0, torch.float32).values,
            bands=band_rows.values,
            band_mask=band_rows.mask,
            lengths=band_rows.lengths,
            labels=column("label"),
            scene=column("scene"),
            coords=column("coords"),
        )

    def __repr__(self) -> str:
        return f"HyperspectralCollator(pad_to_multiple_of={self.pad_to_multiple_of})"
