"""`WarmShapes`: every batch shape of the coming epoch run once through the model before training.

Why: a GPU pays once for each new batch shape (cuDNN attention builds a plan per ``(batch, length)``
in bf16, torch.compile and CUDA graphs record per shape), and a bucketed epoch would otherwise pay
each one in the middle of training, where under DDP the other ranks wait for it. The shape policy
(``max_shapes``, :mod:`varlen.batching.shapes`) keeps the shapes few; this pays them up front.

How it stays invisible to training: before the first training step of a fit (fresh or resumed), one
real batch of each distinct shape of the epoch's plan (every rank's, so every rank warms the same
shapes) is fetched and collated as the loader would, moved to the device, and run through the
module's ``training_step`` and a backward pass under the trainer's precision, with logging silenced.
No optimizer steps, so weights and optimizer state are untouched; gradients, buffers (BatchNorm
statistics), torchmetrics states and every random generator (Python, numpy, torch, CUDA) are put
back as they were, so a run with the warm-up trains bit for bit as one without it. The module is
called directly, not through the DDP wrapper: no collective runs, so ranks need not agree on the
count. A module with manual optimization (its ``training_step`` steps optimizers) is skipped.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from varlen import notices

__all__ = ["WarmShapes", "shape_batches"]

log = logging.getLogger("varlen")


def shape_batches(sampler: Any, epoch: int) -> list[list[int]]:
    """One batch of ``epoch`` for each distinct shape of ``sampler``'s plan, as it serves them (varlen's
    samplers: ``shape_batches``), the widest first; [] for a sampler that cannot tell its shapes."""
    shape_batches_of = getattr(sampler, "shape_batches", None)
    return [] if shape_batches_of is None else list(shape_batches_of(epoch))


class WarmShapes(pl.Callback):
    """Run each batch shape of the coming epoch once before the first training step (see the module
    docstring); ``varlen fit`` adds it (``--warm_shapes=false`` leaves it out). Your own Trainer:
    ``Trainer(callbacks=[WarmShapes()])``.

    It logs on the ``varlen`` logger how many shapes it ran, on which device and in how long, and keeps
    them in :attr:`shapes` and :attr:`seconds`.

    Args:
        max_batches: warm at most this many shapes (the widest first); None: all of them (at most as many as
            the epoch's training steps, under ``limit_train_batches``).
    """

    def __init__(self, max_batches: int | None = None) -> None:
        self.max_batches = max_batches
        self.shapes = 0
        self.seconds = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not pl_module.automatic_optimization:
            notices.info(log, "WarmShapes: skipped, the module optimizes manually (its training_step steps optimizers)")
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
        start = time.perf_counter()
        with restored(pl_module), silenced(pl_module):
            for indices in batches:
                batch = trainer.strategy.batch_to_device(fetch(loader, indices))
                with trainer.precision_plugin.train_step_context():
                    output = pl_module.training_step(batch, 0)
                loss = output["loss"] if isinstance(output, dict) else output
                if loss is not None:
                    loss.backward()
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
        self.shapes, self.seconds = len(batches), time.perf_counter() - start
        notices.info(
            log,
            f"WarmShapes: {self.shapes} batch shapes of epoch {trainer.current_epoch} run through forward and "
            f"backward on {pl_module.device} in {self.seconds:.1f} s",
        )


def fetch(loader: Any, indices: list[int]) -> Any:
    """The collated batch of ``indices``, fetched as the loader's workers would (its batched fetch when
    the dataset has one, else a list of samples) and collated by its ``collate_fn``."""
    dataset = loader.dataset
    getitems = getattr(dataset, "__getitems__", None)
    samples = getitems(indices) if getitems is not None else [dataset[i] for i in indices]
    return loader.collate_fn(samples)


@contextlib.contextmanager
def silenced(module: pl.LightningModule) -> Iterator[None]:
    """``module.log`` and ``log_dict`` do nothing inside (a warm-up step logs no metric)."""
    module.log = module.log_dict = lambda *args, **kwargs: None
    try:
        yield
    finally:
        del module.log, module.log_dict


@contextlib.contextmanager
def restored(module: torch.nn.Module) -> Iterator[None]:
    """Every gradient, buffer, torchmetrics state and random generator of ``module``'s process as it was
    on entry, whatever ran inside."""
    grads = [(p, None if p.grad is None else p.grad.clone()) for p in module.parameters()]
    buffers = [(b, b.clone()) for b in module.buffers()]
    metrics = [(m, _metric_state(m)) for m in module.modules() if hasattr(m, "_defaults")]
    generators = _random_states()
    try:
        yield
    finally:
        with torch.no_grad():
            for p, grad in grads:
                p.grad = grad
            for b, value in buffers:
                b.copy_(value)
        for metric, state in metrics:
            for name, value in state.items():
                setattr(metric, name, value)
        known = {id(m) for m, _ in metrics}
        for created in module.modules():  # a metric made inside (at its first update) starts afresh
            if hasattr(created, "_defaults") and id(created) not in known:
                created.reset()
        _set_random_states(generators)


def _metric_state(metric: Any) -> dict[str, Any]:
    """A torchmetrics ``Metric``'s states and update bookkeeping, copied."""
    names = [*metric._defaults, "_update_count", "_computed"]
    return {name: copy.deepcopy(getattr(metric, name)) for name in names if hasattr(metric, name)}


def _random_states() -> dict[str, Any]:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])
