"""`StreamMixtureSampler`: the streamed mixture plan (:class:`~varlen.stream.mixture_state.MixtureBatchPlan`) as
a BatchSampler Lightning handles as :class:`~varlen.stream.sampler.StreamBatchSampler` (rebuilt under DDP
from its plain-value arguments: the sources' folders, not their indexes)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from varlen.stream.draw_index import weighted_index
from varlen.stream.mixture_state import MixtureBatchPlan
from varlen.stream.plan import WINDOW_BATCHES
from varlen.stream.sampler import StreamBatchSampler
from varlen.stream.size_index import SizeIndex

__all__ = ["StreamMixtureSampler"]


class StreamMixtureSampler(StreamBatchSampler):
    """This rank's batches of several streamed sources (global ids over the sources one after the other, as
    :class:`~varlen.datasets.mixture.SourceMixture` numbers them), or of one source drawn by weight.

    Args:
        folders: each source's dataset folder with its size index (the local copy of a store's).
        names: the sources' names, in order (``source_weights`` may name them).
        source_weights, mix, num_samples: as for :class:`~varlen.stream.mixture_state.MixtureBatchPlan`
            (``source_weights`` a list, a mapping by name, or a schedule's stages).
        sample_weights: per source, its DataModule's ``sample_weights`` (``"balanced"``, a weight column
            or None): its samples are drawn by the weights written beside its size index
            (:func:`~varlen.stream.draw_index.weighted_index`).
        epoch: the epoch ``len()`` describes until ``set_epoch``: Lightning reads the length of a loader it
            reloads (a schedule's epochs differ) before it sets the epoch; an argument, so that the sampler
            Lightning rebuilds under DDP keeps it.
        steps_before: the batches per rank the trainer took before ``epoch`` (a DataModule counts them): where
            a schedule of steps places it; None: counted from the plans.
        the rest (``rungs`` too): as for :class:`~varlen.stream.sampler.StreamBatchSampler`.

    ``len()`` is the current epoch's (after ``set_epoch``): a schedule's epochs may differ.
    """

    def __init__(
        self,
        folders: Sequence[str | Path],
        names: Sequence[str] | None = None,
        source_weights: Any = None,
        mix: str = "within_batch",
        num_samples: int | None = None,
        sample_weights: Sequence[str | None] | None = None,
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
        epoch: int = 0,
        state: dict[str, Any] | None = None,
        rungs: Sequence[int] | None = None,
        steps_before: int | None = None,
    ) -> None:
        # StreamBatchSampler.__init__ (and BatchSampler's) is not called: the plan is a mixture's
        self.folders = [str(folder) for folder in folders]
        weighing = list(sample_weights) if sample_weights is not None else [None] * len(self.folders)
        if len(weighing) != len(self.folders):
            raise ValueError(f"{len(weighing)} sample_weights for {len(self.folders)} sources")
        self.sample_weights = weighing
        indexes = [
            SizeIndex(folder) if weights is None else weighted_index(folder, weights, str(name))
            for folder, weights, name in zip(self.folders, weighing, names or range(len(self.folders)), strict=True)
        ]
        total = sum(int(index.samples_per_chunk.sum()) for index in indexes)
        self.batch_size, self.max_tokens, self.drop_last = batch_size, max_tokens, False
        make_plan = partial(
            MixtureBatchPlan,
            indexes,
            names=names,
            source_weights=source_weights,
            mix=mix,
            num_samples=num_samples,
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
        self._set_up(make_plan, total, sampler, num_replicas, rank, None, epoch)
        if steps_before is not None:
            self.plan.start_at(epoch, steps_before)
        self.state = state
        if state is not None:
            self.load_state_dict(state)

    @property
    def scheduled(self) -> Any:
        """The sources' schedule where their shares change over training (None otherwise), as the in-memory
        sampler's: what the DataModule's report and telemetry read."""
        return None if self.plan.schedule.constant else self.plan.schedule

    def shares_of(self, epoch: int) -> np.ndarray:
        """The sources' shares ``epoch`` draws with."""
        return np.asarray(self.plan.shares(epoch))

    def stage_of(self, epoch: int) -> int:
        """The schedule's stage of ``epoch`` (its first epoch or step)."""
        return self.plan.schedule.stage_at(self.plan.position(epoch))
