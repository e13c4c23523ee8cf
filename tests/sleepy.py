"""A toy DataModule whose batch fetch sleeps a known time, and a model whose step does (data wait, tune)."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from toy import ToyDataModule, ToySequences

BATCHES = 12  # batches an epoch of SleepyData


class SleepySequences(ToySequences):
    """Toy sequences whose batch fetch sleeps `fetch_s`."""

    def __init__(self, n: int, seed: int, fetch_s: float) -> None:
        super().__init__(n, seed)
        self.fetch_s = fetch_s

    def __getitems__(self, indices: list[int]) -> list[dict]:
        time.sleep(self.fetch_s)
        return [self[i] for i in indices]


class SleepyData(ToyDataModule):
    """Batches of 16 toy sequences, `batches` an epoch, whose fetch sleeps `fetch_s`."""

    def __init__(self, fetch_s: float, num_workers: int = 0, batches: int = BATCHES) -> None:
        super().__init__(num_samples=16 * batches, batch_size=16, num_workers=num_workers)
        self.fetch_s = fetch_s
        self.persistent_workers = num_workers > 0

    def build(self, stage: str | None) -> dict:
        return {**super().build(stage), "train": SleepySequences(self.num_samples, 1, self.fetch_s)}


class SleepyStep(pl.LightningModule):
    """A model whose training step takes `step_s` (a sleep) and nothing else."""

    def __init__(self, step_s: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.step_s = step_s

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        time.sleep(self.step_s)
        return (self.weight**2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
