"""The batch plan of a mixture of streamed sources (or of one weighted streamed source), from their size
indexes alone: pure functions of their inputs; `varlen.stream.mixture_epochs` keeps a rank's epochs.

What a run fixes (`mixture_layout`): the buckets, from the sources' summed histograms (one set, so
samples of several sources are costed and cut together), and each source's
`StreamLayout` on those buckets (its chunks in a seeded order, cut into one
piece per rank at sample granularity, so every rank holds about 1 / W of every source, then into windows),
unequalised. Then *units*, what a rank serves one after the other, each made of *parts* (a part is share
`index` of `of` of a source window's drawn samples, bucket by bucket):

* `per_source`: a unit per source window (one part: its whole draw), so each batch is from one source;
* `within_batch`: rank r's `J` units (the most windows any source has on r) are *mixed*: source s's
  window k feeds the units j with `floor(j K_s / J) == k` (its `K_s` windows on r spread over the J),
  its drawn samples shared between them bucket by bucket; a unit's samples are ordered and cut together.
  A small source's window feeds several units and is read by each of them (its sizes only: the chunks
  stay in the dataset's cache of decoded chunks).

What an epoch draws (`epoch_draw`, a function of the layout and the sources' shares alone): source s
serves `n_s` of `num_samples` (its share, rounded along the sources), drawn per (window, bucket)
stratum by `varlen.stream.draw` (with replacement when `n_s` is over its samples); a unit's
histogram is the sum of its parts'; its batch count follows from it (`batch_counts`)
and every rank serves the fullest rank's count, a shorter rank's units splitting their largest batches (as
the plan's windows do). A served batch is a descriptor `(unit, batch, lo, hi)`; its samples are global
ids over the sources one after the other (source s's sample i is `offsets[s] + i`, as
`SourceMixture` numbers them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from varlen.batching.plan import PlanSpec, cut_segment
from varlen.errors import DataError
from varlen.stream.draw import draw_window, source_counts, stratum_draw
from varlen.stream.index_checks import checked_histograms
from varlen.stream.layout import (
    WINDOW_BATCHES,
    SizeIndexLike,
    StreamLayout,
    batch_counts,
    buckets,
    check_spec,
    equalise_ranks,
    layout,
    order_and_cut,
    serve,
    window_samples,
)

__all__ = [
    "MIX_MODES",
    "MixtureEpoch",
    "MixtureLayout",
    "drawn_window",
    "epoch_draw",
    "mixture_layout",
    "read_unit",
    "unit_bounds",
    "unit_rows",
]

MIX_MODES = ("within_batch", "per_source")
# the random streams of an epoch: (seed, epoch, tag, rank or unit); apart from the plan's (0 to 3)
_UNITS, _SAMPLES, _BATCHES = 10, 11, 12


@dataclass(frozen=True, eq=False)
class MixtureLayout:
    """What a mixture's run fixes on `num_replicas` ranks (see the module docstring).

    Part p is share `part_index[p]` of `part_of[p]` of source `part_source[p]`'s window
    `part_window[p]`, in unit `part_unit[p]` (parts sorted by unit); unit u belongs to rank
    `unit_rank[u]`; rank r's units are `rank_units[r]:rank_units[r + 1]`.
    """

    sources: tuple[StreamLayout, ...]
    mix: str
    num_replicas: int
    offsets: np.ndarray  # [S + 1] global id of each source's first sample
    unit_rank: np.ndarray  # [U]
    rank_units: np.ndarray  # [W + 1]
    part_unit: np.ndarray  # [P]
    part_source: np.ndarray
    part_window: np.ndarray
    part_index: np.ndarray
    part_of: np.ndarray

    @property
    def spec(self) -> PlanSpec:
        return self.sources[0].spec

    @property
    def rounded(self) -> np.ndarray:
        return self.sources[0].rounded

    @property
    def num_units(self) -> int:
        return len(self.unit_rank)


@dataclass(frozen=True, eq=False)
class MixtureEpoch:
    """An epoch's draw on a `MixtureLayout`: a function of the sources' shares (and weights).

    `window_counts[s]`: `[windows of s, B]` samples source s's strata give; `unit_histograms`:
    `[U, B]` samples per bucket of each unit; `unit_counts` / `unit_splits`: its batches and
    those split to equalise the ranks, which all serve `batches_per_rank`."""

    shares: tuple[float, ...]
    source_samples: np.ndarray  # [S]
    replacement: np.ndarray  # [S] bool
    window_counts: tuple[np.ndarray, ...]
    unit_histograms: np.ndarray
    unit_counts: np.ndarray
    unit_splits: np.ndarray
    batches_per_rank: int


def mixture_layout(
    indexes: Sequence[SizeIndexLike],
    spec: PlanSpec,
    *,
    seed: int,
    num_replicas: int,
    mix: str = "within_batch",
    window_batches: int = WINDOW_BATCHES,
    axis: int = 0,
) -> MixtureLayout:
    """Lay a mixture's run out on `num_replicas` ranks (the same on every rank).

    Raises:
        DataError: an index is inconsistent, or the indexes' grids differ.
        ValueError: a bad `mix` or spec, or a source too small to give every rank a sample (named).
    """
    check_spec(spec)
    if mix not in MIX_MODES:
        raise ValueError(f"mix must be one of {MIX_MODES}, got {mix!r}")
    if not indexes:
        raise ValueError("a mixture needs at least one source")
    edges = np.asarray(indexes[0].edges)
    total = np.zeros(len(edges), np.int64)
    for index in indexes:
        if not np.array_equal(np.asarray(index.edges), edges):
            raise DataError(f"size index {index.key}: its grid differs from {indexes[0].key}'s; rebuild it")
        total += checked_histograms(index, axis)[1].sum(axis=0, dtype=np.int64)
    bucketing = buckets(total, edges, spec)
    layouts = []
    for s, index in enumerate(indexes):
        try:
            layouts.append(
                layout(index, spec, seed=seed, num_replicas=num_replicas, window_batches=window_batches, axis=axis,
                       bucketing=bucketing, equalise=False)
            )  # fmt: skip
        except ValueError as error:
            raise ValueError(f"source {s} (size index {index.key}): {error}") from error
    sizes = [int(lay.chunk_offsets[-1]) for lay in layouts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    units = _units(layouts, mix, num_replicas)
    return MixtureLayout(tuple(layouts), mix, num_replicas, offsets, *units)


def _units(layouts: Sequence[StreamLayout], mix: str, ranks: int):
    """`unit_rank, rank_units` and the parts (unit, source, window, index, of), sorted by unit."""
    parts: list[np.ndarray] = []  # [5, n] blocks: unit, source, window, index, of
    unit_rank, first = [], 0
    for rank in range(ranks):
        windows = [np.arange(lay.rank_windows[rank], lay.rank_windows[rank + 1]) for lay in layouts]
        if mix == "per_source":
            for s, mine in enumerate(windows):
                n = len(mine)
                parts.append(np.stack([first + np.arange(n), np.full(n, s), mine, np.zeros(n), np.ones(n)]))
                first += n
                unit_rank += [rank] * n
            continue
        slots = max(len(mine) for mine in windows)
        for s, mine in enumerate(windows):
            j = np.arange(slots)
            k = j * len(mine) // slots  # the window feeding slot j
            feeds = np.bincount(k, minlength=len(mine))
            index = j - (np.cumsum(feeds) - feeds)[k]
            parts.append(np.stack([first + j, np.full(slots, s), mine[k], index, feeds[k]]))
        first += slots
        unit_rank += [rank] * slots
    table = np.concatenate(parts, axis=1).astype(np.int64)
    table = table[:, np.lexsort((table[1], table[0]))]
    unit_rank = np.asarray(unit_rank, np.int64)
    rank_units = np.searchsorted(unit_rank, np.arange(ranks + 1))
    return (unit_rank, rank_units, *table)


def epoch_draw(
    plan: MixtureLayout,
    shares: Sequence[float],
    num_samples: int,
    totals: Sequence[np.ndarray | None] | None = None,
) -> MixtureEpoch:
    """An epoch's draw with the sources' `shares` (summing to 1) of `num_samples`; `totals[s]`: source
    s's `[windows, B]` draw weights per stratum (`window_weights`; None:
    unweighted, its sample counts).

    Raises:
        ValueError: a rank whose samples cannot be split to the fullest rank's batch count (named).
    """
    shares = tuple(float(x) for x in shares)
    if len(shares) != len(plan.sources):
        raise ValueError(f"{len(shares)} shares for {len(plan.sources)} sources")
    per_source = source_counts(np.asarray(shares), num_samples)
    counts, replacement = [], []
    for s, lay in enumerate(plan.sources):
        weights = None if totals is None else totals[s]
        drawn, again = stratum_draw(lay.window_histograms if weights is None else weights, lay.window_histograms,
                                    int(per_source[s]), weighted=weights is not None)  # fmt: skip
        counts.append(drawn)
        replacement.append(again)
    unit_hist = np.zeros((plan.num_units, len(plan.rounded)), np.int64)
    parts = _part_counts(plan, counts)
    np.add.at(unit_hist, plan.part_unit, parts)
    unit_counts = batch_counts(unit_hist, plan.rounded, plan.spec)
    splits, most = equalise_ranks(unit_hist.sum(axis=1), unit_counts, plan.unit_rank, plan.rank_units)
    return MixtureEpoch(
        shares, per_source, np.asarray(replacement), tuple(counts), unit_hist, unit_counts, splits, most
    )


def _part_counts(plan: MixtureLayout, counts: Sequence[np.ndarray]) -> np.ndarray:
    """`[P, B]` each part's samples per bucket: its share of its window's (cumulative rounding)."""
    whole = np.zeros((len(plan.part_unit), len(plan.rounded)), np.int64)
    for s, drawn in enumerate(counts):
        mine = plan.part_source == s
        whole[mine] = drawn[plan.part_window[mine]]
    index, of = plan.part_index[:, None], plan.part_of[:, None]
    return (index + 1) * whole // of - index * whole // of


def unit_rows(plan: MixtureLayout, draw: MixtureEpoch, rank: int, epoch: int, seed: int) -> np.ndarray:
    """Rank `rank`'s descriptors for `epoch`: `[T, 4]` int32 (unit, batch, 0, -1), its units in an
    order from `(seed, epoch, rank)`, each unit's batches one after the other."""
    units = np.arange(plan.rank_units[rank], plan.rank_units[rank + 1])
    units = units[np.random.default_rng([seed, epoch, _UNITS, rank]).permutation(len(units))]
    counts = draw.unit_counts[units] + draw.unit_splits[units]
    out = np.zeros((int(counts.sum()), 4), np.int32)
    out[:, 0] = np.repeat(units, counts)
    out[:, 1] = np.arange(len(out)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[:, 3] = -1
    return out


def _serve(plan: MixtureLayout, draw: MixtureEpoch, unit: int, epoch: int, seed: int, starts) -> np.ndarray:
    rng = np.random.default_rng([seed, epoch, _BATCHES, unit])
    return serve(starts, int(draw.unit_counts[unit]), int(draw.unit_splits[unit]), rng, f"unit {unit}")


def unit_bounds(plan: MixtureLayout, draw: MixtureEpoch, unit: int, epoch: int, seed: int) -> np.ndarray:
    """Unit `unit`'s batches `[n, 2]` in serving order from its histogram alone (no chunk read)."""
    largest_first = np.repeat(plan.rounded[::-1], draw.unit_histograms[unit][::-1])
    return _serve(plan, draw, unit, epoch, seed, cut_segment(largest_first[:, None], plan.spec))


def drawn_window(index: SizeIndexLike, plan: MixtureLayout, draw: MixtureEpoch, source: int, window: int,
                 epoch: int, seed: int):  # fmt: skip
    """Source `source`'s window `window`'s drawn samples of `epoch`: their global ids, sizes and
    buckets, grouped by bucket (ascending) in draw order, and each bucket's first position `[B + 1]`."""
    lay = plan.sources[source]
    weighted = getattr(index, "weights", None) is not None and index.weights(int(lay.seg_chunk[0])) is not None
    sizes, ids, bucket, *weights = window_samples(index, lay, window, weights=weighted)
    counts = draw.window_counts[source][window]
    picks = draw_window(
        ids, bucket, weights[0] if weighted else None, counts, bool(draw.replacement[source]),
        seed=seed, epoch=epoch, source=source, window=window,
    )  # fmt: skip
    starts = np.concatenate([[0], np.cumsum(counts)])
    return plan.offsets[source] + ids[picks], sizes[picks], bucket[picks], starts


def read_unit(
    indexes: Sequence[SizeIndexLike],
    plan: MixtureLayout,
    draw: MixtureEpoch,
    unit: int,
    epoch: int,
    seed: int,
    drawn: Callable[[int, int], tuple] | None = None,
):
    """Unit `unit`'s samples as global ids in the order of `epoch`, its batches `[n, 2]` (offsets
    into them, in serving order) and the samples' sizes (in the ids' order); `drawn(source, window)`:
    `drawn_window` (a caller's cache).

    Raises:
        DataError: a chunk's sizes disagree with the index, naming the chunk.
    """
    if drawn is None:
        drawn = lambda s, w: drawn_window(indexes[s], plan, draw, s, w, epoch, seed)  # noqa: E731
    first, last = np.searchsorted(plan.part_unit, [unit, unit + 1])
    ids, sizes, buckets_ = [], [], []
    for p in range(first, last):
        source, window = int(plan.part_source[p]), int(plan.part_window[p])
        index, of = int(plan.part_index[p]), int(plan.part_of[p])
        got_ids, got_sizes, got_bucket, starts = drawn(source, window)
        counts = np.diff(starts)
        low, high = starts[:-1] + index * counts // of, starts[:-1] + (index + 1) * counts // of
        take = np.concatenate([np.arange(a, b) for a, b in zip(low.tolist(), high.tolist(), strict=True)] or [[]])
        take = take.astype(np.int64)
        ids.append(got_ids[take]), sizes.append(got_sizes[take]), buckets_.append(got_bucket[take])
    ids, sizes, bucket = np.concatenate(ids), np.concatenate(sizes), np.concatenate(buckets_)
    if not np.array_equal(np.bincount(bucket, minlength=len(plan.rounded)), draw.unit_histograms[unit]):
        raise DataError(f"unit {unit}: its drawn samples differ from those it was planned with")
    if len(ids) == 0:  # a unit of sources drawn none of this epoch
        return ids, _serve(plan, draw, unit, epoch, seed, np.zeros(1, np.int64)), sizes
    order, starts = order_and_cut(sizes, bucket, plan.sources[0], np.random.default_rng([seed, epoch, _SAMPLES, unit]))
    return ids[order], _serve(plan, draw, unit, epoch, seed, starts), sizes[order]
