"""The contract every varlen DataModule and model keeps, as a pytest base class.

Each scenario's tests subclass :class:`DataModuleContract` and implement ``make_datamodule``
and ``make_model`` (and, for the bad-input matrix, :meth:`DataModuleContract.bad_input`); the
shared tests then check coverage, equal rank counts, budgets on collated batches, resumption,
per-sample outputs, padding invariance, the report, bad input, the CLI and a real 2-process DDP
run whose metrics must equal one process's. Use it for your own DataModules too.
:class:`StepCounter` and :class:`ValidationRecorder` record what each rank did, for DDP tests.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from varlen.batching import BucketBatchSampler
from varlen.batching.loader import VarLenLoader
from varlen.datamodules.base import VarLenDataModule
from varlen.errors import DataError, DatasetNotFoundError
from varlen.models.base import VarLenModule

__all__ = [
    "BAD_INPUT_CASES",
    "BadInput",
    "DataModuleContract",
    "StepCounter",
    "ValidationRecorder",
    "batch_indices",
    "ddp_fit",
    "run_cli",
]

#: the bad-input matrix every DataModule is checked against (see :meth:`DataModuleContract.bad_input`)
BAD_INPUT_CASES = ("missing_source", "unreadable_file", "empty_source", "non_finite", "empty_sample", "unknown_label")


@dataclass(frozen=True)
class BadInput:
    """One case of the bad-input matrix, as DataModule arguments that produce it.

    Attributes:
        overrides: arguments for ``make_datamodule`` (besides ``on_bad``).
        message: a regular expression the raised error's message must match (it should name
            the file, row or sample).
        skipped: a part of the reason ``dm.report`` counts under ``on_bad="skip"``; None when
            the case cannot be skipped (nothing usable is left), so it raises under both policies.
    """

    overrides: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    skipped: str | None = None


class StepCounter(pl.Callback):
    """Writes, per rank, the optimizer steps taken and the sample indices trained on.

    Args:
        out_dir: folder for ``rank<r>.json``.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.indices: list[int] = []
        self.batches = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches += 1
        self.indices.extend(batch_indices(batch))

    def on_train_end(self, trainer, pl_module) -> None:
        Path(self.out_dir).mkdir(parents=True, exist_ok=True)
        record = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "global_step": trainer.global_step,
            "batches": self.batches,
            "indices": self.indices,
            "num_training_batches": trainer.num_training_batches,
        }
        (Path(self.out_dir) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


class ValidationRecorder(pl.Callback):
    """After each (non-sanity) validation: the epoch metrics as JSON and a checkpoint of the weights.

    Args:
        out_dir: folder for ``val_metrics.json`` and ``validated.ckpt`` (written by rank 0).
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        out = Path(self.out_dir)
        trainer.save_checkpoint(out / "validated.ckpt")  # every rank calls it; rank 0 writes
        if trainer.global_rank == 0:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            (out / "val_metrics.json").write_text(json.dumps(metrics))


def run_cli(args: Sequence[str], cwd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m varlen ARGS`` in a subprocess (DDP needs its own process tree)."""
    # one thread per rank: two ranks with a thread per core each would oversubscribe the cores
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "varlen", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise AssertionError(f"varlen {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def ddp_fit(config: str | Path, tmp_path: Path, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """A real 2-process CPU (gloo) fit of ``config`` for one epoch; returns each rank's record.

    Validation runs in full at the end of the epoch; its metrics and weights are written to
    ``tmp_path/steps`` by :class:`ValidationRecorder`.
    """
    out = tmp_path / "steps"
    run_cli(
        [
            "fit",
            "--config",
            str(Path(config).resolve()),
            "--trainer.accelerator=cpu",
            "--trainer.strategy=ddp",
            "--trainer.devices=2",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=null",  # the counts must come from the sampler, not a limit
            "--trainer.limit_val_batches=null",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.enable_checkpointing=false",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.callbacks+=varlen.testing.StepCounter",
            f"--trainer.callbacks.out_dir={out}",
            "--trainer.callbacks+=varlen.testing.ValidationRecorder",
            f"--trainer.callbacks.out_dir={out}",
            *overrides,
        ],
        cwd=tmp_path,
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _assert_same_batch(a: Any, b: Any) -> None:
    """Two collated batches hold the same tensors (a dict of tensors, or a PyG ``Batch``)."""
    items = dict(a.items()) if isinstance(a, Mapping) else dict(a)
    other = dict(b.items()) if isinstance(b, Mapping) else dict(b)
    assert items.keys() == other.keys()
    for name, value in items.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(other[name], value, rtol=0, atol=0, msg=name)
        else:
            assert other[name] == value, name


def _flat(value: Any) -> np.ndarray:
    """Nested lists of numbers as one flat float array."""
    if isinstance(value, list):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.asarray([value], dtype=np.float64)


def batch_indices(batch: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in batch["index"].tolist()]


class DataModuleContract:
    """Shared tests for a varlen DataModule and its model. Subclass and fill in the hooks.

    Hooks:
        make_datamodule(**overrides): a small DataModule (seconds to set up).
        make_model(datamodule): a small model fitting it.
        bad_input(case, tmp_path): a :class:`BadInput` for each case of :data:`BAD_INPUT_CASES`
            that applies (None for one that does not: the test says so and skips).
        real_output(output, batch, i): sample ``i``'s output restricted to its real region
            (default: ``output[i]``), for the per-sample tests.
        collated_cost(batch): what the budget bounds, measured on a collated batch: one value per
            budget axis (default: the element count of each mask in ``mask_keys``).
        budget_overrides(): arguments that switch the DataModule to a token budget.
        config / cli_overrides: the YAML and the arguments that make the CLI tests tiny.
        ddp_overrides(tmp_path): arguments for the 2-process fit (tiny data, a fresh cache folder).
    """

    config: str | None = None
    cli_overrides: Sequence[str] = ()
    invariance_atol: float = 1e-5
    #: start methods the worker test runs under (default: fork and spawn, where offered: forkserver's
    #: workers receive the dataset pickled as spawn's do); a variant whose dataset and collate another
    #: contract class already checks under spawn may skip it
    start_methods: Sequence[str] = tuple(m for m in multiprocessing.get_all_start_methods() if m != "forkserver")

    def make_datamodule(self, **overrides: Any) -> VarLenDataModule:
        raise NotImplementedError

    def make_model(self, datamodule: VarLenDataModule) -> VarLenModule:
        raise NotImplementedError

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        return None

    def real_output(self, output: Any, batch: Mapping[str, Any], i: int) -> torch.Tensor:
        return output[i]

    def collated_cost(self, datamodule: VarLenDataModule, batch: Mapping[str, Any]) -> np.ndarray:
        return np.array([batch[k].numel() for k in datamodule.mask_keys])

    def budget_overrides(self) -> dict[str, Any]:
        return {"max_tokens": 256}

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        return list(self.cli_overrides)

    @pytest.fixture(scope="class")
    def datamodule(self) -> VarLenDataModule:
        dm = self.make_datamodule()
        dm.setup("fit")
        return dm

    @pytest.fixture(scope="class")
    def model(self, datamodule: VarLenDataModule) -> VarLenModule:
        torch.manual_seed(0)
        return self.make_model(datamodule).eval()

    # -- loaders and sampler --------------------------------------------------------------

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

    def dataset_indices(self, dataset) -> list[int]:
        """The ``index`` of every sample of ``dataset`` (read once, for the coverage tests)."""
        return [int(dataset[i]["index"]) for i in range(len(dataset))]

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
        """A DataModule under :meth:`budget_overrides` (capped at ``batch_size`` samples) and its
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
        """Cost every *collated* batch from its tensors: a ``sampler_lengths`` that under-reports fails."""
        dm, served = self._budgeted(batch_size=None)
        assert dm.train_dataloader().batch_sampler.spec.max_batch_size is None  # max_tokens alone: no cap
        assert sorted(i for b in served for i in b) == sorted(self.dataset_indices(dm.dataset("train")))

    def test_budget_and_batch_size_compose(self) -> None:
        """Both given: the budget holds and no batch has more than ``batch_size`` samples (lhotse's
        ``max_cuts``); the cap is chosen below the uncapped largest batch, so it must bite."""
        _, uncapped = self._budgeted(batch_size=None)
        largest = max(len(b) for b in uncapped)
        assert largest > 1, "budget_overrides() must allow batches of several samples"
        cap = largest // 2
        dm, capped = self._budgeted(batch_size=cap)
        assert max(len(b) for b in capped) == cap
        assert sorted(i for b in capped for i in b) == sorted(i for b in uncapped for i in b)

    def test_batch_size_alone_gives_batches_of_that_size(self) -> None:
        """``batch_size`` without ``max_tokens`` means exactly that many samples per batch, whatever
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
        """Two workers started by ``method`` (the dataset and collate pickled to them under spawn
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
        (a bucket of a few samples would keep them together: see ``plan.populated_edges``).
        Where batches keep to groups (``sampler_groups``), groups of fewer than three batches
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

    # -- what a checkpoint carries ---------------------------------------------------------------

    @staticmethod
    def _changed(value: Any) -> Any:
        """Another value of the same kind: lists reversed (or extended), numbers moved, strings suffixed."""
        if isinstance(value, list):
            if len(value) > 1 and value != value[::-1]:
                return value[::-1]
            return [*value, value[-1] if value else "other"]
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value * 2 + 1
        return f"{value}-other"

    def test_checkpoint_data_state_round_trips(self, datamodule: VarLenDataModule, tmp_path: Path) -> None:
        """The state survives ``torch.load(weights_only=True)`` and loads silently into the same setup."""
        state = datamodule.state_dict()
        assert state["data_state"], "data_state() is empty: nothing the model learnt from the data travels"
        torch.save(state, tmp_path / "state.pt")
        loaded = torch.load(tmp_path / "state.pt", weights_only=True)
        assert loaded == state
        fresh = self.make_datamodule()
        fresh.setup("fit")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fresh.load_state_dict(loaded)
        assert fresh.state_dict() == state

    def test_checkpoint_refuses_changed_classes_and_restores_statistics(self, datamodule: VarLenDataModule) -> None:
        state = datamodule.state_dict()["data_state"]
        for key in datamodule.state_must_match:
            if key in state:
                fresh = self.make_datamodule()
                fresh.setup("fit")
                with pytest.raises(DataError, match=key):
                    fresh.load_state_dict({"data_state": {**state, key: self._changed(state[key])}})
        moved = {k: np.asarray(state[k], dtype=object) for k in datamodule.state_restored if k in state}
        if not moved:
            return
        target = {**state, **{k: self._shifted(state[k]) for k in moved}}
        for before_setup in (False, True):
            fresh = self.make_datamodule()
            if before_setup:
                fresh.load_state_dict({"data_state": target})  # applied when setup has built the data
            fresh.setup("fit")
            if not before_setup:
                fresh.load_state_dict({"data_state": target})
            now = fresh.state_dict()["data_state"]
            for key in moved:
                np.testing.assert_allclose(_flat(now[key]), _flat(target[key]), rtol=1e-5, err_msg=key)

    @staticmethod
    def _shifted(value: Any) -> Any:
        """Statistics moved: every number x becomes 1.5 x + 0.25 (a std stays positive)."""
        if isinstance(value, list):
            return [DataModuleContract._shifted(v) for v in value]
        return float(value) * 1.5 + 0.25

    # -- the report and bad input -----------------------------------------------------------

    def test_report_counts_every_split(self, datamodule: VarLenDataModule) -> None:
        for split, dataset in datamodule.datasets.items():
            assert datamodule.report.split(split).kept == len(dataset) > 0
        table = str(datamodule.report)
        assert all(split in table for split in datamodule.datasets)

    def _bad_case(self, case: str, tmp_path: Path) -> BadInput:
        bad = self.bad_input(case, tmp_path)
        if bad is None:
            pytest.skip(f"the bad-input case {case!r} does not apply to {type(self).__name__}")
        return bad

    def _build(self, bad: BadInput, on_bad: str) -> VarLenDataModule:
        dm = self.make_datamodule(**{**bad.overrides, "on_bad": on_bad})
        dm.prepare_data()
        dm.setup("fit")
        return dm

    def test_missing_source_says_what_to_fetch(self, tmp_path: Path) -> None:
        bad = self._bad_case("missing_source", tmp_path)
        with pytest.raises(DatasetNotFoundError, match=bad.message) as info:
            self._build(bad, "raise")
        assert "To get it:" in str(info.value)

    @pytest.mark.parametrize("case", BAD_INPUT_CASES)
    def test_bad_input_raises_a_clear_error(self, case: str, tmp_path: Path) -> None:
        bad = self._bad_case(case, tmp_path)
        with pytest.raises(DataError, match=bad.message):
            self._build(bad, "raise")

    @pytest.mark.parametrize("case", BAD_INPUT_CASES)
    def test_bad_input_is_skipped_and_counted(self, case: str, tmp_path: Path) -> None:
        bad = self._bad_case(case, tmp_path)
        if bad.skipped is None:
            with pytest.raises(DataError, match=bad.message):
                self._build(bad, "skip")
            return
        with pytest.warns(UserWarning, match="dm.report"):
            dm = self._build(bad, "skip")
        assert dm.report.skipped(bad.skipped) >= 1, str(dm.report)

    # -- model ----------------------------------------------------------------------------

    @staticmethod
    def collate(datamodule: VarLenDataModule, split: str, indices: Sequence[int]) -> Any:
        """The batch of ``indices`` as the loader builds it: one batched fetch where the dataset
        offers ``__getitems__`` (else one ``dataset[i]`` per sample), then the collate."""
        return datamodule.collate_fn(datamodule.fetch_batch(split, list(indices)))

    def test_forward_is_per_sample(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        """Permuting a batch permutes its outputs: row ``i`` belongs to sample ``i``."""
        picks = list(range(min(6, len(datamodule.dataset("val")))))
        if len(picks) < 2:
            pytest.skip("needs two validation samples")
        order = picks[::-1]
        batch = self.collate(datamodule, "val", picks)
        flipped = self.collate(datamodule, "val", order)
        with torch.no_grad():
            output, output_flipped = model(batch), model(flipped)
        assert output.shape[0] == len(picks)
        for j, i in enumerate(order):
            torch.testing.assert_close(
                self.real_output(output_flipped, flipped, j),
                self.real_output(output, batch, i),
                atol=self.invariance_atol,
                rtol=1e-4,
            )
        assert not torch.allclose(self.real_output(output, batch, 0), self.real_output(output, batch, order[0]))

    def test_padding_does_not_change_outputs(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        """A sample's output in a batch with the longest and shortest samples equals its output alone."""
        dataset = datamodule.dataset("val")
        sizes = np.asarray(datamodule.sampler_lengths(dataset)).reshape(len(dataset), -1)[:, 0]
        # the shortest and longest samples together: the shortest is mostly padding
        picks = list(dict.fromkeys([int(np.argmin(sizes)), int(np.argmax(sizes)), *range(min(4, len(dataset)))]))
        batch = self.collate(datamodule, "val", picks)
        with torch.no_grad():
            together = model(batch)
            for i, index in enumerate(picks):
                alone_batch = self.collate(datamodule, "val", [index])
                alone = self.real_output(model(alone_batch), alone_batch, 0)
                torch.testing.assert_close(
                    self.real_output(together, batch, i), alone, atol=self.invariance_atol, rtol=1e-4
                )

    # -- CLI ------------------------------------------------------------------------------

    def _cli(self, subcommand: str, tmp_path: Path, *extra: str):
        if self.config is None:
            pytest.skip("no config for this scenario")
        from varlen.cli.dispatch import main

        args = [
            subcommand,
            "--config",
            self.config,
            "--trainer.accelerator=cpu",
            f"--trainer.default_root_dir={tmp_path}",
            *self.cli_overrides,
            *extra,
        ]
        return main(args)

    @pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
    def test_cli_runs_and_logs(self, subcommand: str, tmp_path: Path) -> None:
        cli = self._cli(subcommand, tmp_path, "--trainer.fast_dev_run=1")
        trainer = cli.trainer
        if subcommand == "fit":
            assert trainer.global_step == 1
        prefix = {"fit": "val/", "validate": "val/", "test": "test/"}[subcommand]
        logged = [k for k in trainer.callback_metrics if k.startswith(prefix)]
        assert f"{prefix}loss" in logged, sorted(trainer.callback_metrics)
        assert all(torch.isfinite(trainer.callback_metrics[k]) for k in logged)

    def test_cli_predictions_map_back_to_samples(self, tmp_path: Path) -> None:
        cli = self._cli("predict", tmp_path, "--trainer.fast_dev_run=1")
        predictions = cli.trainer.predict_loop.predictions
        assert predictions, "predict returned nothing"
        dm = cli.datamodule
        dataset = dm.dataset("predict" if "predict" in dm.datasets else dm.predict_split)
        for output in predictions:
            index = output["index"]
            assert index.ndim == 1 and len(set(index.tolist())) == len(index)
            assert all(0 <= i < len(dataset) for i in index.tolist())
            for name, value in output.items():
                if torch.is_tensor(value) and value.ndim:
                    assert value.shape[0] == len(index), (name, tuple(value.shape))
            for i in index.tolist()[:3]:
                assert int(dataset[i]["index"]) == i

    # -- DDP ------------------------------------------------------------------------------

    def test_ddp_fit_covers_all_and_metrics_equal_one_process(self, tmp_path: Path) -> None:
        """Two processes from an empty cache: equal steps, every sample once, and the validation
        metrics of the trained weights equal to what one process computes from them."""
        if self.config is None:
            pytest.skip("no config for this scenario")
        overrides = self.ddp_overrides(tmp_path)
        records = ddp_fit(self.config, tmp_path, overrides)
        assert records[0]["batches"] == records[1]["batches"] == records[0]["num_training_batches"] > 0
        assert records[0]["global_step"] == records[1]["global_step"]
        served = sorted(records[0]["indices"] + records[1]["indices"])
        from varlen.cli.dispatch import main

        one = main(
            [
                "validate",
                "--config",
                self.config,
                "--trainer.accelerator=cpu",
                "--trainer.devices=1",
                "--trainer.logger=false",
                "--trainer.limit_val_batches=null",
                f"--trainer.default_root_dir={tmp_path / 'one'}",
                *overrides,
                f"--ckpt_path={tmp_path / 'steps' / 'validated.ckpt'}",
            ]
        )
        assert served == list(range(len(one.datamodule.dataset("train"))))
        two = json.loads((tmp_path / "steps" / "val_metrics.json").read_text())
        single = {k: float(v) for k, v in one.trainer.callback_metrics.items() if k.startswith("val/")}
        assert two and set(two) == set(single), (sorted(two), sorted(single))
        for name, value in two.items():
            assert value == pytest.approx(single[name], rel=1e-4, abs=1e-6), (name, value, single[name])
