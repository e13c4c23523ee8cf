"""What every reference model shares: logging with explicit batch sizes and indexed predictions."""

from __future__ import annotations

from collections.abc import Mapping
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
