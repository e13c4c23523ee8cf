"""What a training run's wait for data most likely comes from, in one line (for :class:`~.data_wait.DataWait`).

The cause is read from what was measured: the epoch's wait and step times, the first batch's share of
the wait, the loader's settings, the node's cores per device, and a few batches' fetch and collate
timed apart in the main process once the advice is due (:func:`~varlen.batching.throughput.fetch_collate_times`).
The workers can make at most ``workers / (fetch + collate)`` batches a second; the loop asks for one
per step's compute time. Below that demand the workers are the bottleneck (busy in whichever part
dominates, or short of cores); above it, the batches are made in time and lost on their way: the
hand-over to the main process, or in a first epoch perhaps the files read cold (a probe after the
epoch reads them warm, so the two are told apart only by the next epoch).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from varlen.batching.throughput import fetch_collate_times

__all__ = ["WaitFigures", "advice_line", "read_cause", "tune_command_line"]


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
    """The likely cause of the wait, in words with its figures (see the module docstring)."""
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
    """The one line :class:`~varlen.batching.data_wait.DataWait` logs (its epoch counted from 1, as the epoch
    lines count; ``f.epoch`` is Lightning's, from 0)."""
    slowest = f"; slowest rank {f.share_max:.0%}" if f.share_max > f.share + 0.005 else ""
    return (
        f"varlen: the training loop waited for data {f.share:.0%} of epoch {f.epoch + 1} "
        f"({f.wait_s:.1f} s of {f.elapsed_s:.1f} s on rank 0{slowest}); likely cause: {read_cause(f)}. "
        f"Measure the loader's settings: {command}"
    )


def tune_command_line(argv: Sequence[str]) -> str:
    """``varlen tune`` with the ``--config`` and ``--data.*`` arguments of a ``varlen fit`` command line
    (``sys.argv``); ``--config CONFIG`` where it names none."""
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
