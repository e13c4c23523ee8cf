"""The band index lists of a batch as `Ragged` rows, without a loop per sample.

* Fixed bands (evaluation, `train_bands`): one row per scene, and a batch's rows are spans of
  those rows (they overlap: the list is stored once per scene).
* Random subsets (training): sample `i` keeps `counts[i]` of its scene's usable bands, drawn
  from `(seed, epoch, i)` only. Every (sample, usable band) pair gets a 64-bit key from a
  counter-based hash of those four numbers (`varlen.prepare.draws.counter_bits`), and the sample keeps
  the bands with the `counts[i]` smallest keys: a uniformly random subset, in band order. A key
  does not depend on the batch a sample is in, so every worker, every rank and a resumed run
  draw the same bands for the same (epoch, sample), and each epoch draws new ones. A whole
  batch is one `[B, U]` hash and one row-wise sort.
"""

from __future__ import annotations

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.prepare.draws import counter_bits

__all__ = ["draw_keys", "fixed_band_rows", "random_band_rows"]

#: low key bits that hold the band position, so that keys are unique within a row (no ties)
_POSITION_BITS = np.uint64(16)


def draw_keys(seed: int, epoch: int, indices: np.ndarray, width: int) -> np.ndarray:
    """`[B, width]` uint64 keys of (sample `indices[b]`, band position `u`) in `epoch`, unique per row.

    Position `u` occupies the low bits, and the hash the bits above them (the top bit left
    clear), so any key is below the `2**64 - 1` that marks a position a scene does not have.
    """
    if width >= 1 << int(_POSITION_BITS):
        raise ValueError(f"at most {1 << int(_POSITION_BITS)} usable bands per scene, got {width}")
    positions = np.arange(width, dtype=np.uint64)
    keys = counter_bits("band draws", seed, epoch, indices, positions)
    keys >>= _POSITION_BITS + np.uint64(1)
    keys <<= _POSITION_BITS
    keys |= positions
    return keys


def random_band_rows(
    usable: Ragged, scene_ids: np.ndarray, counts: np.ndarray, indices: np.ndarray, seed: int, epoch: int
) -> Ragged:
    """The bands of samples `indices` in `epoch`: `counts[i]` of their scene's `usable` bands each.

    Args:
        usable: one row per scene, its usable band indices in increasing order.
        scene_ids: `[N]` scene of every sample of the dataset.
        counts: `[N]` bands of every sample (at most its scene's usable bands).
        indices: `[B]` the batch.
        seed, epoch: the draw (with the sample index).

    Returns:
        One row per batch position (`B` rows), each in increasing band order.
    """
    indices = np.asarray(indices, np.int64)
    scenes = scene_ids[indices]
    have, want = usable.lengths[scenes], counts[indices].astype(np.int64)
    width = int(have.max())
    keys = draw_keys(seed, epoch, indices, width)
    positions = np.arange(width)
    keys[positions >= have[:, None]] = np.iinfo(np.uint64).max  # bands this sample's scene does not have
    threshold = np.sort(keys, axis=1)[np.arange(len(indices)), want - 1]
    chosen = keys <= threshold[:, None]  # [B, U]: exactly want[b] per row, in band order
    values = usable.values[(usable.starts[scenes][:, None] + positions)[chosen]]
    return Ragged.from_offsets(values, np.concatenate([[0], np.cumsum(want)]))


def fixed_band_rows(fixed: Ragged, scene_ids: np.ndarray, indices: np.ndarray) -> Ragged:
    """The fixed bands of samples `indices`: each a span of its scene's row of `fixed`."""
    scenes = scene_ids[np.asarray(indices, np.int64)]
    return Ragged(fixed.values, fixed.starts[scenes], fixed.lengths[scenes])
