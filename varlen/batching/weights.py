"""Weighted draws of an epoch's samples, stratified so that the plan's shape never moves.

An epoch of a weighted sampler serves ``num_samples`` indices drawn in proportion to per-sample
``weights``. A plain multinomial draw would change how many samples land in each size bucket
from one epoch to the next, so the batch cuts, and ``len()``, would move (Lightning reads
``len()`` once; ranks must agree on it). So the draw is stratified: a *stratum* is a size bucket
(and a group, when batches keep groups apart, and a share id, a mixture's source, when batches mix them),
and each stratum's count is fixed once, from the
weights: ``num_samples * stratum weight / total weight``, rounded along the strata in their order
(a group's buckets one after the other, groups in order) so that every run of consecutive strata,
a group or a source made of groups, gets its own share within one sample, and the counts sum to
``num_samples``. Only *which* samples fill each stratum is drawn every epoch:

* with replacement: each of a stratum's draws picks a sample with probability ``w / stratum
  weight`` (inverse-CDF on the stratum's cumulative weights), so a sample's expected count per
  epoch is ``num_samples * w / total``, as in a multinomial draw;
* without replacement: the stratum's ``count`` samples of smallest ``E / w`` (``E`` a standard
  exponential draw per sample), which is successive weighted sampling without replacement
  (Efraimidis and Spirakis), what torch's ``WeightedRandomSampler(replacement=False)`` does.
  Counts are then capped at the stratum's number of nonzero weights and the excess shared out
  over the other strata in proportion to their weight, so ``num_samples`` equal to the nonzero
  weights serves every one of them once.

Every random number is a counter-based draw of ``(seed, epoch, slot)`` (:mod:`varlen.draws`):
the draw is a pure, vectorised function of the weights, the counts, the seed and the epoch, so a
resumed run, any rank and any world size see the same samples. The price of fixed counts: a
stratum's, a group's or a source's count departs from its share by less than one sample per
epoch, always the same way (one whose expected count is far below one sample may get none).
Rounding each stratum on its own (largest remainder over all strata) would keep each within one
sample too, but the errors of a source's many buckets add up, in one direction: a source asked
for 10 samples an epoch could get none.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from varlen.draws import counter_bits, unit_floats

__all__ = ["WeightedDraw", "check_weights", "strata_of", "stratum_counts"]


def check_weights(weights, num_items: int) -> np.ndarray:
    """``weights`` as float64 ``[num_items]``, or ValueError naming the first offending index."""
    values = np.asarray(weights, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"weights must be one value per sample, got shape {values.shape}")
    if len(values) != num_items:
        raise ValueError(f"weights has {len(values)} values but there are {num_items} samples")
    for bad, what in ((np.isnan(values), "NaN"), (np.isinf(values), "infinite"), (values < 0, "negative")):
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(f"weights must be finite and >= 0: weight {first} is {what} ({values[first]})")
    if not values.any():
        raise ValueError(f"weights are all zero ({num_items} samples): there is nothing to draw")
    return values


def strata_of(bucket_ids: np.ndarray, groups: np.ndarray | None = None, shares: np.ndarray | None = None) -> np.ndarray:
    """Stratum ``0 .. S - 1`` of each sample: its bucket ids ``[N, D]``, group and share id (a mixture's
    source), numbered in sorted order (group, then share id, then bucket), so that a group's or a share id's
    strata are consecutive and their rounded counts add up to their share within one sample."""
    keys = bucket_ids.astype(np.int64)
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    leading = [np.unique(ids, return_inverse=True)[1].reshape(-1) for ids in (groups, shares) if ids is not None]
    if leading:
        keys = np.column_stack([*leading, keys])
    if keys.shape[1] > 1:
        keys = np.ravel_multi_index(tuple(keys.T), tuple(keys.max(axis=0) + 1))[:, None]
    return np.unique(keys[:, 0], return_inverse=True)[1].reshape(-1)


def stratum_counts(totals: np.ndarray, num_samples: int, caps: np.ndarray | None = None) -> np.ndarray:
    """How many of ``num_samples`` each stratum gives, in proportion to its weight ``totals``; at most
    ``caps`` each when given (a capped stratum's excess is shared out over the others in proportion to
    their weight).

    The shares are rounded along the strata: the counts of strata ``0..k`` are the rounded sum of
    their shares, so any run of consecutive strata (a group's buckets, a source's groups) gets its
    summed share within one sample, and each stratum ``floor`` or ``ceil`` of its own (never over
    its cap, never one of zero weight)."""
    share = num_samples * totals / totals.sum()
    if caps is not None:
        fixed = np.zeros(len(totals), dtype=bool)
        while (share > caps).any():  # at most one pass per stratum
            fixed |= share > caps
            share[fixed] = caps[fixed]
            free = ~fixed & (totals > 0)
            share[free] = (num_samples - caps[fixed].sum()) * totals[free] / totals[free].sum()
    running = np.floor(np.cumsum(share) + 0.5).astype(np.int64)
    running[-1] = num_samples  # the float sum of the shares may miss it by a rounding error
    counts = np.diff(running, prepend=0)
    if caps is not None:
        counts = np.minimum(counts, caps)  # float error only: a share never exceeds its (whole) cap
    counts[totals <= 0] = 0
    short = num_samples - int(counts.sum())  # float error only, as above
    if short:
        room = np.flatnonzero((totals > 0) & (counts < (caps if caps is not None else np.iinfo(np.int64).max)))
        counts[room[np.argsort(counts[room] - share[room], kind="stable")[:short]]] += 1
    return counts


@dataclass(frozen=True, eq=False)
class WeightedDraw:
    """One epoch's weighted, stratified draw of sample indices (see the module docstring).

    Build it with :meth:`build`; :meth:`sample` gives the indices of ``(seed, epoch)``.

    Attributes:
        weights: ``[N]`` validated weights.
        strata: ``[N]`` stratum of each sample (0 .. S - 1).
        counts: ``[S]`` samples each stratum gives every epoch (they sum to ``num_samples``).
        replacement: draw with replacement (a sample may come back within an epoch).
    """

    weights: np.ndarray
    strata: np.ndarray
    counts: np.ndarray
    replacement: bool
    members: np.ndarray  # sample indices sorted by stratum
    starts: np.ndarray  # [S + 1]: stratum b is members[starts[b]:starts[b + 1]]
    cumulative: np.ndarray  # members' weights over their stratum's, summed along members

    @classmethod
    def build(cls, weights, strata: np.ndarray, num_samples: int | None, replacement: bool) -> WeightedDraw:
        """Validate ``weights`` (one per sample) and fix each stratum's count.

        ``num_samples`` defaults to the number of samples; without replacement it may not exceed
        the number of nonzero weights.
        """
        values = check_weights(weights, len(strata))
        num_samples = len(values) if num_samples is None else num_samples
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be a whole number >= 1, got {num_samples!r}")
        nonzero = np.bincount(strata, weights=values > 0).astype(np.int64)
        if not replacement and num_samples > nonzero.sum():
            raise ValueError(
                f"replacement=False draws each sample at most once: num_samples={num_samples} exceeds "
                f"the {int(nonzero.sum())} samples of nonzero weight"
            )
        totals = np.bincount(strata, weights=values)
        counts = stratum_counts(totals, int(num_samples), None if replacement else nonzero)
        members = np.argsort(strata, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(strata, minlength=len(counts)))])
        cumulative = np.cumsum(values[members] / np.where(totals > 0, totals, 1.0)[strata[members]])
        return cls(values, np.asarray(strata), counts, bool(replacement), members, starts, cumulative)

    @property
    def num_samples(self) -> int:
        return int(self.counts.sum())

    def key(self) -> str:
        """A digest of what decides the draws (weights, counts, replacement), for saved states."""
        digest = hashlib.blake2b(digest_size=8)
        for part in (self.weights, self.strata.astype(np.int64), self.counts, np.asarray([self.replacement])):
            digest.update(np.ascontiguousarray(part).tobytes())
        return digest.hexdigest()

    def sample(self, seed: int, epoch: int) -> np.ndarray:
        """The ``num_samples`` indices drawn for ``epoch``, grouped by stratum (unordered inside)."""
        if self.replacement:
            return self.members[self._with_replacement(seed, epoch)]
        return self._without_replacement(seed, epoch)

    def _with_replacement(self, seed: int, epoch: int) -> np.ndarray:
        """Positions into ``members``: each stratum's draws, by inverse CDF of its normalised weights."""
        cumulative = self.cumulative
        slot_stratum = np.repeat(np.arange(len(self.counts)), self.counts)
        base = np.concatenate([[0.0], cumulative])[self.starts]  # cumulative weight before each stratum
        low, high = base[slot_stratum], base[slot_stratum + 1]
        uniforms = unit_floats(counter_bits("weighted draw", seed, epoch, np.arange(len(slot_stratum)), np.zeros(1)))
        # strata hold disjoint, increasing ranges of ``cumulative``: sorted targets stay in their
        # stratum's block of slots, and a sorted search is several times faster
        picks = np.searchsorted(cumulative, np.sort(low + uniforms[:, 0] * (high - low)), side="right")
        # rounding may land one past a stratum's end: take its last sample of nonzero weight
        positive = np.flatnonzero(self.weights[self.members] > 0)
        last = positive[np.searchsorted(positive, self.starts[1:], side="left") - 1]
        return np.minimum(picks, last[slot_stratum])

    def _without_replacement(self, seed: int, epoch: int) -> np.ndarray:
        """Each stratum's ``count`` samples of smallest exponential key ``E / w`` (weight 0: never)."""
        members, starts = self.members, self.starts
        bits = counter_bits("weighted draw without replacement", seed, epoch, members, np.zeros(1))
        exponential = -np.log1p(-unit_floats(bits[:, 0]))
        weights = self.weights[members]
        keys = np.divide(exponential, weights, out=np.full(len(weights), np.inf), where=weights > 0)
        stratum = self.strata[members]
        order = np.lexsort((keys, stratum))  # members are sorted by stratum: positions stay in it
        rank = np.arange(len(order)) - starts[stratum[order]]
        return members[order[rank < self.counts[stratum[order]]]]
