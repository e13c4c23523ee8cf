"""The loader settings `varlen tune` measures, the run's figure each gives, and the pick.

A measured point is a number of workers, a prefetch factor, a start method and pinning. Persistent
workers change only when the workers start: once a run instead of once an epoch; the steady rate is
the same. So each point is measured once and gives both rows, whose figure is the run's batches per
second (`run_batches_per_s`): `epochs` epochs of `epoch_batches` batches at the steady
rate, plus the measured start, paid every epoch without persistent workers and once with them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from varlen.batching.loader_rate import LoaderRate

__all__ = ["Row", "Setting", "grid", "pick", "rows_of", "run_batches_per_s", "worker_counts"]

#: the DataModule arguments a setting sets (every varlen DataModule takes them)
ARGUMENTS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "multiprocessing_context")


@dataclass(frozen=True)
class Setting:
    """One loader setting: the DataModule arguments of `ARGUMENTS`."""

    num_workers: int
    prefetch_factor: int | None = None
    multiprocessing_context: str | None = None
    pin_memory: bool = False
    persistent_workers: bool = False

    def init_args(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ARGUMENTS}

    def apply(self, dm: Any) -> None:
        """Set them on a built DataModule: its next loader is made with them."""
        for name, value in self.init_args().items():
            setattr(dm, name, value)

    def overrides(self) -> str:
        """The `--data.init_args.*` arguments of this setting, as `varlen fit` takes them."""
        return " ".join(f"--data.init_args.{name}={_yaml(value)}" for name, value in self.init_args().items())

    def cost(self) -> tuple:
        """What a setting holds on the machine, to break near-ties: workers, their prefetched batches,
        pinned memory, workers kept between epochs; the platform's first start method first."""
        methods = ("fork", "forkserver", "spawn")
        start = methods.index(self.multiprocessing_context) if self.multiprocessing_context in methods else 0
        return (self.num_workers, self.prefetch_factor or 0, self.pin_memory, self.persistent_workers, start)


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def worker_counts(cores_per_device: int) -> list[int]:
    """0, then powers of two below `cores_per_device`, then `cores_per_device` itself."""
    counts, n = [0], 1
    while n < cores_per_device:
        counts.append(n)
        n *= 2
    return counts + ([cores_per_device] if cores_per_device >= 1 else [])


def grid(
    workers: Sequence[int], prefetch: Sequence[int], start_methods: Sequence[str], pins: Sequence[bool]
) -> list[Setting]:
    """The measured points: every combination, a loader without workers once per pinning."""
    points = []
    for n in workers:
        for pin in pins:
            if n == 0:
                points.append(Setting(0, pin_memory=pin))
                continue
            points += [Setting(n, p, method, pin) for method in start_methods for p in prefetch]
    return points


def run_batches_per_s(rate: LoaderRate, epoch_batches: int, epochs: int, persistent: bool) -> float:
    """Batches per second over a run of `epochs` epochs of `epoch_batches` batches (see the module)."""
    steady = (epoch_batches * epochs - (1 if persistent else epochs)) / rate.batches_per_s
    starts = rate.start_s * (1 if persistent else epochs)
    return epoch_batches * epochs / max(steady + starts, 1e-12)


@dataclass(frozen=True)
class Row:
    """One row of the table: a setting, its measure, and the run's figure."""

    setting: Setting
    rate: LoaderRate
    run_per_s: float


def rows_of(measured: Sequence[tuple[Setting, LoaderRate]], epoch_batches: int, epochs: int) -> list[Row]:
    """Each measured point's rows: without persistent workers, and with them where it has workers."""
    rows = []
    for setting, rate in measured:
        for persistent in (False, True) if setting.num_workers else (False,):
            row = replace(setting, persistent_workers=persistent)
            rows.append(Row(row, rate, run_batches_per_s(rate, epoch_batches, epochs, persistent)))
    return rows


def pick(rows: Sequence[Row], within: float = 0.02) -> Row:
    """The cheapest setting (`Setting.cost`) among those the measures cannot tell from the fastest: within
    `within` of its run figure, or within the two figures' combined standard error where that is wider (a
    noisy measure, on a busy machine, is no reason to hold more workers; a measure too short to have an error
    is taken as it is)."""
    usable = [r for r in rows if math.isfinite(r.run_per_s)]
    if not usable:
        raise ValueError("no setting gave a batch")
    fastest = max(usable, key=lambda r: r.run_per_s)

    def error(r: Row) -> float:  # a measure too short to say (fewer than 4 blocks) widens nothing
        return min(r.rate.rel_error, 1.0) if math.isfinite(r.rate.rel_error) else 0.0

    def near(r: Row) -> bool:
        return r.run_per_s >= (1 - max(within, math.hypot(error(r), error(fastest)))) * fastest.run_per_s

    return min((r for r in usable if near(r)), key=lambda r: r.setting.cost())
