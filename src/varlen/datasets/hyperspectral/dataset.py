"""The pixel dataset over memory-mapped cubes, its band sets, and train-only band statistics.

A sample is one labelled pixel: its spectrum, or the `P x P` patch around it. `dataset[i]`
returns the patch as a **view** into the cube together with the band indices it will use; the
loader's batched fetch (`__getitems__`) reads a whole batch at once: the batch's band lists as
`Ragged` rows (`.bands`), padded in one gather, and one read
of the cube per scene present for all patches x their bands (`.gather`), normalized in
place. The dataset keeps one row per sample (int32) and each scene's cube as a
`MappedCube`, which pickles as its path: a worker never
receives a copy of the cube.

Random band subsets (training): sample `i` has `band_counts[i]` bands, drawn once from the
named stream `stream(seed, "band counts")` (`random_band_counts`), so `lengths` is known
up front and the same every epoch; *which* bands is a function of `(seed, epoch, i)` only
(`random_band_rows`), so they change every epoch and
are the same in any worker, on any rank and after a resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from varlen.batching.indices import EpochIndices, PadsToWidths, pad_to  # EpochIndices re-exported
from varlen.batching.ragged import Ragged
from varlen.batching.shape_policy import PadTo
from varlen.datasets.hyperspectral.bands import fixed_band_rows, random_band_rows
from varlen.datasets.hyperspectral.gather import PixelBatch, flat_view, normalize, read_patches
from varlen.datasets.hyperspectral.readers import MappedCube
from varlen.datasets.hyperspectral.source import Scene
from varlen.errors import DataError
from varlen.prepare.splits import stream

__all__ = [
    "EpochIndices",
    "HyperspectralPixels",
    "band_statistics",
    "evenly_spaced",
    "random_band_counts",
    "select_bands",
]


def evenly_spaced(usable: np.ndarray, count: int) -> np.ndarray:
    """`count` bands spread evenly over the usable ones (all when `count` >= their number)."""
    if count >= usable.size:
        return usable
    return usable[np.unique(np.round(np.linspace(0, usable.size - 1, count)).astype(np.int64))]


def select_bands(scene: Scene, spec: int | Sequence[int] | None, what: str) -> np.ndarray:
    """A fixed band set of `scene`: all usable bands (None), `spec` evenly spaced ones, or a list.

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
    """Per-sample band counts in `[min_bands, max_bands]` (capped by each scene's usable bands), fixed per seed."""
    usable = np.asarray(usable, dtype=np.int32)
    high = np.minimum(usable, max_bands if max_bands is not None else usable)
    low = np.minimum(min_bands, high)
    return stream(seed, "band counts").integers(low[scene_ids], high[scene_ids] + 1).astype(np.int32)


def band_statistics(cube: MappedCube | np.ndarray, centres: np.ndarray, rows_per_chunk: int | None = None):
    """Per-band mean and standard deviation `[B]` (float64) over the pixels where `centres` is True.

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


class HyperspectralPixels(PadsToWidths, Dataset):
    """Labelled pixels of one or more scenes; a batch is gathered at once (see the module docstring).

    The dataset keeps only what samples need: each scene's cube (a `MappedCube`, which
    pickles as its path), wavelengths, usable bands and statistics (also concatenated over the
    scenes, so that one gather serves a batch that mixes them), and one row per sample. Label
    maps stay with the DataModule.

    Band sets:
        * `band_counts` given (training with random subsets): sample `i` always has
          `band_counts[i]` bands (so `lengths` is known up front and the sampler's plan keeps
          its size every epoch), and *which* bands is drawn from `(seed, epoch, i)`.
        * otherwise: the fixed per-scene band list `fixed_bands[scene]`.

    Args:
        scenes: checked scenes.
        scene_ids, rows, cols, labels: one entry per sample (labels 0-based, offset per scene).
        radius: patch radius (0 = spectra).
        mean, std: per-scene `[B]` normalization statistics (from train pixels).
        band_counts: per-sample band counts for random subsets, or None.
        fixed_bands: per-scene band index arrays when `band_counts` is None.
        seed: base seed of the band draws.
        pad_to_multiple_of: round a fetched batch's band axis up to this multiple; a batch that carries its
            padded length pads to it (`pad_to`).
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
        pad_to_multiple_of: int | None = None,
    ) -> None:
        if band_counts is None and fixed_bands is None:
            raise ValueError("give band_counts (random subsets) or fixed_bands")
        self.cubes = [scene.cube for scene in scenes]
        self.usable_bands = [np.sort(np.asarray(scene.usable_bands, dtype=np.int64)) for scene in scenes]
        self.wavelengths = [np.asarray(scene.wavelengths, dtype=np.float32) for scene in scenes]
        # one row per sample, int32: the per-sample tables are the dataset's only memory that grows
        # with the scene (a 1.5 GiB cube has about a million training pixels)
        self.scene_ids = np.asarray(scene_ids, dtype=np.int32)
        self.rows = np.asarray(rows, dtype=np.int32)
        self.cols = np.asarray(cols, dtype=np.int32)
        self.labels = np.asarray(labels, dtype=np.int32)
        self.radius = int(radius)
        self.set_statistics(mean, std)
        self.band_counts = None if band_counts is None else np.asarray(band_counts, dtype=np.int32)
        self.fixed_bands = None if fixed_bands is None else [np.asarray(b, dtype=np.int64) for b in fixed_bands]
        self.seed = int(seed)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.epoch = 0  # used by plain `dataset[i]`; batches from the loader carry their own
        if self.band_counts is not None:
            self.lengths = self.band_counts  # read-only for everyone: no copy
        else:
            self.lengths = np.array([len(b) for b in self.fixed_bands], dtype=np.int32)[self.scene_ids]
        # band tables of all scenes back to back (a few hundred values each): scene s's band b is at start[s] + b
        self.usable = Ragged.from_arrays(self.usable_bands)
        self.fixed = None if self.fixed_bands is None else Ragged.from_arrays(self.fixed_bands)
        self.table_start = np.cumsum([0] + [len(w) for w in self.wavelengths[:-1]]).astype(np.int64)
        self.table_wavelengths = np.concatenate(self.wavelengths)

    def set_statistics(self, mean: Sequence[np.ndarray], std: Sequence[np.ndarray]) -> None:
        """Per-scene `[B]` band means and standard deviations every sample is normalized with."""
        self.mean = [np.asarray(m, dtype=np.float32) for m in mean]
        self.std = [np.asarray(s, dtype=np.float32) for s in std]
        self.table_mean, self.table_std = np.concatenate(self.mean), np.concatenate(self.std)

    def __len__(self) -> int:
        return len(self.labels)

    def band_rows(self, indices: Sequence[int] | np.ndarray, epoch: int) -> Ragged:
        """The sorted band indices of samples `indices` in `epoch`, one row per position in `indices`."""
        if self.band_counts is None:
            return fixed_band_rows(self.fixed, self.scene_ids, indices)
        return random_band_rows(self.usable, self.scene_ids, self.band_counts, indices, self.seed, epoch)

    def bands_of(self, i: int, epoch: int) -> np.ndarray:
        """Sorted band indices (into the cube) that sample `i` uses in `epoch`."""
        rows = self.band_rows([int(i)], epoch)
        return rows.values[rows.starts[0] : rows.starts[0] + rows.lengths[0]]

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

    def __getitems__(self, indices: Sequence[int]) -> PixelBatch:
        """A whole batch (the loader's batched fetch), in the epoch an `EpochIndices` carries."""
        return self.gather(indices, getattr(indices, "epoch", self.epoch), pad_to(indices, self.pad_to_multiple_of))

    def gather(self, indices: Sequence[int] | np.ndarray, epoch: int, pad_to_multiple_of: PadTo = None) -> PixelBatch:
        """Samples `indices` as one padded batch: their band rows padded in one gather, one cube
        read per scene present, normalized in place, zero (bands -1) beyond each sample's bands."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) == 0:
            raise ValueError("cannot gather an empty batch")
        scenes = self.scene_ids[indices].astype(np.int64)
        padded = self.band_rows(indices, epoch).pad(np.arange(len(indices)), -1, pad_to_multiple_of, torch.long)
        bands, mask = padded.values.numpy(), padded.mask.numpy()
        read = np.where(mask, bands, bands[:, :1])  # padded slots read the sample's first band, zeroed below
        table = self.table_start[scenes][:, None] + read
        spectra = normalize(self._read(indices, scenes, read), self.table_mean[table], self.table_std[table], mask)
        coords = np.stack([self.rows[indices], self.cols[indices]], axis=1).astype(np.int64)
        return PixelBatch(
            index=torch.from_numpy(indices),
            spectra=torch.from_numpy(spectra),
            wavelengths=torch.from_numpy(np.where(mask, self.table_wavelengths[table], np.float32(0))),
            bands=padded.values,
            band_mask=padded.mask,
            lengths=padded.lengths,
            labels=torch.from_numpy(self.labels[indices].astype(np.int64)),
            scene=torch.from_numpy(scenes),
            coords=torch.from_numpy(coords),
        )

    def _read(self, indices: np.ndarray, scenes: np.ndarray, bands: np.ndarray) -> np.ndarray:
        """`[B, K, P, P]` raw values (`[B, K]` for spectra): one read per scene present in the batch."""
        side = 2 * self.radius + 1
        shape = (len(indices), bands.shape[1]) + ((side, side) if self.radius else ())
        present = np.unique(scenes)
        if len(present) == 1:
            return self._read_scene(int(present[0]), indices, bands).reshape(shape)
        out = np.empty(shape, dtype=np.float32)
        for s in present:  # the scenes' cubes are different files (of different band counts)
            part = np.flatnonzero(scenes == s)
            out[part] = self._read_scene(int(s), indices[part], bands[part]).reshape(len(part), *shape[1:])
        return out

    def _read_scene(self, s: int, indices: np.ndarray, bands: np.ndarray) -> np.ndarray:
        """The patches of samples `indices` (all of scene `s`) x `bands`: one read of its cube."""
        cube = self.cubes[s]
        array = cube.array if isinstance(cube, MappedCube) else np.asarray(cube)
        top = self.rows[indices].astype(np.int64) - self.radius
        left = self.cols[indices].astype(np.int64) - self.radius
        side = 2 * self.radius + 1
        view = flat_view(array)
        if view is None:  # negative or odd strides (an in-memory flipped array): index the cube itself
            steps = np.arange(side)
            rows, cols = (top[:, None] + steps)[:, None, :, None], (left[:, None] + steps)[:, None, None, :]
            return array[rows, cols, bands[:, :, None, None]]
        flat, (row, col, band) = view
        return read_patches(flat, top * row + left * col, (row, col, band), bands, side)
