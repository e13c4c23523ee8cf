"""What every reference model shares: its dimensions taken from the DataModule it trains on, DDP-exact epoch
metrics, explicit batch sizes, indexed predictions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torchmetrics import MeanMetric

__all__ = ["VarLenModule", "WarmupLinearDecay", "warmup_linear_decay"]


class VarLenModule(pl.LightningModule):
    """Base of the reference models.

    Every batch carries `index` (the dataset indices of its samples), so the batch size is
    always known (dynamic batches need an explicit `batch_size` in `self.log`, or epoch
    means are wrong) and predictions can be put back in dataset order.

    Epoch metrics are exact under DDP: each rank sees different samples (the sampler shards
    them), so an epoch mean must be a sum of values over a sum of weights across ranks, not a
    mean of rank means. `log_mean` keeps such a mean in a torchmetrics `MeanMetric`
    (synced as sums); metric objects are logged as they are; values computed from metrics that
    are already synced go through `log_global`.

    Its dimensions come from the DataModule it trains on, as `varlen fit` links them: every argument named in
    `linked` (the DataModule attributes of `varlen.datamodules.base.LINKED` it takes) that is None when the
    model is made is read from `trainer.datamodule` at `setup` (Lightning calls it before
    `configure_optimizers`), written into the hyperparameters (the checkpoint's, so `load_from_checkpoint`
    rebuilds the same model without a DataModule), and only then are the layers made (`build_layers`).
    A model given every dimension it `needs` makes its layers at once.
    """

    #: the `__init__` arguments a DataModule gives (None: taken from it at `setup`)
    linked: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self._epoch_means = nn.ModuleDict()  # name -> MeanMetric, created at first use
        self._built = False

    def needs(self) -> list[str]:
        """The `linked` arguments still None that the layers need (every one but `class_names`; a model whose
        values make others unneeded says so)."""
        return [name for name in self.linked if name != "class_names" and self.hparams.get(name) is None]

    def build_layers(self) -> None:
        """Make the layers from `self.hparams`, every dimension known (a subclass's `__init__` calls
        `build_when_known`, never this)."""

    def build_when_known(self) -> None:
        """`build_layers` now where `needs()` is empty, else at `setup` (the end of a subclass's `__init__`); till
        then, a call of the model is the one-line error that says what it needs."""
        if self.needs():
            self._unbuilt = self.register_forward_pre_hook(_not_built)
        else:
            self._build()

    def _build(self) -> None:
        self.build_layers()
        self._built = True
        unbuilt = self.__dict__.pop("_unbuilt", None)
        if unbuilt is not None:
            unbuilt.remove()

    def setup(self, stage: str) -> None:
        """A model not yet built takes what it was not given from `trainer.datamodule`, then makes its layers
        (a subclass's `setup` calls this first)."""
        if self._built:
            return
        datamodule = getattr(self._trainer, "datamodule", None)
        for name in self.linked:
            if self.hparams.get(name) is None and hasattr(datamodule, name):
                self.hparams[name] = getattr(datamodule, name)
                if hasattr(self, "_hparams_initial"):  # what Lightning gives the loggers
                    self._hparams_initial[name] = self.hparams[name]
        missing = self.needs()
        if missing:
            raise ValueError(_unknown(self, missing, datamodule))
        self._build()

    @staticmethod
    def batch_size_of(batch: Mapping[str, Any]) -> int:
        """Number of samples in a collated batch."""
        return int(batch["index"].shape[0])

    def log_mean(self, metrics: Mapping[str, torch.Tensor], batch: Mapping[str, Any], **kwargs: Any) -> None:
        """Log each value per step (training) and as its epoch mean weighted by batch size, exact over ranks."""
        size = self.batch_size_of(batch)
        kwargs.setdefault("on_step", self.training)
        for name, value in metrics.items():
            key = name.replace("/", "__").replace(".", "_")
            if key not in self._epoch_means:
                self._epoch_means[key] = MeanMetric().to(self.device)
            mean = self._epoch_means[key]
            mean(value.detach(), weight=size)  # forward: updates the epoch state, caches this batch's value
            self.log(name, mean, on_epoch=True, batch_size=size, metric_attribute=f"_epoch_means.{key}", **kwargs)

    def log_global(self, metrics: Mapping[str, Any], **kwargs: Any) -> None:
        """Log epoch values that are already the same on every rank (computed from synced metrics).

        `sync_dist=True` averages identical values, which changes nothing, and tells Lightning
        that the value is global (it warns otherwise).
        """
        self.log_dict(dict(metrics), on_step=False, on_epoch=True, batch_size=1, sync_dist=True, **kwargs)

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> dict[str, torch.Tensor]:
        """Per-sample outputs with the dataset indices they belong to."""
        return {"index": batch["index"], "output": self(batch)}


def _not_built(model: VarLenModule, args: Any) -> None:
    """A forward pre-hook of a model whose layers wait for their dimensions."""
    raise ValueError(_unknown(model, model.needs(), layers=True))


def _unknown(model: VarLenModule, missing: list[str], datamodule: object = None, layers: bool = False) -> str:
    """The line that says which dimensions a model lacks and the two ways to give them."""
    name = type(model).__name__
    needs = f"{name} has no layers yet: it needs" if layers else f"{name} needs"
    given = f"{name}({missing[0]}=...)"
    if datamodule is None:
        return (
            f"{needs} {', '.join(missing)}: give them ({given}) or fit it with a DataModule that has them "
            "(trainer.fit(model, datamodule=dm))"
        )
    return f"{needs} {', '.join(missing)}, which {type(datamodule).__name__} has not: give them ({given})"


class WarmupLinearDecay(torch.optim.lr_scheduler.LRScheduler):
    """Linear warm-up from 0, then linear decay to 0 at the last step; stepped every batch.

    The total step count is read lazily, at the first step after 0. Reading
    `trainer.estimated_stepping_batches` inside `configure_optimizers` makes Lightning build
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
    """A Lightning `lr_scheduler` config of `WarmupLinearDecay`, stepped every batch."""
    scheduler = WarmupLinearDecay(optimizer, warmup_ratio, lambda: module.trainer.estimated_stepping_batches)
    return {"scheduler": scheduler, "interval": "step"}
