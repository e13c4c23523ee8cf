"""An epoch's draw of a streamed source, from its size index alone: how many samples each (window, bucket)
stratum gives (`stratum_draw`), and which of a window's samples fill them (`draw_window`).

The in-memory draw (`WeightedDraw`) fixes a count per size bucket from the
weights and draws only which samples fill it. A streamed source does the same per *stratum* `(window,
bucket)` of its fixed layout (`StreamLayout`): a stratum's weight is the sum
of its samples' draw weights (its sample count when unweighted), read from the index's per-chunk
`weight_histograms` and the boundary chunks' `weights` (`window_weights`), never from every
sample. The counts are `stratum_counts` over the strata in window order,
capped at each stratum's samples without replacement, so a window's count is within one sample of its
share, and a window's batch count follows from its counts alone (`batch_counts`).

Which samples: in a window, each bucket's `count` samples, with every random number a counter-based draw
of `(seed, epoch, sample or window)` (`varlen.prepare.draws`), so any rank, lane or resume that reads the
window draws the same:

* without replacement: the `count` samples of smallest key `E / w` (`E` a standard exponential of
  the sample's id; weight 0: never), Efraimidis and Spirakis' weighted sampling, uniform when unweighted;
* with replacement: `count` inverse-CDF draws over the bucket's cumulative weights.

A source is drawn with replacement by the in-memory sampler's rule
(`draws_with_replacement`): when it serves more samples than it holds (a small
source weighted up) or when its samples are weighted (`sample_weights`: a weight is then a sample's expected
count), without otherwise: an unweighted source served at most its size repeats no sample. Which samples is
the same draw as in memory (`draw_strata`), a window's buckets its strata. An
index is weighted when it has `weight_histograms(axis)` and `weights(chunk)` that return arrays (a missing
method or None: unweighted).
"""

from __future__ import annotations

import numpy as np

from varlen.batching.weights import draw_strata, draws_with_replacement, stratum_counts
from varlen.errors import DataError
from varlen.stream.index_checks import SizeIndexLike, chunk_sizes
from varlen.stream.layout import StreamLayout, window_totals

__all__ = ["draw_window", "index_weight_histograms", "source_counts", "stratum_draw", "window_weights"]


def index_weight_histograms(index: SizeIndexLike, axis: int) -> np.ndarray | None:
    """The index's `[chunks, grid bins]` draw-weight sums, checked; None when it is unweighted."""
    method = getattr(index, "weight_histograms", None)
    values = None if method is None else method(axis)
    if values is None:
        return None
    values = np.asarray(values, np.float64)
    if values.shape != (index.num_chunks, len(index.edges)):
        raise DataError(
            f"size index {index.key}: weight histograms of shape {values.shape}, its histograms are "
            f"{(index.num_chunks, len(index.edges))}: rebuild the weights"
        )
    if not np.isfinite(values).all() or (values < 0).any():
        raise DataError(f"size index {index.key}: its weight histograms hold a negative or non-finite sum")
    return values


def window_weights(index: SizeIndexLike, plan: StreamLayout, weight_histograms: np.ndarray) -> np.ndarray:
    """`[windows, B]` float64: the draw weights of each window's samples per bucket (full chunks from
    `weight_histograms`, the pieces' boundary chunks from their samples' sizes and weights)."""
    histograms = index.histograms(plan.axis)
    samples = np.asarray(index.samples_per_chunk, np.int64)
    buckets = len(plan.rounded)

    def part(s: int) -> np.ndarray:
        chunk, start, stop = int(plan.seg_chunk[s]), int(plan.seg_start[s]), int(plan.seg_stop[s])
        bucket = plan.bin_bucket[np.searchsorted(index.edges, chunk_sizes(index, chunk, plan.axis, histograms))]
        weights = np.asarray(index.weights(chunk), np.float64)
        return np.bincount(bucket[start:stop], weights[start:stop], minlength=buckets)

    segments = (plan.seg_chunk, plan.seg_start, plan.seg_stop)
    return window_totals(segments, plan.window_segments, samples, weight_histograms, plan.bin_bucket, part, np.float64)


def source_counts(shares: np.ndarray, num_samples: int) -> np.ndarray:
    """`[S]` samples each source serves of `num_samples`: its share, rounded along the sources so
    that they sum to `num_samples` exactly."""
    shares = np.asarray(shares, np.float64)
    return stratum_counts(shares, int(num_samples)) if num_samples > 0 else np.zeros(len(shares), np.int64)


def stratum_draw(
    totals: np.ndarray, histograms: np.ndarray, count: int, weighted: bool = False
) -> tuple[np.ndarray, bool]:
    """`[windows, B]` samples each (window, bucket) stratum gives of a source's `count`, in proportion
    to its weight `totals`, and whether the source is drawn with replacement: when `count` is over its
    samples, or its samples are `weighted` (`sample_weights`: as the in-memory sampler draws them, so a
    weight is a sample's expected count, not a mere order). Without replacement a stratum gives at most its
    samples."""
    histograms = np.asarray(histograms, np.int64)
    replacement = draws_with_replacement(count, int(histograms.sum()), weighted)
    if count <= 0 or not (totals > 0).any():
        return np.zeros_like(histograms), replacement
    flat = np.asarray(totals, np.float64).reshape(-1)
    counts = stratum_counts(flat, int(count), None if replacement else histograms.reshape(-1))
    return counts.reshape(histograms.shape), replacement


def draw_window(
    ids: np.ndarray,
    bucket: np.ndarray,
    weights: np.ndarray | None,
    counts: np.ndarray,
    replacement: bool,
    *,
    seed: int,
    epoch: int,
    source: int,
    window: int,
) -> np.ndarray:
    """Positions into a window's samples (their `ids` in the source, `bucket` and draw `weights`,
    None: equal) of the `counts[b]` drawn from each bucket `b`, grouped by bucket, ascending: the
    in-memory plan's draw (`draw_strata`), a bucket its stratum, the window
    its draws' salt."""
    values = np.ones(len(ids)) if weights is None else np.asarray(weights, np.float64)
    name = f"stream draw, source {source}"
    return draw_strata(ids, bucket, values, counts, replacement, name=name, seed=seed, epoch=epoch, salt=window)
