"""Each rung's largest batch that trains on the device (`varlen tune --budget` under the shape policy).

As NeMo's OOMptimizer does per bucket: for every padded length of the DataModule's rungs, the longest first,
the largest batch of that length whose training step, backward and optimizer step fit the device's memory.
The result is the `rung_batch_sizes` table a config holds (each batch then holds its rung's count).

`largest_count` is the search alone, a pure function of a probe `peak(count)` (the step's peak
memory in bytes, None when it ran out; tests drive it with a memory model). Memory grows about linearly with
the batch at one length, so after one step that fits the next guess is read off its peak (the count at
which the peak would reach the device's capacity); a guess that runs out is bisected against the last count
that fitted, down to `tolerance`. Each rung starts from the tokens of the rung above it (a shorter length
holds at least as many tokens), so most rungs take two or three steps, and once a rung holds the whole
training split the shorter ones do too, unprobed.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["RungBatch", "device_peak", "largest_count", "rung_indices", "search_rungs"]


def largest_count(
    peak: Callable[[int], int | None], start: int, high: int, capacity: int, tolerance: float = 0.05
) -> int:
    """The largest count in `[1, high]` whose `peak` fits, within `tolerance` of it, from `start`.

    Raises:
        ValueError: even a count of 1 runs out, or a bad range.
    """
    if not 1 <= start <= high or capacity <= 0:
        raise ValueError(f"need 1 <= start <= high and a capacity > 0, got {start}, {high}, {capacity}")
    good, bad, count = 0, high + 1, start  # the largest count known to fit, the smallest known not to
    fitted: list[tuple[int, int]] = []  # (count, peak) of the steps that fitted
    while True:
        used = peak(count)
        if used is None:
            bad = count
        else:
            good = count
            fitted.append((count, used))
        if good == high or (good and bad - good <= max(1, tolerance * good)):
            return good
        if used is not None and bad > high:  # nothing ran out yet: read the next count off the peaks
            count = min(high, max(_extrapolated(fitted, capacity), int(np.ceil(count * (1 + tolerance)))))
        elif good == 0:
            if count == 1:
                raise ValueError("a batch of one sample does not fit the device")
            count //= 2
        else:
            count = (good + bad) // 2


def _extrapolated(fitted: list[tuple[int, int]], capacity: int) -> int:
    """The count at which the peak would reach the capacity: the line through the last two steps that fitted
    (one step: through nothing, the peak in proportion to the count)."""
    (n1, p1), (n0, p0) = fitted[-1], fitted[-2] if len(fitted) > 1 else (0, 0)
    per = (p1 - p0) / max(n1 - n0, 1)
    return int(n1 + (capacity - p1) / per) if per > 0 else n1 * 2


def rung_indices(sizes: np.ndarray, rungs: np.ndarray, rung: int, count: int) -> list[int]:
    """`count` samples that pad to `rungs[rung]` (their sizes in its bucket; repeated when the bucket holds
    fewer), the longest first: a batch of exactly that padded length."""
    low = rungs[rung - 1] if rung else -1
    inside = np.flatnonzero((sizes > low) & (sizes <= rungs[rung]))
    inside = inside[np.argsort(-sizes[inside], kind="stable")]
    return np.resize(inside, count).tolist()


@dataclass(frozen=True)
class RungBatch:
    """One rung's result: its padded length, the largest batch that fit, what the config's budget gives now."""

    length: int
    batch: int
    budget_batch: int

    def line(self) -> str:
        return (
            f"  {self.length:>6,} tokens: {self.batch:>8,} samples ({self.batch * self.length:>10,} tokens)"
            f"   max_tokens gives {self.budget_batch:,}"
        )


def search_rungs(
    dm: Any,
    peak_of: Callable[[list[int]], int | None],
    capacity: int,
    margin: float = 0.1,
    tolerance: float = 0.05,
    log: Callable[[str], None] = print,
) -> list[RungBatch]:
    """Each rung's largest batch (`margin` of it left free), the longest rung first: `peak_of(indices)` is
    the peak memory of a training step of those training samples (None: it ran out; `device_peak`),
    `capacity` the device's memory."""
    sizes = np.asarray(dm.of_each_source(dm.dataset("train"), "sampler_lengths")).reshape(len(dm.dataset("train")), -1)
    sizes, rungs = sizes[:, 0], dm.rungs[0].array
    high = len(sizes)
    budget = int(np.atleast_1d(dm.max_tokens)[0]) if dm.max_tokens is not None else None
    found, tokens = [], None
    for rung in range(len(rungs) - 1, -1, -1):
        length = int(rungs[rung])
        if not ((sizes > (rungs[rung - 1] if rung else -1)) & (sizes <= length)).any():
            continue
        if tokens is not None and tokens // length >= high:  # the rung above held the whole split: so does this
            count = high
        else:
            start = max(1, min(high, (tokens or budget or length) // length))
            peak = lambda n, r=rung: peak_of(rung_indices(sizes, rungs, r, n))  # noqa: E731
            count = largest_count(peak, start, high, capacity, tolerance)
        tokens = count * length
        found.append(RungBatch(length, max(1, int(count * (1 - margin))), max(1, (budget or 0) // length)))
        log(found[-1].line())
    return found[::-1]


def device_peak(step: Callable[[list[int]], None], device: torch.device) -> Callable[[list[int]], int | None]:
    """`peak_of(indices)`: the peak memory of `step(indices)` on `device` (None when it ran out)."""

    def peak_of(indices: list[int]) -> int | None:
        torch.cuda.reset_peak_memory_stats(device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # self.log outside a trainer
                step(indices)
            torch.cuda.synchronize(device)
            return torch.cuda.max_memory_allocated(device)
        except torch.cuda.OutOfMemoryError:
            return None
        finally:
            gc.collect()
            torch.cuda.empty_cache()

    return peak_of
