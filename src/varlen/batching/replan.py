"""An epoch resumed under other settings: the part of `BucketBatchSampler` that plans the
rest of a saved epoch again when the run resumes with another `batch_size`, `max_tokens`, `cost`, rungs,
`num_buckets`, `pad_to_multiple_of`... (a lower budget after an out-of-memory error, most often).

Why not refuse: the state names the settings its epoch was planned under (`PlanChanges.settings`), so the
saved plan is rebuilt exactly (a copy of the sampler under those settings, `PlanChanges.under`), which
fixes the samples served; the others are planned again under the new settings (`PlanChanges.sub_plan`:
the new settings' buckets, cut and shuffled as an epoch is) and dealt over the ranks in equal counts
(`rest_of_epoch`). Every sample of the epoch is served once; the next epoch is
the new settings' own. What cannot be rebuilt from the state (a weighted draw of other weights, other groups,
another schedule) is refused inside an epoch, naming both ways out (`PlanChanges.refusal`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any

import numpy as np

from varlen.batching.plan import Plan, PlanSpec, bucketize, build_plan, split_largest
from varlen.batching.resume import RESUME_VARIABLE, Segment, canonical, changes, deal, rest_of_epoch, warn_once
from varlen.batching.shape_policy import Rungs

__all__ = ["PlanChanges", "row_positions", "spec_of"]


def spec_of(settings: dict[str, Any]) -> PlanSpec:
    """The `PlanSpec` of a state's plain settings."""
    rungs = settings.get("rungs")
    multiple = settings.get("pad_to_multiple_of")
    tokens, caps = settings.get("max_tokens"), settings.get("rung_batch_sizes")
    return PlanSpec(
        batch_size=settings.get("batch_size"),
        max_tokens=None if tokens is None else tuple(int(t) for t in tokens),
        cost=settings.get("cost", "padded"),
        max_batch_size=settings.get("max_batch_size"),
        num_buckets=settings.get("num_buckets"),
        pad_to_multiple_of=multiple,
        rungs=None if rungs is None else tuple(Rungs(tuple(int(r) for r in axis), multiple) for axis in rungs),
        rung_batch_sizes=None if caps is None else tuple(int(c) for c in caps),
    )


def row_positions(rows: np.ndarray) -> np.ndarray:
    """The positions `[lo, hi)` of every row (`[n, 2]` bounds), one after the other."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    lengths = rows[:, 1] - rows[:, 0]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(rows[:, 0] - offsets, lengths) + np.arange(int(lengths.sum()))


class PlanChanges:
    """What `BucketBatchSampler` adds to resume an epoch under other settings (see the
    module docstring). The sampler sets `sizes`, `groups`, `spec`, `shuffle`, `drop_last`, `seed`,
    `num_replicas`, `_buckets`, `_weighing` (its `weights, num_samples, replacement`), `_steps_anchor`
    and `_clones` (a copy per saved settings)."""

    def settings(self) -> dict[str, Any]:
        """The settings this sampler's plan depends on, as plain values (saved in its state)."""
        spec = self.spec
        return {
            "batch_size": spec.batch_size,
            "max_tokens": None if spec.max_tokens is None else list(spec.max_tokens),
            "cost": spec.cost,
            "max_batch_size": spec.max_batch_size,
            "num_buckets": spec.num_buckets,
            "pad_to_multiple_of": spec.pad_to_multiple_of,
            "rungs": None if spec.rungs is None else [list(r.lengths) for r in spec.rungs],
            "rung_batch_sizes": None if spec.rung_batch_sizes is None else list(spec.rung_batch_sizes),
            "shuffle": bool(self.shuffle),
            "drop_last": bool(self.drop_last),
            "groups": self.groups_digest,
        }

    def settings_key(self) -> str:
        return canonical(self.settings())

    @functools.cached_property
    def groups_digest(self) -> str | None:
        """A digest of the groups (None: no groups): batches never mix them, so they shape the plan. Computed
        when a state is saved or loaded, not for every sampler (the shape policy's fit makes many)."""
        if self.groups is None:
            return None
        _, ids = np.unique(self.groups, return_inverse=True)
        return hashlib.blake2b(ids.astype(np.int64).tobytes(), digest_size=8).hexdigest()

    def saved_settings(self, state: dict[str, Any]) -> dict[str, Any]:
        """The settings a state was saved under; an older state's are this sampler's with its rungs."""
        if "settings" in state:
            return dict(state["settings"])
        return self.settings() | {"rungs": state.get("rungs")}

    def under(self, key: str) -> Any:
        """This sampler under the settings `key` (`canonical`): the same samples,
        groups, weights and seed, planned as that run planned them (itself where they are its own)."""
        if key == self.settings_key():
            return self
        if key not in self._clones:
            settings = json.loads(key)
            other = copy.copy(self)
            other.spec = spec_of(settings)
            other.rungs = other.spec.rungs
            other.shuffle, other.drop_last = bool(settings["shuffle"]), bool(settings["drop_last"])
            other._buckets = bucketize(self.sizes, other.spec)
            other._plan_key, other._plan, other._clones = None, None, {}
            other.scheduled, other._draw = other._weighted_draw(*self._weighing)
            if other.scheduled is not None and self._steps_anchor is not None:
                other.scheduled.know(*self._steps_anchor)
            other.sampler = copy.copy(self.sampler)
            other._start_afresh()
            self._clones[key] = other
        return self._clones[key]

    def sub_plan(self, samples: np.ndarray, epoch: int) -> Plan:
        """`samples` (indices, a drawn epoch's repeats included) planned as one epoch of this sampler's settings
        on one rank: its buckets, cuts and `(seed, epoch)` order; the order holds sample indices."""
        ids, rounded = self._buckets
        groups = None if self.groups is None else self.groups[samples]
        plan = build_plan(
            self.sizes[samples], self.spec, shuffle=self.shuffle, seed=self.seed, epoch=epoch,
            drop_last=self.drop_last, rounded=(ids[samples], rounded[samples]), groups=groups,
        )  # fmt: skip
        return Plan(samples[plan.order], plan.bounds)

    def rest_rows(self, epoch: int, segments: tuple[Segment, ...]) -> tuple[list[np.ndarray], int, np.ndarray]:
        """Every rank's rows of `epoch`'s rest after `segments`: the first part's plan rebuilt under its
        settings, and where the settings change, the rows not served planned again (`sub_plan`) and dealt
        over the next part's ranks. Rows are bounds into the returned order (the plans' orders one after the
        other)."""
        world, first = segments[0][0], self.under(segments[0][3])
        plan = first._plan_on(epoch, world)
        orders, offset, planned = [plan.order], len(plan.order), []

        def replan(rest: np.ndarray, next_world: int, key: str) -> tuple[list[np.ndarray], int]:
            nonlocal offset
            target = self.under(key)
            samples = np.concatenate(orders)[row_positions(rest)] if len(rest) else np.zeros(0, np.int64)
            sub = target.sub_plan(samples, epoch)
            orders.append(sub.order)
            rows, offset = sub.bounds + offset, offset + len(sub.order)
            planned.append(len(samples))
            return deal(rows, next_world, split_largest, target.drop_last)

        ranks = [plan.bounds[r::world] for r in range(world)]
        mine = self.settings_key()
        ranks, repeated = rest_of_epoch(ranks, segments, self.num_replicas, split_largest, self.drop_last, mine, replan)
        if planned and planned[-1] and segments[-1][3] != mine:  # none left: the next epoch, said by nothing
            before = sum(count for _, count, _, _ in segments)
            self._say(epoch, before, json.loads(segments[-1][3]), planned[-1], len(ranks[self.rank]))
        return ranks, repeated, np.concatenate(orders)

    def _say(self, epoch: int, before: int, saved: dict[str, Any], samples: int, left: int) -> None:
        line = (
            f"resuming epoch {epoch} at batch {before} with {changes(saved, self.settings())}: the {samples:,} "
            f"sample{'s' * (samples != 1)} not yet served in it {'are' if samples != 1 else 'is'} planned again under "
            f"the new settings ({left} batch{'es' * (left != 1)} per rank left); the next epochs are the new "
            "settings' own"
        )
        warn_once(line)

    def refusal(self, state: dict[str, Any], saved: dict[str, Any]) -> str | None:
        """Why the epoch of `state` (saved under `saved` settings) cannot be planned again here, naming what
        differs and both ways out; None where it can."""
        epoch = int(state["epoch"])
        ways = (
            f": the rest of epoch {epoch} cannot be told from the state. Resume with the saved value to finish the "
            f"epoch (and change it at an epoch's end), or set {RESUME_VARIABLE}=next_epoch to skip the rest of epoch "
            f"{epoch} and start epoch {epoch + 1} with this one"
        )
        schedule = None if self.scheduled is None else self.scheduled.schedule.describe()
        if state.get("schedule") != schedule:
            said = [f"schedule {s!r}" if s else "no schedule" for s in (state.get("schedule"), schedule)]
            return f"sampler state was saved with {said[0]} of source_weights, this sampler has {said[1]}" + ways
        if saved.get("groups") != self.groups_digest:
            return (
                "sampler state was saved with other groups (a DataModule's mix or sampler_groups: the samples a "
                "batch may not mix)" + ways
            )
        mine = self.under(canonical(saved))._draw_key()
        if state.get("draw") != mine:
            return (
                "sampler state was saved with other weights, num_samples or replacement, or by a varlen that draws "
                f"otherwise (draw {state.get('draw')}, this sampler's: {mine})" + ways
            )
        return None
