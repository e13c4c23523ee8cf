"""`max_shapes` holds for every epoch a sampler serves, weighted draws included, on any number of ranks, or a
warning says why not; a `rung_batch_sizes` table whose top rung is below a training sample is refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from varlen.batching import BucketBatchSampler
from varlen.batching.schedule import MixtureSchedule
from varlen.batching.schedule_draws import ScheduledWeights
from varlen.datamodules.base import VarLenDataModule, base_args

EPOCHS = 3


class Sized(torch.utils.data.Dataset):
    """Samples of random lengths and two classes, one rarer (`balanced` weights differ)."""

    def __init__(self, n: int, seed: int, rare: float) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(rng.lognormal(rng.uniform(1.5, 4), rng.uniform(0.3, 1.0), n), 1, 300).astype(np.int64)
        self.labels = (rng.random(n) < rare).astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "ids": np.ones(int(self.lengths[i]), np.int64), "label": int(self.labels[i])}


class Weighted(VarLenDataModule):
    ragged_keys = ("ids",)

    def __init__(self, n: int, seed: int, rare: float, weights: str | None, world: int, **batching) -> None:
        super().__init__(**base_args(batching), seed=seed)
        self.sample_weights, self.n, self.rare, self.world = weights, n, rare, world

    def build(self, stage: str | None) -> dict[str, Sized]:
        train, val = Sized(self.n, self.seed, self.rare), Sized(50, self.seed + 1, self.rare)
        return {"train": train, "val": val, "test": val}

    def _world_size(self) -> int:  # the ranks the fit is for (a trainer's world size)
        return self.world


def served_shapes(sampler: BucketBatchSampler) -> int:
    """The most distinct `(batch size, padded length)` pairs of an axis over the first epochs' plans."""
    shapes = np.concatenate([sampler.shapes(epoch) for epoch in range(EPOCHS)])
    return max(len(np.unique(shapes[:, [0, d]], axis=0)) for d in range(1, shapes.shape[1]))


def said_why(caught: list[warnings.WarningMessage], limit: int) -> bool:
    return any(f"max_shapes={limit} cannot hold" in str(w.message) for w in caught)


BUDGETS = st.one_of(
    st.builds(lambda t: {"max_tokens": t}, st.integers(300, 5000)),
    st.builds(lambda b: {"batch_size": b}, st.integers(4, 64)),
)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(200, 2500),
    rare=st.floats(0.05, 0.5),
    world=st.integers(1, 8),
    weights=st.sampled_from([None, "balanced"]),
    limit=st.integers(2, 8),
    budget=BUDGETS,
)
def test_an_epoch_serves_at_most_max_shapes_or_a_warning_says_why(seed, n, rare, world, weights, limit, budget) -> None:
    """A DataModule's rungs, fitted for its world size, hold every epoch its (weighted) sampler serves."""
    dm = Weighted(n, seed, rare, weights, world, max_shapes=limit, **budget)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    sampler = dm.batch_sampler("train", True, num_replicas=world, rank=0)
    assert served_shapes(sampler) <= limit or said_why(caught, limit), (served_shapes(sampler), dm.rungs)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(200, 2500),
    world=st.integers(1, 8),
    weighted=st.booleans(),
    limit=st.integers(2, 8),
    budget=BUDGETS,
)
def test_a_sampler_that_fits_its_own_rungs_holds_them_or_says_why(seed, n, world, weighted, limit, budget) -> None:
    sizes = Sized(n, seed, 0.2)
    weights = np.where(sizes.labels == 1, 5.0, 1.0) if weighted else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = BucketBatchSampler(sizes.lengths, max_shapes=limit, weights=weights, num_replicas=world, **budget)
    assert served_shapes(sampler) <= limit or said_why(caught, limit)


def test_balanced_weights_on_several_ranks_keep_the_limit() -> None:
    """The case found: 4 shapes fitted on the unweighted epoch, 5 served by the balanced draw (4 ranks)."""
    dm = Weighted(2251, 78, 0.2, "balanced", 4, max_shapes=4, max_tokens=1061)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    assert not said_why(caught, 4)
    assert served_shapes(dm.batch_sampler("train", True, num_replicas=4, rank=0)) <= 4


def test_a_rung_table_below_the_longest_training_sample_is_refused_by_name() -> None:
    """Samples past the top rung padded to their own lengths (26 shapes): refused, naming the rung, the sample
    and the way out."""
    dm = Weighted(600, 1, 0.2, None, 1, rung_batch_sizes={16: 64, 32: 32})
    longest = int(Sized(600, 1, 0.2).lengths.max())
    said = rf"top rung 32 is below \d+ training samples \(the longest: sample \d+, size {longest}\)"
    with pytest.raises(ValueError, match=rf"{said}.*add a rung of at least {longest} to rung_batch_sizes"):
        dm.setup("fit")
    fine = Weighted(600, 1, 0.2, None, 1, rung_batch_sizes={16: 64, longest: 4})
    fine.setup("fit")
    assert fine.batch_sampler("train", True).shape_count(0) <= 4


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    world=st.integers(1, 8),
    limit=st.integers(2, 8),
    unit=st.sampled_from(["epoch", "step"]),
)
def test_a_schedule_of_shares_holds_the_limit_at_every_stage(seed, world, limit, unit) -> None:
    """Each stage's draw cuts other batches: the rungs hold over every stage's epochs (an epoch cut in pieces too)."""
    rng = np.random.default_rng(seed)
    sources = np.repeat([0, 1], [800, 400])
    sizes = np.concatenate([rng.integers(1, 40, 800), rng.integers(20, 200, 400)])
    until = 1 if unit == "epoch" else 7
    value = [{"weights": [1, 0.05], f"until_{unit}": until}, {"weights": [0.05, 1]}]
    weights = ScheduledWeights.build(MixtureSchedule.parse(value, ("a", "b"), "test"), sources, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = BucketBatchSampler(sizes, max_tokens=1024, max_shapes=limit, weights=weights, shares=sources,
                                     num_replicas=world)  # fmt: skip
    assert served_shapes(sampler) <= limit or said_why(caught, limit)


class TwoSources(VarLenDataModule):
    ragged_keys = ("ids",)

    def __init__(self, source_weights=None, max_tokens: int = 1024, max_shapes: int = 4) -> None:
        super().__init__(**base_args(locals()))

    def build(self, stage: str | None) -> dict:
        val = Sized(50, 9, 0.2)
        return {"train": {"short": Sized(600, 1, 0.2), "long": Sized(300, 2, 0.2)}, "val": val, "test": val}


def test_a_linear_schedule_says_the_epochs_between_its_stages_are_not_held() -> None:
    stages = [{"weights": [1, 0.1], "until_epoch": 4}, {"weights": [0.1, 1]}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TwoSources(source_weights={"stages": stages, "interpolate": "linear"}).setup("fit")
        TwoSources(source_weights=stages).setup("fit")
    said = [str(w.message) for w in caught if "interpolate: linear" in str(w.message)]
    assert len(said) == 1 and "max_shapes=4 is held at the stages of source_weights" in said[0]
