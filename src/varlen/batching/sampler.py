"""`BucketBatchSampler`: length-bucketed, budgeted, distributed-safe and resumable batches.

`EpochBatchSampler` is the same sampler whose batches are `EpochIndices`: index lists that
carry the epoch they were planned for, into the dataset's `__getitems__` in whichever process
runs it, for per-epoch draws of `(seed, epoch, index)` (`varlen.prepare.draws`).

A state saved on W ranks resumes exactly on W' ranks: the state names the epoch, the world size
and the batches each rank served (and, after an earlier such resume, the same for each earlier
part of the epoch), which fixes exactly which of the epoch's global batches were served; the
rest are dealt to the W' ranks (`varlen.batching.resume`, shared with the streamed plan). The
state also names the plan's settings, so a sampler of other settings (`max_tokens`, rungs...) plans
the rest of the saved epoch again under its own (`varlen.batching.replan`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from varlen import notices
from varlen.batching.padding import round_up
from varlen.batching.plan import Plan, PlanSpec, as_size_matrix, bucketize, build_plan, fit_rungs, split_largest
from varlen.batching.plan_sampler import EpochTracker, PlanSampler
from varlen.batching.replan import PlanChanges
from varlen.batching.resume import ResumableEpochs, canonical
from varlen.batching.schedule_draws import ScheduledDraws, ScheduledWeights, join_pieces
from varlen.batching.shape_policy import Rungs, batch_shapes, cant_hold, distinct_shapes
from varlen.batching.spec import sizes_spec, spec_settings
from varlen.batching.weights import WeightedDraw, strata_of

__all__ = ["BucketBatchSampler", "EpochTracker"]


class BucketBatchSampler(PlanChanges, ResumableEpochs, PlanSampler):
    """Batches of similar-size samples, under a fixed batch size or a token budget.

    One global plan per (lengths, seed, epoch) is built on every rank, and rank `r` takes
    every `num_replicas`-th batch, so all ranks get the same number of batches (unequal counts
    hang DDP) and, with `drop_last=False`, every sample is served exactly once per epoch.
    The number of batches is the same every epoch (see `varlen.batching.plan`), which is
    what Lightning assumes after reading `len()` once; only an epoch resumed on another number
    of ranks has its own (the batches each rank served before, plus its share of the rest), and
    under a schedule of shares (`weights` a `ScheduledWeights`)
    each epoch has the length of its shares' draw: `set_epoch`, then `len()`.

    Args:
        lengths: size of each sample, `[N]` or `[N, D]` for costs over several axes
            (e.g. video frames and text tokens).
        batch_size: fixed samples per batch.
        max_tokens: budget per batch (an int, or one int per size dimension); see `cost`.
        shuffle: new random batches every epoch (seeded); if False, batches are sorted by size,
            largest first, in a fixed order (good for evaluation: an OOM shows up at once).
        seed: base seed; the plan depends on `(seed, epoch)` only.
        drop_last: drop the last partial batch (fixed size) and the batches that do not divide
            evenly over ranks. Off by default: nothing is dropped.
        num_replicas: number of ranks; defaults to the injected `DistributedSampler`, then to
            `torch.distributed` when initialised, else 1.
        rank: this rank, defaulted the same way.
        cost: `"padded"` (`len(batch) * max(size) <= max_tokens`) or `"sum"`
            (`sum(size) <= max_tokens`, for graphs where nothing is padded).
        max_batch_size: optional cap on samples per batch under a token budget.
        num_buckets: size buckets per dimension; default: enough that each bucket holds about
            four batches (sizes with few distinct values get one bucket each, so no padding).
        pad_to_multiple_of: cost sizes rounded up to this multiple, to match the collate.
        rungs: the shape policy's padded lengths, one `Rungs` per size axis
            (a DataModule fits them with `fit_rungs`): buckets are the rungs, each batch holds the
            budget over its rung, and the collate pads to the rung, so an epoch takes few batch shapes.
        max_shapes: without `rungs`, fit them here: the most rungs whose epochs (every one served, weighted
            draws included: `served_shape_count`, on these ranks) take at most this many distinct
            `(batch size, padded length)` shapes on each size axis (where even one rung takes more, a warning).
            Pad your collate to `rungs` (`pad_to_multiple_of=sampler.rungs[0]` of varlen's collates).
        rung_batch_sizes: with `rungs` (one axis) and `max_tokens`, the most samples a batch of each rung
            holds (`varlen tune --budget` measures them), on top of the budget.
        groups: optional group id per sample; a batch then holds samples of one group only
            (e.g. the windows of one recording), and groups mix through the batch order.
        weights: optional weight per sample (>= 0, not all zero): each epoch serves
            `num_samples` indices drawn in proportion to them, from `(seed, epoch)` only
            (stratified by size bucket and group so that `len()` never moves; see
            `varlen.batching.weights`). A weight of 0 is never served. Needs `shuffle`.
            A `ScheduledWeights` draws each epoch with the shares
            its schedule gives that epoch's first position (`varlen.batching.schedule_draws`).
        num_samples: indices drawn per epoch (default: the number of samples); given without
            `weights`, every sample weighs the same.
        replacement: with `weights` or `num_samples`, whether an index may be drawn more than once in an
            epoch (False: at most the number of nonzero weights). None (the default): per source (each id of
            `shares`, or the whole split), with replacement where its samples are weighted (their weights
            differ) or it serves more than it holds, without otherwise
            (`draws_with_replacement`, as a streamed plan decides).
        shares: optional id per sample (a mixture's source) whose weighted count every epoch is fixed at
            its weights' share, within one sample, while batches still mix ids (`groups` keeps them
            apart): without it, a source's count in a mixed batch is random around its share, and the
            fixed counts per size bucket can bias it.
        epoch: the epoch `len()` describes until `set_epoch` (Lightning reads `len()` of a loader it
            reloads before it sets the epoch; its length depends on the epoch under a schedule).
        steps_before: under a schedule of steps, the batches per rank the trainer took before `epoch`
            (a DataModule counts them); None: counted from the plans of the epochs before it.
        sampler: set by Lightning, which injects a `DistributedSampler` under DDP; only its
            `num_replicas`, `rank` and `epoch` are read. Leave it None yourself.
        state: a saved state to resume from at once (`load_state_dict`). Lightning reads
            `len()` before it loads the loader's state, and ends an epoch when its count of batches
            reaches that length: a DataModule passes the position its checkpoint recorded, so that an
            epoch resumed on another number of ranks has its own length when Lightning reads it.
        spec: the plan's settings as one `PlanSpec`, instead of `batch_size`,
            `max_tokens`, `cost`, `max_batch_size`, `num_buckets`, `pad_to_multiple_of`, `rungs` and
            `rung_batch_sizes` one by one (as the streamed samplers take it).
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int | None = None,
        max_tokens: int | Sequence[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
        cost: str = "padded",
        max_batch_size: int | None = None,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        rungs: Sequence[Rungs] | None = None,
        max_shapes: int | None = None,
        rung_batch_sizes: Sequence[int] | None = None,
        groups: Sequence[int] | np.ndarray | None = None,
        weights: Sequence[float] | np.ndarray | None = None,
        num_samples: int | None = None,
        replacement: bool | None = None,
        shares: Sequence[int] | np.ndarray | None = None,
        epoch: int = 0,
        steps_before: int | None = None,
        sampler: Sampler | None = None,
        state: dict[str, Any] | None = None,
        spec: PlanSpec | None = None,
    ) -> None:
        if spec is not None:  # the plan's settings as one value
            batch_size, max_tokens, cost, max_batch_size, num_buckets, pad_to_multiple_of, rungs, rung_batch_sizes = (
                spec_settings(spec, locals())
            )
        if max_shapes is not None and rungs is None:
            rungs = self._fit_rungs(dict(locals()))
        self.sizes = as_size_matrix(lengths)
        self.groups, self.shares = self._per_sample(groups, "groups"), self._per_sample(shares, "shares")
        self.spec = sizes_spec(
            self.sizes.shape[1], batch_size, max_tokens, cost, max_batch_size, num_buckets, pad_to_multiple_of,
            rungs, rung_batch_sizes,
        )  # fmt: skip
        self.rungs, self.batch_size, self.max_tokens = self.spec.rungs, batch_size, max_tokens
        if isinstance(max_tokens, (int, np.integer)):
            self.max_tokens = self.spec.max_tokens  # one budget for every size axis
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self._serve_on(len(self.sizes), sampler, num_replicas, rank)
        self._buckets = bucketize(self.sizes, self.spec)
        self._plan_key, self._plan = None, None  # the plan of (epoch, world size) last built
        self._weighing = (weights, num_samples, replacement)  # a copy under a saved state's settings draws the same
        self._clones: dict[str, BucketBatchSampler] = {}
        self._steps_anchor: tuple[int, int] | None = None
        self.scheduled, self._draw = self._weighted_draw(weights, num_samples, replacement)
        if self.scheduled is not None and steps_before is not None:
            self.scheduled.know(epoch, steps_before)
        self._start_afresh()
        self.num_oversized = self._count_oversized()
        self._start(epoch, state)

    def _per_sample(self, values, name: str) -> np.ndarray | None:
        """`values` (`groups` or `shares`: one id per sample, or None) as an array, checked."""
        values = None if values is None else np.asarray(values)
        if values is not None and values.shape != (len(self.sizes),):
            raise ValueError(f"{name} must have one id per sample ({len(self.sizes)}), got shape {values.shape}")
        return values

    @classmethod
    def _fit_rungs(cls, arguments: dict[str, Any]) -> tuple[Rungs, ...]:
        """The rungs `max_shapes` allows for these `__init__` arguments (`fit_rungs`),
        each count of rungs probed by a sampler of them on rank 0 (`served_shape_count`)."""
        arguments = {k: v for k, v in arguments.items() if k not in ("self", "__class__", "state", "epoch", "spec")}
        limit = arguments.pop("max_shapes")
        probe = lambda rungs: cls(**arguments | {"rungs": rungs, "rank": 0}).served_shape_count()  # noqa: E731
        sizes = as_size_matrix(arguments["lengths"])
        budget = arguments["max_tokens"]
        capped = {} if budget is None else {"max_batch_size": arguments["max_batch_size"]}
        spec = sizes_spec(sizes.shape[1], arguments["batch_size"], budget, **capped,
                          pad_to_multiple_of=arguments["pad_to_multiple_of"])  # fmt: skip
        rungs, shapes = fit_rungs(sizes, spec, limit, probe)
        if shapes > limit:
            notices.warn(cant_hold(limit, shapes))
        return rungs

    def _weighted_draw(
        self, weights, num_samples: int | None, replacement: bool | None
    ) -> tuple[ScheduledDraws | None, WeightedDraw | None]:
        """The draws of scheduled weights, or the one draw of every epoch (both None: every sample once)."""
        if weights is None and num_samples is None:
            return None, None
        if not self.shuffle:
            raise ValueError("weights and num_samples draw new samples every epoch: they need shuffle=True")
        if weights is None:
            weights = np.ones(len(self.sizes))
        strata = strata_of(self._buckets[0], self.groups, self.shares)
        # a partial, not a closure: the sampler (and a DataModule holding it) must pickle (spawn, DDP, torch.save)
        build = functools.partial(
            WeightedDraw.build, strata=strata, num_samples=num_samples, replacement=replacement, sources=self.shares
        )
        if not isinstance(weights, ScheduledWeights):
            return None, build(weights)
        if len(weights) != len(self.sizes):
            raise ValueError(f"weights has {len(weights)} values but there are {len(self.sizes)} samples")
        scheduled = ScheduledDraws(weights, build, self._count)
        scheduled.key()  # every stage's draw built now: bad weights are refused here, not at an epoch
        return scheduled, None

    @property
    def draw(self) -> WeightedDraw | None:
        """The current epoch's weighted draw (None: every sample once)."""
        return self.draw_of(self.epoch, self.num_replicas)

    def draw_of(self, epoch: int, world: int) -> WeightedDraw | None:
        """`epoch`'s draw on `world` ranks (under a schedule of steps, the world size decides its shares)."""
        return self._draw if self.scheduled is None else self.scheduled.draw(epoch, world)

    def shares_of(self, epoch: int) -> np.ndarray | None:
        """The sources' shares `epoch` draws with on this world size (None: not scheduled)."""
        return None if self.scheduled is None else self.scheduled.shares(epoch, self.num_replicas)

    def stage_of(self, epoch: int) -> int:
        """The schedule's stage of `epoch` on this world size (0 when not scheduled)."""
        return 0 if self.scheduled is None else self.scheduled.stage(epoch, self.num_replicas)

    def _count(self, draw: WeightedDraw, world: int) -> int:
        """Batches per rank of an epoch of `draw` on `world` ranks: a draw fixes every stratum's count,
        so the cuts, and the count, are those of any epoch of it (epoch 0's plan)."""
        plan = build_plan(self.sizes, self.spec, shuffle=self.shuffle, seed=self.seed, epoch=0, num_replicas=world,
                          drop_last=self.drop_last, rounded=self._buckets, groups=self.groups, draw=draw)  # fmt: skip
        return len(plan) // world

    def _count_oversized(self) -> int:
        """The samples over the budget on their own (warned about: each gets a batch of its own)."""
        if self.spec.max_tokens is None:
            return 0
        budget = np.asarray(self.spec.max_tokens)
        padded = round_up(self.sizes, self.spec.size_multiple)  # what the collate pads to, as the plan costs it
        count = int(np.any(padded > budget, axis=1).sum())
        if count:
            shown = int(budget[0]) if len(set(budget.tolist())) == 1 else budget.tolist()  # as a config writes it
            notices.warn(
                f"{count} samples exceed max_tokens={shown} on their own; "
                "each gets a batch of its own (none is dropped)"
            )
        return count

    def global_plan(self, epoch: int | None = None) -> Plan:
        """All ranks' batches for `epoch` (default: the current one), in serving order."""
        return self._plan_on(self.epoch if epoch is None else epoch, self.num_replicas)

    def _plan_on(self, epoch: int, num_replicas: int) -> Plan:
        key = (epoch, num_replicas)
        if self._plan_key != key:
            if self.scheduled is None:
                self._plan = self._plan_of(self._draw, epoch, num_replicas)
            else:  # a stage may end inside the epoch: each piece from its own shares' plan
                pieces = self.scheduled.pieces(epoch, num_replicas)
                plans = [self._plan_of(self.scheduled.draw_for(shares), epoch, num_replicas) for _, shares in pieces]
                self._plan = join_pieces(plans, [first for first, _ in pieces], num_replicas)
            self._plan_key = key
        return self._plan

    def _plan_of(self, draw: WeightedDraw | None, epoch: int, num_replicas: int) -> Plan:
        return build_plan(
            self.sizes,
            self.spec,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            num_replicas=num_replicas,
            drop_last=self.drop_last,
            rounded=self._buckets,
            groups=self.groups,
            draw=draw,
        )

    def shapes(self, epoch: int | None = None) -> np.ndarray:
        """`[batches, 1 + D]` of `epoch`'s global plan (default: the current one), in serving order: each
        batch's size and the length it pads to on each size axis (its longest sample, up to its rung or
        `pad_to_multiple_of`); packed (`cost="packed"`), every batch one row of the budget: `[1, max_tokens]`
        (rounded up to `pad_to_multiple_of`)."""
        return self._shapes_of(self.global_plan(epoch))

    def _shapes_of(self, plan: Plan) -> np.ndarray:
        if self.spec.cost == "packed":
            row = round_up(self.spec.max_tokens[0], self.spec.pad_to_multiple_of)
            return np.tile(np.array([1, row], dtype=np.int64), (len(plan.bounds), 1))
        shapes = batch_shapes(round_up(self.sizes, self.spec.pad_to_multiple_of), plan.order, plan.bounds)
        for d, rungs in enumerate(self.rungs or ()):
            shapes[:, 1 + d] = rungs.round(shapes[:, 1 + d])
        return shapes

    def served_shape_count(self) -> int:
        """The most distinct `(batch size, padded length)` pairs any size axis takes over every epoch this
        sampler serves on its ranks (what `max_shapes` limits). A draw fixes every stratum's count, so each
        epoch of it is cut as its epoch 0 (unweighted: as epoch 0); under a schedule, every stage's draw counts
        (an epoch cut in pieces takes its batches from them). The epochs between the stages of a linear
        schedule draw other counts: they are not counted (a DataModule warns)."""
        if self.scheduled is None:
            return self.shape_count(0)
        draws = [self.scheduled.draw_for(stage.shares) for stage in self.scheduled.schedule.stages]
        shapes = np.concatenate([self._shapes_of(self._plan_of(draw, 0, self.num_replicas)) for draw in draws])
        return max(distinct_shapes(shapes), default=0)

    def sizes_of(self, indices: list[int]) -> np.ndarray:
        return self.sizes[indices]

    def bucket_sizes(self) -> list[np.ndarray]:
        return [np.unique(self._buckets[1][:, d]) for d in range(self.sizes.shape[1])]

    def shape_batches(self, epoch: int | None = None) -> list[list[int]]:
        """One batch of `epoch` (every rank's plan) for each of its distinct shapes, as it is served, the
        widest first (the most memory first): what `WarmShapes` runs."""
        epoch = self.epoch if epoch is None else int(epoch)
        shapes, plan = self.shapes(epoch), self.global_plan(epoch)
        _, first = np.unique(shapes, axis=0, return_index=True)
        first = first[np.lexsort((-shapes[first, 0], *(-shapes[first, 1:].T)))]
        return [self.batch_of(plan.order[slice(*plan.bounds[k])].tolist(), epoch) for k in first.tolist()]

    def shape_count(self, epoch: int | None = None) -> int:
        """The most distinct `(batch size, padded length)` pairs any size axis takes in `epoch`."""
        return max(distinct_shapes(self.shapes(epoch)), default=0)

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        """Rank `rank`'s batches of `epoch` on `world` ranks: `[n, 2]` bounds into the plan's order."""
        return self._plan_on(epoch, world).bounds[rank::world]

    def split_rows(self, rows: np.ndarray, count: int, epoch: int, world: int) -> np.ndarray:
        return split_largest(rows, count)

    def plain_length(self, epoch: int) -> int:
        if self.scheduled is not None:
            return self.scheduled.length(epoch, self.num_replicas)
        return len(self._plan_on(epoch, self.num_replicas)) // self.num_replicas

    def _begin(self) -> None:
        epoch = self.epoch
        self._position = (epoch, self.first_batch(epoch))  # what a state_dict now names

    def _rank_batches(self) -> Iterator[tuple[list[int], None]]:
        order = None
        for source, (first, end) in self.positions():
            if order is None:  # a resumed epoch's rows index their own order (its plans', see rest_rows)
                order = source if isinstance(source, np.ndarray) else self._plan_on(self.epoch, source).order
            yield order[first:end].tolist(), None

    def state_dict(self) -> dict[str, Any]:
        """Rank-independent position: all ranks have served the same number of batches.

        `batches_served` counts each rank's batches of the epoch; `segments` lists the
        `[world size, batches per rank, lanes]` of the epoch's parts served on other world sizes (and their
        settings, where not `settings`: the plan's, see `settings`).
        """
        schedule = {} if self.scheduled is None else {"schedule": self.scheduled.schedule.describe()}
        if self.scheduled is not None and self.scheduled.schedule.unit == "step":
            schedule["steps_before"] = self.scheduled.steps_before(self.position_state()["epoch"], self.num_replicas)
        return (
            self.position_state()
            | {
                "num_samples": len(self.sizes),
                "seed": self.seed,
                "draw": self._draw_key(),
                "rungs": self._rung_lengths(),
                "settings": self.settings(),
            }
            | schedule
        )

    def _rung_lengths(self) -> list[list[int]] | None:
        return None if self.rungs is None else [list(r.lengths) for r in self.rungs]

    def _draw_key(self) -> str | None:
        if self.scheduled is not None:
            return self.scheduled.key()
        return None if self._draw is None else self._draw.key()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume mid-epoch, on any number of ranks, under these settings.

        On the saved number of ranks and settings, the next iteration yields exactly what an uninterrupted run
        would. On another, the batches the saved ranks had not served are dealt to these ranks
        (split until they divide evenly, or cut with `drop_last`; a sample repeated when fewer are
        left than ranks): every remaining sample once, the same number of batches on every rank; the
        next epoch is this world size's own (see `varlen.batching.resume`). Under other settings
        (`max_tokens`, `batch_size`, rungs, `cost`...), the samples not served are planned again under
        these, said in one warning (`varlen.batching.replan`). A state saved before `segments`,
        `draw` and `settings` were recorded loads as one without them.

        Raises:
            ValueError: a state of other data or seed; or, inside its epoch, of other weights, groups or
                schedule (at an epoch's start or end it resumes there), unless `VARLEN_RESUME=next_epoch`.
        """
        if state["num_samples"] != len(self.sizes):
            raise ValueError(f"sampler state is for {state['num_samples']} samples, this dataset has {len(self.sizes)}")
        if state["seed"] != self.seed:
            raise ValueError(f"sampler state was saved with seed {state['seed']}, this sampler has seed {self.seed}")
        schedule = None if self.scheduled is None else self.scheduled.schedule.describe()
        steps = self.scheduled is not None and "steps_before" in state and state.get("schedule") == schedule
        if steps:  # where the saved epoch started
            self._steps_anchor = (int(state["epoch"]), int(state["steps_before"]))
            self.scheduled.know(*self._steps_anchor)
            self._plan_key, self._clones = None, {}
        saved = self.saved_settings(state)
        refusal = self.refusal(state, saved)
        if refusal is not None:
            self.load_boundary(state, self.set_epoch, refusal)
        else:
            self.load_position(state, self.set_epoch, canonical(saved))
        if steps:
            before = int(state["steps_before"])
            if self.epoch == int(state["epoch"]):  # the next epoch starts where this one, resumed here, ends
                self.scheduled.know(self.epoch + 1, before + len(self))
            else:  # the saved epoch was over: the next starts after the batches the saved run took of it
                self.scheduled.know(self.epoch, before + int(state["batches_served"]))
