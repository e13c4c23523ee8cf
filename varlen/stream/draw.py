"""An epoch's draw of a streamed source, from its size index alone: how many samples each (window, bucket)
stratum gives (:func:`stratum_draw`), and which of a window's samples fill them (:func:`draw_window`).

The in-memory draw (:class:`~varlen.batching.weights.WeightedDraw`) fixes a count per size bucket from the
weights and draws only which samples fill it. A streamed source does the same per *stratum* ``(window,
bucket)`` of its fixed layout (:class:`~varlen.stream.plan.StreamLayout`): a stratum's weight is the sum
of its samples' draw weights (its sample count when unweighted), read from the index's per-chunk
``weight_histograms`` and the boundary chunks' ``weights`` (:func:`window_weights`), never from every
sample. The counts are :func:`~varlen.batching.weights.stratum_counts` over the strata in window order,
capped at each stratum's samples without replacement, so a window's count is within one sample of its
share, and a window's batch count follows from its counts alone (:func:`~varlen.stream.plan.batch_counts`).

Which samples: in a window, each bucket's ``count`` samples, with every random number a counter-based draw
of ``(seed, epoch, sample or window)`` (:mod:`varlen.draws`), so any rank, lane or resume that reads the
window draws the same:

* without replacement: the ``count`` samples of smallest key ``E / w`` (``E`` a standard exponential of
  the sample's id; weight 0: never), Efraimidis and Spirakis' weighted sampling, uniform when unweighted;
* with replacement: ``count`` inverse-CDF draws over the bucket's cumulative weights.

A source is drawn with replacement when it serves more samples than it holds (a small source weighted up)
or when its samples are weighted (``sample_weights``: a weight is then a sample's expected count, as in the
in-memory sampler), without otherwise: an unweighted source served at most its size repeats no sample. (The
in-memory mixture draws every source with replacement: the streamed one repeats less.) An index is weighted
when it has ``weight_histograms(axis)`` and ``weights(chunk)`` that return arrays (a missing method or None:
unweighted).
"""

from __future__ import annotations

import numpy as np

from varlen.batching.weights import stratum_counts
from varlen.draws import counter_bits, unit_floats
from varlen.errors import DataError
from varlen.stream.plan import SizeIndexLike, StreamLayout, chunk_sizes, window_totals

__all__ = ["draw_window", "index_weight_histograms", "source_counts", "stratum_draw", "window_weights"]


def index_weight_histograms(index: SizeIndexLike, axis: int) -> np.ndarray | None:
    """The index's ``[chunks, grid bins]`` draw-weight sums, checked; None when it is unweighted."""
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
    """``[windows, B]`` float64: the draw weights of each window's samples per bucket (full chunks from
    ``weight_histograms``, the pieces' boundary chunks from their samples' sizes and weights)."""
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
    """``[S]`` samples each source serves of ``num_samples``: its share, rounded along the sources so
    that they sum to ``num_samples`` exactly."""
    shares = np.asarray(shares, np.float64)
    return stratum_counts(shares, int(num_samples)) if num_samples > 0 else np.zeros(len(shares), np.int64)


def stratum_draw(
    totals: np.ndarray, histograms: np.ndarray, count: int, weighted: bool = False
) -> tuple[np.ndarray, bool]:
    """``[windows, B]`` samples each (window, bucket) stratum gives of a source's ``count``, in proportion
    to its weight ``totals``, and whether the source is drawn with replacement: when ``count`` is over its
    samples, or its samples are ``weighted`` (``sample_weights``: as the in-memory sampler draws them, so a
    weight is a sample's expected count, not a mere order). Without replacement a stratum gives at most its
    samples."""
    histograms = np.asarray(histograms, np.int64)
    replacement = weighted or count > int(histograms.sum())
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
    """Positions into a window's samples (their ``ids`` in the source, ``bucket`` and draw ``weights``,
    None: equal) of the ``counts[b]`` drawn from each bucket ``b``: grouped by bucket, ascending, each
    bucket's in draw order (see the module docstring)."""
    n = len(ids)
    values = np.ones(n) if weights is None else np.asarray(weights, np.float64)
    counts = np.asarray(counts, np.int64)
    if replacement:
        return _with_replacement(bucket, values, counts, seed, epoch, source, window)
    bits = counter_bits(f"stream draw, source {source}", seed, epoch, np.asarray(ids, np.int64), np.zeros(1))
    exponential = -np.log1p(-unit_floats(bits[:, 0]))
    keys = np.divide(exponential, values, out=np.full(n, np.inf), where=values > 0)
    order = np.lexsort((keys, bucket))
    first = np.searchsorted(bucket[order], np.arange(len(counts)))
    rank = np.arange(n) - first[bucket[order]]
    return order[rank < counts[bucket[order]]]


def _with_replacement(bucket, values, counts, seed, epoch, source, window) -> np.ndarray:
    """Each bucket's ``counts[b]`` inverse-CDF draws over its members' cumulative weights."""
    members = np.argsort(bucket, kind="stable")
    buckets = len(counts)
    starts = np.concatenate([[0], np.cumsum(np.bincount(bucket, minlength=buckets))])
    totals = np.bincount(bucket, values, minlength=buckets)
    cumulative = np.cumsum(values[members] / np.where(totals > 0, totals, 1.0)[bucket[members]])
    slot_bucket = np.repeat(np.arange(buckets), counts)
    if len(slot_bucket) and (totals[slot_bucket] <= 0).any():
        raise RuntimeError(f"window {window}: a bucket without weight was asked for samples")
    base = np.concatenate([[0.0], cumulative])[starts]
    low, high = base[slot_bucket], base[slot_bucket + 1]
    name = f"stream draw with replacement, source {source}"
    uniforms = unit_floats(counter_bits(name, seed, epoch, np.array([window]), np.arange(len(slot_bucket))))[0]
    picks = np.searchsorted(cumulative, low + uniforms * (high - low), side="right")
    positive = np.flatnonzero(values[members] > 0)  # rounding may land past a bucket's last weighted member
    last = positive[np.maximum(np.searchsorted(positive, starts[1:], side="left") - 1, 0)] if positive.size else 0
    return members[np.minimum(picks, np.asarray(last)[slot_bucket] if positive.size else picks)]
