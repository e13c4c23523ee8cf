"""The batch plan: which sample indices go together, as a pure function of (sizes, seed, epoch).

Everything here is vectorised numpy except one loop per *batch* (never per sample) when a
token budget is cut greedily. A plan for a million samples takes a fraction of a second.

How the plan stays fixed in size while its contents change every epoch: each sample's size is
rounded up to the largest size in its bucket (exact sizes when there are few distinct ones,
else count quantiles joined with a 5% geometric grid; a bucket of fewer than two batches' worth of
samples joins the one above, or its batches would be the same every epoch). Samples are sorted by bucket, with a
fresh random order inside each bucket every epoch, and the batch cuts are computed on the
*rounded* sizes. The rounded sequence is the same every epoch, so the cuts (and the number of
batches) are too, while which samples fill each batch is reshuffled. Budgets hold because a
real size never exceeds its rounded size.

With a `WeightedDraw`, the epoch's samples are drawn first (a fixed
count per bucket, see `varlen.batching.weights`) and the drawn ones are planned as above:
the rounded sequence, so the cuts, stay the same every epoch. An interrupted epoch's rest on another
number of ranks is `varlen.batching.resume`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from varlen.batching.deal import deal, repeat_to_multiple, split_largest, split_to_multiple
from varlen.batching.padding import round_up
from varlen.batching.shape_policy import Rungs, fit_count, ladder, power_of_two_tail, size_histogram
from varlen.batching.spec import COST_MODES, MAX_BUCKETS, SUMMED, PlanSpec
from varlen.batching.weights import WeightedDraw

__all__ = [
    "COST_MODES",
    "GROWTH",
    "MAX_BUCKETS",
    "MIX_BATCHES",
    "Plan",
    "PlanSpec",
    "SIZE_GRID",
    "SUMMED",
    "as_size_matrix",
    "auto_buckets",
    "batch_room",
    "best_fit",
    "bucketize",
    "build_plan",
    "cut_batches",
    "cut_order",
    "cut_segment",
    "deal",
    "fit_rungs",
    "geometric_edges",
    "index_dtype",
    "keep_populated",
    "order_samples",
    "populated_edges",
    "repeat_to_multiple",
    "rungs_of",
    "split_largest",
    "split_to_multiple",
]

#: ratio between consecutive geometric bucket edges: rounding costs at most ~5% padding
GROWTH = 1.05
#: every bucket but the largest holds at least this many batches' worth of samples, so that the
#: batches of one epoch are not those of the next
MIX_BATCHES = 2


def index_dtype(n: int) -> type[np.signedinteger]:
    """int32 for indices and sizes below 2**31, else int64: per-sample arrays of a plan are half
    the memory (a million-sample plan holds a few of them)."""
    return np.int32 if n < 2**31 else np.int64


def as_size_matrix(lengths) -> np.ndarray:
    """Sizes as an integer matrix [N, D] (D = 1 for plain lengths; int32 when the values allow,
    see `index_dtype`); rejects negatives, fractions and NaN."""
    sizes = np.asarray(lengths)
    if sizes.ndim == 1:
        sizes = sizes[:, None]
    if sizes.ndim != 2:
        raise ValueError(f"lengths must be [N] or [N, D], got shape {sizes.shape}")
    if sizes.size and not np.all(np.isfinite(sizes)):
        bad = int(np.flatnonzero(~np.isfinite(sizes).all(axis=1))[0])
        raise ValueError(f"lengths of sample {bad} is not finite: {sizes[bad]}")
    if sizes.size and sizes.min() < 0:
        bad = int(np.flatnonzero((sizes < 0).any(axis=1))[0])
        raise ValueError(f"lengths of sample {bad} is negative: {sizes[bad]}")
    if sizes.size and not np.issubdtype(sizes.dtype, np.integer) and np.any(sizes != np.round(sizes)):
        bad = int(np.flatnonzero((sizes != np.round(sizes)).any(axis=1))[0])
        raise ValueError(f"lengths of sample {bad} is not a whole number: {sizes[bad]} (sizes count elements)")
    # headroom for rounding up to a multiple (pad_to_multiple_of) without overflow; int32 sizes
    # are used as they are (the caller's array is never written to)
    return sizes.astype(index_dtype(2 * int(sizes.max()) if sizes.size else 0), copy=False)


def auto_buckets(sizes: np.ndarray, spec: PlanSpec) -> int:
    """Buckets per dimension such that each bucket holds about four batches of samples (packed: every distinct
    size its own, as far as the buckets mix: a packed row is costed at the real sizes)."""
    if spec.cost == "packed":
        return MAX_BUCKETS
    n, dims = sizes.shape
    if spec.batch_size is not None:
        per_batch = spec.batch_size
    else:
        typical = max(1.0, float(np.median(sizes[:, 0])) if n else 1.0)
        per_batch = max(1, int(spec.max_tokens[0] // typical))
    return int(np.clip((n / (4 * per_batch)) ** (1 / dims), 1, 1024))


def bucketize(sizes: np.ndarray, spec: PlanSpec) -> tuple[np.ndarray, np.ndarray]:
    """Bucket ids [N, D] and rounded-up sizes [N, D] (the largest size in each sample's bucket).

    With few distinct sizes each gets its own bucket (no rounding at all). Otherwise bucket
    edges are count quantiles (so every bucket has samples to mix) joined with a geometric grid
    of ratio `GROWTH` (so the sparse long tail is not lumped into one wide bucket).
    """
    num_buckets = spec.num_buckets or auto_buckets(sizes, spec)
    sizes = round_up(sizes, spec.size_multiple)
    ids = np.empty(sizes.shape, dtype=np.int16)  # see MAX_BUCKETS
    rounded = np.empty_like(sizes)
    if spec.rungs is not None and len(spec.rungs) != sizes.shape[1]:
        raise ValueError(f"{len(spec.rungs)} rungs for samples of {sizes.shape[1]} size axes")
    for d in range(sizes.shape[1]):
        col = sizes[:, d]
        distinct = np.unique(col)
        if spec.rungs is not None:
            rungs = spec.rungs[d].array
            ids[:, d] = np.searchsorted(rungs, col, side="left")
            # sizes past the top rung (a split the rungs were not fitted on): one bucket at its largest
            rounded[:, d] = np.append(rungs, col.max(initial=0))[ids[:, d]]
            continue
        if len(distinct) <= num_buckets:
            edges = distinct
        else:
            quantiles = np.quantile(col, np.linspace(0, 1, num_buckets + 1)[1:], method="higher")
            edges = np.union1d(quantiles, geometric_edges(int(distinct[0]), int(distinct[-1])))
        if spec.cost != "packed":  # a packed row is filled at the real sizes: no bucket is merged up
            edges = populated_edges(np.sort(col), edges, spec, d)
        ids[:, d] = np.searchsorted(edges, col, side="left")
        bucket_max = np.zeros(len(edges) + 1, dtype=np.int64)
        np.maximum.at(bucket_max, np.searchsorted(edges, distinct, side="left"), distinct)
        rounded[:, d] = bucket_max[ids[:, d]]
    return ids, rounded


def geometric_edges(low: int, high: int) -> np.ndarray:
    """Sizes from `max(low, 1)` up to at least `high`, each about `GROWTH` times the last and
    whole: every size while a 5% step is under one, then 5% steps. The grid behind `bucketize`
    and, from 1 to the int32 limit, `SIZE_GRID`."""
    low = max(int(low), 1)
    steps = int(np.ceil(np.log(max(high, low) / low) / np.log(GROWTH))) + 1
    return np.unique(np.floor(low * GROWTH ** np.arange(steps)).astype(np.int64))


#: the fixed fine grid of every size an int32 holds: 0, then `geometric_edges` from 1; a size
#: `s` falls in bin `searchsorted(SIZE_GRID, s)` (the first edge `>= s`), so each bin's edge is
#: its size rounded up. Histograms over it (varlen.stream's size index) are comparable across data sets.
SIZE_GRID = np.concatenate([[0], geometric_edges(1, 2**31 - 1)])
SIZE_GRID.flags.writeable = False


def batch_room(sizes: np.ndarray, spec: PlanSpec, dim: int) -> np.ndarray:
    """About how many samples of each size fit one batch (on size axis `dim`)."""
    if spec.batch_size is not None:
        return np.full(len(sizes), spec.batch_size)
    room = np.maximum(1, spec.max_tokens[dim] // np.maximum(sizes, 1))
    if spec.rung_batch_sizes is not None and dim == 0:  # a size past the top rung: the top rung's
        caps = np.asarray(spec.rung_batch_sizes)
        room = np.minimum(room, caps[np.minimum(np.searchsorted(spec.rungs[0].array, sizes), len(caps) - 1)])
    return np.minimum(room, spec.max_batch_size) if spec.max_batch_size else room


def populated_edges(ordered: np.ndarray, edges: np.ndarray, spec: PlanSpec, dim: int) -> np.ndarray:
    """The candidate `edges` (sorted) that close a bucket of at least `MIX_BATCHES` batches'
    worth of the sizes `ordered` (sorted); a sparser bucket joins the one above it.

    Only samples of one bucket trade places between epochs, so a bucket of a few samples would
    give the same batches every epoch (a long tail, or a small dataset). Joining the bucket above
    costs padding for its own few samples only: the bucket above keeps its largest size.
    """
    return keep_populated(edges, np.searchsorted(ordered, edges, side="right"), spec, dim)


def keep_populated(edges: np.ndarray, at_or_below: np.ndarray, spec: PlanSpec, dim: int) -> np.ndarray:
    """`populated_edges` from counts: `at_or_below[i]` samples have sizes `<= edges[i]`
    (a size histogram gives them without the sizes: the streaming plan's case)."""
    at_or_below = np.asarray(at_or_below).tolist()
    need = np.ceil(MIX_BATCHES * batch_room(edges.astype(np.int64), spec, dim)).tolist()
    kept, last = [], 0
    for edge, count, enough in zip(edges.tolist(), at_or_below, need, strict=True):
        if count - last >= enough:
            kept.append(edge)
            last = count
    return np.asarray(kept, dtype=edges.dtype)


def rungs_of(sizes: np.ndarray, spec: PlanSpec, count: int) -> tuple[Rungs, ...]:
    """`count` rungs per size axis for `sizes` [N, D] (rounded up to the spec's multiple), placed where
    they pad least (`ladder`), then those too sparse to mix merged up as
    `populated_edges` merges buckets (the largest size is always a rung)."""
    sizes = round_up(as_size_matrix(sizes), spec.pad_to_multiple_of)
    if spec.max_tokens is not None and len(spec.max_tokens) == 1:  # one budget for every axis, as the sampler's
        spec = replace(spec, max_tokens=spec.max_tokens * sizes.shape[1])
    out = []
    for d in range(sizes.shape[1]):
        column = np.sort(sizes[:, d])
        rungs = ladder(*size_histogram(column, SIZE_GRID), count)
        kept = populated_edges(column, rungs, spec, d)
        if len(rungs) and (not kept.size or kept[-1] != rungs[-1]):
            kept = np.append(kept, rungs[-1])
        out.append(Rungs(tuple(kept.tolist()) or (0,), spec.pad_to_multiple_of))
    return tuple(out)


def fit_rungs(
    sizes: np.ndarray, spec: PlanSpec, max_shapes: int, shapes_of: Callable[[tuple[Rungs, ...]], int]
) -> tuple[tuple[Rungs, ...], int]:
    """The rungs (`rungs_of`) of the most rungs per axis whose epoch takes at most `max_shapes`
    shapes, as `shapes_of(rungs)` counts them (an epoch's plan on the world's ranks), and that count:
    over the limit only where even one rung exceeds it (many groups' short batches)."""
    count = fit_count(lambda k: shapes_of(rungs_of(sizes, spec, k)), max_shapes, max_shapes)
    rungs = rungs_of(sizes, spec, count)
    return rungs, shapes_of(rungs)


def order_samples(bucket_ids: np.ndarray, rng: np.random.Generator | None, sizes: np.ndarray) -> np.ndarray:
    """Indices sorted by bucket, largest first; random inside a bucket when `rng` is given, else
    by size (first axis), largest first."""
    n, dims = bucket_ids.shape
    base = rng.permutation(n) if rng is not None else np.argsort(-sizes[:, 0], kind="stable")
    if n == 0:
        return base.astype(index_dtype(n))
    if dims == 1:
        key = bucket_ids[base, 0]
    else:
        key = np.ravel_multi_index(tuple(bucket_ids[base].T), tuple(bucket_ids.max(axis=0) + 1))
    key = key.max() - key  # largest first
    if key.max() < np.iinfo(np.int16).max:
        key = key.astype(np.int16)  # a stable sort of small ints is a radix sort
    return base[np.argsort(key, kind="stable")].astype(index_dtype(n))


def cut_batches(rounded: np.ndarray, spec: PlanSpec) -> np.ndarray:
    """Batch start offsets into a sequence sorted largest-first (the sizes are rounded sizes).

    Returns the starts plus the final end, so batch `k` is `[starts[k], starts[k + 1])`.
    A sample over the budget on its own gets a batch of its own.
    """
    n = len(rounded)
    if spec.batch_size is not None:
        # the partial batch goes first, among the largest samples, where a long tail is sparse
        partial = n % spec.batch_size
        return np.unique(np.concatenate([[0], np.arange(partial, n, spec.batch_size), [n]]))
    budget = np.asarray(spec.max_tokens, dtype=np.int64)
    if budget.shape != (rounded.shape[1],):
        raise ValueError(f"max_tokens has {budget.size} values but samples have {rounded.shape[1]} size dimensions")
    cap = spec.max_batch_size or n
    starts = [0]
    i = 0
    if spec.cost == "padded" and rounded.shape[1] == 1:
        # Sorted largest-first: a batch starting at i has max size rounded[i], so it holds
        # budget // rounded[i] samples (capped). One O(1) step per batch.
        room = batch_room(rounded[:, 0].astype(np.int64), spec, 0).tolist()
        while i < n:
            i = min(n, i + room[i])
            starts.append(i)
        return np.asarray(starts)
    if spec.cost in SUMMED:
        cumulative = np.vstack([np.zeros((1, rounded.shape[1]), np.int64), np.cumsum(rounded, axis=0)])
        while i < n:
            limit = n
            for d in range(rounded.shape[1]):
                limit = min(
                    limit, int(np.searchsorted(cumulative[:, d], cumulative[i, d] + budget[d], side="right")) - 1
                )
            i = min(max(limit, i + 1), i + cap)
            starts.append(i)
        return np.asarray(starts)
    # padded cost over several dimensions: grow a window until the budget breaks.
    window = 64
    while i < n:
        end = min(n, i + min(window, cap))
        block = rounded[i:end]
        counts = np.arange(1, len(block) + 1)[:, None]
        fits = np.all(np.maximum.accumulate(block, axis=0) * counts <= budget, axis=1)
        take = len(block) if fits.all() else int(np.argmin(fits))
        if take == len(block) and end < n and len(block) < cap:
            window *= 2
            continue
        i += max(take, 1)
        starts.append(i)
    return np.asarray(starts)


def cut_order(
    order: np.ndarray, rounded: np.ndarray, spec: PlanSpec, segment: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Samples `order` (largest first) and their batch starts: `cut_segment`'s cut (a group's: a
    `segment`; else `cut_batches`'), or under `cost="packed"` (one axis) the order rearranged so that
    each best-fit batch (`best_fit`) is a run."""
    if spec.cost != "packed" or rounded.shape[1] != 1 or spec.max_tokens is None:
        return order, (cut_segment if segment else cut_batches)(rounded[order], spec)
    perm, starts = best_fit(rounded[order, 0], int(spec.max_tokens[0]), spec.max_batch_size or len(order))
    return order[perm], starts


def best_fit(sizes: np.ndarray, budget: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Batches of summed `sizes` (largest first) within `budget` tokens and `cap` samples: each takes the
    largest samples left while they fit, then fills what remains with the smallest left (first-fit
    decreasing from both ends), so a row of `budget` tokens holds few empty ones. Returns the permutation
    that makes every batch a run, and the batches' starts (plus the end). A sample over the budget alone gets
    a batch of its own. One step per batch; a function of the sizes alone, so the same every epoch."""
    n = len(sizes)
    total = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    front, back, perm, starts = 0, n, [], [0]
    while front < back:
        end = int(np.searchsorted(total, total[front] + budget, side="right")) - 1
        end = min(max(end, front + 1), back, front + cap)
        room = budget - int(total[end] - total[front])
        low = back
        if room > 0 and end - front < cap:
            low = max(int(np.searchsorted(total, total[back] - room, side="left")), end, back - (cap - (end - front)))
        perm.extend(range(front, end))
        perm.extend(range(low, back))
        starts.append(len(perm))
        front, back = end, low
    return np.asarray(perm, dtype=np.int64), np.asarray(starts)


def cut_segment(rounded: np.ndarray, spec: PlanSpec) -> np.ndarray:
    """`cut_batches` of one segment's samples (a group's, a streamed window's: each leaves a short
    batch); with the shape policy's rungs, its short batch (the first under a fixed batch size, else the
    last) cut into powers of two, so that the segments' short batches take few shapes."""
    starts = cut_batches(rounded, spec)
    if spec.rungs is None or len(starts) < 2:
        return starts
    first = spec.batch_size is not None
    head = rounded[starts[0 if first else -2]].astype(np.int64)
    full = min(int(batch_room(head[d : d + 1], spec, d)[0]) for d in range(rounded.shape[1]))
    return power_of_two_tail(starts, full, first)


@dataclass(frozen=True)
class Plan:
    """One epoch's global batches: batch `k` is `order[bounds[k, 0]:bounds[k, 1]]`."""

    order: np.ndarray
    bounds: np.ndarray

    def __len__(self) -> int:
        return len(self.bounds)


def build_plan(
    sizes: np.ndarray,
    spec: PlanSpec,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    num_replicas: int = 1,
    drop_last: bool = False,
    rounded: tuple[np.ndarray, np.ndarray] | None = None,
    groups: np.ndarray | None = None,
    draw: WeightedDraw | None = None,
) -> Plan:
    """The global batches of one epoch, the same on every rank.

    Rank `r` takes batches `r, r + num_replicas, ...`. With `drop_last=False` the count is
    made a multiple of `num_replicas` by splitting batches (no sample dropped or repeated);
    with `drop_last=True` the surplus batches are dropped instead. With `groups` (one int
    per sample), a batch only holds samples of one group: e.g. the windows of one recording.
    With `draw`, the batches hold the indices it draws for `(seed, epoch)` (an index may
    repeat) instead of every sample once.
    """
    ids, rounded_sizes = rounded if rounded is not None else bucketize(sizes, spec)
    rng = np.random.default_rng([seed, epoch]) if shuffle else None
    chosen = None if draw is None else draw.sample(seed, epoch)
    if chosen is not None:  # plan the drawn samples: positions into them, mapped back below
        ids, rounded_sizes, sizes = ids[chosen], rounded_sizes[chosen], sizes[chosen]
        groups = None if groups is None else np.asarray(groups)[chosen]
    if groups is None:
        order, starts = cut_order(order_samples(ids, rng, sizes), rounded_sizes, spec, segment=False)
    else:
        _, group_ids = np.unique(groups, return_inverse=True)
        order = order_samples(np.column_stack([group_ids, ids]), rng, sizes)
        edges = np.flatnonzero(np.diff(group_ids[order])) + 1
        segments = zip(np.concatenate([[0], edges]), np.concatenate([edges, [len(order)]]), strict=True)
        parts = [(a, *cut_order(order[a:b], rounded_sizes, spec)) for a, b in segments]
        order = np.concatenate([part for _, part, _ in parts]) if parts else order
        starts = np.unique(np.concatenate([cut + a for a, _, cut in parts]))
    if chosen is not None:
        order = chosen[order].astype(index_dtype(len(draw.weights)))
    bounds = np.stack([starts[:-1], starts[1:]], axis=1)
    if spec.batch_size is not None and drop_last:
        bounds = bounds[bounds[:, 1] - bounds[:, 0] == spec.batch_size]
    if rng is not None:
        bounds = bounds[rng.permutation(len(bounds))]
    return Plan(order, deal(bounds, num_replicas, drop_last))
