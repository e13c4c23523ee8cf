"""Weighted draws of an epoch's samples, stratified so that the plan's shape never moves.

An epoch of a weighted sampler serves `num_samples` indices drawn in proportion to per-sample
`weights`. A plain multinomial draw would change how many samples land in each size bucket
from one epoch to the next, so the batch cuts, and `len()`, would move (Lightning reads
`len()` once; ranks must agree on it). So the draw is stratified: a *stratum* is a size bucket
(and a group, when batches keep groups apart, and a share id, a mixture's source, when batches mix them),
and each stratum's count is fixed once, from the
weights: `num_samples * stratum weight / total weight`, rounded along the strata in their order
(a group's buckets one after the other, groups in order) so that every run of consecutive strata,
a group or a source made of groups, gets its own share within one sample, and the counts sum to
`num_samples`. Only *which* samples fill each stratum is drawn every epoch:

* with replacement: each of a stratum's draws picks a sample with probability `w / stratum
  weight` (inverse-CDF on the stratum's cumulative weights), so a sample's expected count per
  epoch is `num_samples * w / total`, as in a multinomial draw;
* without replacement: the stratum's `count` samples of smallest `E / w` (`E` a standard
  exponential draw per sample), which is successive weighted sampling without replacement
  (Efraimidis and Spirakis), what torch's `WeightedRandomSampler(replacement=False)` does.
  Counts are then capped at the stratum's number of nonzero weights and the excess shared out
  over the other strata in proportion to their weight, so `num_samples` equal to the nonzero
  weights serves every one of them once.

Which one (`draws_with_replacement`, one rule for the in-memory and the streamed plans): a *source*
(a mixture's, or the whole split) is drawn with replacement when its samples are weighted (their nonzero
weights differ: a weight is then a sample's expected count, which only repeats can give) or when it serves
more samples than it holds; otherwise without, so a source served its own size serves each sample once.
`draw_strata` draws the samples of every stratum, for both plans.

Every random number is a counter-based draw of `(seed, epoch, slot)` (`varlen.prepare.draws`):
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

from varlen.prepare.draws import counter_bits, unit_floats

__all__ = ["WeightedDraw", "check_weights", "draw_strata", "draws_with_replacement", "strata_of", "stratum_counts"]


def check_weights(weights, num_items: int) -> np.ndarray:
    """`weights` as float64 `[num_items]`, or ValueError naming the first offending index."""
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
    """Stratum `0 .. S - 1` of each sample: its bucket ids `[N, D]`, group and share id (a mixture's
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
    """How many of `num_samples` each stratum gives, in proportion to its weight `totals`; at most
    `caps` each when given (a capped stratum's excess is shared out over the others in proportion to
    their weight).

    The shares are rounded along the strata: the counts of strata `0..k` are the rounded sum of
    their shares, so any run of consecutive strata (a group's buckets, a source's groups) gets its
    summed share within one sample, and each stratum `floor` or `ceil` of its own (never over
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


def draws_with_replacement(count: int, size: int, weighted: bool) -> bool:
    """Whether a source serving `count` samples of its `size` (nonzero weight) is drawn with replacement:
    when its samples are `weighted` (unequal weights: expected counts need repeats) or `count` is over
    `size`; otherwise without, so every sample comes at most once."""
    return bool(weighted) or int(count) > int(size)


def unequal(weights: np.ndarray) -> bool:
    """Whether the nonzero `weights` differ (a source's samples weighted, not merely included)."""
    positive = np.asarray(weights, np.float64)
    positive = positive[positive > 0]
    return bool(len(positive)) and not np.allclose(positive, positive[0], rtol=1e-12, atol=0)


def draw_strata(
    ids: np.ndarray,
    strata: np.ndarray,
    weights: np.ndarray,
    counts: np.ndarray,
    replacement: np.ndarray,
    *,
    name: str,
    seed: int,
    epoch: int,
    salt: int = 0,
) -> np.ndarray:
    """Positions into the samples (their `ids`, `strata`, draw `weights`) of the `counts[s]` drawn
    from each stratum `s`, by stratum, ascending: with `replacement[s]`, inverse-CDF draws over its
    members' cumulative weights (random numbers of `(name, seed, epoch, salt, slot)`); without, its
    `counts[s]` members of smallest `E / w` (`E` of `(name, seed, epoch, id)`: a sample's key is the
    same wherever it is drawn). Weight 0 is never drawn."""
    ids = np.asarray(ids, np.int64)
    strata = np.asarray(strata, np.int64)
    values = np.asarray(weights, np.float64)
    counts = np.asarray(counts, np.int64)
    replacement = np.broadcast_to(np.asarray(replacement, bool), counts.shape)
    members = np.argsort(strata, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(strata, minlength=len(counts)))])
    out = []
    again = replacement & (counts > 0)
    if again.any():
        out.append(
            _with_replacement(members, starts, strata, values, np.where(again, counts, 0), name, seed, epoch, salt)
        )
    once = ~replacement & (counts > 0)
    if once.any():
        out.append(_without_replacement(ids, strata, values, np.where(once, counts, 0), name, seed, epoch))
    drawn = np.concatenate(out) if out else np.zeros(0, np.int64)
    return drawn[np.argsort(strata[drawn], kind="stable")]


def _with_replacement(members, starts, strata, values, counts, name, seed, epoch, salt) -> np.ndarray:
    """Each stratum's `counts[s]` inverse-CDF draws over its members' normalised cumulative weights."""
    totals = np.bincount(strata, values, minlength=len(counts))
    slot_stratum = np.repeat(np.arange(len(counts)), counts)
    if (totals[slot_stratum] <= 0).any():
        raise ValueError("a stratum without weight was asked for samples")
    cumulative = np.cumsum(values[members] / np.where(totals > 0, totals, 1.0)[strata[members]])
    base = np.concatenate([[0.0], cumulative])[starts]  # cumulative weight before each stratum
    low, high = base[slot_stratum], base[slot_stratum + 1]
    bits = counter_bits(f"{name} with replacement", seed, epoch, np.array([salt]), np.arange(len(slot_stratum)))
    targets = low + unit_floats(bits)[0] * (high - low)
    picks = np.searchsorted(cumulative, targets, side="right")
    # rounding may land one past a stratum's end: take its last member of nonzero weight
    positive = np.flatnonzero(values[members] > 0)
    last = positive[np.maximum(np.searchsorted(positive, starts[1:], side="left") - 1, 0)]
    return members[np.minimum(picks, last[slot_stratum])]


def _without_replacement(ids, strata, values, counts, name, seed, epoch) -> np.ndarray:
    """Each stratum's `counts[s]` members of smallest exponential key `E / w` (weight 0: never)."""
    bits = counter_bits(f"{name} without replacement", seed, epoch, ids, np.zeros(1))
    keys = np.divide(-np.log1p(-unit_floats(bits[:, 0])), values, out=np.full(len(ids), np.inf), where=values > 0)
    order = np.lexsort((keys, strata))
    first = np.searchsorted(strata[order], np.arange(len(counts)))
    rank = np.arange(len(order)) - first[strata[order]]
    return order[rank < counts[strata[order]]]


@dataclass(frozen=True, eq=False)
class WeightedDraw:
    """One epoch's weighted, stratified draw of sample indices (see the module docstring).

    Build it with `build`; `sample` gives the indices of `(seed, epoch)`.

    Attributes:
        weights: `[N]` validated weights.
        strata: `[N]` stratum of each sample (0 .. S - 1).
        counts: `[S]` samples each stratum gives every epoch (they sum to `num_samples`).
        replacement: `[S]` whether each stratum is drawn with replacement (a sample may come back within
            an epoch): its source's, by `draws_with_replacement` unless the caller chose.
    """

    weights: np.ndarray
    strata: np.ndarray
    counts: np.ndarray
    replacement: np.ndarray

    @classmethod
    def build(
        cls,
        weights,
        strata: np.ndarray,
        num_samples: int | None,
        replacement: bool | None = None,
        sources: np.ndarray | None = None,
    ) -> WeightedDraw:
        """Validate `weights` (one per sample) and fix each stratum's count.

        `num_samples` defaults to the number of samples. `replacement`: None decides it per source
        (`sources`: a mixture's source of each sample; None: one source) by `draws_with_replacement`
        on the source's share of `num_samples`; True or False for every stratum. Without replacement a
        stratum gives at most its samples of nonzero weight.
        """
        values = check_weights(weights, len(strata))
        num_samples = len(values) if num_samples is None else num_samples
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be a whole number >= 1, got {num_samples!r}")
        strata = np.asarray(strata)
        nonzero = np.bincount(strata, weights=values > 0).astype(np.int64)
        totals = np.bincount(strata, weights=values)
        again = cls._replacement(values, strata, int(num_samples), replacement, sources, len(totals))
        if not again.any() and num_samples > nonzero.sum():
            raise ValueError(
                f"replacement=False draws each sample at most once: num_samples={num_samples} exceeds "
                f"the {int(nonzero.sum())} samples of nonzero weight"
            )
        caps = np.where(again, np.iinfo(np.int64).max // 4, nonzero)
        counts = stratum_counts(totals, int(num_samples), caps if not again.all() else None)
        return cls(values, strata, counts, again)

    @staticmethod
    def _replacement(values, strata, num_samples: int, chosen, sources, count: int) -> np.ndarray:
        """`[S]`: each stratum's replacement, `chosen` or its source's by the rule."""
        if chosen is not None:
            return np.full(count, bool(chosen))
        sources = np.zeros(len(values), np.int64) if sources is None else np.unique(sources, return_inverse=True)[1]
        source_of = np.zeros(count, np.int64)
        source_of[strata] = sources.reshape(-1)  # a stratum holds one source's samples (strata_of splits them)
        weight = np.bincount(sources, weights=values)
        size = np.bincount(sources, weights=values > 0)
        served = num_samples * weight / weight.sum()  # each source's share of the epoch
        again = [
            draws_with_replacement(int(np.ceil(served[s] - 1e-9)), int(size[s]), unequal(values[sources == s]))
            for s in range(len(weight))
        ]
        return np.asarray(again, bool)[source_of]

    @property
    def num_samples(self) -> int:
        return int(self.counts.sum())

    def key(self) -> str:
        """A digest of what decides the draws (weights, counts, replacement), for saved states."""
        digest = hashlib.blake2b(digest_size=8)
        for part in (self.weights, self.strata.astype(np.int64), self.counts, self.replacement):
            digest.update(np.ascontiguousarray(part).tobytes())
        return digest.hexdigest()

    def sample(self, seed: int, epoch: int) -> np.ndarray:
        """The `num_samples` indices drawn for `epoch`, grouped by stratum (unordered inside)."""
        ids = np.arange(len(self.weights))
        return draw_strata(
            ids, self.strata, self.weights, self.counts, self.replacement, name="weighted draw", seed=seed, epoch=epoch
        )
