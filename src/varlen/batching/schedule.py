"""`MixtureSchedule`: the sources' shares of each epoch, constant or changing over training in stages.

`source_weights` is either one set of weights (a list in source order, or a mapping by source name)
or a schedule: a list of stages, each `{"weights": ..., "until_epoch": E}` (or `"until_step": S`),
optionally wrapped as `{"stages": [...], "interpolate": "linear"}`. Stage k holds from the previous
stage's end up to its own (exclusive); the last stage may leave its end out (it holds to the run's end).

`interpolate` says what happens inside a stage:

* `step` (the default): stage k's shares hold through it, and jump to stage k + 1's at its end;
* `linear`: the shares move from stage k's (at its start) to stage k + 1's (reached at its end), in
  proportion to the position in the stage; the last stage holds its own.

A position is an epoch (`until_epoch`) or a step (`until_step`: a step is one training batch per rank
the trainer took, counted by the DataModule and kept in its checkpoint; a sampler used alone counts its
plans' batches instead). An epoch draws with the shares at its first position; with `until_step` a stage
that ends inside an epoch changes the shares at that step (`varlen.batching.schedule_draws`: the epoch's
rest comes from the next stage's plan).

Shares are the weights normalised per stage (a stage's weights need not sum to 1). The spec is frozen
and checked when built, naming the stage and what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, Literal

import numpy as np

__all__ = ["INTERPOLATIONS", "MixtureSchedule", "Stage", "is_schedule"]

Interpolate = Literal["step", "linear"]
INTERPOLATIONS = ("step", "linear")
UNITS = ("until_epoch", "until_step")


def is_schedule(value: Any) -> bool:
    """Whether a `source_weights` value is a schedule (stages), not one set of weights."""
    if isinstance(value, Mapping):
        return "stages" in value and not isinstance(value["stages"], (int, float))
    return isinstance(value, Sequence) and not isinstance(value, str) and any(isinstance(v, Mapping) for v in value)


@dataclass(frozen=True)
class Stage:
    """One stage: the sources' shares (normalised, in source order) and where it ends (None: never)."""

    shares: tuple[float, ...]
    until: int | None


@dataclass(frozen=True)
class MixtureSchedule:
    """The sources' shares over training (see the module docstring).

    Build it with `parse`; `names` are the sources in order, `unit` `"epoch"` or `"step"`.
    """

    names: tuple[str, ...]
    stages: tuple[Stage, ...]
    unit: Literal["epoch", "step"] = "epoch"
    interpolate: Interpolate = "step"

    @classmethod
    def parse(cls, value: Any, names: Sequence[str], owner: str) -> MixtureSchedule:
        """`value` (weights, or stages) for sources `names`, checked.

        Raises:
            ValueError: naming the stage and what is wrong: an unknown or missing key, weights that do not
                fit the sources, ends that do not increase, a stage after one without an end, mixed units.
        """
        names = tuple(names)
        interpolate: Any = "step"
        if isinstance(value, Mapping) and "stages" in value:
            unknown = sorted(set(value) - {"stages", "interpolate"})
            if unknown:
                raise ValueError(f"{owner}: source_weights sets {unknown}; a schedule takes stages and interpolate")
            interpolate, value = value.get("interpolate", "step"), value["stages"]
            if interpolate not in INTERPOLATIONS:
                raise ValueError(
                    f"{owner}: source_weights interpolate must be one of {INTERPOLATIONS}, got {interpolate!r}"
                )
        if not is_schedule(value):
            return cls(names, (Stage(_shares(value, names, f"{owner}: source_weights"), None),))
        if not isinstance(value, Sequence) or not value:
            raise ValueError(f"{owner}: source_weights stages must be a non-empty list, got {value!r}")
        stages, units = [], set()
        for k, stage in enumerate(value):
            where = f"{owner}: source_weights stage {k}"
            if not isinstance(stage, Mapping) or "weights" not in stage:
                raise ValueError(
                    f"{where} must be a mapping with weights (and until_epoch or until_step), got {stage!r}"
                )
            unknown = sorted(set(stage) - {"weights", *UNITS})
            ends = [u for u in UNITS if stage.get(u) is not None]
            if unknown or len(ends) > 1:
                raise ValueError(f"{where} sets {unknown or ends}: a stage takes weights and one of {list(UNITS)}")
            until = None
            if ends:
                units.add(ends[0])
                until = stage[ends[0]]
                if isinstance(until, bool) or not isinstance(until, int) or until < 1:
                    raise ValueError(f"{where}: {ends[0]} must be an integer >= 1, got {until!r}")
            if stages and stages[-1].until is None:
                raise ValueError(
                    f"{where} follows stage {k - 1}, which has no end (only the last stage may leave it out)"
                )
            if until is not None and stages and until <= stages[-1].until:
                raise ValueError(f"{where} ends at {until}, not after stage {k - 1}'s end ({stages[-1].until})")
            stages.append(Stage(_shares(stage["weights"], names, where), until))
        if len(units) > 1:
            raise ValueError(f"{owner}: source_weights stages mix until_epoch and until_step: use one of them")
        unit = "step" if units == {"until_step"} else "epoch"
        return cls(names, tuple(stages), unit, interpolate)

    @property
    def constant(self) -> bool:
        """One set of shares for the whole run (one stage, or stages that all agree)."""
        return len({s.shares for s in self.stages}) == 1

    def stage_at(self, position: int) -> int:
        """The stage that holds at `position` (an epoch or a step)."""
        for k, stage in enumerate(self.stages):
            if stage.until is None or position < stage.until:
                return k
        return len(self.stages) - 1  # past the last end: the last stage holds

    def shares_at(self, position: int) -> np.ndarray:
        """The sources' shares at `position` (float64, summing to 1, in source order)."""
        k = self.stage_at(position)
        stage = self.stages[k]
        shares = np.asarray(stage.shares)
        if self.interpolate == "linear" and k + 1 < len(self.stages) and stage.until is not None:
            start = self.stages[k - 1].until if k else 0
            t = (position - start) / (stage.until - start)
            shares = (1 - t) * shares + t * np.asarray(self.stages[k + 1].shares)
        return shares / shares.sum()

    def describe(self) -> str:
        """One line a report or a log can show, e.g. `until epoch 2: a 0.9, b 0.1; then: a 0.5, b 0.5`."""
        parts = []
        for stage in self.stages:
            when = f"until {self.unit} {stage.until}" if stage.until is not None else "then"
            shares = ", ".join(f"{n} {s:.3g}" for n, s in zip(self.names, stage.shares, strict=True))
            parts.append(f"{when}: {shares}")
        return "; ".join(parts) + (" (linear between stages)" if self.interpolate == "linear" else "")


def _shares(weights: Any, names: tuple[str, ...], where: str) -> tuple[float, ...]:
    """`weights` (a list in source order, or a mapping by name) as shares summing to 1, checked."""
    if isinstance(weights, Mapping):
        missing, unknown = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
        if missing or unknown:
            said = "; ".join(f"{w}: {v}" for w, v in (("missing", missing), ("unknown", unknown)) if v)
            raise ValueError(f"{where}: weights name {sorted(weights)}, the sources are {list(names)} ({said})")
        values = [weights[n] for n in names]
    elif isinstance(weights, Sequence | np.ndarray) and not isinstance(weights, str):
        if len(weights) != len(names):
            raise ValueError(f"{where}: {len(weights)} weights for {len(names)} sources {list(names)}")
        values = list(weights)
    else:
        raise ValueError(f"{where}: weights must be a list or a mapping by source name, got {weights!r}")
    numbers = []
    for name, value in zip(names, values, strict=True):
        ok = isinstance(value, Real) and not isinstance(value, bool) and np.isfinite(value) and value >= 0
        if not ok:
            raise ValueError(f"{where}: the weight of {name!r} must be a finite number >= 0, got {value!r}")
        numbers.append(float(value))
    total = sum(numbers)
    if total <= 0:
        raise ValueError(f"{where}: weights are all zero ({len(names)} sources): there is nothing to draw")
    return tuple(n / total for n in numbers)
