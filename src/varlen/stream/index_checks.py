"""A size index read for a plan, checked: its chunk counts against its histograms, a chunk's sizes against both
(a mismatch names the chunk and says to rebuild the index, rather than planning batches from wrong sizes)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from varlen.errors import DataError
from varlen.stream.piece_ends import BLOCK

__all__ = ["SizeIndexLike", "checked_histograms", "chunk_sizes", "grid_bins"]


class SizeIndexLike(Protocol):
    """What the plan reads of a size index (`varlen.stream.size_index.SizeIndex` is one)."""

    #: content key of the chunk list (a state saved on another index is refused)
    key: str
    #: the histograms' bin edges, ascending: a size `s` falls in the first bin whose edge is `>= s`
    edges: np.ndarray

    @property
    def num_chunks(self) -> int: ...

    @property
    def samples_per_chunk(self) -> np.ndarray: ...

    def histograms(self, axis: int = 0) -> np.ndarray:
        """`[chunks, bins]` counts of each chunk's sizes on `axis`."""

    def sizes(self, chunk: int) -> np.ndarray:
        """`[n, D]` sizes of chunk `chunk`'s samples, in the chunk's order."""


def chunk_sizes(index: SizeIndexLike, chunk: int, axis: int, histograms: np.ndarray | None = None) -> np.ndarray:
    """Chunk `chunk`'s sizes on `axis` (int64), checked against its sample count and histogram.

    Raises:
        DataError: naming the chunk, when the sizes disagree with what the index lists for it.
    """
    return _checked_sizes(index, chunk, axis, histograms)[0]


def _checked_sizes(index: SizeIndexLike, chunk: int, axis: int, histograms: np.ndarray | None):
    """`chunk_sizes` and each size's grid bin."""
    sizes = np.asarray(index.sizes(chunk))
    sizes = sizes[:, None] if sizes.ndim == 1 else sizes
    listed = int(index.samples_per_chunk[chunk])
    if sizes.ndim != 2 or len(sizes) != listed or not 0 <= axis < sizes.shape[1]:
        raise DataError(
            f"size index {index.key}: chunk {chunk} lists {listed} samples but holds sizes of shape {sizes.shape} "
            f"(axis {axis} wanted); rebuild the size index"
        )
    column = sizes[:, axis].astype(np.int64)
    grid_bins = np.searchsorted(index.edges, column)
    counted = np.bincount(grid_bins, minlength=len(index.edges))
    expected = (index.histograms(axis) if histograms is None else histograms)[chunk]
    if len(counted) != len(expected) or not np.array_equal(counted, expected):
        bins = np.flatnonzero(counted[: len(expected)] != expected[: len(counted)])
        where = f"bin <= {int(index.edges[bins[0]])}: {counted[bins[0]]} sizes" if bins.size else "sizes over the grid"
        raise DataError(
            f"size index {index.key}: chunk {chunk}'s sizes do not match its histogram ({where}, "
            f"histogram: {expected[bins[0]] if bins.size else 'none'}); rebuild the size index"
        )
    return column, grid_bins


def grid_bins(index: SizeIndexLike, axis: int, histograms: np.ndarray, chunk: int) -> np.ndarray:
    """Chunk `chunk`'s grid bin of each sample (its sizes read and checked)."""
    return _checked_sizes(index, chunk, axis, histograms)[1]


def checked_histograms(index: SizeIndexLike, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The index's sample counts `[C]` and histograms `[C, G]`, their shapes and sums checked."""
    samples = np.asarray(index.samples_per_chunk, dtype=np.int64)
    histograms = index.histograms(axis)
    edges = np.asarray(index.edges)
    if samples.shape != (index.num_chunks,) or histograms.shape != (index.num_chunks, len(edges)):
        raise DataError(
            f"size index {index.key}: {index.num_chunks} chunks, samples of shape {samples.shape}, histograms "
            f"of shape {histograms.shape} over {len(edges)} bins: the index is inconsistent; rebuild it"
        )
    if len(edges) and np.any(np.diff(edges) <= 0):
        raise DataError(f"size index {index.key}: its bin edges are not increasing; rebuild it")
    if (samples < 0).any():
        raise DataError(f"size index {index.key}: chunk {int(np.argmax(samples < 0))} lists a negative sample count")
    for first in range(0, len(samples), BLOCK):
        counted = histograms[first : first + BLOCK].sum(axis=1, dtype=np.int64)
        wrong = np.flatnonzero(counted != samples[first : first + BLOCK])
        if wrong.size:
            chunk = first + int(wrong[0])
            raise DataError(
                f"size index {index.key}: chunk {chunk} lists {samples[chunk]} samples but its histogram counts "
                f"{counted[wrong[0]]}: the index is inconsistent with its histograms; rebuild it"
            )
    if samples.sum() == 0:
        raise DataError(f"size index {index.key}: no samples in {len(samples)} chunks")
    return samples, histograms
