"""A real 2-process fit through the command line (DDP needs its own process tree), and what each rank did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

__all__ = ["StepCounter", "ValidationRecorder", "batch_indices", "ddp_fit", "run_cli"]


def run_cli(args: Sequence[str], cwd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m varlen ARGS` in a subprocess (DDP needs its own process tree)."""
    # one thread per rank: two ranks with a thread per core each would oversubscribe the cores
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "varlen", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise AssertionError(f"varlen {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def ddp_fit(config: str | Path, tmp_path: Path, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """A real 2-process CPU (gloo) fit of `config` for one epoch; returns each rank's record.

    Validation runs in full at the end of the epoch; its metrics and weights are written to
    `tmp_path/steps` by `ValidationRecorder`.
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


def batch_indices(batch: Mapping[str, Any]) -> list[int]:
    return [int(i) for i in batch["index"].tolist()]


class StepCounter(pl.Callback):
    """Writes, per rank, the optimizer steps taken and the sample indices trained on.

    Args:
        out_dir: folder for `rank<r>.json`.
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
        out_dir: folder for `val_metrics.json` and `validated.ckpt` (written by rank 0).
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
