"""One setting measured: the training loader alone, or each batch through the model's training step.

The loader alone is iterated in this process as the fit loop would, each batch counted on the host
(`batch_stats`, as the DataModule does before every transfer). With the model, a Lightning
`Trainer` fits it on the DataModule for as long as the meter needs (validation, checkpoints and
loggers off), so the steps run the optimizer, precision and device of a run: the figure is the one
the run would see. Workers are kept between the epochs of a measure (persistent), and an epoch's
start is not timed: the start is measured once, on the first.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl

from varlen.batching.loader_rate import LoaderRate, RateMeter, measure_loader
from varlen.tune.grid import Setting

__all__ = ["measure_setting"]


def measure_setting(
    dm: Any,
    setting: Setting,
    limits: dict[str, Any],
    model: pl.LightningModule | None = None,
    trainer_args: dict[str, Any] | None = None,
    on_batch: Callable[[RateMeter], None] | None = None,
    batch_limit: float | None = None,
) -> LoaderRate:
    """`setting`'s figures on `dm`'s training loader (with `model`: through its training step).

    Args:
        dm: a set-up varlen DataModule; `setting` is applied to it (persistent workers for the measure).
        limits: `RateMeter` limits (`max_batches`, `max_seconds`...).
        model: the config's model, or None for the loader alone.
        trainer_args: `Trainer` arguments of the run (`precision`, `accelerator`) with `model`.
        on_batch: called with the meter after each batch (a progress bar).
        batch_limit: seconds a worker's batch may take, the first (the workers' start) included: the
            loader's `timeout`, whose error ends the measure (None: the DataModule's own).

    Raises:
        RuntimeError: with workers, a batch took longer than `batch_limit` (the loader's timeout).
    """
    meter = RateMeter.for_workers(setting.num_workers, **limits)
    Setting(**(setting.init_args() | {"persistent_workers": setting.num_workers > 0})).apply(dm)
    own_timeout = dm.timeout
    dm.timeout = own_timeout if batch_limit is None else batch_limit
    try:
        if model is None:
            loader = dm.train_dataloader()
            return measure_loader(loader, meter, count=lambda batch: dm.batch_stats(batch).real, on_batch=on_batch)
        return _through_model(dm, model, meter, trainer_args or {}, on_batch)
    finally:
        dm.timeout = own_timeout


def _through_model(
    dm: Any,
    model: pl.LightningModule,
    meter: RateMeter,
    trainer_args: dict[str, Any],
    on_batch: Callable[[RateMeter], None] | None,
) -> LoaderRate:
    """`model` fitted on `dm` until `meter` is done; its figures."""
    trainer = pl.Trainer(
        **{"accelerator": "auto", **trainer_args},
        devices=1,
        max_epochs=-1,
        max_steps=10 * meter.max_batches + 10,
        callbacks=[_StepTimer(meter, on_batch)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the run's own warnings belong to `varlen fit`, not to each point
        trainer.fit(model, datamodule=dm)
    return meter.result()


class _StepTimer(pl.Callback):
    """Ticks the meter at each step's end (real elements as the DataModule counted them on the host) and
    stops the fit when it is done; an epoch's start is left untimed."""

    def __init__(self, meter: RateMeter, on_batch: Callable[[RateMeter], None] | None) -> None:
        self.meter, self.on_batch = meter, on_batch
        self.started = False

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.started:
            self.meter.restart()
        else:
            self.meter.start(time.perf_counter())
            self.started = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        stats = getattr(trainer.datamodule, "host_stats", None)
        if self.meter.tick(time.perf_counter(), None if stats is None else stats.real):
            trainer.should_stop = True
        if self.on_batch is not None:
            self.on_batch(self.meter)
