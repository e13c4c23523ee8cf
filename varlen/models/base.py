"""What every reference model shares: logging with explicit batch sizes and indexed predictions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch


class VarLenModule(pl.LightningModule):
    """Base of the reference models.

    Every batch carries ``index`` (the dataset indices of its samples), so the batch size is
    always known (dynamic batches need an explicit ``batch_size`` in ``self.log``, or epoch
    means are wrong) and predictions can be put back in dataset order.
    """

    @staticmethod
    def batch_size_of(batch: Mapping[str, Any]) -> int:
        """Number of samples in a collated batch."""
        return int(batch["index"].shape[0])

    def log_metrics(self, metrics: Mapping[str, Any], batch: Mapping[str, Any], **kwargs: Any) -> None:
        """``log_dict`` with the batch's real size and epoch aggregation synced across ranks."""
        kwargs.setdefault("on_epoch", True)
        kwargs.setdefault("sync_dist", True)
        self.log_dict(dict(metrics), batch_size=self.batch_size_of(batch), **kwargs)

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> dict[str, torch.Tensor]:
        """Per-sample outputs with the dataset indices they belong to."""
        return {"index": batch["index"], "output": self(batch)}


class WarmupLinearDecay(torch.optim.lr_scheduler.LRScheduler):
    """Linear warm-up from 0, then linear decay to 0 at the last step; stepped every batch.

    The total step count is read lazily, at the first step after 0. Reading
    ``trainer.estimated_stepping_batches`` inside ``configure_optimizers`` makes Lightning build
    the train loader before a checkpoint's loader state is restored, and a mid-epoch resume then
    silently restarts the epoch (Lightning issue #20550); at the first step it is harmless.

    Args:
        optimizer: the optimizer whose learning rates are scaled.
        warmup_ratio: share of all steps spent warming up.
        total_steps: returns the number of optimizer steps of the whole fit.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, warmup_ratio: float, total_steps: Callable[[], int | float]
    ) -> None:
        self.warmup_ratio = warmup_ratio
        self.total_steps = total_steps
        self.total: int | None = None
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        if step == 0:
            return 0.0 if self.warmup_ratio > 0 else 1.0
        if self.total is None:
            self.total = max(int(self.total_steps()), 1)
        warmup = int(self.warmup_ratio * self.total)
        if step < warmup:
            return step / warmup
        return max(0.0, (self.total - step) / max(1, self.total - warmup))

    def get_lr(self) -> list[float]:
        return [base * self.factor(self.last_epoch) for base in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "total_steps")}


def warmup_linear_decay(
    optimizer: torch.optim.Optimizer, module: pl.LightningModule, warmup_ratio: float
) -> dict[str, Any]:
    """A Lightning ``lr_scheduler`` config of :class:`WarmupLinearDecay`, stepped every batch."""
    scheduler = WarmupLinearDecay(optimizer, warmup_ratio, lambda: module.trainer.estimated_stepping_batches)
    return {"scheduler": scheduler, "interval": "step"}
