"""`WarmShapes`: every batch shape of the coming epoch run once through the model before training.

Why: a GPU pays once for each new batch shape (cuDNN attention builds a plan per `(batch, length)`
in bf16, torch.compile and CUDA graphs record per shape), and a bucketed epoch would otherwise pay
each one in the middle of training, where under DDP the other ranks wait for it. The shape policy
(`max_shapes`, `varlen.batching.shape_policy`) keeps the shapes few; this pays them up front. Where a
shape costs nothing extra (`first_time_cost`: eager on a CPU) the
warm-up would only spend time (52 s of a 539 s text fit), so by default it runs on another device or
for a compiled model only, and says in one line why it skips elsewhere.

How it stays invisible to training: before the first training step of a fit (fresh or resumed), one
real batch of each distinct shape of the epoch's plan (every rank's, so every rank warms the same
shapes) is fetched and collated as the loader would, moved to the device, and run through the
module's `training_step` and a backward pass under the trainer's precision, with logging silenced.
No optimizer steps; what a step may still change (a buffer its forward reassigns, a plain attribute,
gradients, a learning rate set in place, torchmetrics states, the AMP scaler, every random generator)
is given back by name (`given_back`), so a run with the warm-up
trains bit for bit as one without it. The module is called directly, not through the DDP wrapper: no
collective runs, so ranks need not agree on the count. A module with manual optimization (its
`training_step` steps optimizers) is skipped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any, Literal

import lightning.pytorch as pl
import torch

from varlen import notices
from varlen.batching.given_back import given_back
from varlen.batching.indices import fetch as fetch_batch
from varlen.batching.shape_cost import first_time_cost

__all__ = ["WarmShapes", "shape_batches"]

log = logging.getLogger("varlen")

WHEN = ("auto", "always")


def shape_batches(sampler: Any, epoch: int) -> list[list[int]]:
    """One batch of `epoch` for each distinct shape of `sampler`'s plan, as it serves them (varlen's
    samplers: `shape_batches`), the widest first; [] for a sampler that cannot tell its shapes."""
    shape_batches_of = getattr(sampler, "shape_batches", None)
    return [] if shape_batches_of is None else list(shape_batches_of(epoch))


class WarmShapes(pl.Callback):
    """Run each batch shape of the coming epoch once before the first training step (see the module
    docstring); `varlen fit` adds it (`--warm_shapes=false` leaves it out). Your own Trainer:
    `Trainer(callbacks=[WarmShapes()])`.

    It says when it starts how many shapes it runs and on which device, and when done in how long (progress
    lines: `varlen.notices.say`), and keeps them in `shapes` and `seconds`; skipped, it logs why on the `varlen`
    logger.

    Args:
        max_batches: warm at most this many shapes (the widest first); None: all of them (at most as many as
            the epoch's training steps, under `limit_train_batches`).
        when: `"auto"`: where a new shape has a first-time cost (a device other than a CPU, a compiled
            model); `"always"`: on a CPU in eager mode too.
    """

    def __init__(self, max_batches: int | None = None, when: Literal["auto", "always"] = "auto") -> None:
        if when not in WHEN:
            raise ValueError(f"WarmShapes: when must be one of {', '.join(WHEN)}, got {when!r}")
        self.max_batches = max_batches
        self.when = when
        self.shapes = 0
        self.seconds = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not pl_module.automatic_optimization:
            notices.info(log, "WarmShapes: skipped, the module optimizes manually (its training_step steps optimizers)")
            return
        cost = first_time_cost(pl_module)
        if cost is None and self.when == "auto":
            notices.info(
                log,
                "WarmShapes: skipped: on a CPU in eager mode a new batch shape costs nothing extra "
                "(--warm_shapes=always, WarmShapes(when='always'): warm anyway)",
            )
            return
        loader = trainer.train_dataloader
        sampler = getattr(loader, "batch_sampler", None)
        most = self.max_batches
        steps = trainer.num_training_batches  # a limit_train_batches run meets no more shapes than its steps
        if isinstance(steps, int) and 0 < steps:
            most = steps if most is None else min(most, steps)
        batches = shape_batches(sampler, trainer.current_epoch)[:most]
        if not batches:
            return
        epoch, shapes = trainer.current_epoch + 1, len(batches)
        notices.say(f"WarmShapes: running {shapes} batch shapes of epoch {epoch} through forward and backward on "
                    f"{pl_module.device}", trainer)  # fmt: skip
        start = time.perf_counter()
        with given_back(pl_module, *_training_state(trainer)), silenced(pl_module):
            for indices in batches:
                batch = trainer.strategy.batch_to_device(fetch(loader, indices))
                with trainer.precision_plugin.train_step_context():
                    output = pl_module.training_step(batch, 0)
                loss = output["loss"] if isinstance(output, dict) else output
                if loss is not None:
                    loss.backward()
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
        self.shapes, self.seconds = shapes, time.perf_counter() - start
        notices.say(f"WarmShapes: {shapes} batch shapes of epoch {epoch} run in {self.seconds:.1f} s", trainer)


def _training_state(trainer: pl.Trainer) -> tuple[list[Any], list[Any], Any]:
    """The trainer's optimizers, LR schedulers and AMP scaler (None without one): what a step may touch."""
    schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
    return list(trainer.optimizers), schedulers, getattr(trainer.precision_plugin, "scaler", None)


def fetch(loader: Any, indices: list[int]) -> Any:
    """The collated batch of `indices`, fetched as the loader's workers would (its batched fetch when
    the dataset has one, else a list of samples) and collated by its `collate_fn`."""
    return loader.collate_fn(fetch_batch(loader.dataset, indices))


@contextlib.contextmanager
def silenced(module: pl.LightningModule) -> Iterator[None]:
    """`module.log` and `log_dict` do nothing inside (a warm-up step logs no metric)."""
    module.log = module.log_dict = lambda *args, **kwargs: None
    try:
        yield
    finally:
        del module.log, module.log_dict
