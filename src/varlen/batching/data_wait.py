"""`DataWait`: how long the training loop waits for its next batch, its share of the run, and its likely cause.

Where the wait is timed. Lightning's fit loop fetches each batch through a data fetcher that calls
two hooks of the training epoch loop right around `next()` on the loader (what its profilers
report as `[_TrainingEpochLoop].train_dataloader_next`). The callback wraps those two hooks on
the loop for the fit (and restores them after), so the time measured is the main process blocked
in `next()`: workers not ready, the hand-over of a worker's batch, or with `num_workers=0` the
fetch and collate themselves. That holds for any loader and any fetcher (Lightning's prefetching
one, and a `training_step` that takes the `dataloader_iter` and fetches itself), and nothing
runs on the device: the batch is on the host, nothing is synchronised. Timing between
`on_train_batch_end` and the next `on_train_batch_start` instead would count the logging and
progress-bar work after a step (which waits for the device at every metric read) as data wait. A
Lightning without those hooks gets that gap timing as a fallback.

Each step's time is from its fetch's start to the next fetch's start, so the epoch's time is the
training loop's wall time; a gap in which validation ran is left out (its loader is not this one).

What the wait most likely comes from (`read_cause`, in the advice line) is read from what was measured:
the epoch's wait and step times, the first batch's share of the wait, the loader's settings, the node's cores
per device, and a few batches' fetch and collate timed apart in the main process once the advice is due
(`fetch_collate_times`). The workers can make at most `workers / (fetch +
collate)` batches a second; the loop asks for one per step's compute time. Below that demand the workers are
the bottleneck (busy in whichever part dominates, or short of cores); above it, the batches are made in time
and lost on their way: the hand-over to the main process, or in a first epoch perhaps the files read cold (a
probe after the epoch reads them warm, so the two are told apart only by the next epoch).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch

from varlen import notices
from varlen.batching.loader_rate import fetch_collate_times
from varlen.batching.shape_cost import ShapeCost, first_time_cost, shape_advice, shape_key
from varlen.batching.telemetry import training_batch_stats

__all__ = ["DataWait", "WaitFigures", "advice_line", "read_cause", "tune_command_line"]

log = logging.getLogger("varlen")


class DataWait(pl.Callback):
    """Logs the training loop's wait for data (see the module docstring for where it is timed).

    Per step, to the loggers every `log_every_n_steps` (as Lightning's own step metrics, written
    straight to them, so no value goes to the device): `data/wait_ms`, the mean wait per step since
    the last write. Per epoch, through `LightningModule.log` and synced over ranks:
    `data/wait_share` (all ranks' wait over all ranks' training time), `data/wait_share_max` (the
    slowest rank's share: one rank waiting stalls every other at the next collective),
    `data/batches_per_s` and `data/real_elements_per_s` (all ranks' batches and real elements over
    the slowest rank's training time; real elements need a varlen DataModule, or one with
    `batch_stats`). `epochs` keeps them per epoch, the same on every rank.

    When an epoch's slowest-rank share passes `advise_above`, rank zero logs one line, once per
    run, on the `varlen` logger: the share, the likely cause read from what was measured
    (`read_cause`) and the `varlen tune` command to run.

    What the batch shapes cost (`varlen.batching.shape_cost`), per epoch: `data/shapes`, the
    distinct shapes served, and `data/new_shape_ms`, the steps that met a shape for the first time, in
    ms over the epoch's typical step (the slowest rank's). When that passes `advise_above` of the
    epoch and `shape_floor_s` in all, rank zero logs one line, once per run: the count, the cost and
    the fix (the floor keeps a busy CPU's noise on a short epoch from reading as a cost), where a new shape
    has a first-time cost (`first_time_cost`: a compiled model, a device
    other than a CPU); on a CPU in eager mode a step's time follows its size, and a slow first step is load.

    Args:
        advise_above: the share of an epoch's time waiting that gets the advice (None: never).
        command: the command the advice names (default: `varlen tune` with this run's `--config`
            and `--data.*` arguments, read from `sys.argv`).
        shape_floor_s: the seconds new shapes must cost in an epoch before the shape advice is given.
        advise_shapes: give the shape advice where a new shape has a first-time cost (None), always (True:
            a cost simulated on a CPU) or never (False).
    """

    def __init__(
        self,
        advise_above: float | None = 0.10,
        command: str | None = None,
        shape_floor_s: float = 0.5,
        advise_shapes: bool | None = None,
    ) -> None:
        self.advise_above = advise_above
        self.advise_shapes = advise_shapes
        self._shape_cost: str | None = None
        self.shape_floor_s = shape_floor_s
        self.command = command
        self.epochs: list[dict[str, float]] = []
        self.advice: str | None = None
        self.shape_advice: str | None = None
        self._advised = self._shapes_advised = False
        self._shapes = ShapeCost()
        self._step_start = 0.0
        self._key: tuple = ()
        self._loop: Any = None
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self._epoch_start = now
        self._first: float | None = None  # the epoch's first fetch
        self._last_end: float | None = None
        self._excluded = self._wait = self._step_wait = self._log_wait = 0.0
        self._first_wait = 0.0
        self._batches = self._log_steps = 0
        self._real: float | None = 0.0
        self._fetching: float | None = None
        self._fetched = self._validated = False
        self._fetches = 0

    @property
    def waited_s(self) -> float:
        """This rank's seconds waiting for data so far in the current epoch (a progress line reads it)."""
        return self._wait

    # -- the fetch, timed by the loop's own hooks ------------------------------------------------

    def _fetch_start(self, now: float) -> None:
        if self._first is None:
            self._first = now
        elif self._validated and self._last_end is not None:
            self._excluded += now - self._last_end
        self._validated = False
        self._fetching = now

    def _fetch_end(self, now: float) -> None:
        if self._fetching is not None:
            self._step_wait += now - self._fetching
            self._fetching, self._fetched = None, True
            self._fetches += 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._shape_cost = first_time_cost(pl_module)
        loop = trainer.fit_loop.epoch_loop
        before, after = getattr(loop, "_on_before_fetch", None), getattr(loop, "_on_after_fetch", None)
        if not (callable(before) and callable(after)):
            return  # the fallback: timed from the previous step's end (on_train_batch_start)

        def timed_before() -> None:
            before()
            self._fetch_start(time.perf_counter())

        def timed_after() -> None:
            self._fetch_end(time.perf_counter())
            after()

        loop._on_before_fetch, loop._on_after_fetch = timed_before, timed_after
        self._loop = loop

    def _unhook(self) -> None:
        if self._loop is not None:
            self._loop.__dict__.pop("_on_before_fetch", None)
            self._loop.__dict__.pop("_on_after_fetch", None)
            self._loop = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._unhook()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._unhook()

    # -- steps and epochs -------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset(time.perf_counter())
        self._shapes.start_epoch()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.training or trainer.state.fn == "fit":
            self._validated = True

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._loop is None and not self._fetched:  # no fetch hooks: the gap since the last step
            if self._validated and self._last_end is not None:
                self._excluded += now - self._last_end
                self._validated = False
            else:
                self._fetch_start(self._epoch_start if self._last_end is None else self._last_end)
                self._fetch_end(now)
        if self._first is None:
            self._first = now
        stats = training_batch_stats(trainer, batch) if self._real is not None else None
        self._real = None if stats is None else self._real + stats.real
        masks = getattr(trainer.datamodule, "mask_keys", ()) if trainer.datamodule is not None else ()
        self._key, self._step_start = shape_key(batch, masks), time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._shapes.step(self._key, time.perf_counter() - self._step_start)
        wait, self._step_wait, self._fetched = self._step_wait, 0.0, False
        if self._batches == 0:
            self._first_wait = wait
        self._wait += wait
        self._batches += 1
        self._log_wait, self._log_steps = self._log_wait + wait, self._log_steps + 1
        if _should_log(trainer):
            metrics = {"data/wait_ms": 1000.0 * self._log_wait / self._log_steps}
            step = getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
            self._log_wait, self._log_steps = 0.0, 0
        self._last_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        served = self._batches > 0 and self._first is not None and self._last_end is not None
        elapsed = max(self._last_end - self._first - self._excluded, 1e-9) if served else 0.0
        real = math.nan if self._real is None else self._real
        shapes = self._shapes
        figures = [self._wait, elapsed, self._batches, real, len(shapes.shapes), len(shapes.new_steps)]
        local = torch.tensor([*figures, shapes.extra_seconds], dtype=torch.float64, device=pl_module.device)
        every = pl_module.all_gather(local).reshape(-1, len(local)).cpu()  # [ranks, 7]; one row outside DDP
        wait, times, batches, reals = every[:, 0], every[:, 1], every[:, 2], every[:, 3]
        if not served or batches.min() == 0:  # every rank gathers (a collective), then a rank without batches stops
            return
        if self._loop is not None and self._fetches == 0:
            notices.warn(
                "DataWait: the fit loop's fetch hooks never ran this epoch, so no wait was timed (a Lightning "
                "that fetches otherwise): data/wait_share reads 0"
            )
        summary = {
            "data/wait_share": float(wait.sum() / times.sum()),
            "data/wait_share_max": float((wait / times).max()),
            "data/batches_per_s": float(batches.sum() / times.max()),
        }
        if not torch.isnan(reals).any():
            summary["data/real_elements_per_s"] = float(reals.sum() / times.max())
        slowest = int(torch.argmax(every[:, 6]))  # the rank the new shapes cost most: the others waited for it
        summary["data/shapes"] = float(every[:, 4].max())
        summary["data/new_shape_ms"] = 1000.0 * float(every[slowest, 6])
        self.epochs.append({"epoch": trainer.current_epoch} | {k.removeprefix("data/"): v for k, v in summary.items()})
        pl_module.log_dict(summary, on_step=False, on_epoch=True, batch_size=1, sync_dist=False)
        self._advise_shapes(trainer, every[slowest], float(times.max()))
        if self.advise_above is not None and not self._advised and summary["data/wait_share_max"] > self.advise_above:
            self._advised = True
            if trainer.is_global_zero:
                figures = self._figures(trainer, summary)
                self.advice = advice_line(figures, self.command or tune_command_line(sys.argv))
                log.warning(self.advice)

    def _advise_shapes(self, trainer: pl.Trainer, figures: torch.Tensor, elapsed: float) -> None:
        """One line, once per run, when steps on new shapes took over `advise_above` of the epoch."""
        distinct, new, extra = int(figures[4]), int(figures[5]), float(figures[6])
        share = extra / max(elapsed, 1e-9)
        if self.advise_above is None or self._shapes_advised or share <= self.advise_above:
            return
        if self.advise_shapes is False or (self.advise_shapes is None and self._shape_cost is None):
            return
        if extra < self.shape_floor_s:
            return
        self._shapes_advised = True
        epoch = trainer.current_epoch + 1  # as the epoch lines count
        self.shape_advice = shape_advice(epoch, distinct, new, extra, share, trainer.datamodule, self._shape_cost)
        if trainer.is_global_zero:
            log.warning(self.shape_advice)

    def _figures(self, trainer: pl.Trainer, summary: dict[str, float]) -> WaitFigures:
        """What the advice reads: this rank's epoch, the loader's settings and this node's cores."""
        loader = trainer.train_dataloader
        loader = loader if hasattr(loader, "num_workers") else None
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return WaitFigures.read(
            epoch=trainer.current_epoch,
            share=summary["data/wait_share"],
            share_max=summary["data/wait_share_max"],
            wait_s=self._wait,
            elapsed_s=self._last_end - self._first - self._excluded,
            batches=self._batches,
            first_wait_s=self._first_wait,
            loader=loader,
            devices=int(trainer.num_devices),
            cores=cores,
        )


def _should_log(trainer: pl.Trainer) -> bool:
    """Lightning's own rule for writing step metrics (`log_every_n_steps`), as its callbacks read it."""
    connector = getattr(trainer, "_logger_connector", None)
    if connector is not None and hasattr(connector, "should_update_logs"):
        return bool(connector.should_update_logs)
    every = trainer.log_every_n_steps
    return bool(every) and (trainer.global_step + 1) % every == 0


# -- what the wait comes from: the advice line ----------------------------------------------------


@dataclass(frozen=True)
class WaitFigures:
    """One epoch's wait on one rank, the loader's settings and what its batches cost."""

    epoch: int
    share: float
    share_max: float
    wait_s: float
    elapsed_s: float
    batches: int
    first_wait_s: float
    workers: int = 0
    persistent: bool = False
    devices: int = 1
    cores: int = 1
    fetch_s: float | None = None
    collate_s: float | None = None
    store: str | None = None

    @classmethod
    def read(cls, loader: Any = None, **figures: Any) -> WaitFigures:
        """The figures with the loader's settings and, unless its data stream from a store, its fetch
        and collate timed on a few batches."""
        dataset = getattr(loader, "dataset", None)
        url = getattr(dataset, "url", None)
        store = url if isinstance(url, str) and "://" in url else None
        timed = fetch_collate_times(loader) if loader is not None and store is None else None
        return cls(
            **figures,
            workers=int(getattr(loader, "num_workers", 0) or 0),
            persistent=bool(getattr(loader, "persistent_workers", False)),
            fetch_s=timed[0] if timed else None,
            collate_s=timed[1] if timed else None,
            store=store,
        )

    @property
    def compute_s(self) -> float:
        """The mean step's time outside the wait."""
        return max(self.elapsed_s - self.wait_s, 0.0) / max(self.batches, 1)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def read_cause(f: WaitFigures) -> str:
    """The likely cause of the wait, in words with its figures (see the module docstring's last paragraph)."""
    if f.store is not None:
        return f"the reads from the stream's store ({f.store}): its chunks arrive slower than the steps use them"
    if f.first_wait_s > 0.5 * f.wait_s:
        keep = "" if f.persistent or f.workers == 0 else "; persistent_workers=True starts them once a run"
        return (
            f"the epoch's start: its first batch waited {f.first_wait_s:.2f} s of {f.wait_s:.2f} s "
            f"(loader workers starting, files read cold){keep}"
        )
    per_device = max(f.cores // max(f.devices, 1), 1)
    if f.fetch_s is None or f.collate_s is None:
        return f"loader workers slower than the step ({f.workers} workers; fetch and collate not timed apart here)"
    made = f.fetch_s + f.collate_s
    if f.workers == 0:
        return (
            f"no loader workers: the training process fetches ({_ms(f.fetch_s)}) and collates "
            f"({_ms(f.collate_s)}) every batch; this node has {per_device} cores per device"
        )
    supply = f.workers / max(made, 1e-12)
    demand = 1.0 / max(f.compute_s, 1e-12)
    if supply < 1.1 * demand:
        part = "fetch" if f.fetch_s >= f.collate_s else "collate"
        busy = (
            f"loader workers busy in the {part} (fetch {_ms(f.fetch_s)} + collate {_ms(f.collate_s)} a batch: "
            f"{f.workers} workers make at most {supply:,.1f} batches/s, a step computes in {_ms(f.compute_s)})"
        )
        if f.workers * f.devices >= f.cores:
            return busy + f"; too few cores for more: {f.workers} workers x {f.devices} devices on {f.cores} cores"
        return busy + f"; up to {per_device} workers per device fit this node's {f.cores} cores"
    made_in_time = (
        f"{f.workers} workers make {supply:,.1f} batches/s (fetch {_ms(f.fetch_s)} + collate {_ms(f.collate_s)}), "
        f"more than the {demand:,.1f} steps/s the loop runs"
    )
    if f.epoch == 0:
        return (
            f"a cold cache or the hand-over: {made_in_time}, so either epoch 1 read its files for the first time "
            "or the batches reach the training process late (if later epochs wait as much, the hand-over)"
        )
    return f"the hand-over: {made_in_time}, but the batches reach the training process late (transfer, pinning)"


def advice_line(f: WaitFigures, command: str) -> str:
    """The one line `DataWait` logs (its epoch counted from 1, as the epoch
    lines count; `f.epoch` is Lightning's, from 0)."""
    slowest = f"; slowest rank {f.share_max:.0%}" if f.share_max > f.share + 0.005 else ""
    return (
        f"varlen: the training loop waited for data {f.share:.0%} of epoch {f.epoch + 1} "
        f"({f.wait_s:.1f} s of {f.elapsed_s:.1f} s on rank 0{slowest}); likely cause: {read_cause(f)}. "
        f"Measure the loader's settings: {command}"
    )


def tune_command_line(argv: Sequence[str]) -> str:
    """`varlen tune` with the `--config` and `--data.*` arguments of a `varlen fit` command line
    (`sys.argv`); `--config CONFIG` where it names none."""
    args = list(argv[1:])
    if args[:1] == ["fit"]:
        args = args[1:]
    kept, i = [], 0
    while i < len(args):
        name = args[i].split("=", 1)[0]
        takes_value = "=" not in args[i] and i + 1 < len(args) and not args[i + 1].startswith("--")
        if name == "--config" or name.startswith("--data."):
            kept += args[i : i + 1 + takes_value]
        i += 1 + takes_value
    if not any(a.split("=", 1)[0] == "--config" for a in kept):
        kept = ["--config", "CONFIG", *kept]
    return "varlen tune " + " ".join(shlex.quote(a) for a in kept)
