"""A batch of patches read at once: every sample's `P x P` pixels x its bands, one fancy-index read.

The cube stays memory-mapped: `flat_view` is a 1-D view of its buffer (no copy, any
layout with non-negative strides: a `.npy` map, an ENVI file mapped as BIP), and
`read_patches` builds the `[B, K, P*P]` element offsets of the batch by broadcasting
(patch pixels `[B, 1, P*P]` + bands `[B, K, 1]`) and reads them with one `take`. Padded band
slots read the sample's first band and are zeroed by `normalize`.

What a batch costs: the `[B, K, P, P]` float32 output and, while it is read, its int64 offsets
(twice the output's size); the cube's pages are read through the page cache, shared by all
processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

__all__ = ["PixelBatch", "flat_view", "normalize", "read_patches"]


@dataclass
class PixelBatch:
    """A gathered batch of pixels (see `HyperspectralCollator`)."""

    index: torch.Tensor
    spectra: torch.Tensor
    wavelengths: torch.Tensor
    bands: torch.Tensor
    band_mask: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor
    scene: torch.Tensor
    coords: torch.Tensor


def flat_view(cube: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """A 1-D view over `cube`'s buffer and the element strides of its axes, or None when its
    strides are negative or not whole elements (then index the cube itself)."""
    item = cube.itemsize
    if cube.size == 0 or any(s < 0 or s % item for s in cube.strides):
        return None
    span = sum((n - 1) * s for n, s in zip(cube.shape, cube.strides, strict=True)) // item + 1
    return as_strided(cube, shape=(span,), strides=(item,), writeable=False), tuple(s // item for s in cube.strides)


def read_patches(
    flat: np.ndarray,
    corner: np.ndarray,
    strides: tuple[np.ndarray | int, np.ndarray | int, np.ndarray | int],
    bands: np.ndarray,
    side: int,
) -> np.ndarray:
    """`[B, K, side * side]` values: band `bands[b, k]` of the `side x side` pixels from `corner[b]`.

    Args:
        flat: 1-D values.
        corner: `[B]` offset in `flat` of each patch's first pixel (band 0).
        strides: offsets between rows, columns and bands (ints, or `[B]` arrays when each patch
            has its own layout).
        bands: `[B, K]` band indices, valid everywhere (pad with a real band).
        side: the patch side `P`.
    """
    row, col, band = (np.asarray(s, np.int64).reshape(-1, 1, 1) for s in strides)
    steps = np.arange(side)
    pixels = corner.reshape(-1, 1, 1) + steps[:, None] * row + steps * col  # [B, P, P]
    offsets = pixels.reshape(len(corner), 1, -1) + bands[:, :, None] * band  # [B, K, P*P]
    return flat.take(offsets)


def normalize(raw: np.ndarray, mean: np.ndarray, std: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`(raw - mean) / std` per band in float32, in place where `raw` is float32; 0 where `mask` is False.

    Args:
        raw: `[B, K, ...]`.
        mean, std: `[B, K]` float32 statistics of each sample's bands.
        mask: `[B, K]` True = real band.
    """
    out = raw.astype(np.float32, copy=False)
    trailing = (1,) * (out.ndim - 2)
    out -= mean.reshape(*mean.shape, *trailing)
    out /= std.reshape(*std.shape, *trailing)
    out[~mask] = 0
    return out
