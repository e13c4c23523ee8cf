"""Size indexes held in memory, for tests and benchmarks of the streamed plan (`varlen.stream.layout`):
real per-chunk arrays (`ArraySizeIndex`), or only histograms with each chunk's sizes drawn on
demand from a seeded generator (`SimulatedSizeIndex`: 100 M to 1 B samples in ~100 MB)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from varlen.batching.plan import SIZE_GRID, as_size_matrix
from varlen.storage.cache import array_hash
from varlen.stream.size_index import histograms as grid_counts

__all__ = ["ArraySizeIndex", "SimulatedSizeIndex"]


class ArraySizeIndex:
    """Per-chunk size arrays in memory, with their histograms (the `SizeIndexLike` protocol)."""

    edges = SIZE_GRID

    def __init__(
        self,
        chunks: Sequence[np.ndarray],
        histograms: np.ndarray,
        key: str,
        weights: Sequence[np.ndarray] | None = None,
    ) -> None:
        self._chunks = list(chunks)
        self._histograms = histograms
        self.key = key
        self._weights = None if weights is None else [np.asarray(w, np.float64) for w in weights]
        if self._weights is not None and [len(w) for w in self._weights] != [len(c) for c in self._chunks]:
            raise ValueError("weights must be one array per chunk, one weight per sample")

    @classmethod
    def from_sizes(
        cls, chunks: Sequence[Sequence[int] | np.ndarray], weights: Sequence[Sequence[float]] | None = None
    ) -> ArraySizeIndex:
        """An index of `chunks`: one array of sizes (`[n]` or `[n, D]`) per chunk; `weights`: each
        chunk's per-sample draw weights (the weighted-index protocol: `weights`,
        `weight_histograms`)."""
        arrays = [np.asarray(c, dtype=np.int64) for c in chunks]
        arrays = [as_size_matrix(a[:, None] if a.ndim == 1 else a).astype(np.int32) for a in arrays]
        histograms = grid_counts(np.concatenate(arrays), np.array([len(a) for a in arrays]))
        key = array_hash(histograms, *arrays, *([np.concatenate(weights)] if weights is not None else []))[:24]
        return cls(arrays, histograms, key, weights)

    def weights(self, chunk: int) -> np.ndarray | None:
        """Chunk `chunk`'s per-sample draw weights `[n]` float64 (None: an unweighted index)."""
        return None if self._weights is None else self._weights[chunk]

    def weight_histograms(self, axis: int = 0) -> np.ndarray | None:
        """`[chunks, bins]` float64: each chunk's draw weights summed per grid bin of its sizes on `axis`
        (the grid of `histograms`); None: an unweighted index."""
        if self._weights is None:
            return None
        out = np.zeros((len(self._chunks), len(self.edges)), np.float64)
        for c, (sizes, weights) in enumerate(zip(self._chunks, self._weights, strict=True)):
            out[c] = np.bincount(np.searchsorted(self.edges, sizes[:, axis]), weights, minlength=len(self.edges))
        return out

    @property
    def num_chunks(self) -> int:
        return len(self._chunks)

    @property
    def samples_per_chunk(self) -> np.ndarray:
        return np.asarray([len(c) for c in self._chunks], np.int64)

    def histograms(self, axis: int = 0) -> np.ndarray:
        return self._histograms[:, axis]

    def sizes(self, chunk: int) -> np.ndarray:
        return self._chunks[chunk]


class SimulatedSizeIndex:
    """`num_samples` lognormal sizes in chunks of `chunk_size`, held as histograms only (uint16).

    A chunk's histogram is a multinomial draw over the grid's bins; its sizes, drawn when asked for from
    `(seed, chunk)`, are uniform inside each bin and so match the histogram exactly.
    """

    edges = SIZE_GRID

    def __init__(
        self,
        num_samples: int,
        chunk_size: int = 8192,
        *,
        mean: float = 5.0,
        sigma: float = 1.0,
        max_size: int = 65536,
        seed: int = 0,
    ) -> None:
        if not 0 < chunk_size < 2**16:
            raise ValueError(f"chunk_size must be in [1, 65535] (uint16 histograms), got {chunk_size}")
        self.seed = seed
        self.key = f"simulated-{num_samples}-{chunk_size}-{mean}-{sigma}-{max_size}-{seed}"
        chunks = -(-num_samples // chunk_size)
        self._samples = np.full(chunks, chunk_size, np.int64)
        self._samples[-1] = num_samples - chunk_size * (chunks - 1)
        rng = np.random.default_rng([seed, 1])
        draws = np.clip(np.rint(rng.lognormal(mean, sigma, 1_000_000)), 1, max_size).astype(np.int64)
        shares = np.bincount(np.searchsorted(SIZE_GRID, draws), minlength=len(SIZE_GRID)) / len(draws)
        bins = np.flatnonzero(shares)
        self._histograms = np.zeros((chunks, len(SIZE_GRID)), np.uint16)
        for first in range(0, chunks, 8192):
            n = self._samples[first : first + 8192]
            self._histograms[first : first + len(n), bins] = rng.multinomial(n, shares[bins] / shares[bins].sum())

    @property
    def num_chunks(self) -> int:
        return len(self._samples)

    @property
    def samples_per_chunk(self) -> np.ndarray:
        return self._samples

    def histograms(self, axis: int = 0) -> np.ndarray:
        if axis != 0:
            raise IndexError(f"a simulated index has one size axis, not axis {axis}")
        return self._histograms

    def sizes(self, chunk: int) -> np.ndarray:
        """Chunk `chunk`'s sizes `[n, 1]` int32: uniform in each bin, in a random order."""
        counts = self._histograms[chunk].astype(np.int64)
        bins = np.repeat(np.arange(len(counts)), counts)
        low = np.concatenate([[-1], SIZE_GRID[:-1]])[bins] + 1  # a bin holds (previous edge, edge]
        rng = np.random.default_rng([self.seed, 2, chunk])
        sizes = low + (rng.random(len(bins)) * (SIZE_GRID[bins] - low + 1)).astype(np.int64)
        return rng.permutation(sizes).astype(np.int32)[:, None]
