"""The shape policy: a few padded lengths (rungs) that every batch is cut for and padded to.

Why: a GPU pays for each new batch shape once. In bf16, torch sends attention to cuDNN, which builds
a plan for every new `(batch, length)`, about a quarter of a second each on an H200; exact buckets
give an epoch of SST-2 60 shapes, and the epoch's first pass over them costs more than its training.
With a ladder of rungs, a batch's padded length is the smallest rung at or above its longest sample,
and its batch size is the budget over that rung, so an epoch's batches take few shapes, each of which
can be paid once before training (`WarmShapes`).

Where the rungs go: `ladder` places `count` rungs where they cost the least padding, a pure
function of the size histogram (an exact dynamic programme over its distinct sizes: a rung of 13 tokens
costs a 13-token sentence nothing, so the rungs are dense where the samples are). `Rungs` is the
ladder a plan cuts by (each batch then carries the length it pads to: `varlen.batching.indices`);
`fit_rungs` picks the most rungs whose epoch, planned on the world's ranks, keeps
within `max_shapes` distinct shapes on every size axis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_MAX_SHAPES",
    "PadTo",
    "Rungs",
    "batch_shapes",
    "batch_widths",
    "cant_hold",
    "distinct_shapes",
    "fit_count",
    "ladder",
    "pad_length",
    "power_of_two_pieces",
    "power_of_two_tail",
    "round_up",
    "size_histogram",
]


def round_up(n, multiple: int | None):
    """`n` (an int or an integer array) rounded up to a multiple of `multiple` (unchanged
    when `multiple` is falsy)."""
    return -(-n // multiple) * multiple if multiple else n


#: the default limit of distinct batch shapes an epoch may take (a DataModule's `max_shapes`)
DEFAULT_MAX_SHAPES = 24
#: distinct sizes the exact programme reads; more are first grouped on the plan's 5% size grid
EXACT_SIZES = 512


def ladder(values: np.ndarray, counts: np.ndarray, sums: np.ndarray | None, count: int) -> np.ndarray:
    """The `count` rungs (ascending, the largest value always one) that pad the samples least.

    The samples are given as a histogram: `counts[i]` samples of sizes at most `values[i]` (ascending,
    distinct), adding up to `sums[i]` (None: each exactly `values[i]`). A sample pads to the first
    rung at or above its size, so rungs are chosen among `values`. Exact: a dynamic programme over
    segments of the sorted values, one vectorised `[n, n]` step per rung (`n` values).
    """
    values = np.asarray(values, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.float64)
    sums = counts * values if sums is None else np.asarray(sums, dtype=np.float64)
    n = len(values)
    if n == 0:
        return values
    if count >= n:
        return values.copy()
    if count < 1:
        raise ValueError(f"a ladder needs at least one rung, got {count}")
    held = np.concatenate([[0.0], np.cumsum(counts)])  # samples and their total size before value j
    total = np.concatenate([[0.0], np.cumsum(sums)])
    # cost[i, j]: values i..j-1 padded to values[j-1]
    top = np.concatenate([[0], values])[None, :]
    cost = top * (held[None, :] - held[:, None]) - (total[None, :] - total[:, None])
    cost[np.tril_indices(n + 1)] = np.inf
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((count, n + 1), dtype=np.int64)
    for k in range(count):
        paths = best[:, None] + cost
        choice[k] = np.argmin(paths, axis=0)
        best = paths[choice[k], np.arange(n + 1)]
    rungs, j = [], n
    for k in range(count - 1, -1, -1):
        if j == 0:
            break
        rungs.append(values[j - 1])
        j = int(choice[k, j])
    return np.unique(np.asarray(rungs, dtype=np.int64))


def size_histogram(sizes: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(values, counts, sums)` of `sizes` for `ladder`: the distinct sizes, or, past
    `EXACT_SIZES` of them, the largest size, count and total of each bin of `grid`."""
    sizes = np.asarray(sizes, dtype=np.int64)
    values, counts = np.unique(sizes, return_counts=True)
    if len(values) <= EXACT_SIZES:
        return values, counts, values * counts
    bins = np.searchsorted(grid, values)
    first = np.flatnonzero(np.diff(np.concatenate([[-1], bins])))
    last = np.concatenate([first[1:], [len(values)]]) - 1
    return values[last], np.add.reduceat(counts, first), np.add.reduceat(values * counts, first)


@dataclass(frozen=True)
class Rungs:
    """The padded lengths of one size axis: a length pads to the first rung at or above it (and past the
    top rung, as without rungs: up to `multiple`). What a plan cuts by.

    Attributes:
        lengths: the rungs, ascending.
        multiple: what a length past the top rung is rounded up to a multiple of (the DataModule's
            `pad_to_multiple_of`); the rungs are multiples of it already.
    """

    lengths: tuple[int, ...]
    multiple: int | None = None

    def __post_init__(self) -> None:
        steps = np.diff(np.asarray(self.lengths))
        if not self.lengths or min(self.lengths) < 0 or (steps <= 0).any():
            raise ValueError(f"rungs must be sizes >= 0, ascending and distinct, got {self.lengths}")

    @property
    def array(self) -> np.ndarray:
        return np.asarray(self.lengths, dtype=np.int64)

    def round(self, n):
        """`n` (an int or an integer array) padded up to its rung."""
        rungs = self.array
        at = np.searchsorted(rungs, n, side="left")
        padded = np.where(at < len(rungs), rungs[np.minimum(at, len(rungs) - 1)], round_up(n, self.multiple))
        return int(padded) if np.ndim(n) == 0 else padded

    def __repr__(self) -> str:
        return f"Rungs({list(self.lengths)}" + (f", multiple={self.multiple})" if self.multiple else ")")


#: what a padded axis is rounded up by: nothing, a multiple, or rungs
PadTo = int | Rungs | None


def pad_length(n, pad_to: PadTo):
    """The padded length of a batch whose longest row is `n`: up to `pad_to`'s rung, or multiple."""
    return pad_to.round(n) if isinstance(pad_to, Rungs) else round_up(n, pad_to)


def batch_widths(sizes: np.ndarray, rungs: tuple[Rungs, ...]) -> tuple[int, ...]:
    """The padded length of each size axis of a batch of samples of `sizes` (`[n]` or `[n, D]`): its
    longest, up to its rung (past the top rung, up to the rungs' multiple)."""
    longest = np.asarray(sizes).reshape(len(sizes), -1).max(axis=0)
    return tuple(r.round(int(n)) for r, n in zip(rungs, longest, strict=True))


def batch_shapes(rounded: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """`[batches, 1 + D]`: each batch's size and its padded length on every axis (the largest rounded
    size among its samples: `rounded [N, D]` holds each sample's rung). `bounds [n, 2]` are rows into
    `order` that are disjoint or equal (a plan's batches), so each is one run between their edges."""
    if len(bounds) == 0:
        return np.zeros((0, 1 + rounded.shape[1]), np.int64)
    ordered = rounded[order]
    edges = np.unique(bounds)
    runs = np.maximum.reduceat(ordered, edges[edges < len(ordered)], axis=0)
    widths = runs[np.searchsorted(edges, bounds[:, 0])]
    return np.column_stack([bounds[:, 1] - bounds[:, 0], widths]).astype(np.int64)


def distinct_shapes(shapes: np.ndarray) -> list[int]:
    """Distinct `(batch size, padded length)` pairs on each axis of `batch_shapes` rows."""
    return [len(np.unique(shapes[:, [0, d]], axis=0)) for d in range(1, shapes.shape[1])]


def power_of_two_tail(starts: np.ndarray, full: int, first: bool = False) -> np.ndarray:
    """A cut's `starts` (plus its end) with its short batch, the last (`first`: the first, where a fixed
    batch size puts it), split into batches of powers of two, largest first (13 -> 8, 4, 1), when it holds
    fewer than `full` samples: where a plan holds many short batches (one per group), their sizes then take
    a few values, so the shapes stay few."""
    if len(starts) < 2:
        return starts
    k = 0 if first else len(starts) - 2
    start, end = int(starts[k]), int(starts[k + 1])
    if end - start >= full:
        return starts
    sizes = [1 << bit for bit in range((end - start).bit_length() - 1, -1, -1) if (end - start) >> bit & 1]
    return np.concatenate([starts[:k], start + np.cumsum([0, *sizes[:-1]]), starts[k + 1 :]])


def power_of_two_pieces(counts: np.ndarray) -> np.ndarray:
    """How many batches `power_of_two_tail` cuts short batches of `counts` samples into (their one
    bits), vectorised: what a count of batches from a histogram adds for them."""
    counts = np.asarray(counts, dtype=np.int64).copy()
    ones = np.zeros_like(counts)
    while counts.any():
        ones += counts & 1
        counts >>= 1
    return ones


def cant_hold(limit: int, shapes: int) -> str:
    """The warning where `max_shapes` cannot hold: even one rung per axis gives `shapes` batch shapes."""
    return (
        f"max_shapes={limit} cannot hold: one padded length per axis already gives {shapes} batch shapes (the "
        "short batches: a budget's or a group's last, and the halves that give every rank as many); allow more shapes"
    )


def fit_count(shapes_of: Callable[[int], int], limit: int, most: int) -> int:
    """The most rungs (at most `most`) whose plan takes at most `limit` shapes, by bisection on
    `shapes_of(rungs)`; 1 when even one rung exceeds it."""
    low, high = 1, max(1, most)
    if shapes_of(high) <= limit:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if shapes_of(middle) <= limit:
            low = middle
        else:
            high = middle
    return low


class _PadsToRungs:
    """What `PadsToRungs` became: a padder that reads the lengths its batches carry (see the warning)."""

    pads_to_widths = True


def __getattr__(name: str):
    if name == "PadsToRungs":  # a dataset or collate that was handed the rungs: batches now carry their lengths
        import warnings

        warnings.warn(
            "varlen.batching.shape_policy.PadsToRungs is gone: batches carry the length they pad to; subclass "
            "varlen.batching.indices.PadsToWidths and pad to pad_to(indices, pad_to_multiple_of)",
            DeprecationWarning,
            stacklevel=2,
        )
        return _PadsToRungs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
