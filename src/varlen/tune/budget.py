"""The largest `max_tokens` whose worst batches train on the device without running out of memory.

`largest_budget` is the search alone, a pure function of a probe `fits(budget) -> bool`
(tests drive it with a memory model): the budget doubles from `low` while it fits, then the
bracket between the last budget that fitted and the first that did not is halved down to one
token; the margin is then taken off. Memory grows with the budget, so the boundary found is exact.

The probe (`device_probe`) builds the plan at a budget, takes its worst batches (the one
holding the largest sample on the axis, which sits in the largest bucket, and the one that
allocates the most: the padded shape the plan will build) and runs each through the model's
training step and backward, and an optimizer step (its state counts too), on the device; running
out of memory means no. The cache is emptied between probes.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["NO_DEVICE", "Budget", "device_probe", "largest_budget", "search_budgets", "train_step", "worst_batches"]

NO_DEVICE = (
    "varlen tune --budget: no CUDA device on this machine; the budget search measures a GPU's memory, "
    "so run it where the training runs. Nothing was measured."
)


def largest_budget(fits: Callable[[int], bool], low: int, high: int, margin: float = 0.1) -> int:
    """The largest budget in `[low, high]` that `fits`, less `margin` of it (rounded down).

    Raises:
        ValueError: a bad range or margin, or `low` itself does not fit (naming it).
    """
    if not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got low={low}, high={high}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin is a share of the budget in [0, 1), got {margin}")
    if not fits(low):
        raise ValueError(f"even a budget of {low} (one batch of the largest sample) does not fit")
    good, bad = low, None
    while bad is None and good < high:
        trial = min(2 * good, high)
        if fits(trial):
            good = trial
        else:
            bad = trial
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return max(int(good * (1 - margin)), 1)


def worst_batches(dm: Any, axis: int = 0) -> list[list[int]]:
    """The training plan's (epoch 0, one rank) batches that hold the largest sample on `axis` and that
    allocate the most (padded: samples x largest per axis, summed over axes; packed: the summed sizes)."""
    sampler = dm.batch_sampler("train", True, num_replicas=1, rank=0)
    if not hasattr(sampler, "global_plan"):
        raise ValueError("the budget search plans in memory: a streamed training split is not supported")
    plan = sampler.global_plan(0)
    sizes = np.asarray(dm.of_each_source(dm.dataset("train"), "sampler_lengths")).reshape(len(dm.dataset("train")), -1)
    batches = [plan.order[a:b] for a, b in plan.bounds.tolist()]
    if dm.sampler_cost == "sum":
        cost = [sizes[b].sum() for b in batches]
    else:
        cost = [len(b) * sizes[b].max(0).sum() for b in batches]
    largest = max(range(len(batches)), key=lambda k: sizes[batches[k], axis].max())
    chosen = sorted({largest, int(np.argmax(cost))})
    return [batches[k].tolist() for k in chosen]


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The model's own optimizer where it makes one without a trainer, else AdamW (Adam's state size)."""
    try:
        made = model.configure_optimizers()
    except Exception:  # e.g. it reads the trainer's epochs
        made = None
    while isinstance(made, (list, tuple, dict)) and made:
        made = made.get("optimizer") if isinstance(made, dict) else made[0]
    return made if isinstance(made, torch.optim.Optimizer) else torch.optim.AdamW(model.parameters())


def _loss(model: Any, batch: Any) -> torch.Tensor:
    out = model.training_step(batch, 0)
    out = out.get("loss") if isinstance(out, dict) else out
    if not torch.is_tensor(out):  # manual optimisation: the forward's outputs stand for the loss
        out = model(batch)
        out = sum(t.float().sum() for t in (out if isinstance(out, (list, tuple)) else [out]) if torch.is_tensor(t))
    return out


@contextlib.contextmanager
def _precision(device: torch.device, precision: str | None) -> Iterator[None]:
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(str(precision))
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        yield


def train_step(dm: Any, model: Any, device: torch.device, precision: str | None = None) -> Callable[[list[int]], None]:
    """`step(indices)`: the training samples `indices` fetched and collated as the loader does, then one
    training step, backward and optimizer step of `model` on `device` (an optimizer's state counts too)."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    model.to(device).train()
    optimizer = _optimizer(model)

    def step(indices: list[int]) -> None:
        try:
            batch = move_data_to_device(dm.collate_fn(dm.fetch_batch("train", indices)), device)
            with warnings.catch_warnings(), _precision(device, precision):
                warnings.simplefilter("ignore")  # self.log outside a trainer
                loss = _loss(model, batch)
            loss.backward()
            optimizer.step()
        finally:
            optimizer.zero_grad(set_to_none=True)

    return step


def device_probe(
    dm: Any, model: Any, budgets: tuple[int, ...], axis: int, device: torch.device, precision: str | None = None
) -> Callable[[int], bool]:
    """`fits(budget)`: the worst batches of the plan at `budgets` with `budget` on `axis` train on
    `device` without running out of memory."""
    step = train_step(dm, model, device, precision)

    def fits(budget: int) -> bool:
        trial = list(budgets)
        trial[axis] = budget
        dm.max_tokens = trial[0] if len(trial) == 1 else tuple(trial)
        try:
            for indices in worst_batches(dm, axis):
                step(indices)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return True
        except torch.cuda.OutOfMemoryError:
            return False
        finally:
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    return fits


@dataclass(frozen=True)
class Budget:
    """The search's result on one size axis."""

    axis: str
    low: int
    high: int
    budget: int

    def line(self) -> str:
        return f"  {self.axis}: max_tokens {self.budget:,} (searched {self.low:,} to {self.high:,})"


def search_budgets(
    dm: Any, model: Any, device: torch.device, margin: float = 0.1, precision: str | None = None, high: int = 0
) -> list[Budget]:
    """The largest budget of each size axis (the others at the config's budget). A config batched by
    `batch_size` alone is searched as a budget without that cap; one with both keeps the cap."""
    sizes = np.asarray(dm.of_each_source(dm.dataset("train"), "sampler_lengths")).reshape(len(dm.dataset("train")), -1)
    if dm.max_tokens is None:  # no budget on any axis: the others hold everything
        dm.batch_size = None
        budgets = tuple(int(s) for s in sizes.sum(0))
    else:
        budgets = tuple(int(b) for b in np.broadcast_to(np.atleast_1d(dm.max_tokens), sizes.shape[1:]))
    names = list(getattr(dm, "size_axes", ())) + [f"axis {d}" for d in range(sizes.shape[1])]
    found = []
    for axis in range(sizes.shape[1]):
        low = int(sizes[:, axis].max())
        top = max(high or int(min(sizes[:, axis].sum(), low * 2**16)), low)
        fits = device_probe(dm, model, budgets, axis, device, precision)
        found.append(Budget(names[axis], low, top, largest_budget(fits, low, top, margin)))
    return found
