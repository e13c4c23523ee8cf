"""The streamed plan (varlen.stream.layout): from a size index alone, equal counts on every rank, every
sample once, budgets held, closed-form counts equal to the cut, exact and elastic resume."""

import numpy as np
import pytest

from varlen.batching.plan import PlanSpec, build_plan, cut_batches
from varlen.batching.resume import interleave
from varlen.errors import DataError
from varlen.stream.epochs import StreamBatchPlan
from varlen.stream.layout import batch_counts, layout, rank_batches, read_window
from varlen.stream.memory_index import ArraySizeIndex, SimulatedSizeIndex

BUDGET = 4096


def lognormal_chunks(seed: int, chunks: int, low: int = 50, high: int = 400, top: int = 3000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.clip(np.rint(rng.lognormal(5, 1, rng.integers(low, high))), 1, top).astype(int) for _ in range(chunks)]


@pytest.fixture(scope="module")
def index() -> ArraySizeIndex:
    return ArraySizeIndex.from_sizes(lognormal_chunks(0, 40))


def sizes_of(index) -> np.ndarray:
    return np.concatenate([index.sizes(c)[:, 0] for c in range(index.num_chunks)]).astype(np.int64)


def served(index, plan, rank: int, epoch: int, seed: int) -> list[np.ndarray]:
    """Rank `rank`'s batches of `epoch` through the pure functions (one window read at a time)."""
    out, loaded = [], {}
    for window, batch, _, _ in rank_batches(plan, rank, epoch, seed).tolist():
        if window not in loaded:
            loaded = {window: read_window(index, plan, window, epoch, seed)}
        ids, bounds, _ = loaded[window]
        out.append(ids[bounds[batch, 0] : bounds[batch, 1]])
    return out


def check_budget(batches, sizes, spec: PlanSpec) -> None:
    for batch in batches:
        real = sizes[batch]
        if spec.batch_size is not None:
            assert len(batch) <= spec.batch_size
            continue
        if spec.max_batch_size:
            assert len(batch) <= spec.max_batch_size
        cost = real.sum() if spec.cost == "sum" else len(batch) * real.max()
        assert cost <= spec.max_tokens[0] or len(batch) == 1, (cost, len(batch))


SPECS = [
    PlanSpec(max_tokens=(BUDGET,)),
    PlanSpec(max_tokens=(BUDGET,), cost="sum"),
    PlanSpec(max_tokens=(BUDGET,), max_batch_size=12),
    PlanSpec(max_tokens=(BUDGET,), cost="sum", max_batch_size=9, pad_to_multiple_of=8),
    PlanSpec(batch_size=16),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.cost}-{s.batch_size}-{s.max_batch_size}")
def test_closed_form_counts_equal_the_greedy_cut(spec):
    rng = np.random.default_rng(1)
    rounded = np.unique(np.concatenate([rng.integers(1, 900, 30), [0, 2500, 5000, 9000]]))  # some over budget
    histograms = rng.integers(0, 40, (300, len(rounded))) * (rng.random((300, len(rounded))) < 0.6)
    histograms[:5] = 0
    histograms[:5, rng.integers(0, len(rounded), 5)] = rng.integers(1, 4, 5)  # windows of a few samples
    counts = batch_counts(histograms, rounded, spec)
    for row, count in zip(histograms, counts, strict=True):
        largest_first = np.repeat(rounded[::-1], row[::-1])[:, None]
        assert len(cut_batches(largest_first, spec)) - 1 == count


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.cost}-{s.batch_size}-{s.max_batch_size}")
def test_in_window_planner_gives_the_closed_form_count_and_budgets(spec):
    index = ArraySizeIndex.from_sizes(lognormal_chunks(2, 30))
    sizes = sizes_of(index)
    for seed, window in ((0, 20), (5, 7)):
        plan = layout(index, spec, seed=seed, num_replicas=3, window_batches=window)
        assert plan.num_windows > 6
        for w in range(plan.num_windows):
            ids, bounds, window_sizes = read_window(index, plan, w, epoch=1, seed=seed)
            assert len(bounds) == plan.window_counts[w] + plan.window_splits[w]
            np.testing.assert_array_equal(window_sizes, sizes[ids])  # what its batches pad to, read with it
            check_budget([ids[a:b] for a, b in bounds], sizes, spec)


@pytest.mark.parametrize("world", [1, 2, 3, 8, 64, 512])
def test_every_sample_once_and_equal_counts_on_every_world_size(world):
    index = ArraySizeIndex.from_sizes(lognormal_chunks(3, 100, 500, 1100))  # ~10 batches a rank on 512
    sizes = sizes_of(index)
    spec = SPECS[0]
    plan = layout(index, spec, seed=3, num_replicas=world, window_batches=40)
    for epoch in (0, 1):
        ranks = [served(index, plan, r, epoch, seed=3) for r in range(world)]
        assert {len(batches) for batches in ranks} == {plan.batches_per_rank}
        every = np.concatenate([np.concatenate(batches) for batches in ranks])
        np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes)))
        check_budget([b for batches in ranks for b in batches], sizes, spec)
    assert plan.extra_batches == world * plan.batches_per_rank - plan.window_counts.sum()


def test_len_is_constant_and_batches_remix_between_epochs(index):
    plan = StreamBatchPlan(index, max_tokens=BUDGET, seed=4, num_replicas=2, rank=1)  # the default window
    pairs, lengths = [], set()
    for epoch in range(3):
        plan.set_epoch(epoch)
        batches = list(plan)
        lengths |= {len(plan), len(batches)}
        pairs.append({frozenset((a, b)) for batch in batches for a in batch.tolist() for b in batch.tolist() if a < b})
    assert lengths == {plan.layout.batches_per_rank}
    for later in pairs[1:]:
        assert len(pairs[0] & later) < 0.5 * len(pairs[0])  # most pairs batched together part (the contract's test)


def test_extra_batches_are_few_at_the_default_window():
    index = ArraySizeIndex.from_sizes(lognormal_chunks(5, 100, 1500, 2500))
    plan = layout(index, PlanSpec(max_tokens=(8192,)), seed=0, num_replicas=8)
    assert plan.extra_batches <= 0.01 * plan.window_counts.sum()


@pytest.mark.parametrize("world", [64, 256])
def test_pieces_cut_at_real_counts_leave_few_batches_to_split(world):
    # 300k sizes, 60 chunks: pieces of equal expected batches left ~1 batch a rank to split (53 at 64 ranks,
    # 282 at 256); cut where every piece but the last has T real batches, a few at most
    index = ArraySizeIndex.from_sizes(lognormal_chunks(8, 60, 4000, 6000))
    sizes = sizes_of(index)
    spec = PlanSpec(max_tokens=(BUDGET,))
    plan = layout(index, spec, seed=0, num_replicas=world)
    per_rank = np.bincount(plan.window_rank, plan.window_counts, minlength=world)
    assert (per_rank[:-1] == plan.batches_per_rank).all()
    assert plan.extra_batches == plan.batches_per_rank - per_rank[-1] <= world // 8
    ranks = [served(index, plan, r, 0, seed=0) for r in range(world)]
    assert {len(batches) for batches in ranks} == {plan.batches_per_rank}
    every = np.concatenate([np.concatenate(batches) for batches in ranks])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes)))
    check_budget([b for batches in ranks for b in batches], sizes, spec)


@pytest.mark.parametrize("world", [2, 3, 20])
def test_empty_chunks_get_no_segment_and_every_sample_is_served_once(world):
    base = ArraySizeIndex.from_sizes(lognormal_chunks(4, 12, 100, 400))
    chunks, histograms = list(base._chunks), list(base._histograms)
    for at in (0, 5, 9, 14):
        chunks.insert(at, np.zeros((0, 1), np.int32))
        histograms.insert(at, np.zeros_like(histograms[0]))
    index = ArraySizeIndex(chunks, np.stack(histograms), "with-empty-chunks")
    sizes = sizes_of(index)
    for spec in (SPECS[0], SPECS[1]):
        plan = layout(index, spec, seed=2, num_replicas=world, window_batches=5)
        assert (index.samples_per_chunk[plan.seg_chunk] > 0).all()
        ranks = [served(index, plan, r, 0, seed=2) for r in range(world)]
        assert {len(batches) for batches in ranks} == {plan.batches_per_rank}
        every = np.concatenate([np.concatenate(batches) for batches in ranks])
        np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes)))


def efficiency(batches, sizes) -> float:
    return sum(sizes[b].sum() for b in batches) / sum(len(b) * sizes[b].max() for b in batches)


def test_padding_within_half_a_point_of_the_global_plan():
    index = ArraySizeIndex.from_sizes(lognormal_chunks(6, 150, 3500, 4500, top=8192))  # 600k sizes
    sizes = sizes_of(index)
    spec = PlanSpec(max_tokens=(8192,))
    plan = layout(index, spec, seed=0, num_replicas=2)  # the default window: 5 windows a rank
    assert plan.num_windows >= 8
    ours = [b for r in range(2) for b in served(index, plan, r, 0, seed=0)]
    whole = build_plan(sizes[:, None], spec, shuffle=True, seed=0, epoch=0)
    theirs = [whole.order[a:b] for a, b in whole.bounds]
    assert efficiency(ours, sizes) >= efficiency(theirs, sizes) - 0.005


def run(plans, epoch: int, stop: int | None = None) -> list[list[np.ndarray]]:
    out = []
    for plan in plans:
        plan.set_epoch(epoch)
        batches = []
        for batch in plan:
            batches.append(batch)
            if stop is not None and len(batches) == stop:
                break
        out.append(batches)
    return out


def plans_on(index, world: int, **kwargs) -> list[StreamBatchPlan]:
    return [
        StreamBatchPlan(index, max_tokens=BUDGET, seed=7, num_replicas=world, rank=r, window_batches=30, **kwargs)
        for r in range(world)
    ]


def test_mid_epoch_resume_equals_the_uninterrupted_run(index):
    whole = run(plans_on(index, 3), epoch=1)
    stopped = plans_on(index, 3)
    before = run(stopped, epoch=1, stop=17)
    state = stopped[0].state_dict()
    assert state == stopped[2].state_dict() and state["batches_served"] == 17
    resumed = plans_on(index, 3)
    for plan in resumed:
        plan.load_state_dict(state)
    after = run(resumed, epoch=1)
    for rank in range(3):
        assert len(before[rank]) + len(after[rank]) == len(whole[rank])
        for got, want in zip(before[rank] + after[rank], whole[rank], strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("saved", "resumed", "lanes"), [(2, 4, 1), (4, 3, 1), (8, 3, 1), (4, 1, 1), (3, 2, 2)])
def test_elastic_resume_serves_the_rest_once_with_equal_counts(index, saved, resumed, lanes):
    sizes = sizes_of(index)
    old = plans_on(index, saved, lanes=lanes)
    stop = old[0].layout.batches_per_rank // 3
    before = run(old, epoch=2, stop=stop)
    state = old[0].state_dict()
    new = plans_on(index, resumed, lanes=3)
    for plan in new:
        plan.load_state_dict(state)
    assert len({len(plan) for plan in new}) == 1
    after = run(new, epoch=2)
    assert {len(batches) for batches in after} == {len(new[0]) - stop}
    every = np.concatenate([b for batches in before + after for b in batches])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes)))
    check_budget([b for batches in after for b in batches], sizes, new[0].spec)
    # a second elastic move inside the same epoch, then the next epoch is the new world size's own
    middle = new[0].state_dict()
    assert middle["segments"] == [[saved, stop, lanes]]
    again = plans_on(index, 2)
    for plan in again:
        plan.load_state_dict(middle)
        plan.set_epoch(3)
    assert len(again[0]) == again[0].layout.batches_per_rank


@pytest.mark.parametrize(("rows", "lanes"), [(10, 3), (9, 3), (2, 4), (7, 1), (0, 2)])
def test_interleave_deals_contiguous_stretches_in_turn(rows, lanes):
    order = interleave(np.arange(rows), lanes)
    assert sorted(order.tolist()) == list(range(rows))
    used = max(1, min(lanes, rows))
    for lane in range(used):
        stretch = order[lane::used]  # what loader worker `lane` receives: consecutive rows
        assert len(stretch) in (rows // used, -(-rows // used))
        assert np.array_equal(np.diff(stretch), np.ones(max(0, len(stretch) - 1)))


def test_lanes_order_a_ranks_batches_and_never_change_them(index):
    """Lane l (rows l, l + 3, ... of a rank's epoch) reads whole windows, one after the other; the batches are
    the one-lane plan's, as many."""
    one, three = plans_on(index, 2), plans_on(index, 2, lanes=3)
    for epoch in (0, 1):
        for a, b in zip(run(one, epoch), run(three, epoch), strict=True):
            assert len(a) == len(b) and sorted(map(tuple, a)) == sorted(map(tuple, b))
            assert [x.tolist() for x in a] != [x.tolist() for x in b]
    plan = three[1]
    windows = plan.epoch_batches(1)[1][:, 0]
    for lane in range(3):
        mine = windows[lane::3]
        changes = np.flatnonzero(np.diff(mine)) + 1
        assert len(set(mine.tolist())) == len(changes) + 1  # a window, once left, is never come back to
    shared = [w for w in set(windows.tolist()) if len({i % 3 for i in np.flatnonzero(windows == w)}) > 1]
    assert len(shared) <= 2  # only where a lane's stretch ends inside a window


def test_an_epoch_resumed_with_other_lanes_serves_each_ranks_rest_in_the_new_lanes(index):
    whole = run(plans_on(index, 2, lanes=2), epoch=1)
    stopped = plans_on(index, 2, lanes=2)
    before = run(stopped, epoch=1, stop=11)
    state = stopped[0].state_dict()
    assert state["lanes"] == 2
    resumed = plans_on(index, 2, lanes=3)  # the loader now has 3 workers
    for plan in resumed:
        plan.load_state_dict(state)
    assert resumed[0].state_dict()["lanes"] == 3 and resumed[0].state_dict()["segments"] == [[2, 11, 2]]
    after = run(resumed, epoch=1)
    for rank in range(2):  # each rank serves its own rest: the same batches as the uninterrupted run
        assert sorted(b.tolist() for b in before[rank] + after[rank]) == sorted(b.tolist() for b in whole[rank])
        windows = resumed[rank].epoch_batches(1)[1][:, 0]
        for lane in range(3):  # in the new lanes, each a stretch of whole windows
            mine = windows[lane::3]
            assert len(set(mine.tolist())) == np.count_nonzero(np.diff(mine)) + 1
    nxt, fresh = run(resumed, epoch=2), run(plans_on(index, 2, lanes=3), epoch=2)  # the next epoch: 3 lanes
    assert [[b.tolist() for b in r] for r in nxt] == [[b.tolist() for b in r] for r in fresh]
    assert resumed[0].state_dict()["lanes"] == 3
    unstarted = plans_on(index, 2, lanes=2)[0].state_dict()  # nothing served: the new lanes from its start
    again = plans_on(index, 2, lanes=3)
    for plan in again:
        plan.load_state_dict(unstarted)
    assert again[0].state_dict()["lanes"] == 3
    assert [[b.tolist() for b in r] for r in run(again, 0)] == [
        [b.tolist() for b in r] for r in run(plans_on(index, 2, lanes=3), 0)
    ]
    with pytest.raises(ValueError, match="lanes"):
        StreamBatchPlan(index, max_tokens=BUDGET, lanes=0)


def test_two_elastic_moves_in_one_epoch(index):
    sizes = sizes_of(index)
    first = plans_on(index, 2)
    part1 = run(first, epoch=0, stop=5)
    second = plans_on(index, 3)
    for plan in second:
        plan.load_state_dict(first[0].state_dict())
    part2 = run(second, epoch=0, stop=4)
    third = plans_on(index, 5)
    for plan in third:
        plan.load_state_dict(second[0].state_dict())
    assert third[0].state_dict()["segments"] == [[2, 5, 1], [3, 4, 1]]
    part3 = run(third, epoch=0)
    assert len({len(b) for b in part3}) == 1
    every = np.concatenate([b for part in (part1, part2, part3) for batches in part for b in batches])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(sizes)))


def test_a_state_of_another_index_seed_or_plan_is_refused(index):
    """Another plan's state is refused inside its epoch, naming the settings (at its start it resumes there)."""
    saved = plans_on(index, 2)
    start = saved[0].state_dict()
    run(saved, epoch=0, stop=2)
    state = saved[0].state_dict()
    other = ArraySizeIndex.from_sizes(lognormal_chunks(9, 10))
    for plan, name in (
        (StreamBatchPlan(other, max_tokens=BUDGET, seed=7, window_batches=30), "index"),
        (StreamBatchPlan(index, max_tokens=BUDGET, seed=8, window_batches=30), "seed"),
        (StreamBatchPlan(index, max_tokens=BUDGET, seed=7, window_batches=31), "plan"),
    ):
        with pytest.raises(ValueError, match=f"saved with {name}"):
            plan.load_state_dict(state)
    with pytest.raises(ValueError, match="window_batches 30 -> 31.*saved values.*VARLEN_RESUME=next_epoch"):
        plan.load_state_dict(state)
    plan.load_state_dict(start)
    assert len(plan) == plan.layout.batches_per_rank and plan.epoch == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"max_tokens": (BUDGET,), "num_buckets": 8}, "num_buckets"), ({"max_tokens": (BUDGET, 64)}, "one size axis")],
)
def test_a_bad_spec_is_refused_naming_the_problem(index, kwargs, match):
    with pytest.raises(ValueError, match=match):
        layout(index, PlanSpec(**kwargs), seed=0, num_replicas=1)
    with pytest.raises(ValueError, match="exactly one of batch_size and max_tokens"):
        StreamBatchPlan(index, max_tokens=BUDGET, batch_size=8)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        StreamBatchPlan(index, max_tokens=BUDGET, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="window_batches must be >= 1"):
        StreamBatchPlan(index, max_tokens=BUDGET, window_batches=0)


def test_too_many_ranks_for_the_samples_is_refused():
    index = ArraySizeIndex.from_sizes([np.full(5, 100)])
    with pytest.raises(ValueError, match="use fewer ranks"):
        layout(index, PlanSpec(max_tokens=(BUDGET,)), seed=0, num_replicas=8)


def test_an_index_inconsistent_with_its_histograms_is_refused(index):
    spec = PlanSpec(max_tokens=(BUDGET,))
    miscounted = ArraySizeIndex(index._chunks, index._histograms.copy(), "bad")
    miscounted._histograms[7, 0, 150] += 1
    with pytest.raises(DataError, match="chunk 7 lists .* samples but its histogram counts"):
        layout(miscounted, spec, seed=0, num_replicas=1)
    moved = [c.copy() for c in index._chunks]
    moved[11][0, 0] += 900  # the same count, another bin
    shifted = ArraySizeIndex(moved, index._histograms, "shifted")
    plan = layout(shifted, spec, seed=0, num_replicas=1, window_batches=10)
    window = int(np.searchsorted(plan.window_segments, np.flatnonzero(plan.seg_chunk == 11)[0], side="right") - 1)
    with pytest.raises(DataError, match="chunk 11's sizes do not match its histogram"):
        read_window(shifted, plan, window, 0, 0)
    short = ArraySizeIndex([c[:-1] if i == 3 else c for i, c in enumerate(index._chunks)], index._histograms, "short")
    with pytest.raises(DataError, match="chunk 3 lists"):
        plan = layout(short, spec, seed=0, num_replicas=40)
        for w in range(plan.num_windows):
            read_window(short, plan, w, 0, 0)


def test_simulated_index_sizes_match_its_histograms():
    index = SimulatedSizeIndex(300_000, 4096, seed=1)
    plan = layout(index, PlanSpec(max_tokens=(8192,)), seed=0, num_replicas=4)
    assert plan.window_counts.sum() > 0
    ids, bounds, _ = read_window(index, plan, 0, 0, 0)  # checks the chunk's sizes against its histogram
    assert len(bounds) == plan.window_counts[0] + plan.window_splits[0]
    assert len(np.unique(ids)) == len(ids) == plan.window_histograms[0].sum()


def test_a_late_state_loads_on_more_ranks_than_its_rest_can_feed():
    """Saved on 2 ranks with 2 batches (4 samples) left, loaded on 8: every rank gets one batch, a sample
    repeated for each rank the rest cannot feed (with a warning that counts them); nothing is lost."""
    index = ArraySizeIndex.from_sizes([np.arange(1, 26)] * 4)

    def plans_on(world):
        return [StreamBatchPlan(index, batch_size=2, seed=7, num_replicas=world, rank=r) for r in range(world)]

    old = plans_on(2)
    per_rank = old[0].layout.batches_per_rank
    before = run(old, epoch=0, stop=per_rank - 1)
    new = plans_on(8)
    with pytest.warns(UserWarning, match="4 batch\\(es\\) repeat a sample"):
        for plan in new:
            plan.load_state_dict(old[0].state_dict())
        after = run(new, epoch=0)
    assert [len(batches) for batches in after] == [1] * 8 and {len(p) for p in new} == {per_rank}
    served = np.concatenate([b for batches in before + after for b in batches])
    assert sorted(set(served.tolist())) == list(range(100)) and len(served) == 104
    assert [len(p) for p in new] == [per_rank] * 8


@pytest.mark.parametrize("lanes", [1, 3])
def test_an_elastic_rest_reads_each_window_once_per_lane(index, monkeypatch, lanes):
    """Resumed from 3 ranks onto 5, a rank's rest is laid out window by window: each window it serves is read
    once per lane that serves it (interleaved, it was read again for almost every batch)."""
    import varlen.stream.epochs as plan_state

    reads = []

    def counting(index, plan, window, epoch, seed):
        reads.append(window)
        return read_window(index, plan, window, epoch, seed)

    old = plans_on(index, 3)
    run(old, epoch=1, stop=old[0].layout.batches_per_rank // 4)
    new = plans_on(index, 5, lanes=lanes)
    for plan in new:
        plan.load_state_dict(old[0].state_dict())
    monkeypatch.setattr(plan_state, "read_window", counting)
    for plan in new:
        reads.clear()
        run([plan], epoch=1)
        windows = plan.epoch_batches(1)[1][:, 0]
        assert len(reads) <= len(set(windows.tolist())) + lanes - 1, (reads, windows)


def test_an_index_of_sizes_with_an_empty_chunk_is_built():
    """Found by hypothesis: ArraySizeIndex.from_sizes failed on an empty chunk (reshape of 0 sizes)."""
    index = ArraySizeIndex.from_sizes([np.array([], dtype=int), np.array([3, 5])])
    assert index.samples_per_chunk.tolist() == [0, 2] and index.sizes(1)[:, 0].tolist() == [3, 5]
    plan = StreamBatchPlan(index, max_tokens=BUDGET)
    assert sorted(i for batch in plan for i in batch.tolist()) == [0, 1]


def test_a_streamed_batch_carries_the_rung_of_its_longest_sample_read_with_its_window(monkeypatch):
    """Under rungs every batch a streamed sampler serves carries the rung of its longest sample, from the sizes
    its window was read with: the size index is read once per window's chunk, never again per batch."""
    import varlen.stream.sampler as stream_sampler
    from varlen.batching.plan import SIZE_GRID
    from varlen.stream.sampler import StreamBatchSampler

    reads = []

    class Counted(ArraySizeIndex):
        def sizes(self, chunk: int) -> np.ndarray:
            reads.append(chunk)
            return super().sizes(chunk)

    index = Counted.from_sizes(lognormal_chunks(4, 20))
    monkeypatch.setattr(stream_sampler, "SizeIndex", lambda folder: index)
    rungs = [int(SIZE_GRID[i]) for i in np.searchsorted(SIZE_GRID, [64, 160, 400, 1000, 3000])]
    sampler = StreamBatchSampler("folder", max_tokens=BUDGET, rungs=rungs, window_batches=20)
    sizes, ladder = sizes_of(index), sampler.spec.rungs[0]
    reads.clear()
    batches = list(sampler)
    assert len(batches) > 2 * index.num_chunks
    for batch in batches:
        assert batch.widths == (ladder.round(int(sizes[batch].max())),)
    assert len(reads) <= len(sampler.plan.layout.seg_chunk)  # each window read once, its chunks once
