"""`MixtureBatchPlan`: the streamed mixture plan (`varlen.stream.mixture_layout`) behind a rank's epochs, with a
small, rank-independent state that resumes exactly on the same or another number of ranks and lanes.

The layout of each world size is fixed for the run; an epoch's draw is a function of `(seed, epoch,
shares)`: the shares are `source_weights` (default: each source's samples), or a
`MixtureSchedule`'s at the epoch's first position (an epoch; or a step,
the batches a rank served before the epoch). `len()` is the epoch's own count, read after `set_epoch`.

The state is the unweighted plan's (`{epoch, batches_served, num_replicas, lanes, segments, seed, index,
plan}`, `varlen.batching.resume`) plus `steps_before`, the steps before the saved epoch: with a
schedule by step, the shares of the epoch in progress and of the next ones follow from it and the epochs'
counts on the world size that resumes, never from what the saved run served before. Its size never grows
with the data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from varlen.batching.plan import PlanSpec
from varlen.batching.schedule import MixtureSchedule
from varlen.storage.cache import cache_key
from varlen.stream.draw import index_weight_histograms, window_weights
from varlen.stream.epochs import StreamEpochs
from varlen.stream.layout import SizeIndexLike
from varlen.stream.mixture_layout import (
    MixtureEpoch,
    MixtureLayout,
    drawn_window,
    epoch_draw,
    mixture_layout,
    read_unit,
    unit_bounds,
    unit_rows,
)
from varlen.stream.shape_policy import row_shapes

__all__ = ["MixtureBatchPlan"]

#: epoch draws kept (a schedule with linear stages draws anew every epoch)
_DRAWS = 8


class MixtureBatchPlan(StreamEpochs):
    """A rank's batches of streamed sources mixed (or of one source drawn by weight), epoch after epoch.

    Args:
        indexes: each source's size index (`SizeIndexLike`); a weighted one
            (`weight_histograms` / `weights`) draws its samples by weight.
        spec, seed, num_replicas, rank, window_batches, axis, lanes (and the spec's settings one by one): as for
            `StreamEpochs`.
        names: the sources' names (default `source0`, ...), for `source_weights` by name.
        source_weights: the sources' shares of every epoch (a list, a mapping by name, or a schedule:
            `MixtureSchedule`); None: each source's samples.
        mix: `within_batch` (sources share batches) or `per_source` (each batch from one source).
        num_samples: samples an epoch serves (default: every source's samples).
    """

    def __init__(
        self,
        indexes: Sequence[SizeIndexLike],
        spec: PlanSpec | None = None,
        *,
        names: Sequence[str] | None = None,
        source_weights: Any = None,
        mix: str = "within_batch",
        num_samples: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__(indexes, spec, **options)
        self.names = tuple(names) if names is not None else tuple(f"source{s}" for s in range(len(self.indexes)))
        if len(self.names) != len(self.indexes):
            raise ValueError(f"{len(self.names)} names for {len(self.indexes)} sources")
        self.mix = mix
        sizes = np.asarray([int(np.sum(index.samples_per_chunk)) for index in self.indexes], np.float64)
        shares = list(sizes) if source_weights is None else source_weights
        self.schedule = MixtureSchedule.parse(shares, self.names, "MixtureBatchPlan")
        self.num_samples = int(sizes.sum()) if num_samples is None else int(num_samples)
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self._weights = [index_weight_histograms(index, self.axis) for index in self.indexes]
        self._draws: dict[tuple, MixtureEpoch] = {}
        self._anchor = (0, 0)  # (epoch, steps before it): where step positions are counted from
        self._steps: dict[int, int] = {}
        self.layout = self.layout_on(self.num_replicas)
        self._start_afresh()

    # -- what a run fixes and what an epoch draws

    def layout_on(self, num_replicas: int) -> MixtureLayout:
        """The run laid out on `num_replicas` ranks (kept: an elastic resume needs the saved one)."""
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
        """The sources' shares of `epoch`: the schedule's at its first epoch or step."""
        if self.schedule.constant:
            return tuple(self.schedule.shares_at(0).tolist())
        return tuple(self.schedule.shares_at(self.position(epoch)).tolist())

    def position(self, epoch: int) -> int:
        """Where `epoch` starts in the schedule's unit: the epoch, or the steps before it."""
        return epoch if self.schedule.unit == "epoch" else self.steps_before(epoch)

    def draw(self, epoch: int, world: int | None = None) -> MixtureEpoch:
        """`epoch`'s draw on `world` ranks (default: this plan's)."""
        return self.draw_for(self.shares(epoch), world)

    def draw_for(self, shares: tuple[float, ...], world: int | None = None) -> MixtureEpoch:
        """The draw of an epoch with the sources' `shares` on `world` ranks (default: this plan's)."""
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
        """The trainer took `steps` batches per rank before `epoch` (the DataModule counted them): positions
        of a schedule of steps count from there."""
        self._anchor, self._steps = (int(epoch), int(steps)), {}

    def steps_before(self, epoch: int) -> int:
        """Batches a rank served before `epoch`: from the trainer's count or the loaded state's epoch on, each
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

    # -- StreamEpochs

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        return unit_rows(self.layout_on(world), self.draw(epoch, world), rank, epoch, self.seed)

    def unit_bounds(self, unit: int, epoch: int, world: int) -> np.ndarray:
        return unit_bounds(self.layout_on(world), self.draw(epoch, world), unit, epoch, self.seed)

    def plain_length(self, epoch: int) -> int:
        return self.draw(epoch).batches_per_rank

    def reader(self, epoch: int) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
        """Reads a unit of `epoch` (on a world size): its ids, batches and sizes, a few drawn windows held."""
        windows: dict[tuple[int, int, int], Any] = {}

        def read(world: int, unit: int):
            plan, draw = self.layout_on(world), self.draw(epoch, world)

            def drawn(source: int, window: int):
                key = (world, source, window)
                if key not in windows:
                    if len(windows) >= 2 * len(self.indexes) * (self.lanes + 1):
                        del windows[next(iter(windows))]
                    windows[key] = drawn_window(self.indexes[source], plan, draw, source, window, epoch, self.seed)
                return windows[key]

            return read_unit(self.indexes, plan, draw, unit, epoch, self.seed, drawn)

        return read

    def shapes(self, epoch: int | None = None) -> set[tuple[int, int]]:
        """The distinct `(batch size, padded length)` of `epoch`'s batches on every rank (its draw's units'
        histograms: nothing read)."""
        epoch = self.epoch if epoch is None else int(epoch)
        world = self.epoch_rows(epoch)[2]
        plan, draw = self.layout_on(world), self.draw(epoch, world)
        return row_shapes(draw.unit_histograms, draw.unit_splits, plan.rounded, plan.spec)

    def _sample_weights(self) -> list[str | None]:
        return [getattr(index, "sample_weights", None) for index in self.indexes]

    def _key(self) -> str:
        rungs = () if self.spec.rungs is None else (self.spec.rungs[0].lengths,)  # old states keep their key
        drawn = (self.mix, self.num_samples, repr(self.schedule), self.names, self._sample_weights())
        return cache_key(*self.key_parts(), *drawn, *rungs, version="mixture-2")  # a state of another draw: refused

    def settings(self) -> dict[str, Any]:
        """The plan's settings and what it draws, as plain values (in its state, to name what a resume changed)."""
        return super().settings() | {
            "mix": self.mix,
            "num_samples": self.num_samples,
            "source_weights": self.schedule.describe(),
            "sources": list(self.names),
            "sample_weights": self._sample_weights(),
        }

    def state_dict(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches."""
        state = super().state_dict()
        return state | {"steps_before": self.steps_before(int(state["epoch"]))}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume mid-epoch on any number of ranks and lanes (see `StreamEpochs.load_state_dict`), the
        schedule's steps counted from the saved epoch's."""
        self.check_origin(state)
        self._anchor = (int(state["epoch"]), int(state.get("steps_before", 0)))
        self._steps.clear()
        self._draws.clear()
        super().load_state_dict(state)
        self._steps.clear()
