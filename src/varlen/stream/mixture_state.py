"""`MixtureBatchPlan`: the streamed mixture plan (:mod:`varlen.stream.mixture`) behind a rank's epochs, with a
small, rank-independent state that resumes exactly on the same or another number of ranks and lanes.

The layout of each world size is fixed for the run; an epoch's draw is a function of ``(seed, epoch,
shares)``: the shares are ``source_weights`` (default: each source's samples), or a
:class:`~varlen.batching.schedule.MixtureSchedule`'s at the epoch's first position (an epoch; or a step,
the batches a rank served before the epoch). ``len()`` is the epoch's own count, read after ``set_epoch``.

The state is the unweighted plan's (``{epoch, batches_served, num_replicas, lanes, segments, seed, index,
plan}``, :mod:`varlen.batching.resume`) plus ``steps_before``, the steps before the saved epoch: with a
schedule by step, the shares of the epoch in progress and of the next ones follow from it and the epochs'
counts on the world size that resumes, never from what the saved run served before. Its size never grows
with the data.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from varlen.batching.resume import ResumableEpochs
from varlen.batching.schedule import MixtureSchedule
from varlen.storage.cache import cache_key
from varlen.stream.draw import index_weight_histograms, window_weights
from varlen.stream.mixture import (
    MixtureEpoch,
    MixtureLayout,
    drawn_window,
    epoch_draw,
    mixture_layout,
    read_unit,
    unit_bounds,
    unit_rows,
)
from varlen.stream.plan import WINDOW_BATCHES, SizeIndexLike
from varlen.stream.plan_state import plan_settings, settings_refusal, split_tail, stream_spec
from varlen.stream.shape_policy import row_shapes

__all__ = ["MixtureBatchPlan"]

#: epoch draws kept (a schedule with linear stages draws anew every epoch)
_DRAWS = 8


class MixtureBatchPlan(ResumableEpochs):
    """A rank's batches of streamed sources mixed (or of one source drawn by weight), epoch after epoch.

    Args:
        indexes: each source's size index (:class:`~varlen.stream.plan.SizeIndexLike`); a weighted one
            (``weight_histograms`` / ``weights``) draws its samples by weight.
        names: the sources' names (default ``source0``, ...), for ``source_weights`` by name.
        source_weights: the sources' shares of every epoch (a list, a mapping by name, or a schedule:
            :class:`~varlen.batching.schedule.MixtureSchedule`); None: each source's samples.
        mix: ``within_batch`` (sources share batches) or ``per_source`` (each batch from one source).
        num_samples: samples an epoch serves (default: every source's samples).
        batch_size, max_tokens, cost, max_batch_size, pad_to_multiple_of, seed, num_replicas, rank,
            window_batches, axis, lanes: as for :class:`~varlen.stream.plan_state.StreamBatchPlan`.
    """

    state_name = "plan"

    def __init__(
        self,
        indexes: Sequence[SizeIndexLike],
        *,
        names: Sequence[str] | None = None,
        source_weights: Any = None,
        mix: str = "within_batch",
        num_samples: int | None = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        cost: str = "padded",
        max_batch_size: int | None = None,
        pad_to_multiple_of: int | None = None,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        window_batches: int = WINDOW_BATCHES,
        axis: int = 0,
        lanes: int = 1,
        rungs: Sequence[int] | None = None,
    ) -> None:
        checked = (rank, num_replicas, lanes)
        self.spec = stream_spec(batch_size, max_tokens, cost, max_batch_size, pad_to_multiple_of, *checked, rungs)
        self.indexes = list(indexes)
        self.names = tuple(names) if names is not None else tuple(f"source{s}" for s in range(len(self.indexes)))
        if len(self.names) != len(self.indexes):
            raise ValueError(f"{len(self.names)} names for {len(self.indexes)} sources")
        self.mix, self.seed, self.rank, self.num_replicas = mix, int(seed), int(rank), int(num_replicas)
        self.window_batches, self.axis, self.lanes = int(window_batches), int(axis), int(lanes)
        sizes = np.asarray([int(np.sum(index.samples_per_chunk)) for index in self.indexes], np.float64)
        self.schedule = (
            MixtureSchedule.parse(source_weights, self.names, "MixtureBatchPlan")
            if source_weights is not None
            else MixtureSchedule.parse(list(sizes), self.names, "MixtureBatchPlan")
        )
        self.num_samples = int(sizes.sum()) if num_samples is None else int(num_samples)
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self._weights = [index_weight_histograms(index, self.axis) for index in self.indexes]
        self._layouts: dict[int, tuple[MixtureLayout, list[np.ndarray | None]]] = {}
        self._draws: dict[tuple, MixtureEpoch] = {}
        self._anchor = (0, 0)  # (epoch, steps before it): where step positions are counted from
        self._steps: dict[int, int] = {}
        self.layout = self.layout_on(self.num_replicas)
        self.epoch = 0
        self._start_afresh()

    # -- what a run fixes and what an epoch draws

    def layout_on(self, num_replicas: int) -> MixtureLayout:
        """The run laid out on ``num_replicas`` ranks (kept: an elastic resume needs the saved one)."""
        if num_replicas not in self._layouts:
            plan = mixture_layout(
                self.indexes, self.spec, seed=self.seed, num_replicas=num_replicas, mix=self.mix,
                window_batches=self.window_batches, axis=self.axis,
            )  # fmt: skip
            totals = [
                None if w is None else window_weights(index, lay, w)
                for index, lay, w in zip(self.indexes, plan.sources, self._weights, strict=True)
            ]
            self._layouts[num_replicas] = (plan, totals)
        return self._layouts[num_replicas][0]

    def shares(self, epoch: int) -> tuple[float, ...]:
        """The sources' shares of ``epoch``: the schedule's at its first epoch or step."""
        if self.schedule.constant:
            return tuple(self.schedule.shares_at(0).tolist())
        return tuple(self.schedule.shares_at(self.position(epoch)).tolist())

    def position(self, epoch: int) -> int:
        """Where ``epoch`` starts in the schedule's unit: the epoch, or the steps before it."""
        return epoch if self.schedule.unit == "epoch" else self.steps_before(epoch)

    def draw(self, epoch: int, world: int | None = None) -> MixtureEpoch:
        """``epoch``'s draw on ``world`` ranks (default: this plan's)."""
        return self.draw_for(self.shares(epoch), world)

    def draw_for(self, shares: tuple[float, ...], world: int | None = None) -> MixtureEpoch:
        """The draw of an epoch with the sources' ``shares`` on ``world`` ranks (default: this plan's)."""
        world = self.num_replicas if world is None else int(world)
        key = (world, tuple(float(x) for x in shares))
        if key not in self._draws:
            self.layout_on(world)
            plan, totals = self._layouts[world]
            if len(self._draws) >= _DRAWS:
                del self._draws[next(iter(self._draws))]
            self._draws[key] = epoch_draw(plan, key[1], self.num_samples, totals)
        return self._draws[key]

    def start_at(self, epoch: int, steps: int) -> None:
        """The trainer took ``steps`` batches per rank before ``epoch`` (the DataModule counted them): positions
        of a schedule of steps count from there."""
        self._anchor, self._steps = (int(epoch), int(steps)), {}

    def steps_before(self, epoch: int) -> int:
        """Batches a rank served before ``epoch``: from the trainer's count or the loaded state's epoch on, each
        later epoch's plan on this world size."""
        anchor, steps = self._anchor if epoch >= self._anchor[0] else (0, 0)
        for e in range(anchor, epoch):
            if e not in self._steps:
                self._steps[e] = self._length(e)
            steps += self._steps[e]
        return steps

    def _length(self, epoch: int) -> int:
        if self.segments(epoch):
            rows, before, _ = self.epoch_rows(epoch)
            return before + len(rows)
        return self.plain_length(epoch)

    # -- ResumableEpochs

    def on_rank(self, rank: int) -> MixtureBatchPlan:
        """This plan as rank ``rank``'s, from an epoch's start (its layouts and draws shared)."""
        plan = copy.copy(self)
        plan.rank = int(rank)
        plan._start_afresh()
        return plan

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        return unit_rows(self.layout_on(world), self.draw(epoch, world), rank, epoch, self.seed)

    def split_rows(self, rows: np.ndarray, count: int, epoch: int, world: int) -> np.ndarray:
        plan, draw = self.layout_on(world), self.draw(epoch, world)
        return split_tail(rows, count, lambda unit: unit_bounds(plan, draw, unit, epoch, self.seed))

    def plain_length(self, epoch: int) -> int:
        return self.draw(epoch).batches_per_rank

    def __iter__(self) -> Iterator[np.ndarray]:
        """This epoch's batches for this rank, as global sample ids (a unit read when its lane reaches it;
        up to ``lanes + 1`` units and a few drawn windows held)."""
        epoch, loaded, windows = self.epoch, {}, {}
        for world, (unit, batch, low, high) in self.positions():
            if unit in loaded:
                loaded[unit] = loaded.pop(unit)
            else:
                if len(loaded) > self.lanes:
                    loaded.pop(next(iter(loaded)))
                plan, draw = self.layout_on(world), self.draw(epoch, world)

                def drawn(source: int, window: int, plan=plan, draw=draw, world=world):
                    key = (world, source, window)
                    if key not in windows:
                        if len(windows) >= 2 * len(self.indexes) * (self.lanes + 1):
                            del windows[next(iter(windows))]
                        windows[key] = drawn_window(self.indexes[source], plan, draw, source, window, epoch, self.seed)
                    return windows[key]

                loaded[unit] = read_unit(self.indexes, plan, draw, unit, epoch, self.seed, drawn)
            ids, bounds = loaded[unit]
            samples = ids[bounds[batch, 0] : bounds[batch, 1]]
            yield samples[low:] if high < 0 else samples[low:high]

    def shapes(self, epoch: int | None = None) -> set[tuple[int, int]]:
        """The distinct ``(batch size, padded length)`` of ``epoch``'s batches on every rank (its draw's units'
        histograms: nothing read)."""
        epoch = self.epoch if epoch is None else int(epoch)
        world = self.epoch_rows(epoch)[2]
        plan, draw = self.layout_on(world), self.draw(epoch, world)
        return row_shapes(draw.unit_histograms, draw.unit_splits, plan.rounded, plan.spec)

    def _key(self) -> str:
        spec = (self.spec.batch_size, self.spec.max_tokens, self.spec.cost, self.spec.max_batch_size)
        rungs = () if self.spec.rungs is None else (self.spec.rungs[0].lengths,)  # old states keep their key
        return cache_key(
            spec, self.spec.pad_to_multiple_of, self.window_batches, self.axis, self.mix, self.num_samples,
            repr(self.schedule), self.names, [getattr(i, "sample_weights", None) for i in self.indexes], *rungs,
            version="mixture-2",  # each source's sample_weights: a state of another draw is refused
        )  # fmt: skip

    def settings(self) -> dict[str, Any]:
        """The plan's settings and what it draws, as plain values (in its state, to name what a resume changed)."""
        return plan_settings(self.spec, self.window_batches, self.axis) | {
            "mix": self.mix,
            "num_samples": self.num_samples,
            "source_weights": self.schedule.describe(),
            "sources": list(self.names),
            "sample_weights": [getattr(i, "sample_weights", None) for i in self.indexes],
        }

    def state_dict(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches."""
        state = self.position_state()
        keys = [index.key for index in self.indexes]
        return state | {
            "seed": self.seed,
            "index": keys[0] if len(keys) == 1 else keys,
            "plan": self._key(),
            "settings": self.settings(),
            "steps_before": self.steps_before(int(state["epoch"])),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume mid-epoch on any number of ranks and lanes.

        Raises:
            ValueError: the state is of other indexes or seed, or inconsistent; or, inside its epoch, of other plan
                settings or draws (unless ``VARLEN_RESUME=next_epoch``).
        """
        keys = [index.key for index in self.indexes]
        mine = {"index": keys[0] if len(keys) == 1 else keys, "seed": self.seed}
        for name, value in mine.items():
            saved = state[name]
            if (list(saved) if isinstance(saved, (list, tuple)) else saved) != value:
                raise ValueError(f"plan state was saved with {name} {saved!r}, this plan has {value!r}")
        self._anchor = (int(state["epoch"]), int(state.get("steps_before", 0)))
        self._steps.clear()
        self._draws.clear()
        if state["plan"] != self._key():
            self.load_boundary(dict(state), self.set_epoch, settings_refusal(dict(state), self.settings()))
        else:
            self.load_position(dict(state), self.set_epoch)
        self._steps.clear()
