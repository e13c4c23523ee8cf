"""The contract's checks on loaders and samplers: coverage, rank counts, budgets, workers, resumption."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from varlen.batching import BucketBatchSampler
from varlen.batching.loader import VarLenLoader
from varlen.datamodules.base import VarLenDataModule
from varlen.testing.hooks import ContractHooks
from varlen.testing.runs import batch_indices

__all__ = ["LoaderChecks"]


def _assert_same_batch(a: Any, b: Any) -> None:
    """Two collated batches hold the same tensors (a dict of tensors, or a PyG `Batch`)."""
    items = dict(a.items()) if isinstance(a, Mapping) else dict(a)
    other = dict(b.items()) if isinstance(b, Mapping) else dict(b)
    assert items.keys() == other.keys()
    for name, value in items.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(other[name], value, rtol=0, atol=0, msg=name)
        else:
            assert other[name] == value, name


class LoaderChecks(ContractHooks):
    """What every DataModule's loaders and samplers must do (see `DataModuleContract`)."""

    def test_loaders_are_resumable_and_expose_their_parts(self, datamodule: VarLenDataModule) -> None:
        for loader in (datamodule.train_dataloader(), datamodule.val_dataloader()):
            assert isinstance(loader, StatefulDataLoader)
            assert isinstance(loader.batch_sampler, BucketBatchSampler)
            assert loader.dataset is not None and loader.collate_fn is not None

    def test_train_epoch_serves_every_sample_once(self, datamodule: VarLenDataModule) -> None:
        loader = datamodule.train_dataloader()
        seen: list[int] = []
        count = 0
        for batch in loader:
            seen += batch_indices(batch)
            count += 1
        assert count == len(loader)
        assert sorted(seen) == sorted(self.dataset_indices(datamodule.dataset("train")))

    @pytest.mark.parametrize("world_size", [2, 3])
    def test_ranks_get_equal_counts_and_cover_all(self, datamodule: VarLenDataModule, world_size: int) -> None:
        dataset = datamodule.dataset("train")
        for epoch in (0, 1):
            served, counts = [], set()
            for rank in range(world_size):
                sampler = datamodule.batch_sampler("train", True, num_replicas=world_size, rank=rank)
                sampler.set_epoch(epoch)
                batches = list(sampler)
                counts.add((len(batches), len(sampler)))
                served += [i for b in batches for i in b]
            assert len(counts) == 1 and len({c for pair in counts for c in pair}) == 1
            assert sorted(served) == list(range(len(dataset)))

    def _budgeted(self, batch_size: int | None) -> tuple[VarLenDataModule, list[list[int]]]:
        """A DataModule under `budget_overrides` (capped at `batch_size` samples) and its
        collated training batches, each checked against the budget."""
        dm = self.make_datamodule(**{**self.budget_overrides(), "batch_size": batch_size})
        dm.setup("fit")
        loader = dm.train_dataloader()
        budget = np.asarray(loader.batch_sampler.spec.max_tokens)
        served = []
        for batch in loader:
            cost = np.asarray(self.collated_cost(dm, batch))
            assert cost.size == budget.size, f"collated_cost gave {cost.size} values for {budget.size} budget axes"
            assert len(batch_indices(batch)) == 1 or np.all(cost <= budget), (batch_indices(batch), cost, budget)
            served.append(batch_indices(batch))
        assert len(served) == len(loader) > 1
        return dm, served

    def test_budget_is_held_by_collated_batches(self) -> None:
        """Cost every *collated* batch from its tensors: a `sampler_lengths` that under-reports fails."""
        dm, served = self._budgeted(batch_size=None)
        assert dm.train_dataloader().batch_sampler.spec.max_batch_size is None  # max_tokens alone: no cap
        assert sorted(i for b in served for i in b) == sorted(self.dataset_indices(dm.dataset("train")))

    def test_budget_and_batch_size_compose(self) -> None:
        """Both given: the budget holds and no batch has more than `batch_size` samples (lhotse's
        `max_cuts`); the cap is chosen below the uncapped largest batch, so it must bite."""
        _, uncapped = self._budgeted(batch_size=None)
        largest = max(len(b) for b in uncapped)
        assert largest > 1, "budget_overrides() must allow batches of several samples"
        cap = largest // 2
        dm, capped = self._budgeted(batch_size=cap)
        assert max(len(b) for b in capped) == cap
        assert sorted(i for b in capped for i in b) == sorted(i for b in uncapped for i in b)

    def test_batch_size_alone_gives_batches_of_that_size(self) -> None:
        """`batch_size` without `max_tokens` means exactly that many samples per batch, whatever
        the scenario's default budget; one partial batch (per group, where batches keep to groups)."""
        dm = self.make_datamodule(batch_size=3, max_tokens=None)
        dm.setup("fit")
        sampler = dm.train_dataloader().batch_sampler
        assert sampler.spec.max_tokens is None
        sizes = np.array([len(b) for b in sampler])
        groups = dm.sampler_groups(dm.dataset("train"))
        partial = 1 if groups is None else len(np.unique(groups))
        assert sizes.max() == 3 and sizes.sum() == len(dm.dataset("train"))
        assert (sizes != 3).sum() <= partial, sizes

    @pytest.mark.parametrize("method", multiprocessing.get_all_start_methods())
    def test_workers_serve_the_single_process_batches_under_every_start_method(
        self, datamodule: VarLenDataModule, method: str
    ) -> None:
        """Two workers started by `method` (the dataset and collate pickled to them under spawn
        and forkserver) give the batches one process gives: the first epoch's first four."""
        if method not in self.start_methods:
            pytest.skip(f"{type(self).__name__} checks its dataset and collate under {list(self.start_methods)}")
        sampler = datamodule.batch_sampler("train", True)
        sampler.set_epoch(1)
        plain = VarLenLoader(datamodule.dataset("train"), batch_sampler=sampler, collate_fn=datamodule.collate_fn)
        workers = VarLenLoader(
            datamodule.dataset("train"),
            batch_sampler=sampler,
            collate_fn=datamodule.collate_fn,
            num_workers=2,
            multiprocessing_context=method,
        )
        expected = [b for _, b in zip(range(4), plain, strict=False)]
        got = [b for _, b in zip(range(4), workers, strict=False)]
        workers.shutdown_workers()
        assert len(got) == len(expected) == min(4, len(sampler))
        for a, b in zip(expected, got, strict=True):
            _assert_same_batch(a, b)

    def test_resume_mid_epoch_matches_uninterrupted(self, datamodule: VarLenDataModule) -> None:
        loader = datamodule.train_dataloader()
        loader.batch_sampler.set_epoch(1)
        full = [batch_indices(b) for b in loader]
        cut = max(1, len(full) // 2)
        loader = datamodule.train_dataloader()
        loader.batch_sampler.set_epoch(1)
        iterator = iter(loader)
        head = [batch_indices(next(iterator)) for _ in range(cut)]
        state = loader.state_dict()
        resumed = datamodule.train_dataloader()
        resumed.load_state_dict(state)
        assert head + [batch_indices(b) for b in resumed] == full

    def test_batches_differ_between_epochs(self, datamodule: VarLenDataModule) -> None:
        """Which samples go together changes, not only the order of the same batches: most of
        epoch 1's batches are new, and most pairs of samples batched together in epoch 0 part
        (a bucket of a few samples would keep them together: see `plan.populated_edges`).
        Where batches keep to groups (`sampler_groups`), groups of fewer than three batches
        cannot re-mix and are left out."""
        sampler = datamodule.train_dataloader().batch_sampler
        epochs = []
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            epochs.append([frozenset(int(i) for i in b) for b in sampler])
        groups = datamodule.sampler_groups(datamodule.dataset("train"))
        if groups is not None:
            count = Counter(int(groups[min(b)]) for b in epochs[0])
            epochs = [[b for b in e if count[int(groups[min(b)])] >= 3] for e in epochs]
            assert epochs[0], "no group fills three batches: too little data to see batches re-mix"
        first, second = epochs
        several = [b for b in second if len(b) > 1]
        repeated = sum(b in set(first) for b in several) / max(1, len(several))
        assert repeated < 0.5, f"{repeated:.0%} of epoch 1's batches repeat epoch 0's"
        pairs = [{frozenset((a, b)) for batch in e for a in batch for b in batch if a < b} for e in epochs]
        assert pairs[0], "no batch of epoch 0 holds two samples"
        together = len(pairs[0] & pairs[1]) / len(pairs[0])
        assert together < 0.5, f"{together:.0%} of the pairs batched together in epoch 0 are again in epoch 1"
