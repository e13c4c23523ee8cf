"""One setting's figure from passes that agree: a warm-up discarded, then passes until their rates settle.

A single pass (one `RateMeter` measure) of a setting moves with whatever else the machine does: the
first pass of a run reads cold caches and starts the workers' imports, and on a shared machine one pass can
land in another job's burst (a tune run once gave 12,033 batches/s for a setting measured first and 2,758
for the same setting at the end). So each setting is measured in passes (`repeated`): the first
`Settle.warmup` passes are run and discarded, then passes are repeated until the rates of the last
`Settle.repeats` are within `Settle.spread` of each other ((largest - smallest) / median), and the figure is
their median. A setting that has not settled by `Settle.cap_s` (its warm-up included) keeps the figure of
its last passes, flagged `not settled` with their spread, which the table shows.

The clock is a parameter, so the rule is tested on a fake one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from varlen.batching.loader_rate import LoaderRate

__all__ = ["Settle", "relative_spread", "repeated"]


@dataclass(frozen=True)
class Settle:
    """How a setting's passes are taken: `warmup` discarded, then until the last `repeats` agree within
    `spread` (or `cap_s` seconds have gone, the warm-up's included)."""

    warmup: int = 1
    repeats: int = 3
    spread: float = 0.10
    cap_s: float = 15.0

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeats < 1 or not self.spread > 0 or not self.cap_s > 0:
            raise ValueError(
                f"need warmup >= 0, repeats >= 1, spread > 0 and cap_s > 0, got warmup={self.warmup}, "
                f"repeats={self.repeats}, spread={self.spread}, cap_s={self.cap_s}"
            )


def relative_spread(rates: Sequence[float]) -> float:
    """(largest - smallest) / median of `rates` (inf for none, or a rate that is not a number)."""
    if not rates or not all(math.isfinite(r) for r in rates):
        return math.inf
    return (max(rates) - min(rates)) / max(statistics.median(rates), 1e-12)


def repeated(
    measure: Callable[[], LoaderRate], rule: Settle, clock: Callable[[], float] = time.perf_counter
) -> LoaderRate:
    """The figure of a setting whose one pass is `measure()`, taken by `rule` (see the module).

    An error of a pass (a warm-up's timeout: the setting is pruned) is raised as it is."""
    started = clock()
    for _ in range(rule.warmup):
        measure()
    passes: list[LoaderRate] = []
    while True:
        passes.append(measure())
        last = passes[-rule.repeats :]
        spread = relative_spread([p.batches_per_s for p in last])
        if len(last) == rule.repeats and spread <= rule.spread:
            return _combined(last, f"settled: {len(last)} passes within {spread:.0%}")
        if clock() - started >= rule.cap_s:
            said = f"{spread:.0%} apart" if math.isfinite(spread) and len(last) > 1 else "too few to compare"
            return _combined(last, f"not settled: last {len(last)} passes {said} at the {rule.cap_s:g} s cap")


def _combined(passes: list[LoaderRate], stopped: str) -> LoaderRate:
    """The passes' medians; `rel_error` the relative standard error of their mean rate (inf for one pass)."""
    rates = [p.batches_per_s for p in passes]
    reals = [p.real_per_s for p in passes]
    if len(rates) > 1 and all(math.isfinite(r) for r in rates):
        error = statistics.stdev(rates) / math.sqrt(len(rates)) / max(statistics.fmean(rates), 1e-12)
    else:
        error = math.inf
    return LoaderRate(
        start_s=statistics.median(p.start_s for p in passes),
        batches=sum(p.batches for p in passes),
        batches_per_s=statistics.median(rates),
        real_per_s=None if any(r is None for r in reals) else statistics.median(reals),
        rel_error=error,
        stopped=stopped,
    )
