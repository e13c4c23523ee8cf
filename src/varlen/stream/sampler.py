"""`StreamBatchSampler` and `StreamMixtureSampler`: the streamed plans (`
StreamBatchPlan`, `MixtureBatchPlan`) as the batch sampler Lightning handles
as it handles `BucketBatchSampler` (`PlanSampler`:
the same epoch, ranks, rebuild under DDP, state and yield; only the size source differs).

The arguments are plain values (the folders, not the indexes) so that Lightning's rebuild and the loader's
pickling carry no open files.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from varlen.batching.plan import Plan, PlanSpec
from varlen.batching.plan_sampler import PlanSampler
from varlen.batching.shape_policy import batch_widths
from varlen.stream.draw_index import weighted_index
from varlen.stream.epochs import StreamBatchPlan, StreamEpochs
from varlen.stream.mixture_epochs import MixtureBatchPlan
from varlen.stream.shape_policy import stream_sizes
from varlen.stream.size_index import SizeIndex

__all__ = ["StreamBatchSampler", "StreamMixtureSampler"]


class StreamBatchSampler(PlanSampler):
    """This rank's batches of a streamed training split (global sample ids), from its size index.

    Args:
        folder: the LitData dataset folder with its size index.
        spec: the plan's `PlanSpec` (or its settings one by one: `batch_size`,
            `max_tokens`, `cost`, `max_batch_size`, `pad_to_multiple_of`, `rungs`; these, `seed`,
            `window_batches` and the next by name), as for `StreamEpochs`; the
            order always changes with `(seed, epoch)`. Its rungs (the shape policy's, edges of the size grid: a
            DataModule fits them) are the buckets, each batch the budget over its rung, padded to it by the collate.
        lanes: the loader's `num_workers` (1 for none): the DataLoader deals batches to its workers in
            turn, and the plan lays them out so that each worker reads whole windows of its own, each
            chunk decoded by one worker (with 1, every worker decodes every chunk). It orders a rank's
            batches, never chooses them; a state of other lanes finishes its epoch in the saved order.
        num_replicas, rank: default to the injected sampler's, then torch.distributed's, else 1 and 0.
        sampler: set by Lightning (its `DistributedSampler`); leave it None yourself.
        state: a saved state to resume from at once (see `BucketBatchSampler`).

    `len()` is the same on every rank and every epoch (an epoch resumed on another number of
    ranks has its own, as the in-memory sampler's).
    """

    #: the streamed plan draws no weights (what `varlen inspect` reads)
    draw = None

    def __init__(
        self,
        folder: str | Path,
        spec: PlanSpec | None = None,
        sampler: Sampler | None = None,
        state: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.folder = str(folder)
        index = SizeIndex(self.folder)
        ranks = options.pop("num_replicas", None), options.pop("rank", None)
        self._serve_on(int(index.samples_per_chunk.sum()), sampler, *ranks)
        self._adopt(StreamBatchPlan(index, spec, **options, **self._ranks()))
        self._start(0, state)

    def _ranks(self) -> dict[str, int]:
        return {"num_replicas": self.num_replicas, "rank": self.rank}

    def _adopt(self, plan: StreamEpochs) -> None:
        self.plan, self.spec = plan, plan.spec
        self.batch_size, self.drop_last = self.spec.batch_size, False
        self.max_tokens = None if self.spec.max_tokens is None else self.spec.max_tokens[0]

    def _synced(self) -> StreamEpochs:
        self.plan.set_epoch(self.epoch)
        return self.plan

    def __len__(self) -> int:
        return len(self._synced())

    def _rank_batches(self) -> Iterator[tuple[list[int], tuple[int, ...] | None]]:
        rungs = self.spec.rungs  # each batch's sizes come with it, read with its window
        for ids, sizes in self._synced().sized_batches():
            yield ids.tolist(), None if rungs is None else batch_widths(sizes, rungs)

    def global_plan(self, epoch: int | None = None) -> Plan:
        """Every rank's batches of `epoch` in serving order (rank r's t-th batch is batch `t * W + r`),
        as the in-memory sampler's `global_plan`: for a look at
        the whole split (`varlen inspect`), it reads every rank's windows."""
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
        """The distinct `(batch size, padded length)` shapes of `epoch`'s batches (every rank's)."""
        return len(self.plan.shapes(self.epoch if epoch is None else epoch))

    def shape_batches(self, epoch: int | None = None) -> list[list[int]]:
        """One batch (global ids) of each distinct shape of `epoch`, the widest first: samples whose sizes pad to
        the shape's length, found in the size indexes chunk by chunk until each has enough (repeated where the
        split holds too few); nothing decoded. Packed, one row: rank 0's first batch of `epoch`."""
        epoch = self.epoch if epoch is None else int(epoch)
        if self.plan.spec.cost == "packed":
            first = self.plan.on_rank(0)
            first.set_epoch(epoch)
            return [self.batch_of(batch.tolist(), epoch) for batch in itertools.islice(first, 1)]
        shapes = sorted(self.plan.shapes(epoch), key=lambda s: (-s[1], -s[0]))
        rungs = np.asarray(self.plan.layout.rounded)
        wanted = {width: max(count for count, w in shapes if w == width) for _, width in shapes}
        found: dict[int, list[int]] = {width: [] for width in wanted}
        first = 0  # a source's first global id
        for index in self.plan.indexes:
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
        return [
            self.batch_of(np.resize(found[width], count).tolist(), epoch) for count, width in shapes if found[width]
        ]

    def sizes_of(self, indices: list[int]) -> np.ndarray:
        """The sizes of samples `indices` on the first axis, read from the size indexes chunk by chunk."""
        return stream_sizes(self.plan.indexes, indices)

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
        """Resume exactly (see `StreamBatchPlan.load_state_dict`); the epoch it resumes in is set
        on `.sampler` too (a complete epoch resumes at the start of the next)."""
        self.plan.load_state_dict(state)
        self.sampler.set_epoch(self.plan.epoch)


class StreamMixtureSampler(StreamBatchSampler):
    """This rank's batches of several streamed sources (global ids over the sources one after the other, as
    `SourceMixture` numbers them), or of one source drawn by weight.

    Args:
        folders: each source's dataset folder with its size index (the local copy of a store's).
        names: the sources' names, in order (`source_weights` may name them).
        source_weights, mix, num_samples: as for `MixtureBatchPlan`
            (`source_weights` a list, a mapping by name, or a schedule's stages).
        sample_weights: per source, its DataModule's `sample_weights` (`"balanced"`, a weight column
            or None): its samples are drawn by the weights written beside its size index
            (`weighted_index`).
        epoch: the epoch `len()` describes until `set_epoch`: Lightning reads the length of a loader it
            reloads (a schedule's epochs differ) before it sets the epoch; an argument, so that the sampler
            Lightning rebuilds under DDP keeps it.
        steps_before: the batches per rank the trainer took before `epoch` (a DataModule counts them): where
            a schedule of steps places it; None: counted from the plans.
        the rest (`spec`, `sampler`, `state`; `seed`, `window_batches`, `lanes`, `num_replicas`,
            `rank` and the spec's settings one by one, by name): as for `StreamBatchSampler`.

    `len()` is the current epoch's (after `set_epoch`): a schedule's epochs may differ.
    """

    def __init__(
        self,
        folders: Sequence[str | Path],
        names: Sequence[str] | None = None,
        source_weights: Any = None,
        mix: str = "within_batch",
        num_samples: int | None = None,
        sample_weights: Sequence[str | None] | None = None,
        sampler: Sampler | None = None,
        epoch: int = 0,
        state: dict[str, Any] | None = None,
        steps_before: int | None = None,
        spec: PlanSpec | None = None,
        **options: Any,
    ) -> None:
        self.folders = [str(folder) for folder in folders]
        weighing = list(sample_weights) if sample_weights is not None else [None] * len(self.folders)
        if len(weighing) != len(self.folders):
            raise ValueError(f"{len(weighing)} sample_weights for {len(self.folders)} sources")
        self.sample_weights = weighing
        indexes = [
            SizeIndex(folder) if weights is None else weighted_index(folder, weights, str(name))
            for folder, weights, name in zip(self.folders, weighing, names or range(len(self.folders)), strict=True)
        ]
        ranks = options.pop("num_replicas", None), options.pop("rank", None)
        self._serve_on(sum(int(index.samples_per_chunk.sum()) for index in indexes), sampler, *ranks)
        drawn = {"names": names, "source_weights": source_weights, "mix": mix, "num_samples": num_samples}
        self._adopt(MixtureBatchPlan(indexes, spec, **options, **self._ranks(), **drawn))
        if steps_before is not None:
            self.plan.start_at(epoch, steps_before)
        self._start(epoch, state)

    @property
    def scheduled(self) -> Any:
        """The sources' schedule where their shares change over training (None otherwise), as the in-memory
        sampler's: what the DataModule's report and telemetry read."""
        return None if self.plan.schedule.constant else self.plan.schedule

    def shares_of(self, epoch: int) -> np.ndarray:
        """The sources' shares `epoch` draws with."""
        return np.asarray(self.plan.shares(epoch))

    def stage_of(self, epoch: int) -> int:
        """The schedule's stage of `epoch` (its first epoch or step)."""
        return self.plan.schedule.stage_at(self.plan.position(epoch))
