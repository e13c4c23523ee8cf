"""Streamed mixtures and weighted streamed draws (varlen.stream.draw / mixture / mixture_state): each source's
share, with replacement only where weighted up past its size, equal counts on every rank, budgets, schedules,
and every resume (mid-epoch, at a stage boundary, epoch 2, other ranks and lanes) equal to the uninterrupted run."""

import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from varlen.batching.plan import PlanSpec
from varlen.stream.memory_index import ArraySizeIndex, SimulatedSizeIndex
from varlen.stream.mixture_epochs import MixtureBatchPlan
from varlen.stream.mixture_layout import mixture_layout

BUDGET = 4096


def chunks_of(seed: int, samples: int, chunks: int, top: int = 3000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, samples), chunks - 1, replace=False)) if chunks > 1 else []
    sizes = np.clip(np.rint(rng.lognormal(5, 1, samples)), 1, top).astype(int)
    return np.split(sizes, cuts)


@pytest.fixture(scope="module")
def sources() -> list[ArraySizeIndex]:
    """Three sources of 12,000, 1,500 and 200 samples."""
    shapes = [(12000, 24), (1500, 6), (200, 2)]
    return [ArraySizeIndex.from_sizes(chunks_of(s, n, k)) for s, (n, k) in enumerate(shapes)]


def sizes_of(indexes) -> np.ndarray:
    return np.concatenate([index.sizes(c)[:, 0] for index in indexes for c in range(index.num_chunks)]).astype(int)


def plans(indexes, world: int, lanes: int = 1, **kwargs) -> list[MixtureBatchPlan]:
    kwargs = {"max_tokens": BUDGET, "seed": 5, "window_batches": 20} | kwargs
    first = MixtureBatchPlan(indexes, num_replicas=world, rank=0, lanes=lanes, **kwargs)
    return [first] + [first.on_rank(r) for r in range(1, world)]  # the layouts computed once


def run(ranks, epoch: int, stop: int | None = None) -> list[list[np.ndarray]]:
    out = []
    for plan in ranks:
        plan.set_epoch(epoch)
        batches = []
        for batch in plan if stop != 0 else ():
            batches.append(batch)
            if stop is not None and len(batches) == stop:
                break
        out.append(batches)
    return out


def source_of(ids: np.ndarray, indexes) -> np.ndarray:
    offsets = np.cumsum([0] + [int(i.samples_per_chunk.sum()) for i in indexes])
    return np.searchsorted(offsets, ids, side="right") - 1


def check_budget(batches, sizes) -> None:
    for batch in batches:
        assert len(batch) * sizes[batch].max() <= BUDGET or len(batch) == 1


def binomial_ok(count: int, total: int, share: float) -> bool:
    half = 2.576 * np.sqrt(total * share * (1 - share)) + 1  # 99%, and the one sample of rounding
    return abs(count - total * share) <= half


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shares_counts_budgets_and_replacement(sources, mix, world):
    sizes = sizes_of(sources)
    weights = [0.59, 0.4, 0.01] if world != 3 else [0.2, 0.3, 0.5]  # 0.5 of 13,700: source 2 drawn ~34 times over
    ranks = plans(sources, world, source_weights=weights, mix=mix)
    for epoch in (0, 1):
        served = run(ranks, epoch)
        assert {len(batches) for batches in served} == {len(ranks[0])} == {ranks[0].draw(epoch).batches_per_rank}
        every = np.concatenate([np.concatenate(batches) for batches in served])
        origin = source_of(every, sources)
        counts = np.bincount(origin, minlength=3)
        for s, share in enumerate(weights):
            assert binomial_ok(int(counts[s]), len(every), share), (s, counts, weights)
        draw = ranks[0].draw(epoch)
        np.testing.assert_array_equal(counts, draw.source_samples)  # the draw's exact counts, each served
        for s in range(3):
            mine = every[origin == s]
            held = int(sources[s].samples_per_chunk.sum())
            assert draw.replacement[s] == (draw.source_samples[s] > held)
            if not draw.replacement[s]:
                assert len(np.unique(mine)) == len(mine)  # each at most once
        check_budget([b for batches in served for b in batches], sizes)
        if mix == "per_source":
            assert all(len(np.unique(source_of(b, sources))) == 1 for batches in served for b in batches)


def test_without_weights_every_sample_once(sources):
    served = run(plans(sources, 3), 0)
    every = np.concatenate([np.concatenate(batches) for batches in served])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes_of(sources))))


def test_within_batch_mixes_sources_in_batches(sources):
    served = run(plans(sources, 2, source_weights=[0.5, 0.3, 0.2]), 0)
    mixed = [len(np.unique(source_of(b, sources))) > 1 for batches in served for b in batches]
    assert np.mean(mixed) > 0.5


def test_weighted_single_source_serves_the_weights_shares():
    rng = np.random.default_rng(3)
    chunks = chunks_of(9, 6000, 12)
    labels = [(rng.random(len(c)) < 0.1).astype(int) for c in chunks]  # class 1: 10%
    weights = [np.where(lab == 1, 9.0, 1.0) for lab in labels]  # balanced
    index = ArraySizeIndex.from_sizes(chunks, weights=weights)
    label, weight = np.concatenate(labels), np.concatenate(weights)
    share = weight[label == 1].sum() / weight.sum()  # about a half
    for num_samples in (300, None, 12000):  # None: as many as the source holds, where weights must still count
        ranks = plans([index], 2, num_samples=num_samples)
        served = np.concatenate([np.concatenate(b) for b in run(ranks, 0)])
        drawn = num_samples or len(label)
        assert len(served) == drawn and ranks[0].draw(0).replacement[0]  # weighted: with replacement, as in memory
        assert binomial_ok(int(label[served].sum()), drawn, share)


def test_a_weight_zero_sample_is_never_drawn():
    chunks = chunks_of(2, 3000, 6)
    weights = [np.where(np.arange(len(c)) % 3 == 0, 0.0, 1.0) for c in chunks]
    index = ArraySizeIndex.from_sizes(chunks, weights=weights)
    zero = np.flatnonzero(np.concatenate(weights) == 0)
    for num_samples in (1500, 5000):
        served = np.concatenate([np.concatenate(b) for b in run(plans([index], 3, num_samples=num_samples), 1)])
        assert not np.isin(served, zero).any()


SCHEDULE = [{"weights": [0.9, 0.1, 0.0], "until_epoch": 1}, {"weights": [0.3, 0.3, 0.4]}]


def test_a_schedule_changes_shares_and_len_per_epoch(sources):
    ranks = plans(sources, 2, source_weights=SCHEDULE, mix="per_source")
    lengths = []
    for epoch, shares in ((0, [0.9, 0.1, 0.0]), (1, [0.3, 0.3, 0.4]), (2, [0.3, 0.3, 0.4])):
        served = run(ranks, epoch)
        lengths.append(len(ranks[0]))
        assert {len(b) for b in served} == {lengths[-1]}
        every = np.concatenate([np.concatenate(b) for b in served])
        counts = np.bincount(source_of(every, sources), minlength=3)
        assert all(binomial_ok(int(counts[s]), len(every), shares[s]) for s in range(3)), counts
    assert lengths[0] != lengths[1] == lengths[2]


def test_a_schedule_by_step_changes_at_the_first_epoch_past_its_end(sources):
    ranks = plans(sources, 2, source_weights=[{"weights": [1, 1, 0], "until_step": 1}, {"weights": [0, 0, 1]}])
    first = len(ranks[0])  # epoch 0's steps
    assert ranks[0].shares(0) == (0.5, 0.5, 0.0)
    assert ranks[0].steps_before(1) == first and ranks[0].shares(1) == (0.0, 0.0, 1.0)


def rest_after(indexes, saved_world, resumed_world, epoch, stop, lanes=(1, 1), **kwargs):
    """Every rank's batches of `epoch` served up to `stop` on `saved_world`, then the rest on
    `resumed_world` from the saved state (and the next epoch there)."""
    stopped = plans(indexes, saved_world, lanes[0], **kwargs)
    for e in range(epoch):
        run(stopped, e)
    before = run(stopped, epoch, stop)
    state = stopped[0].state_dict()
    assert all(plan.state_dict() == state for plan in stopped)
    resumed = plans(indexes, resumed_world, lanes[1], **kwargs)
    for plan in resumed:
        plan.load_state_dict(state)
    after = run(resumed, epoch) if resumed[0].epoch == epoch else [[] for _ in resumed]  # else: it was complete
    return before, after, resumed


def multiset(batches) -> np.ndarray:
    return np.sort(np.concatenate([np.concatenate(b) for b in batches if b]))


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_mid_epoch_resume_in_epoch_2_equals_the_uninterrupted_run(sources, mix):
    kwargs = {"source_weights": [0.5, 0.2, 0.3], "mix": mix}
    whole = run(plans(sources, 3, **kwargs), 2)
    before, after, _ = rest_after(sources, 3, 3, 2, 11, **kwargs)
    for r in range(3):
        assert len(before[r] + after[r]) == len(whole[r])
        for a, b in zip(before[r] + after[r], whole[r], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("saved", "resumed", "lanes"), [(8, 6, (1, 1)), (2, 3, (1, 3)), (3, 3, (2, 1))])
def test_elastic_resume_serves_the_rest_of_the_draw(sources, saved, resumed, lanes):
    kwargs = {"source_weights": [0.5, 0.2, 0.3]}
    whole = run(plans(sources, saved, lanes[0], **kwargs), 1)
    before, after, again = rest_after(sources, saved, resumed, 1, 5, lanes, **kwargs)
    assert len({len(b) for b in after}) == 1
    np.testing.assert_array_equal(multiset(before + after), multiset(whole))
    nxt = run(again, 2)
    np.testing.assert_array_equal(multiset(nxt), multiset(run(plans(sources, resumed, **kwargs), 2)))


@pytest.mark.parametrize("unit", ["until_epoch", "until_step"])
def test_resume_at_a_stage_boundary_equals_the_uninterrupted_run(sources, unit):
    first = plans(sources, 2, source_weights=[0.8, 0.2, 0.0])[0]  # stage 0's epoch: its steps end the stage
    end = 1 if unit == "until_epoch" else len(first)
    kwargs = {"source_weights": [{"weights": [0.8, 0.2, 0.0], unit: end}, {"weights": [0.2, 0.3, 0.5]}]}
    scheduled = plans(sources, 2, **kwargs)[0]
    assert scheduled.shares(0)[2] == 0 and scheduled.shares(1)[2] == 0.5  # the boundary is epoch 0's end
    whole = [run(plans_, e) for plans_ in [plans(sources, 2, **kwargs)] for e in range(3)]
    # stopped at the end of epoch 0 (the boundary), and in the middle of epoch 1, resumed on 2 and on 3 ranks
    for epoch, stop in ((0, None), (1, 4)):
        stopped = plans(sources, 2, **kwargs)
        for e in range(epoch):
            run(stopped, e)
        before = run(stopped, epoch, stop)
        state = stopped[0].state_dict()
        same = plans(sources, 2, **kwargs)
        for plan in same:
            plan.load_state_dict(state)
        start = same[0].epoch
        after = run(same, start)
        if stop is None:
            assert start == 1
            for r in range(2):
                for a, b in zip(after[r], whole[1][r], strict=True):
                    np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(multiset(before + after), multiset(whole[epoch]))
        other = plans(sources, 3, **kwargs)
        for plan in other:
            plan.load_state_dict(state)
        rest = run(other, start)
        assert other[0].shares(start) == (0.2, 0.3, 0.5)  # the saved run's steps, not 3 ranks' own
        if stop is not None:  # the rest of the saved draw; a new epoch is the new world size's own draw
            np.testing.assert_array_equal(multiset(before + rest), multiset(whole[start]))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(60, 1500), min_size=1, max_size=3),
    weights=st.lists(st.floats(0.02, 1.0), min_size=3, max_size=3),
    world=st.integers(1, 5),
    resumed=st.integers(1, 5),
    stop=st.integers(0, 6),
    mix=st.sampled_from(["within_batch", "per_source"]),
    weighted=st.booleans(),
    seed=st.integers(0, 3),
)
# 61 samples resumed on 5 ranks with fewer left than ranks: the warned repeats (a CI run found it)
@example(sizes=[61], weights=[1.0] * 3, world=2, resumed=5, stop=5, mix="within_batch", weighted=True, seed=3)
def test_random_mixtures_resume_exactly(sizes, weights, world, resumed, stop, mix, weighted, seed):
    rng = np.random.default_rng(seed)
    indexes = []
    for s, n in enumerate(sizes):
        chunks = chunks_of(seed * 7 + s, n, max(1, n // 300))
        w = [rng.random(len(c)) + 0.1 for c in chunks] if weighted and s == 0 else None
        indexes.append(ArraySizeIndex.from_sizes(chunks, weights=w))
    kwargs = {"source_weights": weights[: len(sizes)], "mix": mix, "seed": seed, "window_batches": 6}
    try:
        first = plans(indexes, world, **kwargs)
        for plan in (first[0], plans(indexes, resumed, **kwargs)[0]):
            plan.draw(1)  # an epoch's draw on each world size
    except ValueError:
        return  # too few samples for the ranks: refused by name
    whole = run(first, 1)
    assert len({len(b) for b in whole}) == 1
    stop = min(stop, len(whole[0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before, after, _ = rest_after(indexes, world, resumed, 1, stop, **kwargs)
    assert len({len(b) for b in after}) == 1
    if stop == 0 and resumed != world:  # nothing served: the epoch is the new world size's own draw
        whole = run(plans(indexes, resumed, **kwargs), 1)
    served, planned = Counter(multiset(before + after).tolist()), Counter(multiset(whole).tolist())
    assert not planned - served  # every sample of the epoch served
    repeats = [w for w in caught if "fewer samples left than ranks" in str(w.message)]
    # beyond it only the warned repeats that give every rank a batch (fewer samples left than ranks), of the rest
    assert not served - planned or (repeats and set(served - planned) <= set(multiset(after).tolist()))


def test_a_state_of_other_sources_or_weights_is_refused(sources):
    saved = plans(sources, 1)
    run(saved, 0, stop=1)
    state = saved[0].state_dict()
    with pytest.raises(ValueError, match="plan state was saved with plan"):
        plans(sources, 1, source_weights=[1, 1, 1])[0].load_state_dict(state)
    with pytest.raises(ValueError, match="index"):
        plans(sources[:2], 1)[0].load_state_dict(state)


def test_a_source_too_small_for_the_ranks_is_refused_by_name():
    tiny = ArraySizeIndex.from_sizes([[10, 20, 30]])
    big = ArraySizeIndex.from_sizes(chunks_of(0, 2000, 4))
    with pytest.raises(ValueError, match="source 1"):
        mixture_layout([big, tiny], PlanSpec(max_tokens=(BUDGET,)), seed=0, num_replicas=8)


def test_three_simulated_sources_plan_quickly():
    indexes = [SimulatedSizeIndex(n, 8192, seed=s) for s, n in enumerate((1_000_000, 100_000, 10_000))]
    plan = MixtureBatchPlan(indexes, source_weights=[0.6, 0.3, 0.1], max_tokens=8192, num_replicas=8, rank=0)
    assert len(plan) == plan.draw(0).batches_per_rank > 0
    batch = next(iter(plan))
    assert len(batch) > 0
