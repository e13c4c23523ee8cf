"""The pixel dataset over memory-mapped cubes, its band sets, and train-only band statistics.

A sample is one labelled pixel: its spectrum, or the ``P x P`` patch around it, returned as a
**view** into the cube together with the band indices it will use; the collate copies only those
bands. The dataset keeps one row per sample (int32) and each scene's cube as a
:class:`~varlen.datasets.hyperspectral.MappedCube`, which pickles as its path: a worker never
receives a copy of the cube.

Random band subsets (training): sample ``i`` has ``band_counts[i]`` bands, drawn once from the
named stream ``stream(seed, "band counts")`` (:func:`random_band_counts`), so ``lengths`` is known
up front and the same every epoch; *which* bands is drawn from ``default_rng((seed, epoch, i))``,
so they change every epoch and are the same in any worker, on any rank and after a resume. That
three-number seed cannot collide with a named stream, whose seed is ``[seed, crc32(name)]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from varlen.datasets.hyperspectral.readers import MappedCube
from varlen.datasets.hyperspectral.source import Scene
from varlen.errors import DataError
from varlen.splits import stream

__all__ = [
    "EpochIndices",
    "HyperspectralPixels",
    "band_statistics",
    "evenly_spaced",
    "random_band_counts",
    "select_bands",
]


class EpochIndices(list):
    """A batch of indices that also carries the epoch it was planned for.

    The loader hands this list to :meth:`HyperspectralPixels.__getitems__` in whichever process
    runs it (it pickles with its ``epoch``), so the band subsets of an epoch depend on
    ``(seed, epoch, index)`` only: workers need no shared state and resuming mid-epoch replays
    exactly the same bands.
    """

    def __init__(self, indices, epoch: int) -> None:
        super().__init__(indices)
        self.epoch = epoch


def evenly_spaced(usable: np.ndarray, count: int) -> np.ndarray:
    """``count`` bands spread evenly over the usable ones (all when ``count`` >= their number)."""
    if count >= usable.size:
        return usable
    return usable[np.unique(np.round(np.linspace(0, usable.size - 1, count)).astype(np.int64))]


def select_bands(scene: Scene, spec: int | Sequence[int] | None, what: str) -> np.ndarray:
    """A fixed band set of ``scene``: all usable bands (None), ``spec`` evenly spaced ones, or a list.

    Raises:
        DataError: a set that would give samples of 0 bands (an empty list, a count < 1), an index
            out of range, or a band dropped for NaN/inf values.
    """
    usable = np.asarray(scene.usable_bands, dtype=np.int64)
    if spec is None:
        return usable
    if isinstance(spec, (int, np.integer)):
        if spec < 1:
            raise DataError(f"{what}: band count must be >= 1 (a sample of 0 bands), got {spec}")
        return evenly_spaced(usable, int(spec))
    bands = np.asarray(spec, dtype=np.int64)
    if bands.size == 0:
        raise DataError(
            f"{what}: the band list is empty, so every pixel would have 0 bands; give at least one band index, "
            "a count, or null for all bands"
        )
    bad = bands[(bands < 0) | (bands >= scene.num_bands)]
    if bad.size:
        raise DataError(
            f"{what}: band index {int(bad[0])} out of range for scene {scene.name!r} with {scene.num_bands} bands"
        )
    dropped = np.setdiff1d(bands, usable)
    if dropped.size:
        raise DataError(f"{what}: band(s) {dropped.tolist()} of scene {scene.name!r} were dropped (NaN/inf values)")
    return np.unique(bands)


def random_band_counts(
    usable: Sequence[int], scene_ids: np.ndarray, min_bands: int, max_bands: int | None, seed: int
) -> np.ndarray:
    """Per-sample band counts in ``[min_bands, max_bands]`` (capped by each scene's usable bands), fixed per seed."""
    usable = np.asarray(usable, dtype=np.int32)
    high = np.minimum(usable, max_bands if max_bands is not None else usable)
    low = np.minimum(min_bands, high)
    return stream(seed, "band counts").integers(low[scene_ids], high[scene_ids] + 1).astype(np.int32)


def band_statistics(cube: MappedCube | np.ndarray, centres: np.ndarray, rows_per_chunk: int | None = None):
    """Per-band mean and standard deviation ``[B]`` (float64) over the pixels where ``centres`` is True.

    Read in row slabs and merged with Chan's parallel update, so memory stays bounded (some tens of
    MB) however large the cube and the training split are. A band with zero spread gets std 1.
    """
    h, w = centres.shape
    bands = cube.shape[-1]
    step = rows_per_chunk or max(1, (8 << 20) // max(1, w * bands * 4))
    count, mean, m2 = 0, np.zeros(bands), np.zeros(bands)
    for r0 in range(0, h, step):
        rows, cols = np.nonzero(centres[r0 : r0 + step])
        if rows.size == 0:
            continue
        block = np.asarray(cube[r0 : r0 + step])[rows, cols].astype(np.float64)  # [n, B], the centres only
        n, block_mean = rows.size, block.mean(0)
        block -= block_mean
        block_m2 = np.einsum("nb,nb->b", block, block)
        delta = block_mean - mean
        total = count + n
        mean = mean + delta * n / total
        m2 = m2 + block_m2 + delta**2 * count * n / total
        count = total
    if count == 0:
        raise DataError("no pixel to compute band statistics from")
    std = np.sqrt(m2 / count)
    return mean, np.where(std > 0, std, 1.0)


class HyperspectralPixels(Dataset):
    """Labelled pixels of one or more scenes, each a spectrum or a patch view plus its band indices.

    The dataset keeps only what samples need: each scene's cube (a :class:`MappedCube`, which
    pickles as its path), wavelengths, usable bands and statistics, and one row per sample.
    Label maps stay with the DataModule.

    Band sets:
        * ``band_counts`` given (training with random subsets): sample ``i`` always has
          ``band_counts[i]`` bands (so ``lengths`` is known up front and the sampler's plan keeps
          its size every epoch), and *which* bands is drawn from ``(seed, epoch, i)``.
        * otherwise: the fixed per-scene band list ``fixed_bands[scene]``.

    Args:
        scenes: checked scenes.
        scene_ids, rows, cols, labels: one entry per sample (labels 0-based, offset per scene).
        radius: patch radius (0 = spectra).
        mean, std: per-scene ``[B]`` normalisation statistics (from train pixels).
        band_counts: per-sample band counts for random subsets, or None.
        fixed_bands: per-scene band index arrays when ``band_counts`` is None.
        seed: base seed of the band draws.
    """

    def __init__(
        self,
        scenes: Sequence[Scene],
        scene_ids: np.ndarray,
        rows: np.ndarray,
        cols: np.ndarray,
        labels: np.ndarray,
        radius: int,
        mean: Sequence[np.ndarray],
        std: Sequence[np.ndarray],
        band_counts: np.ndarray | None = None,
        fixed_bands: Sequence[np.ndarray] | None = None,
        seed: int = 0,
    ) -> None:
        if band_counts is None and fixed_bands is None:
            raise ValueError("give band_counts (random subsets) or fixed_bands")
        self.cubes = [scene.cube for scene in scenes]
        self.usable_bands = [np.asarray(scene.usable_bands, dtype=np.int64) for scene in scenes]
        self.wavelengths = [np.asarray(scene.wavelengths, dtype=np.float32) for scene in scenes]
        # one row per sample, int32: the per-sample tables are the dataset's only memory that grows
        # with the scene (a 1.5 GiB cube has about a million training pixels)
        self.scene_ids = np.asarray(scene_ids, dtype=np.int32)
        self.rows = np.asarray(rows, dtype=np.int32)
        self.cols = np.asarray(cols, dtype=np.int32)
        self.labels = np.asarray(labels, dtype=np.int32)
        self.radius = int(radius)
        self.mean = [np.asarray(m, dtype=np.float32) for m in mean]
        self.std = [np.asarray(s, dtype=np.float32) for s in std]
        self.band_counts = None if band_counts is None else np.asarray(band_counts, dtype=np.int32)
        self.fixed_bands = None if fixed_bands is None else [np.asarray(b, dtype=np.int64) for b in fixed_bands]
        self.seed = int(seed)
        self.epoch = 0  # used by plain ``dataset[i]``; batches from the loader carry their own
        if self.band_counts is not None:
            self.lengths = self.band_counts  # read-only for everyone: no copy
        else:
            self.lengths = np.array([len(b) for b in self.fixed_bands], dtype=np.int32)[self.scene_ids]

    def __len__(self) -> int:
        return len(self.labels)

    def bands_of(self, i: int, epoch: int) -> np.ndarray:
        """Sorted band indices (into the cube) that sample ``i`` uses in ``epoch``."""
        s = self.scene_ids[i]
        if self.band_counts is None:
            return self.fixed_bands[s]
        usable = self.usable_bands[s]
        rng = np.random.default_rng((self.seed, epoch, int(i)))
        return np.sort(usable[rng.permutation(usable.size)[: self.band_counts[i]]])

    def sample(self, i: int, epoch: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} pixels")
        s = int(self.scene_ids[i])
        r, c, k = int(self.rows[i]), int(self.cols[i]), self.radius
        cube = self.cubes[s]
        patch = cube[r, c] if k == 0 else cube[r - k : r + k + 1, c - k : c + k + 1]  # a view, nothing copied
        bands = self.bands_of(i, epoch)
        return {
            "index": i,
            "patch": patch,
            "bands": bands,
            "wavelengths": self.wavelengths[s][bands],
            "mean": self.mean[s][bands],
            "std": self.std[s][bands],
            "label": int(self.labels[i]),
            "scene": s,
            "coords": (r, c),
        }

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.sample(i, self.epoch)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        epoch = getattr(indices, "epoch", self.epoch)
        return [self.sample(i, epoch) for i in indices]
