"""Property-based tests (hypothesis) of the in-memory sampler and the streamed plan, over random sizes
(empty chunks, sizes over the budget), budgets and costs, world sizes 1-16, lanes, weights (zeros too),
groups, mixtures, stop points anywhere in an epoch (the last batch too) and W -> W' -> W'' resumes.

Properties: every sample (or every drawn index) once per epoch, equal batch counts per rank, budgets held
(with the shape policy on and off; on: within `max_shapes` distinct shapes, the same ones every epoch),
the same batches in a new process, a resume equal to the uninterrupted run, and served shares within a 99%
interval of the requested ones over many epochs. Example counts are bounded (`VARLEN_HYPOTHESIS_EXAMPLES`
scales them) so that the suite stays within its time; failing examples found are kept as regression tests
(beside the tests of what they broke, each naming that hypothesis found it).
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from varlen.batching import BucketBatchSampler
from varlen.batching.padding import round_up
from varlen.batching.plan import PlanSpec
from varlen.batching.shape_policy import Rungs
from varlen.stream.epochs import StreamBatchPlan
from varlen.stream.memory_index import ArraySizeIndex
from varlen.stream.shape_policy import histogram_rungs

SCALE = float(os.environ.get("VARLEN_HYPOTHESIS_EXAMPLES", "1"))
#: the suite's examples are the same every run (CI stays reproducible); set VARLEN_HYPOTHESIS_RANDOM=1 to explore
RANDOM = bool(os.environ.get("VARLEN_HYPOTHESIS_RANDOM"))


def bounded(examples: int):
    """Settings of a property: `examples` examples (scaled) and a generous deadline per example."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=20_000,
        derandomize=not RANDOM,
        database=None if not RANDOM else settings.default.database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- strategies -----------------------------------------------------------------------------------


@st.composite
def budgets(draw) -> dict:
    """A batch size, or a token budget with its cost, cap and rounding."""
    if draw(st.booleans()):
        return {"batch_size": draw(st.integers(1, 40))}
    spec = {"max_tokens": draw(st.integers(16, 4096)), "cost": draw(st.sampled_from(["padded", "sum", "packed"]))}
    if draw(st.booleans()):
        spec["max_batch_size"] = draw(st.integers(1, 32))
    if draw(st.booleans()):
        spec["pad_to_multiple_of"] = draw(st.sampled_from([2, 8]))
    return spec


def sizes_of(draw, n: int) -> np.ndarray:
    """`n` sizes: lognormal-like around a drawn scale, some over any budget, some zero."""
    scale = draw(st.floats(1.0, 8.0))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    sizes = np.clip(np.rint(rng.lognormal(scale, 1.0, n)), 0, 6000).astype(np.int64)
    return sizes


@st.composite
def sampler_cases(draw) -> dict:
    n = draw(st.integers(1, 300))
    case = {"sizes": sizes_of(draw, n), "budget": draw(budgets()), "seed": draw(st.integers(0, 99))}
    case["world"] = draw(st.integers(1, min(16, n)))
    if draw(st.booleans()):
        weights = np.asarray(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=n, max_size=n)))
        assume(weights.any())
        case["weights"] = weights
        case["replacement"] = draw(st.booleans())
        nonzero = int((weights > 0).sum())
        if draw(st.booleans()):
            case["num_samples"] = draw(st.integers(1, nonzero if not case["replacement"] else 2 * n))
        elif not case["replacement"]:
            case["num_samples"] = nonzero
        assume(case.get("num_samples", n) >= case["world"])
    if draw(st.booleans()):
        case["groups"] = np.asarray(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    if case["budget"].get("cost") in (None, "padded") and draw(st.booleans()):  # the shape policy on, or off
        case["max_shapes"] = draw(st.integers(1, 40))
    return case


def make_sampler(case: dict, world: int, rank: int, rungs=None) -> BucketBatchSampler:
    """The case's sampler of `rank` on `world` ranks; with `rungs` (a run's, resumed on another world
    size), cut for them instead of fitting its own to `max_shapes`."""
    extra = {k: case[k] for k in ("weights", "replacement", "num_samples", "groups", "max_shapes") if k in case}
    return BucketBatchSampler(
        case["sizes"], num_replicas=world, rank=rank, seed=case["seed"], rungs=rungs, **case["budget"], **extra
    )


def within_budget(batch: list[int], sizes: np.ndarray, budget: dict) -> bool:
    if "batch_size" in budget:
        return len(batch) <= budget["batch_size"]
    if len(batch) > budget.get("max_batch_size", len(batch)):
        return False
    multiple = None if budget["cost"] == "packed" else budget.get("pad_to_multiple_of")  # packed: the row is padded
    real = round_up(sizes[batch][:, None], multiple)[:, 0]
    cost = real.sum() if budget["cost"] in ("sum", "packed") else len(batch) * real.max()
    return len(batch) == 1 or cost <= budget["max_tokens"]


def epoch_of(samplers, epoch: int | None, stop: int | None = None) -> list[list[list[int]]]:
    """Each rank's batches of `epoch` (None: the one a loaded state set), its first `stop` (the next is
    not taken, so a state names them)."""
    out = []
    for sampler in samplers:
        if epoch is not None:
            sampler.set_epoch(epoch)
        batches, iterator = [], iter(sampler)
        while stop is None or len(batches) < stop:
            batch = next(iterator, None)
            if batch is None:
                break
            batches.append([int(i) for i in batch])
        out.append(batches)
    return out


def flat(per_rank) -> Counter:
    return Counter(int(i) for rank in per_rank for batch in rank for i in batch)


def serve_moves(make, steps, state: dict, epoch: int) -> tuple[Counter, list | None, int]:
    """An epoch saved in `state` served on by each of `steps` (`(args of make, share)`: the plans of a
    world size, and the share of the batches left each serves before it is saved again; the last serves the
    rest). Every part has equal counts per rank. Returns what the parts served, the first part's batches
    when it was the only one, and the last state's batches served (the epoch's end when it ran)."""
    total, first = Counter(), None
    for number, (args, share) in enumerate(steps):
        plans = make(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for plan in plans:
                plan.load_state_dict(state)
            if plans[0].epoch != epoch:  # the saved epoch was over: the next one starts
                assert {p.epoch for p in plans} == {epoch + 1}
                return total, None, len(plans[0])
            assert len({len(p) for p in plans}) == 1
            left = len(plans[0]) - state["batches_served"]
            part = epoch_of(plans, None, None if number == len(steps) - 1 else int(share * left))
        assert len({len(rank) for rank in part}) == 1
        first = part if len(steps) == 1 else None
        total += flat(part)
        state = plans[0].state_dict()
    assert state["batches_served"] == len(plans[0])  # the epoch is over on every rank
    return total, first, state["batches_served"]


# -- the in-memory sampler ------------------------------------------------------------------------


@bounded(60)
@given(case=sampler_cases(), epoch=st.integers(0, 3))
def test_an_epoch_serves_every_sample_once_in_equal_counts_within_budget(case: dict, epoch: int) -> None:
    world = case["world"]
    samplers = [make_sampler(case, world, rank) for rank in range(world)]
    batches = epoch_of(samplers, epoch)
    assert len({len(rank) for rank in batches} | {len(s) for s in samplers}) == 1
    served = flat(batches)
    draw = samplers[0].draw
    want = Counter(range(len(case["sizes"]))) if draw is None else Counter(draw.sample(case["seed"], epoch).tolist())
    # every sample (drawn index) once; a few repeated (fewer than the ranks) only where the samples are too
    # few to split into a multiple of the ranks' batches, so that every rank gets as many
    repeated = sum(served.values()) - sum(want.values())
    assert want - served == Counter() and 0 <= repeated < world
    if repeated:
        assert all(len(batch) == 1 for rank in batches for batch in rank)
    if draw is not None:
        assert not any(case["weights"][i] == 0 for i in served)
    for rank in batches:
        for batch in rank:
            assert batch and within_budget(batch, case["sizes"], case["budget"])
            if "groups" in case:
                assert len(set(case["groups"][batch].tolist())) == 1
    if "max_shapes" in case:  # within the limit, unless one padded length per axis already exceeds it
        sampler = samplers[0]
        assert sampler.shape_count(epoch) <= case["max_shapes"] or all(len(r.lengths) == 1 for r in sampler.rungs)
        assert set(map(tuple, sampler.shapes(epoch))) == set(map(tuple, sampler.shapes(0)))  # the same every epoch


@bounded(50)
@given(data=st.data(), case=sampler_cases(), epoch=st.integers(0, 2))
def test_resumes_on_any_world_sizes_serve_the_uninterrupted_epoch(data, case: dict, epoch: int) -> None:
    """Saved anywhere (the last batch too), resumed on W', saved again and resumed on W'': every rank serves
    as many batches in each part; together the parts serve the uninterrupted epoch's samples (a sample
    repeated only to give a rank a batch when fewer are left than ranks); on the saved world size, exactly
    the uninterrupted run's batches."""
    world = case["world"]
    first = [make_sampler(case, world, rank) for rank in range(world)]
    whole = epoch_of([make_sampler(case, world, rank) for rank in range(world)], epoch)
    draw = first[0].draw  # what the epoch serves, before any repeat that gives every rank a batch
    want = Counter(range(len(case["sizes"]))) if draw is None else Counter(draw.sample(case["seed"], epoch).tolist())
    most = min(16, case.get("num_samples", len(case["sizes"])))  # more ranks than samples: a usage error
    moves = st.tuples(st.integers(1, most), st.floats(0, 1))
    steps = data.draw(st.lists(moves, min_size=1, max_size=3))
    stop = data.draw(st.integers(0, len(whole[0])))
    served = epoch_of(first, epoch, stop)
    assert served == [rank[:stop] for rank in whole]
    make = lambda world: [make_sampler(case, world, rank, first[0].rungs) for rank in range(world)]  # noqa: E731
    total, alone, _ = serve_moves(make, [((w,), share) for w, share in steps], first[0].state_dict(), epoch)
    if alone is not None and steps[0][0] == world:  # resumed on the saved world size: the uninterrupted run
        assert [a + b for a, b in zip(served, alone, strict=True)] == whole
    total += flat(served)
    # nothing lost; a sample repeated only to give each rank a batch when fewer were left than ranks
    assert want - total == Counter() and sum(total.values()) - sum(want.values()) < world + sum(w for w, _ in steps)


def digest(case: dict, world: int, epoch: int) -> list[list[list[int]]]:
    return epoch_of([make_sampler(case, world, rank) for rank in range(world)], epoch)


@pytest.fixture(scope="module")
def fresh_process():
    """A spawned interpreter (its own hash seed, nothing inherited) that recomputes plans."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


@bounded(15)
@given(case=sampler_cases(), epoch=st.integers(0, 5))
def test_a_new_process_plans_the_same_batches(fresh_process, case: dict, epoch: int) -> None:
    here = digest(case, case["world"], epoch)
    assert fresh_process.apply(digest, (case, case["world"], epoch)) == here


@st.composite
def mixtures(draw) -> dict:
    """Two to four sources of 20-400 samples, each asked for at least 2 samples an epoch."""
    counts = draw(st.lists(st.integers(20, 400), min_size=2, max_size=4))
    raw = np.asarray(draw(st.lists(st.floats(0.01, 1.0), min_size=len(counts), max_size=len(counts))))
    shares = raw / raw.sum()
    n = sum(counts)
    assume((shares * n >= 2).all())
    sizes = sizes_of(draw, n)
    sources = np.repeat(np.arange(len(counts)), counts)
    weights = shares[sources] / np.asarray(counts)[sources]
    mix = draw(st.sampled_from(["within_batch", "per_source"]))
    return {"sizes": sizes, "sources": sources, "shares": shares, "weights": weights, "mix": mix,
            "budget": draw(budgets()), "seed": draw(st.integers(0, 99))}  # fmt: skip


@bounded(20)
@given(case=mixtures())
def test_each_source_is_served_its_share_within_a_99_percent_interval(case: dict) -> None:
    """Over 30 epochs a source serves its asked share of the epochs' samples within a 99% binomial interval
    (the per-epoch counts are fixed, within one sample of the share). Found by hypothesis: under within_batch
    the fixed counts per size bucket biased a source spread thinly over them (2.07 of 2.86 asked an epoch)."""
    groups = case["sources"] if case["mix"] == "per_source" else None  # as the DataModule passes them
    sampler = BucketBatchSampler(case["sizes"], seed=case["seed"], weights=case["weights"], groups=groups,
                                 shares=case["sources"], **case["budget"])  # fmt: skip
    epochs, n = 30, len(case["sizes"])
    served = np.zeros(len(case["shares"]), np.int64)
    for epoch in range(epochs):
        served += np.bincount(case["sources"][sampler.global_plan(epoch).order], minlength=len(served))
    low, high = binom.ppf(0.005, n * epochs, case["shares"]), binom.ppf(0.995, n * epochs, case["shares"])
    assert ((low <= served) & (served <= high)).all(), (served / epochs, case["shares"] * n)


# -- the streamed plan ----------------------------------------------------------------------------


@st.composite
def stream_cases(draw) -> dict:
    chunks = draw(st.lists(st.integers(0, 60), min_size=1, max_size=10))
    assume(sum(chunks) >= 1)
    sizes = np.maximum(sizes_of(draw, sum(chunks)), 1)  # an index's sizes: at least one element
    budget = draw(budgets())
    case = {
        "chunks": np.split(sizes, np.cumsum(chunks)[:-1]),
        "budget": budget,
        "seed": draw(st.integers(0, 99)),
        "world": draw(st.integers(1, 8)),
        "lanes": draw(st.integers(1, 4)),
        "window_batches": draw(st.integers(1, 40)),
    }
    if budget.get("cost") in (None, "padded") and draw(st.booleans()):  # the shape policy's rungs, or the grid's
        index = ArraySizeIndex.from_sizes(case["chunks"])
        total = index.histograms(0).sum(axis=0)
        spec = PlanSpec(**{k: v for k, v in budget.items() if k != "max_tokens"}, max_tokens=(budget["max_tokens"],)) \
            if "max_tokens" in budget else PlanSpec(**budget)  # fmt: skip
        case["rungs"] = list(histogram_rungs(total, index.edges, spec, draw(st.integers(1, 12)))[0].lengths)
    return case


def stream_plans(case: dict, world: int, lanes: int) -> list[StreamBatchPlan]:
    index = ArraySizeIndex.from_sizes(case["chunks"])
    try:
        return [
            StreamBatchPlan(
                index,
                seed=case["seed"],
                num_replicas=world,
                rank=rank,
                lanes=lanes,
                window_batches=case["window_batches"],
                rungs=case.get("rungs"),
                **case["budget"],
            )  # fmt: skip
            for rank in range(world)
        ]
    except ValueError as error:  # a documented refusal: too few samples for the ranks
        assume("use fewer ranks or more data" not in str(error))
        raise


stream_epoch = epoch_of


@bounded(50)
@given(case=stream_cases(), epoch=st.integers(0, 3))
def test_a_streamed_epoch_serves_every_sample_once_in_equal_counts_within_budget(case: dict, epoch: int) -> None:
    plans = stream_plans(case, case["world"], case["lanes"])
    batches = stream_epoch(plans, epoch)
    assert len({len(rank) for rank in batches} | {len(p) for p in plans}) == 1
    sizes = np.concatenate(case["chunks"])
    assert flat(batches) == Counter(range(len(sizes)))
    for rank in batches:
        for batch in rank:
            assert batch and within_budget(batch, sizes, case["budget"])
    if "rungs" in case:  # every batch pads to a rung, and the plan's shapes are the batches' (none left out)
        rungs = Rungs(tuple(case["rungs"]))
        met = {(len(b), int(rungs.round(int(sizes[b].max())))) for rank in batches for b in rank}
        assert met == plans[0].shapes(epoch)


@bounded(40)
@given(data=st.data(), case=stream_cases(), epoch=st.integers(0, 2))
def test_streamed_resumes_on_any_world_sizes_and_lanes_serve_the_uninterrupted_epoch(data, case, epoch) -> None:
    world, lanes = case["world"], case["lanes"]
    whole = stream_epoch(stream_plans(case, world, lanes), epoch)
    want = Counter(range(sum(len(c) for c in case["chunks"])))
    stop = data.draw(st.integers(0, len(whole[0])))
    first = stream_plans(case, world, lanes)
    served = stream_epoch(first, epoch, stop)
    assert served == [rank[:stop] for rank in whole]
    moves = st.tuples(st.integers(1, 8), st.integers(1, 4), st.floats(0, 1))
    steps = data.draw(st.lists(moves, min_size=1, max_size=3))
    make = lambda world, ways: stream_plans(case, world, ways)  # noqa: E731
    total, alone, _ = serve_moves(make, [((w, ways), share) for w, ways, share in steps], first[0].state_dict(), epoch)
    if alone is not None and steps[0][:2] == (world, lanes):
        assert [a + b for a, b in zip(served, alone, strict=True)] == whole
    total += flat(served)
    assert want - total == Counter() and sum(total.values()) - sum(want.values()) < sum(w for w, _, _ in steps)


def stream_digest(case: dict, epoch: int) -> list[list[list[int]]]:
    return stream_epoch(stream_plans(case, case["world"], case["lanes"]), epoch)


@bounded(10)
@given(case=stream_cases(), epoch=st.integers(0, 5))
def test_a_new_process_plans_the_same_streamed_batches(fresh_process, case: dict, epoch: int) -> None:
    here = stream_digest(case, epoch)
    assert fresh_process.apply(stream_digest, (case, epoch)) == here
