"""Counter-based random draws: 64-bit words of `(seed, epoch, item, draw number)`, for a whole batch at once.

A per-epoch, per-item random choice (a sample's band subset, a training window's shift) must be
the same in whatever batch, worker or rank the item lands, replay exactly on resume, and change
with the epoch. A stateful generator gives none of that; a hash of the counters does. Draw `k`
of item `i` is SplitMix64's output function applied twice: once to the epoch's key plus
`i` times the golden-ratio increment (one stream per item), once to that plus `k + 1` times
the increment. The epoch's key is `SeedSequence((seed, epoch, crc32(name)))`: three words,
so it cannot collide with a named split stream's `(seed, crc32(name))`
(`varlen.prepare.splits.stream`). A `[B, K]` batch of draws is two vectorised hashes.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["counter_bits", "mix64", "unit_floats"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a uint64 array (wrapping arithmetic), in place."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def counter_bits(name: str, seed: int, epoch: int, items: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """`[B, *numbers.shape]` uint64 words: draws `numbers` of every item `items[b]` in `epoch`.

    Args:
        name: what is drawn (e.g. `"band draws"`): other names give independent draws.
        seed, epoch: the run's seed and the epoch.
        items: `[B]` non-negative item ids (a sample's index in its split).
        numbers: non-negative draw numbers, any shape; each item's draws do not depend on the others'.
    """
    key = np.random.SeedSequence((int(seed), int(epoch), zlib.crc32(name.encode()))).generate_state(1, np.uint64)
    rows = mix64(key + np.asarray(items, np.uint64) * _GOLDEN)  # [B], one stream per item
    numbers = np.asarray(numbers, np.uint64)
    flat = numbers.reshape(-1) + np.uint64(1)  # arrays, not scalars: uint64 arithmetic wraps silently
    return mix64(rows[:, None] + flat * _GOLDEN).reshape(len(rows), *numbers.shape)


def unit_floats(bits: np.ndarray) -> np.ndarray:
    """float64 uniforms in `[0, 1)` from uint64 words (their top 53 bits)."""
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
