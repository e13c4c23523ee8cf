"""The batching core on its own: plan, sampler contract, collate helpers, mask conventions."""

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from varlen.batching import (
    BucketBatchSampler,
    additive_mask,
    blocked_mask,
    lengths_to_mask,
    pad_sequences,
)

RNG = np.random.default_rng(0)
LONG_TAILED = np.clip(RNG.lognormal(3.0, 0.8, 997), 1, 400).astype(int)


def epoch_of(sampler: BucketBatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("world_size", range(1, 9))
@pytest.mark.parametrize("budget", [{"batch_size": 16}, {"max_tokens": 600}])
def test_every_sample_once_with_equal_counts_on_all_ranks(world_size: int, budget: dict) -> None:
    for epoch in range(3):
        counts, served = set(), []
        for rank in range(world_size):
            sampler = BucketBatchSampler(LONG_TAILED, num_replicas=world_size, rank=rank, seed=3, **budget)
            batches = epoch_of(sampler, epoch)
            counts.update({len(batches), len(sampler)})
            served += [i for b in batches for i in b]
        assert len(counts) == 1
        assert sorted(served) == list(range(len(LONG_TAILED)))


def test_length_is_the_same_every_epoch_under_a_token_budget() -> None:
    sampler = BucketBatchSampler(LONG_TAILED, max_tokens=700, num_buckets=16)
    lengths = {len(epoch_of(sampler, e)) for e in range(6)}
    assert lengths == {len(sampler)}


@pytest.mark.parametrize("cost", ["padded", "sum"])
def test_budget_is_held_and_oversized_samples_batch_alone(cost: str) -> None:
    lengths = np.append(LONG_TAILED, [900, 1200])  # two samples over the budget
    with pytest.warns(UserWarning, match="2 samples exceed"):
        sampler = BucketBatchSampler(lengths, max_tokens=800, cost=cost)
    served = []
    for batch in sampler:
        sizes = lengths[batch]
        cost_of = sizes.sum() if cost == "sum" else len(batch) * sizes.max()
        assert cost_of <= 800 or len(batch) == 1
        served += batch
    assert sorted(served) == list(range(len(lengths)))
    assert sampler.num_oversized == 2


def test_budget_counts_padding_to_a_multiple() -> None:
    sampler = BucketBatchSampler(LONG_TAILED, max_tokens=640, pad_to_multiple_of=8)
    for batch in sampler:
        padded_len = -(-LONG_TAILED[batch].max() // 8) * 8
        assert len(batch) * padded_len <= 640 or len(batch) == 1


def test_two_dimensional_budget() -> None:
    sizes = np.stack([LONG_TAILED, RNG.integers(1, 50, len(LONG_TAILED))], axis=1)
    sampler = BucketBatchSampler(sizes, max_tokens=(1000, 300))
    served = []
    for batch in sampler:
        assert len(batch) == 1 or np.all(len(batch) * sizes[batch].max(0) <= [1000, 300])
        served += batch
    assert sorted(served) == list(range(len(sizes)))


def test_deterministic_per_seed_and_epoch_and_different_between_epochs() -> None:
    a = BucketBatchSampler(LONG_TAILED, batch_size=8, seed=5)
    b = BucketBatchSampler(LONG_TAILED, batch_size=8, seed=5)
    assert epoch_of(a, 2) == epoch_of(b, 2)
    assert epoch_of(a, 0) != epoch_of(a, 1)
    assert epoch_of(a, 0) != epoch_of(BucketBatchSampler(LONG_TAILED, batch_size=8, seed=6), 0)
    # the contents change, not only the order of the same batches
    assert sorted(map(tuple, epoch_of(a, 0))) != sorted(map(tuple, epoch_of(a, 1)))


def test_bucketing_keeps_padding_near_zero() -> None:
    lengths = RNG.integers(3, 70, 20_000)  # SST-2-like: few distinct lengths
    sampler = BucketBatchSampler(lengths, batch_size=32)
    real = padded = 0
    for batch in sampler:
        real += lengths[batch].sum()
        padded += len(batch) * lengths[batch].max()
    assert real / padded > 0.99


def test_no_shuffle_is_sorted_longest_first() -> None:
    sampler = BucketBatchSampler(LONG_TAILED, batch_size=10, shuffle=False)
    maxima = [LONG_TAILED[b].max() for b in sampler]
    assert maxima == sorted(maxima, reverse=True)
    assert list(sampler) == list(sampler)


def test_drop_last_drops_only_the_partial_and_surplus_batches() -> None:
    sampler = BucketBatchSampler(np.ones(103, int), batch_size=10, drop_last=True, num_replicas=4, rank=0)
    assert len(sampler) == 2  # 10 full batches, 8 of them divide over 4 ranks
    assert all(len(b) == 10 for b in sampler)


def test_drop_last_with_a_token_budget_drops_only_surplus_batches() -> None:
    """Under a budget no batch is 'partial': drop_last only drops the batches that do not divide
    over the ranks, the same count on each, and every served batch holds the budget."""
    world = 3
    plain = BucketBatchSampler(LONG_TAILED, max_tokens=500, seed=2).global_plan(0)
    samplers = [
        BucketBatchSampler(LONG_TAILED, max_tokens=500, seed=2, drop_last=True, num_replicas=world, rank=r)
        for r in range(world)
    ]
    batches = [list(s) for s in samplers]
    assert {len(b) for b in batches} == {len(plain) // world} == {len(s) for s in samplers}
    served = [i for rank in batches for b in rank for i in b]
    assert len(served) == len(set(served))
    dropped = len(plain) % world
    assert dropped, "pick a seed whose plan does not divide over the ranks"
    assert len(LONG_TAILED) - len(served) <= dropped * int((plain.bounds[:, 1] - plain.bounds[:, 0]).max())
    assert all(len(b) * LONG_TAILED[b].max() <= 500 for rank in batches for b in rank if len(b) > 1)


@pytest.mark.parametrize("world_size", [1, 3])
def test_resume_mid_epoch_equals_uninterrupted(world_size: int) -> None:
    for rank in range(world_size):
        full = epoch_of(BucketBatchSampler(LONG_TAILED, max_tokens=500, num_replicas=world_size, rank=rank), 4)
        sampler = BucketBatchSampler(LONG_TAILED, max_tokens=500, num_replicas=world_size, rank=rank)
        sampler.set_epoch(4)
        iterator = iter(sampler)
        head = [next(iterator) for _ in range(5)]
        state = sampler.state_dict()
        assert state["batches_served"] == 5 and state["epoch"] == 4
        fresh = BucketBatchSampler(LONG_TAILED, max_tokens=500, num_replicas=world_size, rank=rank)
        fresh.load_state_dict(state)
        assert head + list(fresh) == full
        assert fresh.epoch == 4
        assert len(list(fresh)) == len(full)  # the next pass is a whole epoch again


def test_state_is_rank_independent() -> None:
    states = []
    for rank in range(2):
        sampler = BucketBatchSampler(LONG_TAILED, batch_size=16, num_replicas=2, rank=rank)
        iterator = iter(sampler)
        for _ in range(3):
            next(iterator)
        states.append(sampler.state_dict())
    assert states[0] == states[1]


def test_state_from_another_dataset_is_refused() -> None:
    state = BucketBatchSampler(LONG_TAILED, batch_size=16).state_dict()
    with pytest.raises(ValueError, match="997 samples"):
        BucketBatchSampler(LONG_TAILED[:10], batch_size=16).load_state_dict(state)


def test_injected_distributed_sampler_sets_ranks_and_epoch() -> None:
    injected = DistributedSampler(range(len(LONG_TAILED)), num_replicas=4, rank=2, shuffle=False)
    sampler = BucketBatchSampler(LONG_TAILED, batch_size=16, sampler=injected)
    assert (sampler.num_replicas, sampler.rank) == (4, 2)
    injected.set_epoch(3)  # what Lightning does each epoch
    reference = BucketBatchSampler(LONG_TAILED, batch_size=16, num_replicas=4, rank=2)
    assert list(sampler) == epoch_of(reference, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"batch_size": 4, "max_tokens": 10}, "exactly one of"),
        ({"batch_size": 0}, "batch_size must be"),
        ({"max_tokens": 10, "cost": "max"}, "cost must be"),
        ({"batch_size": 4, "num_buckets": 0}, "num_buckets must be"),
        ({"batch_size": 4, "num_buckets": 10**6}, "num_buckets must be"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BucketBatchSampler(LONG_TAILED, **kwargs)


def test_bad_lengths_name_the_sample() -> None:
    with pytest.raises(ValueError, match="sample 2 is negative"):
        BucketBatchSampler([3, 4, -1], batch_size=2)
    with pytest.raises(ValueError, match="sample 1 is not finite"):
        BucketBatchSampler([3.0, np.nan], batch_size=2)
    with pytest.raises(ValueError, match="cannot fill"):
        len(BucketBatchSampler([3, 4], batch_size=2, num_replicas=3, rank=0))


def test_samples_too_large_to_share_a_batch_give_every_rank_one_with_a_repeat() -> None:
    """Found by hypothesis: 3 samples that each fill the budget, on 2 ranks, were refused ("3 samples cannot
    fill 4 batches"); now a sample is repeated (warned about) so that both ranks get two batches."""
    with pytest.warns(UserWarning, match="1 batch\\(es\\) repeat a sample"):
        ranks = [BucketBatchSampler([10, 17, 10], max_tokens=16, num_replicas=2, rank=r) for r in range(2)]
        served = [list(sampler) for sampler in ranks]
    assert [len(batches) for batches in served] == [2, 2] and {len(s) for s in ranks} == {2}
    assert sorted(i for batches in served for b in batches for i in b) == [0, 0, 1, 2]


def test_pad_sequences_one_ragged_axis() -> None:
    arrays = [np.arange(3), np.arange(5), np.arange(1)]
    padded = pad_sequences(arrays, pad_value=-1, pad_to_multiple_of=4)
    assert padded.values.shape == (3, 8)
    assert padded.lengths.tolist() == [3, 5, 1]
    assert padded.values[0].tolist() == [0, 1, 2, -1, -1, -1, -1, -1]
    assert padded.mask.sum(1).tolist() == [3, 5, 1]
    assert torch.equal(padded.mask, lengths_to_mask(padded.lengths, 8))


def test_pad_sequences_trailing_axes_and_dtype() -> None:
    arrays = [np.ones((2, 3), np.float64), 2 * np.ones((4, 3), np.float64)]
    padded = pad_sequences(arrays, dtype=torch.float32)
    assert padded.values.dtype == torch.float32 and padded.values.shape == (2, 4, 3)
    assert padded.values[0, 2:].eq(0).all() and padded.values[1].eq(2).all()


def test_pad_sequences_two_ragged_axes() -> None:
    arrays = [np.ones((2, 3)), np.ones((1, 5))]
    padded = pad_sequences(arrays, pad_value=0, ragged_dims=2)
    assert padded.values.shape == (2, 2, 5)
    assert padded.lengths.tolist() == [[2, 3], [1, 5]]
    assert padded.mask.sum().item() == 6 + 5
    assert padded.values.sum().item() == 11
    assert not padded.mask[1, 1].any()


def test_pad_sequences_rejects_mismatched_arrays() -> None:
    with pytest.raises(ValueError, match=r"sample 1 has shape \(2, 4\), sample 0 has \(2, 3\)"):
        pad_sequences([np.ones((2, 3)), np.ones((2, 4))])
    with pytest.raises(ValueError, match="empty list"):
        pad_sequences([])


def test_mask_conventions_match_multihead_attention() -> None:
    torch.manual_seed(0)
    keep = torch.tensor([[True, True, False, False]])
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    y = x.clone()
    y[:, 2:] = 100.0  # what sits under padding must not matter
    out_bool = attention(x, x, x, key_padding_mask=blocked_mask(keep))[0]
    out_float = attention(x, x, x, key_padding_mask=additive_mask(keep))[0]
    out_changed = attention(y, y, y, key_padding_mask=blocked_mask(keep))[0]
    torch.testing.assert_close(out_bool, out_float)
    torch.testing.assert_close(out_bool[:, :2], out_changed[:, :2])
    sdpa_mask = additive_mask(keep)[:, None, None, :]
    q = torch.randn(1, 1, 4, 8)
    k = torch.randn(1, 1, 4, 8)
    v = torch.randn(1, 1, 4, 8)
    v_changed = v.clone()
    v_changed[..., 2:, :] = 100.0
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask)
    b = torch.nn.functional.scaled_dot_product_attention(q, k, v_changed, attn_mask=keep[:, None, None, :])
    torch.testing.assert_close(a, b)  # sdpa's bool mask is True = *allowed*, the opposite of MHA's


@pytest.mark.parametrize("budget", [{"batch_size": 8}, {"max_tokens": 500}])
def test_groups_are_never_mixed_and_all_served(budget: dict) -> None:
    groups = RNG.integers(0, 12, len(LONG_TAILED))
    for world_size in (1, 3):
        served, counts = [], set()
        for rank in range(world_size):
            sampler = BucketBatchSampler(LONG_TAILED, groups=groups, num_replicas=world_size, rank=rank, **budget)
            lengths = {len(epoch_of(sampler, e)) for e in range(3)}
            counts |= lengths
            for batch in epoch_of(sampler, 0):
                assert len(set(groups[batch])) == 1
                served += batch
        assert len(counts) == 1
        assert sorted(served) == list(range(len(LONG_TAILED)))


def test_per_sample_arrays_are_compact_and_exact_for_huge_sizes() -> None:
    """Plans keep int32 sizes and indices (half the memory of int64) unless values need int64."""
    lengths = np.arange(1, 2001, dtype=np.int32)
    sampler = BucketBatchSampler(lengths, batch_size=16)
    assert sampler.sizes.dtype == np.int32 and sampler.global_plan().order.dtype == np.int32
    huge = np.array([2**40, 3, 2**33, 7], dtype=np.int64)
    sampler = BucketBatchSampler(huge, batch_size=1, shuffle=False)
    assert sampler.sizes.dtype == np.int64
    assert [b for b in sampler] == [[0], [2], [3], [1]]  # largest first, no overflow


def test_fractional_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"lengths of sample 1 is not a whole number: \[1.5\]"):
        BucketBatchSampler([2.0, 1.5, 3.0], max_tokens=10)


def test_samples_over_budget_after_padding_to_a_multiple_are_counted() -> None:
    with pytest.warns(UserWarning, match="1 samples exceed"):
        sampler = BucketBatchSampler([99, 10, 10], max_tokens=100, pad_to_multiple_of=8)
    assert sampler.num_oversized == 1


@pytest.mark.parametrize("width", [3, 5000])  # the scatter path and the copy path
def test_pad_sequences_dtype_is_the_first_arrays_whatever_the_width(width: int) -> None:
    arrays = [np.arange(width, dtype=np.int32), np.full(2, 0.5)]
    padded = pad_sequences(arrays)
    assert padded.values.dtype == torch.int32 and padded.values[1, :2].tolist() == [0, 0]


def test_pad_sequences_names_the_odd_sample() -> None:
    with pytest.raises(ValueError, match=r"sample 2 has shape \(2, 4\), sample 0 has \(1, 3\)"):
        pad_sequences([np.zeros((1, 3)), np.zeros((5, 3)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match=r"sample 1 has shape \(3,\).*at least 2 ragged axes"):
        pad_sequences([np.zeros((2, 3)), np.zeros(3)], ragged_dims=2)


def test_bucketing_rounds_up_by_one_grid_step_where_dense_and_widens_sparse_buckets() -> None:
    """Many distinct sizes reach the quantile + geometric branch. Where sizes are dense no sample
    is rounded up by more than one grid step (GROWTH); every bucket but the largest holds at least
    MIX_BATCHES batches of samples (a sparser one joins the bucket above, so batches re-mix)."""
    from varlen.batching.plan import GROWTH, MIX_BATCHES, PlanSpec, bucketize

    lengths = np.clip(np.random.default_rng(1).lognormal(5.0, 1.0, 20_000), 1, 20_000).astype(int)
    spec = PlanSpec(batch_size=32)
    sampler = BucketBatchSampler(lengths, batch_size=32)
    ids, rounded = bucketize(lengths[:, None], spec)
    population = np.bincount(ids[:, 0])
    assert len(np.unique(rounded)) < len(np.unique(lengths)) / 4  # buckets, not one per distinct size
    top = ids[:, 0].max()
    assert population[np.unique(ids[ids[:, 0] != top, 0])].min() >= MIX_BATCHES * 32
    dense = (lengths >= 40) & (lengths <= np.quantile(lengths, 0.9))  # below 40 the integer floor dominates
    assert np.all(rounded[dense, 0] <= np.ceil(lengths[dense] * GROWTH))
    assert np.mean(rounded[lengths >= 40, 0] > np.ceil(lengths[lengths >= 40] * GROWTH)) < 0.05
    real = padded = 0
    for batch in sampler:
        real += lengths[batch].sum()
        padded += len(batch) * lengths[batch].max()
    assert real / padded > 0.94


def test_small_datasets_get_buckets_that_re_mix() -> None:
    """160 samples of 90 distinct sizes in batches of 16: a bucket per size would batch the same
    samples together every epoch; buckets of two batches or more part most pairs."""
    lengths = np.clip(np.random.default_rng(3).lognormal(3.8, 0.6, 160), 5, 400).astype(int)
    sampler = BucketBatchSampler(lengths, batch_size=16, seed=0)
    together = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        together.append({frozenset((a, b)) for batch in sampler for a in batch for b in batch if a < b})
    assert len(together[0] & together[1]) / len(together[0]) < 0.5


def test_drop_last_false_splits_the_largest_batches_in_two() -> None:
    """103 samples in batches of 10 make 11 batches (the partial one of 3 first); on 4 ranks the
    plan needs 12, so one full batch is split into 5 + 5: nothing is dropped or repeated."""
    lengths = np.arange(103) + 1
    samplers = [BucketBatchSampler(lengths, batch_size=10, num_replicas=4, rank=r, seed=0) for r in range(4)]
    plan = samplers[0].global_plan(0)
    sizes = sorted((plan.bounds[:, 1] - plan.bounds[:, 0]).tolist())
    assert sizes == [3, 5, 5] + [10] * 9
    (first, second) = [k for k, (a, b) in enumerate(plan.bounds.tolist()) if b - a == 5]
    assert second == first + 1  # the two halves of one batch, side by side
    joined = sorted(plan.order[plan.bounds[first, 0] : plan.bounds[second, 1]].tolist())
    one_rank = BucketBatchSampler(lengths, batch_size=10, seed=0).global_plan(0)
    assert joined in [sorted(one_rank.order[a:b].tolist()) for a, b in one_rank.bounds.tolist()]
    served = [i for s in samplers for b in s for i in b]
    assert sorted(served) == list(range(103)) and {len(s) for s in samplers} == {3}
