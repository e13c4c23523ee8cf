"""`PlanSampler`: what every batch sampler of varlen is to Lightning, whatever its plan reads the sizes from.

Two size sources plan an epoch: the sizes in memory (`BucketBatchSampler`, its own
plan) or a streamed data set's size index (`StreamBatchSampler`, whose plan
reads the index's histograms). Around either, the sampler is the same: Lightning calls `set_epoch` on
`batch_sampler.sampler` (an `EpochTracker`, or the `DistributedSampler` it injects under DDP, which
also gives the ranks), rebuilds the sampler under DDP from its `__init__` arguments, reads `len()` once,
and saves and loads `state_dict` through torchdata's `StatefulDataLoader`; every batch leaves through
`PlanSampler.batch_of`, the one place where a plan's indices become what the loader fetches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import BatchSampler, Sampler

from varlen.batching.indices import BatchIndices
from varlen.batching.shape_policy import batch_widths

__all__ = ["EpochTracker", "PlanSampler", "resolve_ranks"]


class EpochTracker(Sampler[int]):
    """The batch sampler's `.sampler`: a sequential sampler that remembers its epoch.

    Lightning calls `set_epoch` only on `batch_sampler.sampler`; this is where it lands when
    no `DistributedSampler` was injected.
    """

    def __init__(self, num_samples: int) -> None:
        self.num_samples = num_samples
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.num_samples))

    def __len__(self) -> int:
        return self.num_samples


def resolve_ranks(num_replicas: int | None, rank: int | None, sampler: Sampler | None) -> tuple[int, int]:
    """The world size and rank: as given, else the injected sampler's, else torch.distributed's, else 1 and 0."""
    if num_replicas is None:
        num_replicas = getattr(sampler, "num_replicas", None)
    if rank is None:
        rank = getattr(sampler, "rank", None)
    initialised = dist.is_available() and dist.is_initialized()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
    return int(num_replicas), int(rank)


class PlanSampler(BatchSampler):
    """The part of a batch sampler that Lightning sees (see the module docstring). A subclass calls
    `_serve_on` first and `_start` last in its `__init__`, and gives `_rank_batches` (this
    rank's batches of the current epoch, as index lists with their padded lengths where its plan knows them),
    `sizes_of` and `bucket_sizes` (from where its sizes live: memory, or a size index) and the plan's `spec`,
    `len()` and state."""

    def _serve_on(self, num_samples: int, sampler: Sampler | None, num_replicas: int | None, rank: int | None) -> None:
        """The sampler Lightning sets the epoch on (its injected one, else an `EpochTracker`) and the ranks."""
        # BatchSampler.__init__ is not called: it insists on a sampler and an int batch size.
        self.sampler = sampler if sampler is not None else EpochTracker(num_samples)
        self.num_replicas, self.rank = resolve_ranks(num_replicas, rank, sampler)

    def _start(self, epoch: int, state: dict[str, Any] | None) -> None:
        """Stand at `epoch` (what `len()` describes until `set_epoch`), a saved `state` loaded at once."""
        if epoch:
            self.set_epoch(epoch)
        self.state = state
        if state is not None:
            self.load_state_dict(state)

    @property
    def epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose plan the next iteration yields."""
        self.sampler.set_epoch(epoch)

    def batch_of(self, indices: list[int], epoch: int, widths: tuple[int, ...] | None = None) -> Sequence[int]:
        """`indices` as this sampler serves a batch of `epoch`: with rungs, carrying the padded length of each
        size axis (`widths`, else read off their sizes). Every batch served, warm-up batches too, is made here."""
        widths = self.widths(indices) if widths is None else widths
        return indices if widths is None else BatchIndices(indices, widths)

    def widths(self, indices: list[int]) -> tuple[int, ...] | None:
        """The padded length of each size axis of the batch of `indices` (None without rungs: its longest)."""
        rungs = self.spec.rungs
        return None if rungs is None else batch_widths(self.sizes_of(indices), rungs)

    def sizes_of(self, indices: list[int]) -> np.ndarray:
        """The sizes (`[n]` or `[n, D]`) of samples `indices`, from where this sampler's sizes live."""
        raise NotImplementedError

    def bucket_sizes(self) -> list[np.ndarray]:
        """The size each bucket's samples are costed at, per size axis."""
        raise NotImplementedError

    def _begin(self) -> None:
        """What `iter()` fixes at once, before the first batch (nothing here)."""

    def _rank_batches(self) -> Iterator[tuple[list[int], tuple[int, ...] | None]]:
        """This rank's batches of the current epoch, from where a loaded state stood: index lists and their
        padded lengths (None: read off their sizes where rungs pad them)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Sequence[int]]:
        """This epoch's batches for this rank (resuming where a loaded state left off).

        The epoch is read again at the first `next()`, so a `set_epoch` between `iter()`
        and the first batch still counts (Lightning calls it after creating its first iterator).
        """
        self._begin()
        return self._served()

    def _served(self) -> Iterator[Sequence[int]]:
        epoch = self.epoch
        for indices, widths in self._rank_batches():
            yield self.batch_of(indices, epoch, widths)
