"""What batch shapes cost a run: the distinct shapes an epoch served, and the time of the steps that met one
for the first time (read by `DataWait`).

Why: a GPU pays once for each new batch shape (cuDNN attention builds a plan per `(batch, length)` in
bf16; torch.compile and CUDA graphs record one), on the host, inside the step that first meets it. So a
step's host time says it without synchronising the device: a step on a new shape takes longer than the
later steps of the same shape. The extra time of those first steps, over their shapes' later median, is
what the shapes cost; past a tenth of the epoch it gets one line of advice: fewer shapes (`max_shapes`, named
only for a DataModule that takes it), paid before training (`WarmShapes`). Only
where a shape has a first-time cost (`first_time_cost`: a compiled model, a device other than a CPU): on a
CPU in eager mode a slow first step is the machine's load, not its shape.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["ShapeCost", "first_time_cost", "shape_advice", "shape_key", "takes_max_shapes"]


def shape_key(batch: Any, mask_keys: tuple[str, ...] = ()) -> tuple:
    """The shapes of a batch's tensors, by name: a dict's, a dataclass's, or what `to_dict()` gives (a PyG
    `Batch`); a plain tensor's own. With a DataModule's `mask_keys` (all in the batch), those alone: the
    padded shapes (a packed row's is one shape, whatever its labels' count). Metadata only: nothing is read
    from the device."""
    if mask_keys and isinstance(batch, Mapping) and all(k in batch for k in mask_keys):
        return tuple((k, tuple(batch[k].shape)) for k in mask_keys)
    if torch.is_tensor(batch):
        return (tuple(batch.shape),)
    if hasattr(batch, "to_dict") and not isinstance(batch, Mapping):
        batch = batch.to_dict()
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        batch = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    if isinstance(batch, Mapping):
        return tuple(sorted((str(k), tuple(v.shape)) for k, v in batch.items() if torch.is_tensor(v)))
    return ()


class ShapeCost:
    """Per epoch: the distinct shapes served and the steps that met a shape no earlier step of the run met,
    each timed on the host against the later steps of its own shape (the epoch's median step where its shape
    came once): a step is slow for its shape, not for being large."""

    def __init__(self) -> None:
        self.seen: set[tuple] = set()
        self.start_epoch()

    def start_epoch(self) -> None:
        self.shapes: set[tuple] = set()
        self.first: dict[tuple, float] = {}  # a shape new to the run: its first step's seconds
        self.later: dict[tuple, list[float]] = {}  # the steps after it on the same shape
        self.known_steps: list[float] = []

    @property
    def new_steps(self) -> list[float]:
        return list(self.first.values())

    def step(self, key: tuple, seconds: float) -> None:
        """A training step on a batch of shapes `key` that took `seconds` on the host."""
        self.shapes.add(key)
        if key not in self.seen:
            self.seen.add(key)
            self.first[key] = seconds
            return
        self.known_steps.append(seconds)
        if key in self.first:
            self.later.setdefault(key, []).append(seconds)

    @property
    def extra_seconds(self) -> float:
        """The epoch's steps on new shapes, over what a step of each shape takes later (0 without a later step)."""
        typical = float(np.median(self.known_steps)) if self.known_steps else None
        extra = 0.0
        for key, first in self.first.items():
            usual = float(np.median(self.later[key])) if key in self.later else typical
            extra += 0.0 if usual is None else max(0.0, first - usual)
        return extra


def first_time_cost(module: torch.nn.Module) -> str | None:
    """Why a batch shape new to `module` costs extra the first time it runs: a compiled part (torch.compile
    records a graph per shape), else its device when not a CPU (cuDNN plans, CUDA graphs, MPS kernels); None
    where it costs nothing extra: eager on a CPU, where a step's time follows its size alone."""
    from torch._dynamo import OptimizedModule  # as Lightning's own check (it imports it already)

    compiled = getattr(module, "_compiler_ctx", None) or any(
        isinstance(m, OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None for m in module.modules()
    )
    if compiled:
        return "the model is compiled, and torch.compile records a graph per new shape"
    device = getattr(module, "device", None)
    if not isinstance(device, torch.device):
        device = next((t.device for t in itertools.chain(module.parameters(), module.buffers())), torch.device("cpu"))
    return None if device.type == "cpu" else f"on {device} cuDNN plans, CUDA graphs and kernels are made per new shape"


def takes_max_shapes(datamodule: Any) -> bool:
    """Whether `datamodule` has a `max_shapes` argument (the DataModules whose batches pad to rungs)."""
    try:
        return "max_shapes" in inspect.signature(type(datamodule)).parameters
    except (TypeError, ValueError):
        return False


def shape_advice(
    epoch: int, distinct: int, new: int, extra_s: float, share: float, datamodule: Any = None, cost: str | None = None
) -> str:
    """The line rank zero logs when steps on new shapes took over a tenth of an epoch; `epoch` counted from
    1 as the epoch lines count it, `cost` what `first_time_cost` said. It names `max_shapes` only for
    a DataModule that takes it."""
    line = (
        f"varlen: {new} steps of epoch {epoch} met a batch shape for the first time and took {extra_s:.1f} s more "
        f"than typical steps ({share:.0%} of the epoch; {distinct} distinct shapes served): "
        f"{cost or 'a GPU pays once per shape (cuDNN attention plans in bf16, torch.compile, CUDA graphs)'}. "
    )
    if datamodule is not None and takes_max_shapes(datamodule):
        value = getattr(datamodule, "max_shapes", None)
        limit = f"{value} here" if value is not None else "null here: exact buckets; a number caps them"
        return line + (
            f"Keep them few with {type(datamodule).__name__}'s max_shapes ({limit}) and pay them before training "
            "with WarmShapes (varlen fit's default; your own Trainer: callbacks=[WarmShapes()])."
        )
    name = type(datamodule).__name__ if datamodule is not None else "A training loader outside a DataModule"
    dynamic = (
        "; a compiled model can take them as dynamic: torch.compile(dynamic=True)"
        if cost and "compiled" in cost
        else ""
    )
    return (
        line + f"{name} takes no max_shapes (its batches are not padded to rungs): the shapes are its data's{dynamic}."
    )
