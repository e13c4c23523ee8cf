"""The batch plan of a streamed data set, from its size index alone: per rank, memory that grows with
chunks x buckets plus one window, never with samples.

The in-memory plan (`varlen.batching.plan`) needs every size on every rank. Here a rank reads the
index's per-chunk histograms (over `SIZE_GRID`) and the sizes of about
W - 1 chunks to lay the run out (the pieces' boundary chunks, a few neighbours), then the sizes of one
window at a time:

1. Buckets: the grid's edges that close a bucket of enough samples in the summed histograms
   (`keep_populated`, as `bucketize` keeps them); a sample is costed at
   its bucket's upper edge (rounded up to `pad_to_multiple_of`, but packed), so budgets hold.
2. Pieces: the chunks in a seeded order, cut into one contiguous piece per rank, inside the boundary
   chunks at sample granularity (their sizes read). Cut at equal expected batch count
   (`sum(samples / room)`), pieces would differ by a few real batches each (a bucket's last batch is
   partial), and every rank serves the fullest one's count. So the cuts are walked from the first
   piece on at real counts (`varlen.stream.piece_ends`).
3. Windows: K consecutive chunks of a piece (about `window_batches` batches). A window's batch count
   follows from its bucket histogram alone (`batch_counts`: the greedy cut only reads the sorted
   rounded sizes); its samples are ordered and cut exactly as the in-memory plan does
   (`read_window`), which gives that count.
4. Equal counts: every rank gets T = the largest rank's count; a shorter rank's windows split their
   largest batches (the splits dealt to its windows, the ones of largest mean batch first). With the
   walked cuts only the last piece can be short: by 0 to a few batches in most runs, by up to about
   W / 3 when the run's batches fall midway between multiples of W (moving a piece's end inside the
   range of its T batches moves its expected batches by about one: half a batch either way).

What is fixed for the run and what changes per epoch. The chunk order comes from the run's seed, not
from `(seed, epoch)`: pieces and windows are the same every epoch, so each rank keeps its chunks
(a node's chunk cache stays useful) and every window's count, hence `len()`, never moves (Lightning
reads it once). From `(seed, epoch)`: the order of a rank's windows, the order of the samples inside
each bucket of a window (so which samples share a batch) and the order of a window's batches. A rank
serves a window's batches one after the other (in each of its lanes, one per loader worker: see
`varlen.stream.epochs`), so a reader loads each window once per epoch.

A served batch is a *descriptor* `(window, batch, lo, hi)`: samples `lo:hi` of the window's batch
(`hi = -1`: to its end); the main process never holds a per-sample array. `StreamBatchPlan`
wraps the plan with a rank-independent state that resumes exactly, on the same or another number of
ranks (`varlen.stream.epochs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

import varlen.stream.piece_ends as pieces
from varlen.batching.padding import round_up
from varlen.batching.plan import (
    PlanSpec,
    batch_room,
    bucketize,
    cut_segment,
    keep_populated,
    order_samples,
    split_to_multiple,
)
from varlen.batching.shape_policy import power_of_two_pieces
from varlen.errors import DataError
from varlen.stream.index_checks import SizeIndexLike, checked_histograms, chunk_sizes, grid_bins
from varlen.stream.piece_ends import BLOCK

__all__ = [
    "WINDOW_BATCHES",
    "SizeIndexLike",
    "StreamLayout",
    "batch_counts",
    "equalise_ranks",
    "chunk_sizes",
    "group_windows",
    "layout",
    "order_and_cut",
    "rank_batches",
    "read_window",
    "serve",
    "window_bounds",
    "window_samples",
    "window_totals",
]

#: a window's default size, in batches. Measured on 600k lognormal(5, 1) sizes, budget 8192, real / padded
#: tokens against the global plan's 99.75%: 98.54% at 500 batches, 98.98% at 1000, 99.35% at 2000, 99.60%
#: at 4000 (a window's buckets hold few samples). 2000 keeps it within 0.5 point; text at 8192 tokens
#: a batch holds 64 MB of int32 tokens per window.
WINDOW_BATCHES = 2000
# the random streams of a run: (seed, _CHUNKS); per epoch (seed, epoch, tag, rank or window)
_CHUNKS, _WINDOWS, _SAMPLES, _BATCHES = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class StreamLayout:
    """What a run fixes on `num_replicas` ranks (see the module docstring).

    Segment `s` is samples `seg_start[s]:seg_stop[s]` of chunk `seg_chunk[s]`; window `w` holds
    segments `window_segments[w]:window_segments[w + 1]` and belongs to rank `window_rank[w]`; rank
    `r`'s windows are `rank_windows[r]:rank_windows[r + 1]`.
    """

    spec: PlanSpec
    axis: int
    num_replicas: int
    bucket_edges: np.ndarray  # [B] each bucket's upper edge (a grid edge), ascending
    rounded: np.ndarray  # [B] the size a bucket's samples are costed at
    bin_bucket: np.ndarray  # [G] the bucket of each grid bin
    chunk_offsets: np.ndarray  # [C + 1] global id of each chunk's first sample
    seg_chunk: np.ndarray
    seg_start: np.ndarray
    seg_stop: np.ndarray
    window_segments: np.ndarray  # [windows + 1]
    window_rank: np.ndarray  # [windows]
    rank_windows: np.ndarray  # [W + 1]
    window_histograms: np.ndarray  # [windows, B] samples per bucket
    window_counts: np.ndarray  # [windows] batches of the cut (batch_counts)
    window_splits: np.ndarray  # [windows] batches split to equalise the ranks
    batches_per_rank: int

    @property
    def num_windows(self) -> int:
        return len(self.window_counts)

    @property
    def extra_batches(self) -> int:
        """Batches added by splitting so that every rank has `batches_per_rank`."""
        return int(self.window_splits.sum())


def check_spec(spec: PlanSpec) -> None:
    """Refuse what a histogram plan cannot honour, naming it."""
    if spec.max_tokens is not None and len(spec.max_tokens) != 1:
        raise ValueError(
            f"a streamed plan budgets one size axis (its histograms are per axis), got max_tokens={spec.max_tokens}"
        )
    if spec.num_buckets is not None:
        raise ValueError("a streamed plan's buckets come from the size index's grid: leave num_buckets None")


def buckets(total: np.ndarray, edges: np.ndarray, spec: PlanSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket upper edges, each bucket's rounded size and each grid bin's bucket, from the summed
    histogram `total` (as `bucketize` draws them from sizes, the grid being its finest edges); with the
    shape policy's rungs (grid edges: `histogram_rungs`), the rungs."""
    present = np.flatnonzero(total)
    candidates = np.asarray(edges)[present].astype(np.int64)
    if spec.rungs is not None:
        kept = spec.rungs[0].array
        if candidates[-1] > kept[-1] or not np.isin(kept, edges).all():
            raise ValueError(
                f"rungs {list(kept)} are not edges of the size grid up to its largest size {candidates[-1]}"
            )
        return kept, kept, np.minimum(np.searchsorted(kept, edges, side="left"), len(kept) - 1)
    kept = keep_populated(candidates, np.cumsum(total[present]), spec, 0)
    if kept.size == 0 or kept[-1] != candidates[-1]:
        kept = np.append(kept, candidates[-1])  # the largest bucket, however sparse (as bucketize)
    bin_bucket = np.minimum(np.searchsorted(kept, edges, side="left"), len(kept) - 1)
    return kept, round_up(kept, spec.size_multiple), bin_bucket


def batch_counts(histograms: np.ndarray, rounded: np.ndarray, spec: PlanSpec) -> np.ndarray:
    """Batches of `cut_batches` over each row's samples (`[N, B]` counts per
    bucket of rounded size `rounded[b]`), without the samples: one step per bucket, over all rows.

    The greedy cut reads only the sorted rounded sizes, largest first. `padded`: a batch started in
    bucket b holds `room_b` samples, so what it takes of the next buckets is a carry. `sum`: a
    bucket's last batch stays open and takes what fits of the next buckets. With the shape policy's rungs,
    a row's short batch is cut into powers of two (`cut_segment`): as many
    more batches as its size has one bits, less one.
    """
    histograms = np.asarray(histograms, dtype=np.int64)
    if spec.batch_size is not None:
        total = histograms.sum(axis=1)
        short = total % spec.batch_size if spec.rungs is not None else np.zeros_like(total)
        return -(-total // spec.batch_size) + np.maximum(power_of_two_pieces(short) - 1, 0)
    budget, cap = int(spec.max_tokens[0]), spec.max_batch_size or np.iinfo(np.int64).max
    rooms = batch_room(np.asarray(rounded, np.int64), spec, 0).tolist()
    columns = np.ascontiguousarray(histograms.T)
    present = np.flatnonzero(columns.any(axis=1))[::-1].tolist()  # an empty bucket changes nothing
    count = np.zeros(len(histograms), np.int64)
    if spec.cost == "padded":  # in place: the walk of the pieces counts a few hundred rows a call, once a rank
        carry, rest, new = np.zeros_like(count), np.empty_like(count), np.empty_like(count)
        last_room = np.zeros_like(count)  # the room of the bucket the last batch started in
        for b in present:
            room = rooms[b]
            np.subtract(columns[b], carry, out=rest)
            np.floor_divide(rest, -room, out=new)
            np.negative(new, out=new)
            np.maximum(new, 0, out=new)  # ceil(rest / room) new batches, if rest > 0
            np.multiply(new, room, out=carry)
            carry -= rest  # samples the open batch still covers
            count += new
            if spec.rungs is not None:
                last_room[new > 0] = room
        if spec.rungs is not None:  # the last batch holds last_room - carry: short, in powers of two
            count += np.maximum(power_of_two_pieces(np.where(carry > 0, last_room - carry, 0)) - 1, 0)
        return count
    used, held = np.zeros_like(count), np.zeros_like(count)  # sum: tokens and samples of the open batch
    for b in present:
        n, size, room = columns[b], int(rounded[b]), rooms[b] if rounded[b] else cap
        taken = np.minimum(np.minimum(n, (budget - used) // size if size else cap), cap - held)
        taken = np.where(held > 0, np.maximum(taken, 0), 0)  # what the open batch takes of this bucket
        rest = n - taken  # >= 0
        new = -(-rest // room)
        last = rest - (new - 1) * room  # the bucket's last batch, left open
        opened = rest > 0
        held = np.where(opened, last, held + taken)
        used = np.where(opened, last * size, used + taken * size)
        count += new
    return count


def layout(
    index: SizeIndexLike,
    spec: PlanSpec,
    *,
    seed: int,
    num_replicas: int,
    window_batches: int = WINDOW_BATCHES,
    axis: int = 0,
    bucketing: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    equalise: bool = True,
) -> StreamLayout:
    """Lay a run out on `num_replicas` ranks (the same on every rank; see the module docstring).

    `bucketing`: the buckets `(upper edges, rounded sizes, grid bin -> bucket)` to use instead of the
    index's own (a mixture's sources share theirs); `equalise=False` leaves the ranks' counts as the
    windows give them (no split; `batches_per_rank` the largest rank's), for a plan that draws its own.

    Raises:
        DataError: the index is inconsistent (shapes, sums, a boundary chunk's sizes), naming the chunk.
        ValueError: a spec a histogram cannot plan, or too few samples to give every rank its batches.
    """
    check_spec(spec)
    if num_replicas < 1 or window_batches < 1:
        raise ValueError(f"num_replicas and window_batches must be >= 1, got {num_replicas} and {window_batches}")
    samples, histograms = checked_histograms(index, axis)
    total = np.zeros(histograms.shape[1], np.int64)
    for i in range(0, len(histograms), BLOCK):
        total += histograms[i : i + BLOCK].sum(axis=0, dtype=np.int64)
    edges, rounded, bin_bucket = buckets(total, index.edges, spec) if bucketing is None else bucketing
    per_bin = 1.0 / batch_room(rounded, spec, 0)[bin_bucket]
    expected = pieces.expected_batches(histograms, per_bin)
    chunk_batches = float(expected.sum()) / max(1, int((samples > 0).sum()))  # mean over non-empty chunks
    per_window = max(1, round(window_batches / chunk_batches))  # chunks per window
    order = np.random.default_rng([seed, _CHUNKS]).permutation(len(samples))
    starts = np.concatenate([[0], np.cumsum(samples[order])])
    count = partial(batch_counts, rounded=rounded, spec=spec)
    read_bins = partial(grid_bins, index, axis, histograms)
    run = pieces.Run(histograms, order, samples, expected, bin_bucket, per_bin, per_window, count, read_bins)
    bounds = pieces.piece_bounds(run, num_replicas)
    breaks = np.union1d(starts, bounds)
    position = np.searchsorted(starts, breaks[:-1], side="right") - 1
    seg_rank = np.searchsorted(bounds, breaks[:-1], side="right") - 1
    seg_chunk, seg_start, seg_stop = order[position], breaks[:-1] - starts[position], breaks[1:] - starts[position]
    window_segments, window_rank, rank_windows = group_windows(seg_rank, per_window, num_replicas, samples)
    segments = (seg_chunk, seg_start, seg_stop)
    part = lambda s: np.bincount(run.read[int(seg_chunk[s])][seg_start[s] : seg_stop[s]], minlength=len(rounded))  # noqa: E731
    window_hist = window_totals(segments, window_segments, samples, histograms, bin_bucket, part, np.int32)
    counts = batch_counts(window_hist, rounded, spec)
    if equalise:
        splits, most = equalise_ranks(window_hist.sum(axis=1), counts, window_rank, rank_windows)
    else:
        splits = np.zeros_like(counts)
        most = int(np.bincount(window_rank, counts, minlength=num_replicas).max())
    return StreamLayout(
        spec, axis, num_replicas, edges, rounded, bin_bucket, np.concatenate([[0], np.cumsum(samples)]),
        seg_chunk, seg_start, seg_stop, window_segments, window_rank, rank_windows, window_hist, counts, splits, most,
    )  # fmt: skip


def group_windows(seg_rank: np.ndarray, per_window: int, num_replicas: int, samples: np.ndarray):
    """Each rank's segments (in order, `seg_rank` their ranks) grouped `per_window` at a time into windows:
    `(window_segments [windows + 1], window_rank [windows], rank_windows [W + 1])`.

    Raises:
        ValueError: a rank without samples (of the `samples` per chunk).
    """
    per_rank = np.bincount(seg_rank, minlength=num_replicas)
    if (per_rank == 0).any():
        raise ValueError(
            f"rank {int(np.argmin(per_rank))} of {num_replicas} gets no samples ({int(samples.sum())} samples): "
            "use fewer ranks or more data"
        )
    local = np.arange(len(seg_rank)) - np.searchsorted(seg_rank, np.arange(num_replicas))[seg_rank]
    rank_windows = np.concatenate([[0], np.cumsum(-(-per_rank // per_window))])
    seg_window = rank_windows[seg_rank] + local // per_window
    window_segments = np.searchsorted(seg_window, np.arange(rank_windows[-1] + 1))
    return window_segments, np.repeat(np.arange(num_replicas), np.diff(rank_windows)), rank_windows


def window_totals(segments, window_segments, samples, histograms, bin_bucket, part, dtype) -> np.ndarray:
    """Samples (or weights) per bucket of each window `[windows, B]`: full chunks from their per-chunk
    `histograms` (`[C, G]` over the grid: counts, or weight sums), the boundary chunks' parts from
    `part(segment)` (that segment's row `[B]`, its samples read); a block of windows at a time."""
    chunk, start, stop = segments
    num_buckets = int(bin_bucket[-1]) + 1
    first_bins = np.searchsorted(bin_bucket, np.arange(num_buckets))
    out = np.empty((len(window_segments) - 1, num_buckets), dtype)
    accumulate = np.int64 if np.issubdtype(np.dtype(dtype), np.integer) else np.float64
    cut = np.flatnonzero((start > 0) | (stop < samples[chunk]))
    for w0 in range(0, len(out), BLOCK):
        w1 = min(len(out), w0 + BLOCK)
        s0, s1 = window_segments[w0], window_segments[w1]
        rows = np.add.reduceat(histograms[chunk[s0:s1]], first_bins, axis=1, dtype=accumulate)
        for s in cut[(cut >= s0) & (cut < s1)].tolist():
            rows[s - s0] = part(s)
        out[w0:w1] = np.add.reduceat(rows, window_segments[w0:w1] - s0, axis=0)
    return out


def equalise_ranks(window_samples, counts, window_rank, rank_windows) -> tuple[np.ndarray, int]:
    """Splits per window that give every rank the largest rank's count, and that count: a rank's missing
    batches dealt to its windows in proportion to what they can split (samples - batches), the
    remainder one each to those of largest mean batch first."""
    ranks = len(rank_windows) - 1
    per_rank = np.bincount(window_rank, counts, minlength=ranks).astype(np.int64)
    most = int(per_rank.max())
    spare = (window_samples - counts).astype(np.int64)
    spare_rank = np.bincount(window_rank, spare, minlength=ranks).astype(np.int64)
    short = np.flatnonzero(most - per_rank > spare_rank)
    if short.size:
        rank = int(short[0])
        raise ValueError(
            f"rank {rank} holds {int(per_rank[rank] + spare_rank[rank])} samples in {int(per_rank[rank])} batches "
            f"and cannot be split to {most} (the fullest of {ranks} ranks): use fewer ranks or more data"
        )
    missing = (most - per_rank)[window_rank]
    splits = missing * spare // np.maximum(spare_rank[window_rank], 1)
    left = (most - per_rank) - np.bincount(window_rank, splits, minlength=ranks).astype(np.int64)
    mean = np.divide(window_samples, counts, out=np.zeros(len(counts)), where=counts > 0)
    ranked = np.lexsort((np.arange(len(counts)), -mean, splits >= spare, window_rank))
    place = np.empty_like(ranked)
    place[ranked] = np.arange(len(ranked)) - rank_windows[window_rank[ranked]]
    return splits + (place < left[window_rank]), most


def rank_batches(plan: StreamLayout, rank: int, epoch: int, seed: int) -> np.ndarray:
    """Rank `rank`'s descriptors for `epoch`: `[T, 4]` int32 (window, batch, 0, -1), its windows in an
    order from `(seed, epoch, rank)`, each window's batches one after the other."""
    windows = np.arange(plan.rank_windows[rank], plan.rank_windows[rank + 1])
    windows = windows[np.random.default_rng([seed, epoch, _WINDOWS, rank]).permutation(len(windows))]
    counts = plan.window_counts[windows] + plan.window_splits[windows]
    out = np.zeros((int(counts.sum()), 4), np.int32)  # 16 bytes a batch: millions a rank at 1 B samples
    out[:, 0] = np.repeat(windows, counts)
    out[:, 1] = np.arange(len(out)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[:, 3] = -1
    return out


def serve(starts: np.ndarray, count: int, splits: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """Batches `[n, 2]` from a cut's `starts`, checked against the `count` planned, `splits` of the
    largest split in two, in a random order from `rng`; `what` names the window in the error."""
    bounds = np.stack([starts[:-1], starts[1:]], axis=1)
    if len(bounds) != count:
        raise RuntimeError(f"{what}: {len(bounds)} batches cut but {count} counted")
    if splits:
        bounds = split_to_multiple(bounds, len(bounds) + splits)  # exactly `splits` splits of the largest
    return bounds[rng.permutation(len(bounds))]


def _serve(plan: StreamLayout, window: int, epoch: int, seed: int, starts: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng([seed, epoch, _BATCHES, window])
    return serve(starts, int(plan.window_counts[window]), int(plan.window_splits[window]), rng, f"window {window}")


def window_bounds(plan: StreamLayout, window: int, epoch: int, seed: int) -> np.ndarray:
    """Window `window`'s batches `[n, 2]` (offsets into its ordered samples, in serving order), from
    its histogram alone: the batch sizes `read_window` gives, without reading a chunk."""
    largest_first = np.repeat(plan.rounded[::-1], plan.window_histograms[window][::-1])
    return _serve(plan, window, epoch, seed, cut_segment(largest_first[:, None], plan.spec))


def read_window(index: SizeIndexLike, plan: StreamLayout, window: int, epoch: int, seed: int):
    """Window `window`'s samples as global ids (chunk offset + position) in the order of `epoch`, its
    batches `[n, 2]` (offsets into them, in serving order) and the samples' sizes on the plan's axis (in the
    ids' order: what a batch pads to): the in-memory plan's ordering and cut over the window's samples, the
    window's chunks read once.

    Raises:
        DataError: a chunk's sizes disagree with the index's histograms, naming the chunk.
    """
    sizes, ids, bucket = window_samples(index, plan, window)
    order, starts = order_and_cut(sizes, bucket, plan, np.random.default_rng([seed, epoch, _SAMPLES, window]))
    return ids[order], _serve(plan, window, epoch, seed, starts), sizes[order]


def window_samples(index: SizeIndexLike, plan: StreamLayout, window: int, weights: bool = False):
    """Window `window`'s sizes on the plan's axis, global ids (chunk offset + position) and buckets, in
    its chunks' order (and their draw weights with `weights`: `index.weights(chunk)`), its chunks'
    sizes read and checked against the index and the plan.

    Raises:
        DataError: a chunk's sizes disagree with the index's histograms, naming the chunk.
    """
    histograms = index.histograms(plan.axis)
    chunk_range = range(plan.window_segments[window], plan.window_segments[window + 1])
    parts, ids, drawn = [], [], []
    for s in chunk_range:
        chunk, start, stop = int(plan.seg_chunk[s]), int(plan.seg_start[s]), int(plan.seg_stop[s])
        parts.append(chunk_sizes(index, chunk, plan.axis, histograms)[start:stop])
        ids.append(plan.chunk_offsets[chunk] + np.arange(start, stop))
        if weights:
            drawn.append(np.asarray(index.weights(chunk), np.float64)[start:stop])
    sizes, ids = np.concatenate(parts), np.concatenate(ids)
    bucket = plan.bin_bucket[np.searchsorted(index.edges, sizes)]
    if not np.array_equal(np.bincount(bucket, minlength=len(plan.rounded)), plan.window_histograms[window]):
        raise DataError(f"size index {index.key}: window {window}'s sizes differ from those it was planned with")
    return (sizes, ids, bucket) + ((np.concatenate(drawn),) if weights else ())


def order_and_cut(sizes: np.ndarray, bucket: np.ndarray, plan: StreamLayout, rng: np.random.Generator):
    """The order of a window's samples (`sizes` and their `bucket`) and its batches' starts: by bucket,
    largest first; inside a bucket, the window's own finer buckets (bucketize's, as the in-memory plan's)
    largest first, so the cut's positions stay the histogram's and a batch holds samples of close sizes."""
    finer, _ = bucketize(sizes[:, None], plan.spec)
    order = order_samples(np.column_stack([bucket, finer[:, 0]]), rng, sizes[:, None])
    return order, cut_segment(plan.rounded[bucket[order]][:, None], plan.spec)
