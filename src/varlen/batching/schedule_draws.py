"""A sampler's draws when the sources' shares follow a `MixtureSchedule`.

`ScheduledWeights` is what a DataModule passes as the sampler's `weights`: per-sample weights for
any share vector (each source's share, spread inside it by its own weights). `ScheduledDraws` is
the sampler's side: epoch `e` on `W` ranks draws with the shares at its first position (the epoch, or
the steps before it), one `WeightedDraw` per distinct share vector.

Steps are the batches per rank the trainer took: a DataModule counts them as it serves them and hands each
epoch's start to its sampler (`ScheduledDraws.know`; in its checkpoint, so a resume knows them too),
so `limit_train_batches` or an epoch left early count what was trained. Where none is known (a sampler
used alone), an epoch's start is the plans' counts of the epochs before it, counted once per world size.

Under `until_step` a stage may end inside an epoch: the epoch is then served in *pieces*
(`ScheduledDraws.pieces`), each from the plan of its own shares (the first k batches per rank from
the first stage's plan, the next from the following stage's plan, from its batch k on), and its length is
its last piece's plan's. A draw fixes every stratum's count, so a plan's length depends on its shares only:
lengths are cached per (shares, world size).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from varlen.batching.plan import Plan
from varlen.batching.schedule import MixtureSchedule
from varlen.batching.weights import WeightedDraw

__all__ = ["ScheduledDraws", "ScheduledWeights", "join_pieces"]

#: draws kept at once (a linear schedule builds one per epoch; each holds a few arrays of the samples)
KEPT_DRAWS = 4


@dataclass(frozen=True, eq=False)
class ScheduledWeights:
    """Per-sample weights under `schedule`: `sources` is each sample's source (an index into the
    schedule's names), `within` its weight inside its source (each source's summing to 1, or all 0).
    `at` gives the weights of one share vector. Build it with `build`."""

    schedule: MixtureSchedule
    sources: np.ndarray
    within: np.ndarray

    @classmethod
    def build(cls, schedule: MixtureSchedule, sources: np.ndarray, within: np.ndarray | None) -> ScheduledWeights:
        """`within` (None: equal weights) normalised inside each of the `sources`."""
        sources = np.asarray(sources, dtype=np.int64)
        values = np.ones(len(sources)) if within is None else np.asarray(within, dtype=np.float64)
        totals = np.bincount(sources, values, minlength=len(schedule.names))[sources]
        return cls(schedule, sources, np.divide(values, totals, out=np.zeros(len(values)), where=totals > 0))

    def at(self, shares: Sequence[float]) -> np.ndarray:
        """Per-sample weights giving source `s` the share `shares[s]` of an epoch."""
        return np.asarray(shares, dtype=np.float64)[self.sources] * self.within

    def __len__(self) -> int:
        return len(self.sources)


class ScheduledDraws:
    """Each epoch's draw, shares and length under a schedule (see the module docstring).

    Args:
        weights: the schedule and the per-sample weights of any shares.
        build: the sampler's draw of per-sample weights (its strata, `num_samples`, `replacement`).
        count: batches per rank of an epoch drawn by a draw, on a world size (a plan's count).
    """

    def __init__(
        self,
        weights: ScheduledWeights,
        build: Callable[[np.ndarray], WeightedDraw],
        count: Callable[[WeightedDraw, int], int],
    ) -> None:
        self.weights = weights
        self.schedule = weights.schedule
        self._build, self._count = build, count
        self._draws: OrderedDict[tuple[float, ...], WeightedDraw] = OrderedDict()
        self._lengths: dict[tuple[tuple[float, ...], int], int] = {}
        self._starts: dict[int, list[int]] = {}  # world size -> steps before epoch 0, 1, ... (counted)
        self.known: dict[int, int] = {}  # epoch -> steps the trainer took before it
        self._key: str | None = None

    def know(self, epoch: int, steps: int) -> None:
        """The trainer took `steps` batches per rank before `epoch` (the DataModule counted them)."""
        self.known[int(epoch)] = int(steps)

    def position(self, epoch: int, world: int) -> int:
        """Where `epoch` starts in the schedule's unit: the epoch, or the steps before it on `world` ranks."""
        return epoch if self.schedule.unit == "epoch" else self.steps_before(epoch, world)

    def shares(self, epoch: int, world: int) -> np.ndarray:
        """The sources' shares `epoch` draws with on `world` ranks."""
        return self.schedule.shares_at(self.position(epoch, world))

    def stage(self, epoch: int, world: int) -> int:
        """The stage that holds at `epoch`'s first position."""
        return self.schedule.stage_at(self.position(epoch, world))

    def draw(self, epoch: int, world: int) -> WeightedDraw:
        return self.draw_for(self.shares(epoch, world))

    def draw_for(self, shares: Sequence[float]) -> WeightedDraw:
        """The draw of one share vector (the last `KEPT_DRAWS` are kept)."""
        key = tuple(float(s) for s in shares)
        if key in self._draws:
            self._draws.move_to_end(key)
        else:
            self._draws[key] = self._build(self.weights.at(key))
            while len(self._draws) > KEPT_DRAWS:
                self._draws.popitem(last=False)
        return self._draws[key]

    def plan_length(self, shares: Sequence[float], world: int) -> int:
        """Batches per rank of a whole epoch of `shares`'s draw on `world` ranks."""
        key = (tuple(float(s) for s in shares), world)
        if key not in self._lengths:
            self._lengths[key] = self._count(self.draw_for(key[0]), world)
        return self._lengths[key]

    def pieces(self, epoch: int, world: int) -> list[tuple[int, tuple[float, ...]]]:
        """`epoch`'s pieces on `world` ranks: `(first batch per rank, shares)`, the shares changing where
        a stage ends inside the epoch (`until_step` only; one piece otherwise)."""
        return self._pieces_from(self.position(epoch, world), world)

    def _pieces_from(self, start: int, world: int) -> list[tuple[int, tuple[float, ...]]]:
        out = [(0, tuple(float(s) for s in self.schedule.shares_at(start)))]
        if self.schedule.unit != "step":
            return out
        for end in sorted(stage.until for stage in self.schedule.stages if stage.until is not None):
            offset = end - start
            if offset <= out[-1][0]:
                continue  # a stage that ended before this piece
            if offset >= self.plan_length(out[-1][1], world):
                break  # the epoch ends before the stage does
            out.append((offset, tuple(float(s) for s in self.schedule.shares_at(end))))
        return out

    def length(self, epoch: int, world: int) -> int:
        """Batches per rank of `epoch` served from its start on `world` ranks."""
        return self._length_from(self.position(epoch, world), world)

    def _length_from(self, start: int, world: int) -> int:
        """An epoch's length from its first position: its last piece's plan's (at least where it starts)."""
        first, shares = self._pieces_from(start, world)[-1]
        return max(first, self.plan_length(shares, world))

    def steps_before(self, epoch: int, world: int) -> int:
        """Batches per rank before `epoch`: as the trainer took them where known, else counted from the plans
        of the epochs since the last known one (from epoch 0: counted once per world size)."""
        if epoch in self.known:
            return self.known[epoch]
        anchor = max((e for e in self.known if e < epoch), default=None)
        first, starts = (0, self._starts.setdefault(world, [0])) if anchor is None else (anchor, [self.known[anchor]])
        while first + len(starts) - 1 < epoch:
            starts.append(starts[-1] + self._length_from(starts[-1], world))
        return starts[epoch - first]

    def key(self) -> str:
        """A digest of the schedule and of what decides each draw (weights, strata, counts), for saved states."""
        if self._key is None:
            digest = hashlib.blake2b(repr(self.schedule).encode(), digest_size=8)
            for stage in self.schedule.stages:
                digest.update(self.draw_for(stage.shares).key().encode())
            self._key = digest.hexdigest()
        return self._key


def join_pieces(plans: list[Plan], firsts: list[int], num_replicas: int) -> Plan:
    """One epoch from pieces of several plans: plan j's batches from `firsts[j]` per rank up to where the next
    piece starts (the last: to its end), in serving order (each rank's t-th batch is batch `t * W + r`)."""
    if len(plans) == 1:
        return plans[0]
    orders, rows, offset = [], [], 0
    ends = [*firsts[1:], None]
    for plan, first, end in zip(plans, firsts, ends, strict=True):
        orders.append(plan.order)
        stop = len(plan.bounds) if end is None else end * num_replicas
        rows.append(plan.bounds[first * num_replicas : stop] + offset)
        offset += len(plan.order)
    return Plan(np.concatenate(orders), np.concatenate(rows))
