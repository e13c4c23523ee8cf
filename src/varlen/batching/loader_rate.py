"""How fast a loader serves batches: a steady rate measured until it is settled.

`RateMeter` turns batch arrival times into a steady rate and says when more batches would not
change it (the relative standard error of block times under a tolerance), or when a batch or time
limit is reached; `measure_loader` drives it over a loader, `loader_rate` over a set-up
DataModule's training loader with its own settings (what `varlen inspect` prints), and
`varlen tune` over every setting of its grid. `fetch_collate_times` times a few batches'
fetch and collate apart, in this process: what a loader worker spends on each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LoaderRate",
    "RateMeter",
    "fetch_collate_times",
    "loader_rate",
    "loader_settings",
    "measure_loader",
    "probe_batches",
]


@dataclass(frozen=True)
class LoaderRate:
    """A loader's (or a training loop's) measured figures.

    `start_s` is the time from `iter()` (or the epoch's start) to the first batch: worker start-up
    and the first fetch. `batches_per_s` and `real_per_s` are steady rates, measured after the
    start's burst; `rel_error` is the relative standard error of the rate; `stopped` says why the
    measure ended (`settled`, `batches`, `time` or `exhausted`)."""

    start_s: float
    batches: int
    batches_per_s: float
    real_per_s: float | None
    rel_error: float
    stopped: str

    def line(self, settings: str = "") -> str:
        """One line for a terminal, e.g. `varlen inspect`'s."""
        real = f", {self.real_per_s:,.0f} real elements/s" if self.real_per_s is not None else ""
        where = f" ({settings})" if settings else ""
        return (
            f"  loader{where}: {self.batches_per_s:,.1f} batches/s{real}; first batch after {self.start_s:.2f} s; "
            f"{self.batches} batches measured ({self.stopped})"
        )


@dataclass
class RateMeter:
    """Arrival times in, a steady rate out, with the rule that says it is settled.

    The first `burst` batches after a start (a worker each, ready together) are not timed: the
    rate is taken over the intervals after them. Intervals are summed in blocks of `block`; the
    rate is settled when at least `min_batches` intervals in 4 blocks or more give a relative
    standard error of the mean block time below `rel_tol`. `settle=False` measures until
    `max_batches` or `max_seconds` (of timed intervals) whatever the spread: the exhaustive run.
    """

    max_batches: int = 300
    min_batches: int = 24
    max_seconds: float = 5.0
    rel_tol: float = 0.05
    burst: int = 1
    block: int = 4
    settle: bool = True
    _intervals: list[float] = field(default_factory=list, repr=False)
    _reals: list[float] = field(default_factory=list, repr=False)
    _started: float = 0.0
    _first: float | None = None
    _last: float | None = None
    _untimed: int = 0
    _elapsed: float = 0.0
    _stopped: str = ""

    @classmethod
    def for_workers(cls, workers: int, **limits: Any) -> RateMeter:
        """A meter for a loader of `workers` workers: their first batches (ready together) untimed, blocks
        of whole rounds (4 batches a worker)."""
        return cls(burst=max(workers, 1), block=4 * max(workers, 1), **limits)

    def start(self, now: float) -> None:
        """The loader's `iter()` (or the epoch's start): the reference of `LoaderRate.start_s`."""
        self._started, self._untimed = now, self.burst

    def restart(self) -> None:
        """A new epoch of the same loader: its start and burst are not timed."""
        self._last, self._untimed = None, self.burst

    def tick(self, now: float, real: float | None = None) -> bool:
        """A batch arrived at `now` (holding `real` elements); True when the measure is done."""
        if self._first is None:
            self._first = now
        if self._untimed > 0 or self._last is None:
            self._untimed -= 1
        else:
            self._intervals.append(now - self._last)
            self._elapsed += now - self._last
            self._reals.append(math.nan if real is None else float(real))
        self._last = now
        return self.done()

    def done(self) -> bool:
        n = len(self._intervals)
        if n >= self.max_batches:
            self._stopped = "batches"
        elif self._elapsed >= self.max_seconds:
            self._stopped = "time"
        elif self.settle and n >= self.min_batches and n % self.block == 0 and self.rel_error() < self.rel_tol:
            self._stopped = "settled"
        return bool(self._stopped)

    def rel_error(self) -> float:
        """Relative standard error of the mean block time (inf with fewer than 4 blocks)."""
        blocks = len(self._intervals) // self.block
        if blocks < 4:
            return math.inf
        sums = [sum(self._intervals[b * self.block : (b + 1) * self.block]) for b in range(blocks)]
        mean = sum(sums) / blocks
        var = sum((s - mean) ** 2 for s in sums) / (blocks - 1)
        return math.sqrt(var / blocks) / max(mean, 1e-12)

    @property
    def timed(self) -> int:
        """Intervals timed so far."""
        return len(self._intervals)

    def result(self, stopped: str | None = None) -> LoaderRate:
        if self._first is None:
            raise ValueError("no batch was measured: the loader is empty")
        elapsed = self._elapsed
        reals = [r for r in self._reals if not math.isnan(r)]
        real = sum(reals) / elapsed if elapsed > 0 and len(reals) == len(self._reals) and reals else None
        return LoaderRate(
            start_s=self._first - self._started,
            batches=len(self._intervals),
            batches_per_s=len(self._intervals) / elapsed if elapsed > 0 else math.nan,
            real_per_s=real,
            rel_error=self.rel_error(),
            stopped=stopped or self._stopped or "exhausted",
        )


def measure_loader(
    loader: Iterable,
    meter: RateMeter,
    count: Callable[[Any], float | None] | None = None,
    on_batch: Callable[[RateMeter], None] | None = None,
) -> LoaderRate:
    """Iterate `loader` (again from its start when an epoch ends before the meter is done; the new
    epoch's start is not timed) until `meter` is done; `count(batch)` gives its real elements.

    A loader's workers are stopped before returning (`shutdown_workers` of a
    `VarLenLoader`; a plain loader's iterator is dropped)."""
    meter.start(time.perf_counter())
    served = 0
    try:
        while True:
            before = served
            for batch in loader:
                served += 1
                now = time.perf_counter()
                done = meter.tick(now, count(batch) if count is not None else None)
                if on_batch is not None:
                    on_batch(meter)
                if done:
                    return meter.result()
            if served == before:
                return meter.result("exhausted")
            meter.restart()
    finally:
        shutdown = getattr(loader, "shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def loader_rate(dm: Any, max_batches: int = 200, max_seconds: float = 5.0) -> LoaderRate:
    """The training loader's batches/s and real elements/s with the DataModule's own settings (its
    `num_workers`, `prefetch_factor`, ... as configured): the figure `varlen inspect` prints.

    Args:
        dm: a set-up varlen DataModule (`train_dataloader()` and `batch_stats(batch)`).
        max_batches: stop after this many timed batches, settled or not.
        max_seconds: stop after this many seconds of timed batches.
    """
    workers = int(getattr(dm, "num_workers", 0) or 0)
    meter = RateMeter(
        max_batches=max_batches, max_seconds=max_seconds, burst=max(workers, 1), block=4 * max(workers, 1)
    )
    return measure_loader(dm.train_dataloader(), meter, count=lambda batch: dm.batch_stats(batch).real)


def loader_settings(dm: Any) -> str:
    """The DataModule's loader arguments, as `LoaderRate.line` names them."""
    names = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "multiprocessing_context")
    return ", ".join(f"{name}={getattr(dm, name, None)}" for name in names)


def probe_batches(loader: Any, batches: int) -> list[list[int]]:
    """Up to `batches` batches of indices the loader would serve, read without moving its sampler:
    a varlen sampler's plan of epoch 0 (a pure function of its seed), else the first indices in order
    at the loader's batch size; none for a loader without either (an iterable dataset)."""
    sampler = getattr(loader, "batch_sampler", None)
    plan = getattr(sampler, "global_plan", None)
    if plan is not None:
        laid = plan(0)
        return [laid.order[a:b].tolist() for a, b in laid.bounds[:batches].tolist()]
    size = getattr(loader, "batch_size", None) or getattr(sampler, "batch_size", None)
    dataset = getattr(loader, "dataset", None)
    if not size or not hasattr(dataset, "__len__"):
        return []
    n = len(dataset)
    return [list(range(start, min(start + size, n))) for start in range(0, min(n, batches * size), size)]


def fetch_collate_times(loader: Any, batches: int = 3, max_seconds: float = 2.0) -> tuple[float, float] | None:
    """Seconds a batch takes to fetch (the dataset's `__getitems__`, else one `dataset[i]` per
    sample) and to collate, each a mean over up to `batches` batches (fewer past `max_seconds`),
    timed in this process; None where the loader's batches cannot be read apart (see `probe_batches`)."""
    dataset, collate = getattr(loader, "dataset", None), getattr(loader, "collate_fn", None)
    indices = probe_batches(loader, batches)
    if dataset is None or collate is None or not indices:
        return None
    fetch_s = collate_s = 0.0
    done = 0
    for batch in indices:
        t0 = time.perf_counter()
        items = dataset.__getitems__(batch) if hasattr(dataset, "__getitems__") else [dataset[i] for i in batch]
        t1 = time.perf_counter()
        collate(items)
        t2 = time.perf_counter()
        fetch_s, collate_s, done = fetch_s + t1 - t0, collate_s + t2 - t1, done + 1
        if fetch_s + collate_s > max_seconds:
            break
    return fetch_s / done, collate_s / done
