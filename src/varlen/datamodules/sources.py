"""Training data from several sources (`sources`, `source_weights`, `mix`), checked here.

A DataModule's own arguments describe its first source, named `MAIN`; each entry of
`sources` is another, written as the arguments that differ (`{"name": "noisy", "train_file":
"noisy.csv"}`). The base builds a DataModule of the same class from them (so the same classes,
tokenizer and batching), takes its training split, and serves the training splits as one
`SourceMixture`. `source_weights` are the sources' shares of
every epoch (by default, as many as they hold); `mix` says whether sources share batches
(`within_batch`) or each batch comes from one source (`per_source`, as lhotse's and LitData's
per-stream batching). `SourceMixing` is the part of the base that does it.

`source_weights` may also be a schedule (`varlen.batching.schedule`): stages of weights until an
epoch or a step. Each epoch then draws with its own shares (`varlen.batching.schedule_draws`), so its
length is its own: Lightning, which reads a loader's length once per load, reloads the training loader
every epoch (set here when the DataModule makes it).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from varlen import notices
from varlen.batching.schedule import MixtureSchedule, is_schedule
from varlen.batching.schedule_draws import ScheduledWeights
from varlen.datamodules.weighting import weights_of
from varlen.datasets.mixture import MixtureCollator, SourceMixture, share_weights
from varlen.errors import DataError

__all__ = [
    "MAIN",
    "MIX_MODES",
    "Mix",
    "SourceMixing",
    "SourceWeights",
    "check_mix",
    "check_source_weights",
    "check_sources",
    "proportions",
]

#: the name of the source the DataModule's own arguments describe
MAIN = "main"
Mix = Literal["within_batch", "per_source"]
#: `source_weights`: one set of weights (a list in source order, or a mapping by name), or a schedule (a
#: list of stages `{weights, until_epoch | until_step}`, or `{stages: [...], interpolate: linear}`)
SourceWeights = list[float] | dict[str, float] | list[dict[str, Any]] | dict[str, Any] | None
MIX_MODES = ("within_batch", "per_source")
#: arguments a source entry may not set: they describe the mixture itself
MIXTURE_ARGS = ("sources", "source_weights", "mix")
log = logging.getLogger("varlen")


def check_mix(mix: str, owner: str) -> str:
    if mix not in MIX_MODES:
        raise ValueError(f"{owner}: mix must be one of {MIX_MODES}, got {mix!r}")
    return mix


def check_sources(sources: Sequence[Mapping[str, Any]] | None, owner: str) -> list[tuple[str, dict[str, Any]]]:
    """`(name, arguments)` of each extra source, in order (names default to `source1`, ...).

    Raises:
        ValueError: an entry that is not a mapping, sets a mixture argument, or repeats a name.
    """
    checked: list[tuple[str, dict[str, Any]]] = []
    for number, entry in enumerate(sources or (), 1):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{owner}: sources[{number - 1}] must be a mapping of arguments, got {entry!r}")
        arguments = dict(entry)
        name = str(arguments.pop("name", f"source{number}"))
        nested = sorted(set(arguments) & set(MIXTURE_ARGS))
        if nested:
            raise ValueError(f"{owner}: source {name!r} sets {nested}: a source cannot be a mixture itself")
        if name in {MAIN, *(n for n, _ in checked)}:
            raise ValueError(f"{owner}: two sources are named {name!r} (the first source is {MAIN!r})")
        checked.append((name, arguments))
    return checked


def check_source_weights(weights: SourceWeights, owner: str, names: Sequence[str] | None = None) -> Any:
    """`weights` as floats (a list, or a mapping by source name), each finite and >= 0, not all 0; a
    schedule as it is, checked against the sources' `names` when they are known now (else at setup)."""
    if weights is None:
        return None
    if is_schedule(weights):
        if names is not None:
            MixtureSchedule.parse(weights, names, owner)
        return weights
    items = weights.items() if isinstance(weights, Mapping) else enumerate(weights)
    values = {}
    for key, value in items:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{owner}: source_weights[{key!r}] must be a finite number >= 0, got {value!r}")
        values[key] = number
    if not any(values.values()):
        raise ValueError(f"{owner}: source_weights are all zero ({len(values)} sources): there is nothing to draw")
    return values if isinstance(weights, Mapping) else list(values.values())


def proportions(weights: Sequence[float] | Mapping[str, float], names: Sequence[str], owner: str) -> list[float]:
    """`weights` in the order of `names`, checked against them (one per source).

    Raises:
        ValueError: a list of another length (both lengths named), or names missing or unknown.
    """
    if isinstance(weights, Mapping):
        missing, unknown = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
        if missing or unknown:
            problems = [f"{what}: {these}" for what, these in (("missing", missing), ("unknown", unknown)) if these]
            raise ValueError(
                f"{owner}: source_weights name {sorted(weights)}, the sources are {list(names)} ({'; '.join(problems)})"
            )
        return [float(weights[name]) for name in names]
    if len(weights) != len(names):
        raise ValueError(
            f"{owner}: source_weights has {len(weights)} values but there are {len(names)} sources {list(names)}"
        )
    return [float(w) for w in weights]


class SourceMixing:
    """What `VarLenDataModule` does with several training sources:
    a DataModule per extra source, their training splits served as one `SourceMixture`,
    and the sampler's sizes, groups and weights computed by each source's DataModule. The base
    sets `other_sources`, `source_weights`, `mix`, `source_name` and the two below."""

    _source_modules: dict[str, Any] | None
    _mixture_owners: list[Any]
    #: the parsed `source_weights` (None without them), set at setup when the sources' names are known
    mixture_schedule: MixtureSchedule | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's `prepare_data` also prepares its other `sources` (one process per node)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("prepare_data")
        if own is not None and not getattr(own, "_prepares_sources", False):

            @functools.wraps(own)
            def prepare_data(self: SourceMixing) -> None:
                own(self)
                for module in self.source_modules().values():
                    module.prepare_data()

            prepare_data._prepares_sources = True  # type: ignore[attr-defined]
            cls.prepare_data = prepare_data

    def _set_sources(self, owner: str, sources: Any, source_weights: Any, mix: str, frame: Any) -> None:
        """Check and keep the mixture's arguments (the base's `__init__` calls this with its `frame`)."""
        self.other_sources = check_sources(sources, owner)
        names = [MAIN, *(name for name, _ in self.other_sources)] if self.other_sources else None
        self.source_weights = check_source_weights(source_weights, owner, names)
        self.mix = check_mix(mix, owner)
        # every argument of every __init__ (linked ones included): what a source's DataModule starts from
        self._arguments = self._init_arguments(frame) if self.other_sources else {}
        self._source_modules = None
        self._mixture_owners = []  # the DataModule of each source of a mixture
        self.served_steps: dict[int, int] = {}  # training batches per rank served in each epoch (a mixture's)
        self.source_name: str | None = None  # set on a DataModule built as another's source

    def _init_arguments(self, frame: Any) -> dict[str, Any]:
        """The arguments of this instance's `__init__` calls from the base's (`frame`) out, the outermost
        (most derived class) winning: what the DataModule of another source starts from."""
        arguments: dict[str, Any] = {}
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is self:
            code = frame.f_code
            names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
            arguments.update({n: frame.f_locals[n] for n in names if n in frame.f_locals})
            frame = frame.f_back
        return {k: v for k, v in arguments.items() if k not in MIXTURE_ARGS}

    def source_modules(self) -> dict[str, Any]:
        """A DataModule per extra source (this class, this DataModule's arguments but
        `source_arguments` with the source's own; the same classes where the class takes
        `class_names`), built once."""
        if self._source_modules is None:
            modules = {}
            accepted = inspect.signature(type(self)).parameters
            for name, overrides in self.other_sources:
                unknown = sorted(set(overrides) - set(accepted))
                if unknown:
                    raise ValueError(f"{type(self).__name__}: source {name!r} sets {unknown}, which it does not take")
                inherited = set(accepted) - set(self.source_arguments)
                arguments = {k: v for k, v in self._arguments.items() if k in inherited} | overrides
                if "class_names" in accepted and "class_names" not in overrides:
                    arguments["class_names"] = getattr(self, "class_names", None)
                try:
                    module = type(self)(**arguments)
                except (TypeError, ValueError) as error:
                    raise ValueError(f"{type(self).__name__}: source {name!r}: {error}") from error
                module.source_name = name
                modules[name] = module
            self._source_modules = modules
        return self._source_modules

    def _mix_sources(self, datasets: dict[str, Any], stage: str | None) -> dict[str, Any]:
        """`datasets` with the training split of every source served as one `SourceMixture`."""
        train = datasets.get("train")
        if not self.other_sources and not isinstance(train, Mapping):
            if self.source_weights is not None:
                raise ValueError(f"{type(self).__name__}: source_weights need sources (there is one)")
            return datasets
        parts = dict(train) if isinstance(train, Mapping) else {MAIN: train}
        owners = [self] * len(parts)
        mine = self._compared_state()
        state = self.plain_data_state()
        mine_restored = {k: state.get(k) for k in self.state_restored}
        for name, module in self.source_modules().items():
            try:
                module.setup(stage)
            except DataError as error:
                raise DataError(f"{type(self).__name__}: source {name!r}: {error}") from error
            theirs = module._compared_state()
            differ = [k for k in mine if k in theirs and mine[k] != theirs[k]]
            if differ:
                raise DataError(
                    f"{type(self).__name__}: source {name!r} has "
                    + "; ".join(f"{k}={theirs[k]!r} where {MAIN!r} has {mine[k]!r}" for k in differ)
                    + ": a model cannot learn from both"
                )
            restored = {k: v for k, v in mine_restored.items() if v is not None}
            if restored:  # training statistics: the main source's, for every source (and the checkpoint)
                module.restore_data_state(restored)
            parts[name] = module.dataset("train")
            owners.append(module)
            seen, left_out = {id(parts[name])}, []  # its other splits, each dataset once (test may be val)
            for split, dataset in module.datasets.items():
                if id(dataset) not in seen:
                    seen.add(id(dataset))
                    left_out.append(split)
            self.report.absorb(name, module.report, left_out)
        mixture = SourceMixture(parts)
        self.mixture_schedule = None
        if self.source_weights is not None:  # refused now, not at the loader
            if not is_schedule(self.source_weights):
                proportions(self.source_weights, mixture.names, type(self).__name__)
            self.mixture_schedule = MixtureSchedule.parse(self.source_weights, mixture.names, type(self).__name__)
        self.report.mixture("train", mixture.counts(), self._planned_shares(mixture))
        if self.mixture_schedule is not None and not self.mixture_schedule.constant:
            schedule = self.mixture_schedule
            stages = [dict(zip(schedule.names, stage.shares, strict=True)) for stage in schedule.stages]
            self.report.schedule("train", schedule.describe(), stages)
        self._mixture_owners = owners
        self.collate_fn = MixtureCollator(self.collate_fn)
        return {**datasets, "train": mixture}

    def _compared_state(self) -> dict[str, Any]:
        """What every source must share with the main one: the `state_must_match` values."""
        state = self.plain_data_state()
        return {k: state[k] for k in self.state_must_match if k in state}

    def _planned_shares(self, mixture: SourceMixture) -> dict[str, float]:
        """The sources' shares of an epoch (a schedule's at its start)."""
        counts = np.asarray(list(mixture.counts().values()), dtype=np.float64)
        if self.mixture_schedule is not None and is_schedule(self.source_weights):
            weights = self.mixture_schedule.shares_at(0)
        elif self.source_weights is None:
            weights = counts
        else:
            weights = np.asarray(proportions(self.source_weights, mixture.names, type(self).__name__))
        return dict(zip(mixture.names, (weights / weights.sum()).tolist(), strict=True))

    def scheduled_shares(self, epoch: int) -> dict[str, float] | None:
        """The shares the training mixture's sources are asked for in `epoch` (None: no mixture)."""
        mixture = self.datasets.get("train")
        if not isinstance(mixture, SourceMixture):
            return None
        shares = getattr(self._train_sampler, "shares_of", lambda epoch: None)(epoch)
        if shares is None:
            return self._planned_shares(mixture)
        return dict(zip(mixture.names, shares.tolist(), strict=True))

    def fit_start(self) -> dict[str, Any]:
        """Where the fit's training sampler starts: the epoch Lightning is about to serve, the batches per rank
        the trainer took before it (a schedule of steps counts them; None: unknown), a checkpoint's position."""
        epoch = self._fit_epoch()
        return {"epoch": epoch, "steps_before": self.steps_before(epoch), "state": self.resume_position()}

    def steps_before(self, epoch: int) -> int | None:
        """The training batches per rank served before `epoch` (None where an earlier epoch's count is unknown)."""
        if any(e not in self.served_steps for e in range(epoch)):
            return None
        return sum(self.served_steps[e] for e in range(epoch))

    def _note_step(self, epoch: int) -> None:
        """Count a training batch of a mixture's `epoch` (a schedule of steps starts each epoch where the trainer
        is), and put in the report, once per epoch, the stage and shares a scheduled epoch draws with."""
        self.served_steps[epoch] = self.served_steps.get(epoch, 0) + 1
        sampler = self._train_sampler
        if getattr(sampler, "scheduled", None) is None or epoch in self.report.scheduled:
            return
        self.report.plan_epoch(epoch, sampler.stage_of(epoch), self.scheduled_shares(epoch))

    def _reload_every_epoch(self) -> None:
        """Under a schedule whose epochs differ in length, make the fitting trainer reload the training loader
        every epoch: Lightning reads a loader's length once per load and ends the epoch at that count."""
        trainer = self.trainer
        schedule = self.mixture_schedule
        if trainer is None or schedule is None or schedule.constant or trainer.reload_dataloaders_every_n_epochs == 1:
            return
        was = trainer.reload_dataloaders_every_n_epochs
        trainer.reload_dataloaders_every_n_epochs = 1
        said = (
            f"{type(self).__name__}: source_weights is a schedule, so each epoch has its own length: the trainer "
            "reloads the training loader every epoch (reload_dataloaders_every_n_epochs=1"
        )
        if was:
            notices.warn(f"{said}, not {was})")
        else:
            notices.info(log, "%s)", said)

    def of_each_source(self, dataset: Any, per_dataset: str) -> Any:
        """`self.<per_dataset>(dataset)`, a mixture's computed by each source's DataModule and concatenated."""
        if not isinstance(dataset, SourceMixture):
            return getattr(self, per_dataset)(dataset)
        owners = self._mixture_owners or [self] * len(dataset.parts)
        values = [getattr(owner, per_dataset)(part) for owner, part in zip(owners, dataset.parts, strict=True)]
        return None if any(v is None for v in values) else np.concatenate([np.asarray(v) for v in values])

    def _sampler_groups(self, dataset: Any) -> np.ndarray | None:
        """`sampler_groups`; a mixture's sources never share a group (a group of one source,
        a recording say, is not the same-numbered group of another), and under `per_source` each
        source is one group at least."""
        if not isinstance(dataset, SourceMixture):
            return self.sampler_groups(dataset)
        owners = self._mixture_owners or [self] * len(dataset.parts)
        inner = [owner.sampler_groups(part) for owner, part in zip(owners, dataset.parts, strict=True)]
        if all(g is None for g in inner) and self.mix == "within_batch":
            return None
        ids = [np.zeros(len(p), np.int64) if g is None else np.unique(g, return_inverse=True)[1].reshape(-1)
               for g, p in zip(inner, dataset.parts, strict=True)]  # fmt: skip
        firsts = np.cumsum([0] + [int(i.max()) + 1 if len(i) else 0 for i in ids])
        return np.concatenate([i + first for i, first in zip(ids, firsts, strict=False)])

    def _mixture_weights(self, mixture: SourceMixture) -> np.ndarray | None:
        """Source s gets `source_weights[s]` of every epoch (default: its share of the samples),
        its samples drawn by its own `sample_weights`; None when neither weighs anything."""
        owners = self._mixture_owners or [self] * len(mixture.parts)
        within = [weights_of(owner, part) for owner, part in zip(owners, mixture.parts, strict=True)]
        if self.source_weights is None and all(w is None for w in within):
            return None  # every sample of every source once
        counts = list(mixture.counts().values())
        schedule = self.mixture_schedule
        if schedule is not None and not schedule.constant:
            inner = None
            if any(w is not None for w in within):
                inner = np.concatenate([np.ones(n) if w is None else np.asarray(w, np.float64)
                                        for w, n in zip(within, counts, strict=True)])  # fmt: skip
            return ScheduledWeights.build(schedule, mixture.sources, inner)
        if schedule is not None and is_schedule(self.source_weights):  # stages that all agree
            return share_weights(schedule.shares_at(0), counts, within)
        shares = counts if self.source_weights is None else proportions(self.source_weights, mixture.names, "")
        return share_weights(shares, counts, within)

    def _report_draw(self, sampler: Any, mixture: SourceMixture) -> None:
        """Put in the report what every epoch of the training `sampler` draws of each source (its draw's
        strata are split by source, `shares`, so each source's count is fixed; under a schedule, each
        stage's at its start), and warn about a source asked for a share that its rounded count never serves."""
        scheduled = getattr(sampler, "scheduled", None)
        stages = [sampler.draw_of(0, sampler.num_replicas)] if scheduled is None else [
            scheduled.draw_for(stage.shares) for stage in scheduled.schedule.stages]  # fmt: skip
        drawn = [self._drawn_counts(draw, mixture) for draw in stages]
        self.report.draw("train", drawn[0])
        if scheduled is not None:
            self.report.draw_stages("train", drawn)
        asked = [self.report.sources.get("train", {})]
        if scheduled is not None:
            asked = [{k: (0, s) for k, s in zip(mixture.names, stage.shares, strict=True)}
                     for stage in scheduled.schedule.stages]  # fmt: skip
        starved = sorted({
            name for told, counts in zip(asked, drawn, strict=True) for name, n in counts.items()
            if told.get(name, (0, 0.0))[1] > 0 and n == 0
        })  # fmt: skip
        if starved:
            notices.warn(
                f"{type(self).__name__}: source(s) {starved} are asked for less than half a sample an epoch and "
                "get none: raise their source_weights"
            )

    @staticmethod
    def _drawn_counts(draw: Any, mixture: SourceMixture) -> dict[str, float]:
        """Samples of each source an epoch of `draw` serves (None: every sample once)."""
        if draw is None:
            counts = np.diff(mixture.offsets).astype(np.float64)
        else:
            stratum_source = np.zeros(len(draw.counts), np.int64)
            stratum_source[draw.strata] = mixture.sources  # one source a stratum
            counts = np.bincount(stratum_source, draw.counts, minlength=len(mixture.parts))
        return dict(zip(mixture.names, counts.tolist(), strict=True))
