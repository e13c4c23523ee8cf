"""Resuming a sampler's state on another number of ranks: every remaining sample once, equal counts."""

import warnings
from collections import Counter

import numpy as np
import pytest

from varlen.batching import BucketBatchSampler, EpochBatchSampler, EpochIndices

RNG = np.random.default_rng(11)
LENGTHS = np.clip(RNG.lognormal(3.0, 0.8, 1500), 1, 400).astype(int)
WEIGHTS = RNG.random(len(LENGTHS))
WEIGHTS[::7] = 0.0
KINDS = {
    "plain, token budget": (BucketBatchSampler, {"max_tokens": 600}),
    "plain, batch size": (BucketBatchSampler, {"batch_size": 8}),
    "weighted": (BucketBatchSampler, {"max_tokens": 600, "weights": WEIGHTS}),
    "epoch sampler, weighted without replacement": (
        EpochBatchSampler,
        {"max_tokens": 600, "weights": WEIGHTS, "num_samples": 1000, "replacement": False},
    ),
}
PAIRS = [(2, 4), (4, 3), (8, 3), (4, 1)]


def samplers(kind: str, world_size: int, epoch: int) -> list[BucketBatchSampler]:
    cls, kwargs = KINDS[kind]
    made = [cls(LENGTHS, num_replicas=world_size, rank=r, seed=9, **kwargs) for r in range(world_size)]
    for sampler in made:
        sampler.set_epoch(epoch)
    return made


def serve(ranks: list[BucketBatchSampler], batches: int | None = None) -> list[list[list[int]]]:
    """Each rank's next `batches` batches (None: the rest of the epoch), as the ranks serve them."""
    iterators = [iter(sampler) for sampler in ranks]
    if batches is None:
        return [list(it) for it in iterators]
    return [[next(it) for _ in range(batches)] for it in iterators]


def within_budget(batch: list[int], kind: str) -> bool:
    budget = KINDS[kind][1]
    if "batch_size" in budget:
        return len(batch) <= budget["batch_size"]
    return len(batch) == 1 or len(batch) * LENGTHS[batch].max() <= budget["max_tokens"]


def flat(per_rank: list[list[list[int]]]) -> Counter:
    return Counter(i for rank in per_rank for batch in rank for i in batch)


@pytest.mark.parametrize(("before", "after"), PAIRS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_resume_on_another_world_size_serves_every_remaining_sample_once(kind: str, before: int, after: int) -> None:
    epoch = 2
    old = samplers(kind, before, epoch)
    head = serve(old, 3)
    states = [sampler.state_dict() for sampler in old]
    assert all(state == states[0] for state in states)
    whole_epoch = Counter(old[0].global_plan(epoch).order.tolist())  # the drawn multiset, repeats included
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the resume is exact
        new = samplers(kind, after, 0)
        for sampler in new:
            sampler.load_state_dict(states[0])
        rest = serve(new)
    assert {len(rank) for rank in rest} == {len(rest[0])} and rest[0]
    assert {len(sampler) for sampler in new} == {3 + len(rest[0])}  # this epoch's length, as Lightning counts it
    assert flat(head) + flat(rest) == whole_epoch
    assert all(within_budget(b, kind) for rank in rest for b in rank)
    if KINDS[kind][0] is EpochBatchSampler:
        assert all(isinstance(b, EpochIndices) and b.epoch == epoch for rank in rest for b in rank)
    # the next epoch is the new world size's own
    for sampler in new:
        sampler.set_epoch(epoch + 1)
    assert serve(new) == serve(samplers(kind, after, epoch + 1))
    assert {len(sampler) for sampler in new} == {len(samplers(kind, after, epoch + 1)[0])}


@pytest.mark.parametrize("kind", ["plain, token budget", "weighted"])
def test_a_state_saved_after_an_elastic_resume_resumes_exactly_again(kind: str) -> None:
    """2 ranks serve 4 batches each, 3 ranks 2 more each, then 5 ranks (or 3 again) finish the epoch."""
    epoch = 1
    first = samplers(kind, 2, epoch)
    head = serve(first, 4)
    second = samplers(kind, 3, 0)
    for sampler in second:
        sampler.load_state_dict(first[0].state_dict())
    uninterrupted = serve(samplers_loaded(kind, 3, first[0].state_dict()))
    middle = serve(second, 2)
    state = second[0].state_dict()
    assert state["segments"] == [[2, 4, 1]] and state["batches_served"] == 6 and state["num_replicas"] == 3
    same = samplers_loaded(kind, 3, state)
    assert [m + r for m, r in zip(middle, serve(same), strict=True)] == uninterrupted
    third = samplers_loaded(kind, 5, state)
    rest = serve(third)
    assert {len(rank) for rank in rest} == {len(rest[0])}
    assert flat(head) + flat(middle) + flat(rest) == Counter(first[0].global_plan(epoch).order.tolist())


def samplers_loaded(kind: str, world_size: int, state: dict) -> list[BucketBatchSampler]:
    made = samplers(kind, world_size, 0)
    for sampler in made:
        sampler.load_state_dict(state)
    return made


@pytest.mark.parametrize("after", [1, 2, 3])
def test_a_state_from_before_segments_were_recorded_still_loads(after: int) -> None:
    epoch = 3
    old = samplers("plain, token budget", 2, epoch)
    head = serve(old, 5)
    legacy = {
        key: old[0].state_dict()[key] for key in ("epoch", "batches_served", "num_replicas", "num_samples", "seed")
    }
    new = samplers_loaded("plain, token budget", after, legacy)
    rest = serve(new)
    if after == 2:  # the same world size: exactly the uninterrupted run
        full = serve(samplers("plain, token budget", 2, epoch))
        assert [h + r for h, r in zip(head, rest, strict=True)] == full
    assert flat(head) + flat(rest) == Counter(range(len(LENGTHS)))


def test_a_finished_epoch_resumes_at_the_next_one_on_the_new_world_size() -> None:
    old = samplers("weighted", 4, 0)
    serve(old)
    new = samplers_loaded("weighted", 3, old[0].state_dict())
    assert all(sampler.epoch == 1 for sampler in new)
    assert serve(new) == serve(samplers("weighted", 3, 1))


def test_drop_last_serves_no_sample_twice_with_equal_counts() -> None:
    def make(world_size: int) -> list[BucketBatchSampler]:
        return [
            BucketBatchSampler(LENGTHS, max_tokens=600, drop_last=True, num_replicas=world_size, rank=r, seed=9)
            for r in range(world_size)
        ]

    old = make(3)
    head = serve(old, 4)
    new = make(4)
    for sampler in new:
        sampler.load_state_dict(old[0].state_dict())
    rest = serve(new)
    assert {len(rank) for rank in rest} == {len(rest[0])}
    served = flat(head) + flat(rest)
    assert max(served.values()) == 1


def test_an_inconsistent_state_is_refused() -> None:
    state = samplers("plain, token budget", 2, 0)[0].state_dict()
    state.update(segments=[[4, 7, 1]], batches_served=3)
    with pytest.raises(ValueError, match="inconsistent"):
        samplers("plain, token budget", 2, 0)[0].load_state_dict(state)


def test_a_state_saved_mid_elastic_epoch_by_an_older_version_resumes_at_the_next_epoch() -> None:
    """Segments of two numbers (before lanes were recorded) dealt the rest in another order: the rest of
    that epoch cannot be told, so it is skipped with a warning that counts it, never served wrongly."""
    state = samplers("plain, token budget", 3, 0)[0].state_dict()
    state.update(epoch=2, segments=[[2, 4]], batches_served=6)
    new = samplers("plain, token budget", 4, 0)
    with pytest.warns(UserWarning, match="older varlen.*epoch 2.*6 batches per rank.*epoch 3"):
        for sampler in new:
            sampler.load_state_dict(state)
    assert serve(new) == serve(samplers("plain, token budget", 4, 3))


@pytest.mark.parametrize("left", [4, 0])
def test_a_late_state_loads_on_more_ranks_than_its_rest_can_feed(left: int) -> None:
    """100 samples in batches of 2, saved on 2 ranks with `left` samples to go, loaded on 8: every rank
    gets the same number of batches (a sample repeated where fewer are left than ranks, with a warning
    that counts it), every sample of the epoch is served, and the next epoch is 8 ranks' own."""
    lengths = np.arange(1, 101)
    old = [BucketBatchSampler(lengths, batch_size=2, num_replicas=2, rank=r, seed=3) for r in range(2)]
    head = serve(old, (100 - left) // 4)
    new = [BucketBatchSampler(lengths, batch_size=2, num_replicas=8, rank=r, seed=3) for r in range(8)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for sampler in new:
            sampler.load_state_dict(old[0].state_dict())
        rest = serve(new)
    if left == 0:  # a finished epoch: the next one, whole
        fresh = [BucketBatchSampler(lengths, batch_size=2, num_replicas=8, rank=r, seed=3) for r in range(8)]
        for sampler in fresh:
            sampler.set_epoch(1)
        assert rest == serve(fresh)
        return
    assert {len(rank) for rank in rest} == {1} and {len(s) for s in new} == {len(head[0]) + 1}
    served = flat(head) + flat(rest)
    assert set(served) == set(range(100)) and sum(served.values()) == 100 + 8 - left
    repeats = [str(w.message) for w in caught if "repeat" in str(w.message)]
    assert len(set(repeats)) == 1 and f"{8 - left} batch(es) repeat" in repeats[0]
