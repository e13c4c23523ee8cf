"""`StreamBatchSampler`: the streamed plan (:class:`~varlen.stream.plan_state.StreamBatchPlan`) as a
BatchSampler that Lightning handles as it handles :class:`~varlen.batching.BucketBatchSampler`.

Lightning rebuilds a custom batch sampler under DDP with its saved arguments and the injected
``DistributedSampler`` as ``sampler`` (ranks are read from it, then from torch.distributed), and calls
``set_epoch`` on ``batch_sampler.sampler``; the state goes into checkpoints through torchdata's
``StatefulDataLoader``. The arguments are plain values (the folder, not the index) so the rebuild
and the loader's pickling carry no open files.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, Sampler

from varlen.batching.indices import BatchIndices
from varlen.batching.plan import Plan
from varlen.batching.sampler import BucketBatchSampler, EpochTracker
from varlen.batching.shape_policy import batch_widths
from varlen.stream.plan import WINDOW_BATCHES
from varlen.stream.plan_state import StreamBatchPlan
from varlen.stream.shape_policy import stream_sizes
from varlen.stream.size_index import SizeIndex

__all__ = ["StreamBatchSampler"]


class StreamBatchSampler(BatchSampler):
    """This rank's batches of a streamed training split (global sample ids), from its size index.

    Args:
        folder: the LitData dataset folder with its size index.
        batch_size, max_tokens, cost, max_batch_size, pad_to_multiple_of, seed, window_batches: the
            plan's (:class:`~varlen.stream.plan_state.StreamBatchPlan`); the order always changes with
            ``(seed, epoch)``.
        lanes: the loader's ``num_workers`` (1 for none): the DataLoader deals batches to its workers in
            turn, and the plan lays them out so that each worker reads whole windows of its own, each
            chunk decoded by one worker (with 1, every worker decodes every chunk). It orders a rank's
            batches, never chooses them; a state of other lanes finishes its epoch in the saved order.
        num_replicas, rank: default to the injected sampler's, then torch.distributed's, else 1 and 0.
        sampler: set by Lightning (its ``DistributedSampler``); leave it None yourself.
        state: a saved state to resume from at once (see :class:`~varlen.batching.BucketBatchSampler`).
        rungs: the shape policy's padded lengths (edges of the size grid; a DataModule fits them):
            the buckets, each batch the budget over its rung, padded to it by the collate.

    ``len()`` is the same on every rank and every epoch (an epoch resumed on another number of
    ranks has its own, as the in-memory sampler's).
    """

    #: the streamed plan draws no weights (what ``varlen inspect`` reads)
    draw = None

    def __init__(
        self,
        folder: str | Path,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        cost: str = "padded",
        max_batch_size: int | None = None,
        pad_to_multiple_of: int | None = None,
        seed: int = 0,
        window_batches: int = WINDOW_BATCHES,
        lanes: int = 1,
        num_replicas: int | None = None,
        rank: int | None = None,
        sampler: Sampler | None = None,
        state: dict[str, Any] | None = None,
        rungs: Sequence[int] | None = None,
    ) -> None:
        # BatchSampler.__init__ is not called: it insists on a sampler and an int batch size.
        self.folder = str(folder)
        self.batch_size, self.max_tokens, self.drop_last = batch_size, max_tokens, False
        index = SizeIndex(self.folder)
        make_plan = partial(
            StreamBatchPlan,
            index,
            batch_size=batch_size,
            max_tokens=max_tokens,
            cost=cost,
            max_batch_size=max_batch_size,
            pad_to_multiple_of=pad_to_multiple_of,
            seed=seed,
            window_batches=window_batches,
            lanes=lanes,
            rungs=rungs,
        )
        self._set_up(make_plan, int(index.samples_per_chunk.sum()), sampler, num_replicas, rank, state)

    def _set_up(self, make_plan, samples: int, sampler, num_replicas, rank, state, epoch: int = 0) -> None:
        """What every streamed sampler does with its plan: the sampler Lightning sets the epoch on (or its
        injected one), the ranks, ``make_plan(num_replicas=, rank=)``, and a saved state loaded at once."""
        self.sampler = sampler if sampler is not None else EpochTracker(samples)
        self.num_replicas, self.rank = BucketBatchSampler._resolve_ranks(num_replicas, rank, sampler)
        self.plan = make_plan(num_replicas=self.num_replicas, rank=self.rank)
        self.spec = self.plan.spec
        if epoch:
            self.set_epoch(epoch)
        self.state = state
        if state is not None:
            self.load_state_dict(state)

    @property
    def epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def _synced(self) -> StreamBatchPlan:
        self.plan.set_epoch(self.epoch)
        return self.plan

    def __len__(self) -> int:
        return len(self._synced())

    def __iter__(self) -> Iterator[list[int]]:
        """This epoch's batches; the epoch is read at the first ``next()`` (Lightning sets it after
        creating its first iterator)."""
        for batch in self._synced():
            yield self.batch_of(batch.tolist())

    def global_plan(self, epoch: int | None = None) -> Plan:
        """Every rank's batches of ``epoch`` in serving order (rank r's t-th batch is batch ``t * W + r``),
        as the in-memory sampler's :meth:`~varlen.batching.BucketBatchSampler.global_plan`: for a look at
        the whole split (``varlen inspect``), it reads every rank's windows."""
        epoch = self.epoch if epoch is None else int(epoch)
        ranks = []
        for rank in range(self.num_replicas):
            plan = self.plan.on_rank(rank)
            plan.set_epoch(epoch)
            ranks.append(list(plan))
        batches = [batch for turn in zip(*ranks, strict=True) for batch in turn]
        ends = np.cumsum([len(batch) for batch in batches])
        order = np.concatenate(batches) if batches else np.zeros(0, np.int64)
        return Plan(order, np.stack([ends - [len(b) for b in batches], ends], axis=1))

    def shape_count(self, epoch: int | None = None) -> int:
        """The distinct ``(batch size, padded length)`` shapes of ``epoch``'s batches (every rank's)."""
        return len(self.plan.shapes(self.epoch if epoch is None else epoch))

    def shape_batches(self, epoch: int | None = None) -> list[list[int]]:
        """One batch (global ids) of each distinct shape of ``epoch``, the widest first: samples whose sizes pad to
        the shape's length, found in the size indexes chunk by chunk until each has enough (repeated where the
        split holds too few); nothing decoded. Packed, one row: rank 0's first batch of ``epoch``."""
        epoch = self.epoch if epoch is None else int(epoch)
        if self.plan.spec.cost == "packed":
            first = self.plan.on_rank(0)
            first.set_epoch(epoch)
            return [batch.tolist() for batch in itertools.islice(first, 1)]
        shapes = sorted(self.plan.shapes(epoch), key=lambda s: (-s[1], -s[0]))
        rungs = np.asarray(self.plan.layout.rounded)
        wanted = {width: max(count for count, w in shapes if w == width) for _, width in shapes}
        found: dict[int, list[int]] = {width: [] for width in wanted}
        first = 0  # a source's first global id
        for index in getattr(self.plan, "indexes", None) or [self.plan.index]:
            for chunk in range(index.num_chunks):
                if all(len(found[w]) >= n for w, n in wanted.items()):
                    break
                sizes = np.asarray(index.sizes(chunk)).reshape(int(index.samples_per_chunk[chunk]), -1)[:, 0]
                widths = rungs[np.minimum(np.searchsorted(rungs, sizes, side="left"), len(rungs) - 1)]
                start = first + int(np.sum(index.samples_per_chunk[:chunk]))
                for width in wanted:
                    if len(found[width]) < wanted[width]:
                        found[width] += (start + np.flatnonzero(widths == width)).tolist()
            first += int(np.sum(index.samples_per_chunk))
        return [self.batch_of(np.resize(found[width], count).tolist()) for count, width in shapes if found[width]]

    def batch_of(self, ids: list[int]) -> list[int]:
        """``ids`` as this sampler serves a batch: with rungs, carrying its padded length (the plan's axis)."""
        rungs = self.plan.spec.rungs
        if rungs is None:
            return ids
        sizes = stream_sizes(getattr(self.plan, "indexes", None) or [self.plan.index], ids)
        return BatchIndices(ids, batch_widths(sizes, rungs))

    def bucket_sizes(self) -> list[np.ndarray]:
        """The size each bucket's samples are costed at, per axis (one: the streamed plan's)."""
        return [np.asarray(self.plan.layout.rounded)]

    def segments(self, epoch: int) -> tuple:
        return self.plan.segments(epoch)

    def saved_segments(self, epoch: int) -> list:
        return self.plan.saved_segments(epoch)

    def resumed_epoch(self) -> bool:
        return self._synced().resumed_epoch()

    def state_dict(self) -> dict[str, Any]:
        return self._synced().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume exactly (see :meth:`StreamBatchPlan.load_state_dict`); the epoch it resumes in is set
        on ``.sampler`` too (a complete epoch resumes at the start of the next)."""
        self.plan.load_state_dict(state)
        self.sampler.set_epoch(self.plan.epoch)
