"""The contract every varlen DataModule and model keeps, as a pytest base class.

Each scenario's tests subclass :class:`DataModuleContract` and implement ``make_datamodule``
and ``make_model``; the shared tests then check coverage, equal rank counts, budgets,
resumption, the batch layout, padding invariance and the CLI. Use it for your own DataModules
too. :class:`StepCounter` records what each rank trained on, for DDP tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from varlen.batching import BucketBatchSampler
from varlen.datamodules.base import VarLenDataModule
from varlen.models.base import VarLenModule


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
        self.indices.extend(int(i) for i in batch["index"].tolist())

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
    """A real 2-process CPU (gloo) fit of ``config`` for one epoch; returns each rank's record."""
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
            "--trainer.limit_val_batches=2",
            "--trainer.enable_checkpointing=false",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.callbacks+=varlen.testing.StepCounter",
            f"--trainer.callbacks.out_dir={out}",
            *overrides,
        ],
        cwd=tmp_path,
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def batch_indices(batch: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in batch["index"].tolist()]


class DataModuleContract:
    """Shared tests for a varlen DataModule and its model. Subclass and fill in the hooks.

    Hooks:
        make_datamodule(**overrides): a small DataModule (seconds to set up).
        make_model(datamodule): a small model fitting it.
        real_output(output, batch, i): sample ``i``'s output restricted to its real region
            (default: ``output[i]``), for the padding-invariance test.
        config / cli_overrides: the YAML and the arguments that make the CLI test tiny.
    """

    config: str | None = None
    cli_overrides: Sequence[str] = ()
    invariance_atol: float = 1e-5

    def make_datamodule(self, **overrides: Any) -> VarLenDataModule:
        raise NotImplementedError

    def make_model(self, datamodule: VarLenDataModule) -> VarLenModule:
        raise NotImplementedError

    def real_output(self, output: Any, batch: Mapping[str, Any], i: int) -> torch.Tensor:
        return output[i]

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

    def test_budget_is_held(self) -> None:
        dm = self.make_datamodule(**self.budget_overrides())
        dm.setup("fit")
        sampler = dm.train_dataloader().batch_sampler
        budget = np.asarray(sampler.spec.max_tokens)
        sizes = sampler.sizes
        for batch in sampler:
            block = sizes[batch]
            cost = block.sum(0) if sampler.spec.cost == "sum" else len(batch) * block.max(0)
            assert len(batch) == 1 or np.all(cost <= budget), (batch, cost, budget)

    def budget_overrides(self) -> dict[str, Any]:
        """DataModule arguments that switch it to a token budget (override per scenario)."""
        return {"max_tokens": 256}

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
        sampler = datamodule.train_dataloader().batch_sampler
        sampler.set_epoch(0)
        first = list(sampler)
        sampler.set_epoch(1)
        assert list(sampler) != first

    # -- model ----------------------------------------------------------------------------

    def test_forward_is_per_sample(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        batch = next(iter(datamodule.val_dataloader()))
        with torch.no_grad():
            output = model(batch)
        assert output.shape[0] == len(batch["index"])

    def test_padding_does_not_change_outputs(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        dataset = datamodule.dataset("val")
        sizes = np.asarray(datamodule.sampler_lengths(dataset)).reshape(len(dataset), -1)[:, 0]
        # the shortest and longest samples together: the shortest is mostly padding
        picks = [int(np.argmin(sizes)), int(np.argmax(sizes)), *range(min(4, len(dataset)))]
        samples = [dataset[i] for i in dict.fromkeys(picks)]
        batch = datamodule.collate_fn(samples)
        with torch.no_grad():
            together = model(batch)
            for i, sample in enumerate(samples):
                alone_batch = datamodule.collate_fn([sample])
                alone = self.real_output(model(alone_batch), alone_batch, 0)
                torch.testing.assert_close(
                    self.real_output(together, batch, i), alone, atol=self.invariance_atol, rtol=1e-4
                )

    # -- CLI ------------------------------------------------------------------------------

    @pytest.mark.parametrize("subcommand", ["fit", "validate", "test", "predict"])
    def test_cli_runs(self, subcommand: str, tmp_path: Path) -> None:
        if self.config is None:
            pytest.skip("no config for this scenario")
        from varlen.cli import main

        args = [
            subcommand,
            "--config",
            self.config,
            "--trainer.fast_dev_run=1",
            "--trainer.accelerator=cpu",
            f"--trainer.default_root_dir={tmp_path}",
            *self.cli_overrides,
        ]
        main(args)
