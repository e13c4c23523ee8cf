"""Weighted draws in the sampler: frequencies, zeros, errors, fixed len(), resume, no replacement."""

from collections import Counter
from statistics import NormalDist

import numpy as np
import pytest

from varlen.batching import BucketBatchSampler, EpochBatchSampler, EpochIndices
from varlen.batching.weights import WeightedDraw, stratum_counts

RNG = np.random.default_rng(7)
LENGTHS = np.clip(RNG.lognormal(3.0, 0.8, 997), 1, 400).astype(int)
WEIGHTS = RNG.random(len(LENGTHS)) ** 2  # uneven: some samples weigh 100x others
WEIGHTS[::10] = 0.0
BUDGETS = [{"batch_size": 16}, {"max_tokens": 600}]


def epoch_of(sampler: BucketBatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def within_budget(batch: list[int], budget: dict) -> bool:
    if "batch_size" in budget:
        return len(batch) <= budget["batch_size"]
    return len(batch) == 1 or len(batch) * LENGTHS[batch].max() <= budget["max_tokens"]


def binomial_halfwidth(trials: int, p: np.ndarray, confidence: float) -> np.ndarray:
    """Half-width of the normal-approximation binomial interval of a count."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return z * np.sqrt(trials * p * (1 - p))


@pytest.mark.parametrize("budget", BUDGETS)
def test_served_frequencies_over_50_epochs_match_the_weights(budget: dict) -> None:
    sampler = BucketBatchSampler(LENGTHS, weights=WEIGHTS, seed=1, **budget)
    counts = np.zeros(len(LENGTHS), dtype=np.int64)
    for epoch in range(50):
        served = [i for batch in epoch_of(sampler, epoch) for i in batch]
        assert len(served) == len(LENGTHS)  # num_samples defaults to the dataset's size
        counts += np.bincount(served, minlength=len(LENGTHS))
    # 99% binomial intervals over each family (Bonferroni). Fixed counts per stratum make the
    # draw's variance at most the binomial's, so the intervals are if anything wide.
    trials = int(counts.sum())
    p = WEIGHTS / WEIGHTS.sum()
    assert np.all(np.abs(counts - trials * p) <= binomial_halfwidth(trials, p, 1 - 0.01 / len(p)))
    classes = np.random.default_rng(99).integers(0, 4, len(LENGTHS))  # e.g. labels, spread over all sizes
    class_p = np.bincount(classes, weights=p, minlength=4)
    class_counts = np.bincount(classes, weights=counts, minlength=4)
    assert np.all(np.abs(class_counts - trials * class_p) <= binomial_halfwidth(trials, class_p, 1 - 0.01 / 4))


@pytest.mark.parametrize("replacement", [True, False])
def test_a_weight_of_zero_is_never_served(replacement: bool) -> None:
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, weights=WEIGHTS, num_samples=500, replacement=replacement)
    zero = set(np.flatnonzero(WEIGHTS == 0).tolist())
    for epoch in range(20):
        served = {i for batch in epoch_of(sampler, epoch) for i in batch}
        assert not served & zero


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": np.r_[1.0, 1.0, 1.0, -2.0, np.ones(993)]}, "weight 3 is negative"),
        ({"weights": np.r_[np.ones(5), np.nan, np.ones(991)]}, "weight 5 is NaN"),
        ({"weights": np.r_[np.ones(8), np.inf, np.ones(988)]}, "weight 8 is infinite"),
        ({"weights": np.zeros(997)}, "weights are all zero"),
        ({"weights": np.ones(10)}, "weights has 10 values but there are 997 samples"),
        ({"weights": np.ones((997, 2))}, "one value per sample"),
        ({"weights": WEIGHTS, "replacement": False, "num_samples": 950}, "num_samples=950 exceeds the 897 samples"),
        ({"weights": WEIGHTS, "num_samples": 0}, "num_samples must be"),
        ({"weights": WEIGHTS, "shuffle": False}, "need shuffle=True"),
        ({"num_samples": 100, "shuffle": False}, "need shuffle=True"),
    ],
)
def test_bad_weights_raise_naming_the_problem(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BucketBatchSampler(LENGTHS, batch_size=8, **kwargs)


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("replacement", [True, False])
def test_len_is_the_same_on_every_rank_and_epoch_and_the_budget_holds(
    world_size: int, budget: dict, replacement: bool
) -> None:
    lengths = set()
    for epoch in range(4):
        served = []
        for rank in range(world_size):
            sampler = BucketBatchSampler(
                LENGTHS,
                weights=WEIGHTS,
                num_samples=700,
                replacement=replacement,
                num_replicas=world_size,
                rank=rank,
                seed=2,
                **budget,
            )
            batches = epoch_of(sampler, epoch)
            lengths |= {len(batches), len(sampler)}
            assert all(within_budget(b, budget) for b in batches)
            served += [i for b in batches for i in b]
        assert len(served) == 700
        if not replacement:
            assert len(set(served)) == 700
    assert len(lengths) == 1


@pytest.mark.parametrize("cost", ["padded", "sum"])
def test_two_size_axes_under_weights_keep_len_and_budget(cost: str) -> None:
    sizes = np.stack([LENGTHS, RNG.integers(1, 50, len(LENGTHS))], axis=1)
    sampler = BucketBatchSampler(sizes, max_tokens=(1000, 300), cost=cost, weights=WEIGHTS, seed=8)
    for epoch in range(4):
        batches = epoch_of(sampler, epoch)
        assert len(batches) == len(sampler)
        for b in batches:
            used = sizes[b].sum(0) if cost == "sum" else len(b) * sizes[b].max(0)
            assert len(b) == 1 or np.all(used <= [1000, 300])


def test_groups_stay_apart_under_weights() -> None:
    groups = RNG.integers(0, 5, len(LENGTHS))
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, groups=groups, weights=WEIGHTS, seed=3)
    sizes = {len(epoch_of(sampler, epoch)) for epoch in range(4)}
    assert sizes == {len(sampler)}
    assert all(len(set(groups[b])) == 1 for b in epoch_of(sampler, 5))


@pytest.mark.parametrize("world_size", [1, 3])
def test_resume_mid_epoch_replays_the_weighted_draw(world_size: int) -> None:
    def make(rank: int) -> BucketBatchSampler:
        return BucketBatchSampler(LENGTHS, max_tokens=500, weights=WEIGHTS, num_replicas=world_size, rank=rank, seed=4)

    for rank in range(world_size):
        full = epoch_of(make(rank), 3)
        sampler = make(rank)
        sampler.set_epoch(3)
        iterator = iter(sampler)
        head = [next(iterator) for _ in range(4)]
        fresh = make(rank)
        fresh.load_state_dict(sampler.state_dict())
        assert head + list(fresh) == full


def test_the_draw_depends_on_seed_and_epoch_only() -> None:
    a = BucketBatchSampler(LENGTHS, batch_size=8, weights=WEIGHTS, seed=5)
    b = BucketBatchSampler(LENGTHS, batch_size=8, weights=WEIGHTS, seed=5)
    assert epoch_of(a, 2) == epoch_of(b, 2)
    drawn = [Counter(i for batch in epoch_of(a, e) for i in batch) for e in range(2)]
    assert drawn[0] != drawn[1]  # another epoch draws other samples, not only other batches


def test_without_replacement_serves_no_index_twice_and_all_nonzero_at_full_size() -> None:
    nonzero = int((WEIGHTS > 0).sum())
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, weights=WEIGHTS, num_samples=nonzero, replacement=False)
    for epoch in range(5):
        served = [i for batch in epoch_of(sampler, epoch) for i in batch]
        assert sorted(served) == np.flatnonzero(WEIGHTS > 0).tolist()
    partial = BucketBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS, num_samples=300, replacement=False)
    for epoch in range(5):
        served = [i for batch in epoch_of(partial, epoch) for i in batch]
        assert len(served) == len(set(served)) == 300


def test_without_replacement_favours_heavy_samples() -> None:
    """Successive weighted draws: the heaviest fifth is served far more often than the lightest."""
    sampler = BucketBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS, num_samples=200, replacement=False)
    counts = np.zeros(len(LENGTHS))
    for epoch in range(30):
        counts += np.bincount([i for b in epoch_of(sampler, epoch) for i in b], minlength=len(LENGTHS))
    positive = np.flatnonzero(WEIGHTS > 0)
    ranked = positive[np.argsort(WEIGHTS[positive])]
    fifth = len(ranked) // 5
    assert counts[ranked[-fifth:]].mean() > 5 * counts[ranked[:fifth]].mean()


def test_num_samples_without_weights_draws_uniformly() -> None:
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, num_samples=2000, seed=6)
    counts = np.zeros(len(LENGTHS))
    for epoch in range(10):
        served = [i for b in epoch_of(sampler, epoch) for i in b]
        assert len(served) == 2000
        counts += np.bincount(served, minlength=len(LENGTHS))
    assert counts.min() > 0 and abs(counts.mean() - 20000 / len(LENGTHS)) < 1e-9


def test_equal_weights_without_replacement_serve_every_sample_once() -> None:
    sampler = BucketBatchSampler(LENGTHS, max_tokens=600, weights=np.ones(len(LENGTHS)), replacement=False)
    assert sorted(i for b in epoch_of(sampler, 1) for i in b) == list(range(len(LENGTHS)))


def test_epoch_sampler_takes_weights_and_carries_the_epoch() -> None:
    sampler = EpochBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS, seed=1)
    batches = epoch_of(sampler, 2)
    assert all(isinstance(b, EpochIndices) and b.epoch == 2 for b in batches)
    reference = BucketBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS, seed=1)
    assert [list(b) for b in batches] == epoch_of(reference, 2)


def test_a_state_of_other_weights_is_refused_inside_its_epoch() -> None:
    """Its draw cannot be told from the state: refused naming both ways out; at the epoch's start, nothing of
    the draw was served, and the epoch starts with the new weights."""
    saved = BucketBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS)
    start = saved.state_dict()
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(ValueError, match="other weights.*saved value.*VARLEN_RESUME=next_epoch"):
        BucketBatchSampler(LENGTHS, batch_size=16, weights=WEIGHTS + 1).load_state_dict(state)
    with pytest.raises(ValueError, match="other weights"):
        BucketBatchSampler(LENGTHS, batch_size=16).load_state_dict(state)
    fresh = BucketBatchSampler(LENGTHS, batch_size=16)
    fresh.load_state_dict(start)
    assert list(fresh) == list(BucketBatchSampler(LENGTHS, batch_size=16))


def test_stratum_counts_are_proportional_capped_and_sum_to_the_total() -> None:
    assert stratum_counts(np.array([1.0, 2.0, 1.0]), 8).tolist() == [2, 4, 2]
    assert stratum_counts(np.array([1.0, 1.0, 1.0]), 10).tolist() == [3, 4, 3]  # 3.33, 6.67, 10 rounded
    assert stratum_counts(np.array([0.0, 1.0, 3.0]), 5).tolist() == [0, 1, 4]  # 1.25 / 3.75: 3.75 rounds up
    capped = stratum_counts(np.array([100.0, 1.0, 1.0]), 101, caps=np.array([1, 100, 100]))
    assert capped.tolist() == [1, 50, 50]


def test_stratum_counts_keep_every_run_of_strata_within_one_sample_of_its_share() -> None:
    """A source of many small buckets gets its share (one largest-remainder pass over all strata
    rounded each bucket of the small source down: 0 of 10.2 asked)."""
    totals = np.concatenate([np.full(40, 0.0005 / 40), np.full(60, 0.9995 / 60)])
    counts = stratum_counts(totals, 20_400)
    assert counts[:40].sum() == 10 and counts.sum() == 20_400
    rng = np.random.default_rng(0)
    for _ in range(200):
        totals = rng.random(50) * (rng.random(50) < 0.8)
        if not totals.any():
            continue
        n = int(rng.integers(1, 500))
        caps = rng.integers(0, 40, 50) if rng.random() < 0.5 else None
        if caps is not None:
            caps[totals > 0] = np.maximum(caps[totals > 0], 1)
            n = min(n, int(caps[totals > 0].sum()))
        counts = stratum_counts(totals, n, caps)
        assert counts.sum() == n and (counts >= 0).all() and not counts[totals == 0].any()
        if caps is None:
            share = n * totals / totals.sum()
            a, b = sorted(rng.integers(0, 51, 2))
            assert abs(counts[a:b].sum() - share[a:b].sum()) < 1
            assert (np.abs(counts - share) < 1).all()
        else:
            assert (counts <= caps).all()


def test_weighted_draw_counts_do_not_depend_on_the_epoch() -> None:
    strata = np.repeat(np.arange(4), [10, 20, 30, 40])
    draw = WeightedDraw.build(RNG.random(100), strata, 60, replacement=True)
    for epoch in range(3):
        drawn = draw.sample(seed=0, epoch=epoch)
        assert np.bincount(strata[drawn], minlength=4).tolist() == draw.counts.tolist()


def test_a_source_thin_over_many_buckets_keeps_its_share_when_batches_mix_sources() -> None:
    """Found by hypothesis: 180 samples of a source asked for 1.5% of 200 (3.08 an epoch), spread thin over
    the size buckets, were served 2.03 an epoch on average when sources share batches (each bucket's fixed
    count rounded the same way); with the sources as `shares` of the draw, 3 every epoch."""
    sizes = np.clip(np.rint(np.random.default_rng(0).lognormal(1.5, 1.0, 200)), 0, 6000).astype(int)
    sources = np.repeat([0, 1], [20, 180])
    weights = np.array([0.98461538, 0.01538462])[sources] / np.array([20, 180])[sources]
    sampler = BucketBatchSampler(sizes, batch_size=1, weights=weights, shares=sources)
    served = [int((sources[sampler.global_plan(epoch).order] == 1).sum()) for epoch in range(30)]
    assert served == [3] * 30
    with pytest.raises(ValueError, match="shares must have one id per sample"):
        BucketBatchSampler(sizes, batch_size=1, weights=weights, shares=sources[:5])
