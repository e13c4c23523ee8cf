"""The shape policy on a streamed plan: rungs from a size index's histograms, and an epoch's distinct batch
shapes from its windows' (or units') histograms, without reading a chunk.

Rungs (`histogram_rungs`) are edges of the size grid: a streamed plan buckets samples by grid bin, so
a rung must close a bin. They are placed where they pad least by the same exact programme as in memory
(`ladder`), over the summed histogram, each bin's samples counted at its edge.

A batch's padded length is its longest size up to its rung, the sizes read from the size indexes
(`stream_sizes`): what the streamed sampler's batches carry (`varlen.batching.indices`).

Shapes (`row_shapes`): a window's cut is the greedy walk over its buckets, largest first, that
`batch_counts` counts: a batch started in bucket b holds `room_b` samples and
pads to its rung, so a window's full batches take `(room_b, rung_b)` for the buckets batches start in,
and its last batch, when short, is cut into powers of two (each padded to the rung its first sample is in).
The few windows that split batches to equalise the ranks are cut exactly (`cut_segment`). A packed plan's
batches are one row each: one shape.
"""

from __future__ import annotations

import numpy as np

from varlen.batching.plan import PlanSpec, batch_room, cut_segment, keep_populated, split_to_multiple
from varlen.batching.shape_policy import Rungs, ladder, round_up

__all__ = ["histogram_rungs", "row_shapes", "stream_sizes"]


def histogram_rungs(total: np.ndarray, edges: np.ndarray, spec: PlanSpec, count: int) -> tuple[Rungs, ...]:
    """`count` rungs (grid edges) for samples counted per bin of `edges` in `total`, the sparse ones
    merged up as the plan merges buckets (the largest bin's edge always a rung)."""
    present = np.flatnonzero(total)
    values = np.asarray(edges)[present].astype(np.int64)
    counts = np.asarray(total)[present].astype(np.int64)
    rungs = ladder(values, counts, None, count)
    kept = keep_populated(rungs, np.cumsum(counts)[np.searchsorted(values, rungs)], spec, 0)
    if not kept.size or kept[-1] != rungs[-1]:
        kept = np.append(kept, rungs[-1])
    return (Rungs(tuple(int(r) for r in kept), spec.pad_to_multiple_of),)


def row_shapes(histograms: np.ndarray, splits: np.ndarray, rounded: np.ndarray, spec: PlanSpec) -> set[tuple]:
    """The distinct `(batch size, padded length)` of the batches cut from rows of bucket counts
    (`[rows, B]`, bucket b costed and padded at `rounded[b]`), `splits[row]` of each row's largest
    batches split in two (the ranks' equalising). Packed (`cost="packed"`), every batch is one row: `(1, T)`,
    `T` the budget rounded up to `pad_to_multiple_of`."""
    histograms = np.asarray(histograms, dtype=np.int64)
    splits = np.asarray(splits, dtype=np.int64)
    if spec.cost == "packed":
        return {(1, int(round_up(spec.max_tokens[0], spec.pad_to_multiple_of)))} if histograms.sum() else set()
    found: set[tuple] = set()
    for row in np.flatnonzero(splits > 0).tolist():  # cut exactly: few rows split
        largest_first = np.repeat(np.asarray(rounded)[::-1], histograms[row][::-1])
        starts = cut_segment(largest_first[:, None], spec)
        bounds = split_to_multiple(np.stack([starts[:-1], starts[1:]], axis=1), len(starts) - 1 + int(splits[row]))
        found |= {(int(b - a), int(largest_first[a])) for a, b in bounds.tolist()}
    plain = histograms[splits == 0]
    if len(plain):
        found |= _walked(plain, np.asarray(rounded, dtype=np.int64), spec)
    return found


def _walked(histograms: np.ndarray, rounded: np.ndarray, spec: PlanSpec) -> set[tuple]:
    """`row_shapes` of rows without splits (see the module docstring)."""
    if spec.batch_size is not None:
        return set().union(*(_fixed_shapes(row, rounded, spec.batch_size) for row in histograms))
    rows, buckets = histograms.shape
    rooms = batch_room(rounded, spec, 0)
    below = np.concatenate([np.zeros((rows, 1), np.int64), np.cumsum(histograms, axis=1)], axis=1)  # buckets < b
    found: set[tuple] = set()
    carry = np.zeros(rows, np.int64)  # samples the open batch still takes
    last = np.full(rows, -1)  # the bucket each row's last batch started in
    for b in range(buckets - 1, -1, -1):
        rest = histograms[:, b] - carry
        new = np.where(rest > 0, -(-rest // rooms[b]), 0)
        carry = np.where(rest > 0, new * rooms[b] - rest, carry - histograms[:, b])
        filled = (new >= 2) | ((new == 1) & (below[:, b] >= carry))  # a batch started here holds room_b
        if filled.any():
            found.add((int(rooms[b]), int(rounded[b])))
        last = np.where(new > 0, b, last)
    short = (carry > 0) & (last >= 0)
    tails = rooms[np.maximum(last, 0)] - carry
    for row in np.flatnonzero(short).tolist():
        found |= _pieces(
            histograms[row][::-1], rounded[::-1], int(histograms[row].sum()) - int(tails[row]), int(tails[row])
        )
    return found


def _fixed_shapes(histogram: np.ndarray, rounded: np.ndarray, size: int) -> set[tuple]:
    """A row cut into batches of `size` (the short one first, in powers of two), largest samples first."""
    largest_first, widths = histogram[::-1], rounded[::-1]
    total = int(histogram.sum())
    short = total % size
    found = _pieces(largest_first, widths, 0, short)
    ends = np.cumsum(largest_first)
    starts = ends - largest_first
    first = short + -(-(starts - short).clip(min=0) // size) * size  # each bucket's first batch start in it
    hit = (largest_first > 0) & (first < ends) & (first < total)
    return found | {(size, int(w)) for w in widths[hit]}


def _pieces(largest_first: np.ndarray, widths: np.ndarray, start: int, short: int) -> set[tuple]:
    """The batches of powers of two that `short` samples from position `start` are cut into, each padded to
    the rung its first sample is in (a row's samples largest first: `largest_first` per bucket)."""
    ends = np.cumsum(largest_first)
    found = set()
    for bit in range(short.bit_length() - 1, -1, -1):
        if short >> bit & 1:
            found.add((1 << bit, int(widths[int(np.searchsorted(ends, start, side="right"))])))
            start += 1 << bit
    return found


def stream_sizes(indexes: list, ids: np.ndarray) -> np.ndarray:
    """The first-axis sizes of global ids `ids` of a stream whose sources' size indexes are `indexes` (their
    samples numbered one source after another), each chunk's sizes read once."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.zeros(len(ids), np.int64)
    first = 0
    for index in indexes:
        counts = np.asarray(index.samples_per_chunk, dtype=np.int64)
        offsets = first + np.concatenate([[0], np.cumsum(counts)])
        mine = np.flatnonzero((ids >= first) & (ids < offsets[-1]))
        chunks = np.searchsorted(offsets, ids[mine], side="right") - 1
        for chunk in np.unique(chunks).tolist():
            at = mine[chunks == chunk]
            sizes = np.asarray(index.sizes(chunk)).reshape(int(counts[chunk]), -1)[:, 0]
            out[at] = sizes[ids[at] - offsets[chunk]]
        first = int(offsets[-1])
    return out
