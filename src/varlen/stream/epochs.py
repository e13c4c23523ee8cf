"""`StreamBatchPlan`: the streamed plan (`varlen.stream.layout`) behind a rank's epochs, with a small,
rank-independent state that resumes exactly on the same or another number of ranks and lanes.

A rank's batches come in *lanes*, one per loader worker (`interleave`): a
DataLoader deals batches to its workers in turn, so worker w serves lane w, a stretch of whole windows in
order, and decodes only their chunks (with one lane, every worker would decode every chunk of every window).
The lanes change the order of a rank's batches, never which batches it serves.

The state is `{epoch, batches_served, num_replicas, lanes, segments, seed, index, plan}`, as the in-memory
sampler's, and so is the resume (`varlen.batching.resume`): restoring computes descriptors only, and
serving the next batch reads one window. Resumed on other ranks or lanes, the rest of the epoch is each saved
rank's unserved batches in its windows' order, cut into one stretch per new rank and served in the new lanes,
so a rank reads each window of its stretch once (a few batches split so that the ranks' counts are equal,
from the windows' histograms: no chunk read). The next epoch is the new world size's own.

A state of other plan settings (`max_tokens`, `window_batches`...; named in the state's `settings`) is
resumed at its epoch's start or end; inside its epoch it is refused by name (its rest would be read again to
be planned under the new settings), unless `VARLEN_RESUME=next_epoch` skips that rest
(`load_boundary`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from varlen.batching.plan import PlanSpec, split_largest
from varlen.batching.resume import RESUME_VARIABLE, ResumableEpochs, changes
from varlen.batching.shape_policy import Rungs
from varlen.batching.spec import sizes_spec
from varlen.storage.cache import cache_key
from varlen.stream.layout import (
    WINDOW_BATCHES,
    SizeIndexLike,
    StreamLayout,
    layout,
    rank_batches,
    read_window,
    window_bounds,
)
from varlen.stream.shape_policy import row_shapes

__all__ = [
    "SPEC_ARGUMENTS",
    "StreamBatchPlan",
    "StreamEpochs",
    "plan_settings",
    "settings_refusal",
    "split_tail",
    "stream_spec",
]


def split_tail(batches: np.ndarray, count: int, bounds_of: Callable[[int], np.ndarray]) -> np.ndarray:
    """`batches` (descriptors) with up to `count` more (as many as their samples allow), the largest of
    the shortest tail that can take them split, each piece where its batch was (`bounds_of(window)`: a
    window's batch bounds from its histogram, no chunk read)."""
    bounds: dict[int, np.ndarray] = {}
    tail = batches.copy()
    first, room = len(tail), 0
    while room < count and first > 0:
        first -= 1
        window, batch, low, high = tail[first].tolist()
        if window not in bounds:
            bounds[window] = bounds_of(window)
        if high < 0:
            tail[first, 3] = high = int(bounds[window][batch, 1] - bounds[window][batch, 0])
        room += high - low - 1
    count = min(count, room)
    if count <= 0:
        return batches
    parts = tail[first:]
    lengths = parts[:, 3] - parts[:, 2]
    tiles = np.concatenate([[0], np.cumsum(lengths)])  # each part as a tile of one line, split there
    split = split_largest(np.stack([tiles[:-1], tiles[1:]], axis=1), count)
    owner = np.searchsorted(tiles, split[:, 0], side="right") - 1
    out = parts[owner].copy()
    out[:, 2] = parts[owner, 2] + split[:, 0] - tiles[owner]
    out[:, 3] = parts[owner, 2] + split[:, 1] - tiles[owner]
    return np.concatenate([tail[:first], out])


#: a streamed plan's settings given one by one instead of a `spec` (as the sampler's own arguments)
SPEC_ARGUMENTS = ("batch_size", "max_tokens", "cost", "max_batch_size", "pad_to_multiple_of", "rungs")


def stream_spec(spec: PlanSpec | None = None, **settings: Any) -> PlanSpec:
    """A streamed plan's spec: `spec`, or one made of `SPEC_ARGUMENTS` (`max_tokens` an int: one budget
    axis; `rungs` the shape policy's padded lengths, grid edges), in the one form its state's key is made of.

    Raises:
        TypeError: both a `spec` and settings, or a name that is not a plan setting.
    """
    unknown = set(settings) - set(SPEC_ARGUMENTS)
    if unknown or (spec is not None and settings):
        raise TypeError(f"give a spec or the plan settings {SPEC_ARGUMENTS}, got {sorted(settings)}")
    if spec is None:
        ladder = settings.pop("rungs", None)
        spec = sizes_spec(1, **settings, rungs=None if ladder is None else (Rungs(tuple(int(r) for r in ladder)),))
    if spec.rung_batch_sizes is not None:
        raise ValueError("a streamed plan holds each batch to its budget: rung_batch_sizes are the in-memory plan's")
    multiple = spec.pad_to_multiple_of
    rungs = None if spec.rungs is None else (Rungs(tuple(int(r) for r in spec.rungs[0].lengths), multiple),)
    tokens = None if spec.max_tokens is None else tuple(int(t) for t in spec.max_tokens)
    return PlanSpec(spec.batch_size, tokens, spec.cost, spec.max_batch_size, spec.num_buckets, multiple, rungs)


def settings_refusal(state: dict[str, Any], settings: dict[str, Any]) -> str:
    """Why a streamed plan refuses a state of other plan settings inside its epoch: the settings that differ (a
    state that does not name them: its key), and both ways out."""
    epoch = int(state["epoch"])
    saved = state.get("settings")
    differ = changes(saved, settings) if saved is not None else f"key {state.get('plan')!r}"
    return (
        f"plan state was saved with plan settings other than this plan's ({differ}): a streamed epoch's rest is "
        f"not planned again under other settings (its windows would be read again). Resume with the saved values "
        f"to finish epoch {epoch} (and change them at an epoch's end), or set {RESUME_VARIABLE}=next_epoch to skip "
        f"the rest of epoch {epoch} and start epoch {epoch + 1} with these"
    )


def plan_settings(spec: PlanSpec, window_batches: int, axis: int) -> dict[str, Any]:
    """A streamed plan's settings as plain values (in its state, to name what a resume changed)."""
    return {
        "batch_size": spec.batch_size,
        "max_tokens": None if spec.max_tokens is None else spec.max_tokens[0],
        "cost": spec.cost,
        "max_batch_size": spec.max_batch_size,
        "pad_to_multiple_of": spec.pad_to_multiple_of,
        "window_batches": window_batches,
        "axis": axis,
        "rungs": None if spec.rungs is None else list(spec.rungs[0].lengths),
    }


class StreamEpochs(ResumableEpochs):
    """What every streamed plan does with its layouts: a rank's epochs served in lanes, read a unit (a window,
    or a mixture's unit) at a time, and a state that names the plan's key, settings and size index(es).

    Args:
        indexes: the size indexes (`SizeIndexLike`), one per source.
        spec: the plan's `PlanSpec` (one budget axis: `axis` of the sizes; its
            rungs: the shape policy's padded lengths, edges of the size grid, see `
            histogram_rungs`), or its settings one by one (`SPEC_ARGUMENTS`, `max_tokens` an int).
        seed: the run's seed (chunk order, pieces and windows; with the epoch, every order).
        num_replicas, rank: the world size and this rank.
        window_batches: a window's size in batches. A window's buckets hold fewer samples than the
            whole data set's: smaller windows pad more and re-mix less between epochs (at 40 batches,
            three quarters of the pairs batched together are again the next epoch; at 2000, a third).
        lanes: the loader's workers (`num_workers`, 1 for none): each reads its own windows.

    A subclass gives `layout_on`, `rank_rows`, `plain_length`, `unit_bounds` (a unit's
    batches from its histogram), `reader` (an epoch's units read) and `shapes`.
    """

    state_name = "plan"

    def __init__(
        self,
        indexes: Sequence[SizeIndexLike],
        spec: PlanSpec | None = None,
        *,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        window_batches: int = WINDOW_BATCHES,
        axis: int = 0,
        lanes: int = 1,
        **settings: Any,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        if int(lanes) < 1:
            raise ValueError(f"lanes must be >= 1 (the loader's workers, 1 for none), got {lanes}")
        self.spec = stream_spec(spec, **settings)
        self.indexes, self.seed, self.rank, self.num_replicas = list(indexes), int(seed), int(rank), int(num_replicas)
        self.window_batches, self.axis, self.lanes = int(window_batches), int(axis), int(lanes)
        self._layouts: dict[int, Any] = {}
        self.epoch = 0

    def on_rank(self, rank: int) -> StreamEpochs:
        """This plan as rank `rank`'s, from an epoch's start (its layouts shared, nothing read)."""
        plan = copy.copy(self)
        plan.rank = int(rank)
        plan._start_afresh()
        return plan

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def split_rows(self, rows: np.ndarray, count: int, epoch: int, world: int) -> np.ndarray:
        return split_tail(rows, count, lambda unit: self.unit_bounds(unit, epoch, world))

    def __iter__(self) -> Iterator[np.ndarray]:
        """This epoch's batches for this rank, as global sample ids."""
        for ids, _ in self.sized_batches():
            yield ids

    def sized_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """This epoch's batches for this rank: global sample ids and their sizes on the plan's axis (what a
        batch pads to, read with its unit). A unit is read when its lane reaches it (up to `lanes + 1` held,
        the least recently used out first)."""
        loaded, read = {}, self.reader(self.epoch)
        for world, (unit, batch, low, high) in self.positions():
            if unit in loaded:
                loaded[unit] = loaded.pop(unit)
            else:
                if len(loaded) > self.lanes:
                    loaded.pop(next(iter(loaded)))
                loaded[unit] = read(world, unit)
            ids, bounds, sizes = loaded[unit]
            taken = slice(bounds[batch, 0] + low, bounds[batch, 1] if high < 0 else bounds[batch, 0] + high)
            yield ids[taken], sizes[taken]

    def key_parts(self) -> tuple:
        """What the state's `plan` key is made of: the spec, multiple, window and axis (and what a subclass adds)."""
        spec = (self.spec.batch_size, self.spec.max_tokens, self.spec.cost, self.spec.max_batch_size)
        return spec, self.spec.pad_to_multiple_of, self.window_batches, self.axis

    def _key(self) -> str:
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """The plan's settings as plain values (in its state, to name what a resume changed)."""
        return plan_settings(self.spec, self.window_batches, self.axis)

    def index_key(self) -> str | list[str]:
        keys = [index.key for index in self.indexes]
        return keys[0] if len(keys) == 1 else keys

    def state_dict(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches."""
        mine = {"seed": self.seed, "index": self.index_key(), "plan": self._key(), "settings": self.settings()}
        return self.position_state() | mine

    def check_origin(self, state: Mapping[str, Any]) -> None:
        """Refuse a state of other size indexes or another seed, naming which."""
        for name, mine in (("index", self.index_key()), ("seed", self.seed)):
            saved = state[name]
            if (list(saved) if isinstance(saved, (list, tuple)) else saved) != mine:
                raise ValueError(f"plan state was saved with {name} {saved!r}, this plan has {mine!r}")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume mid-epoch on any number of ranks and lanes (see the module docstring).

        Raises:
            ValueError: the state is of other indexes or seed, or inconsistent; or, inside its epoch, of other
                plan settings or draws (unless `VARLEN_RESUME=next_epoch`).
        """
        state = dict(state)
        self.check_origin(state)
        if state["plan"] != self._key():
            self.load_boundary(state, self.set_epoch, settings_refusal(state, self.settings()))
        else:
            self.load_position(state, self.set_epoch)


class StreamBatchPlan(StreamEpochs):
    """A rank's batches of a streamed data set, epoch after epoch, from its size index (`index`; the rest:
    as for `StreamEpochs`)."""

    def __init__(self, index: SizeIndexLike, spec: PlanSpec | None = None, **options: Any) -> None:
        super().__init__([index], spec, **options)
        self.index = index
        self.layout = self.layout_on(self.num_replicas)
        self._start_afresh()

    def layout_on(self, num_replicas: int) -> StreamLayout:
        """The run laid out on `num_replicas` ranks (kept: an elastic resume needs the saved one)."""
        if num_replicas not in self._layouts:
            self._layouts[num_replicas] = layout(
                self.index, self.spec, seed=self.seed, num_replicas=num_replicas,
                window_batches=self.window_batches, axis=self.axis,
            )  # fmt: skip
        return self._layouts[num_replicas]

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        """Rank `rank`'s descriptors `[n, 4]` of `epoch` on `world` ranks (window, batch, lo, hi;
        hi = -1: the batch's end), its windows one after the other."""
        return rank_batches(self.layout_on(world), rank, epoch, self.seed)

    def unit_bounds(self, window: int, epoch: int, world: int) -> np.ndarray:
        return window_bounds(self.layout_on(world), window, epoch, self.seed)

    def plain_length(self, epoch: int) -> int:
        return self.layout.batches_per_rank

    def epoch_batches(self, epoch: int | None = None) -> tuple[StreamLayout, np.ndarray, int]:
        """The layout whose windows `epoch` serves, this rank's descriptors in serving order, and the
        batches per rank served before them (on other world sizes or lanes)."""
        rows, before, world = self.epoch_rows(self.epoch if epoch is None else epoch)
        return self.layout_on(world), rows, before

    def descriptors(self) -> Iterator[tuple[int, int, int, int]]:
        """This epoch's descriptors for this rank, from a loaded state's position (nothing read)."""
        for _, row in self.positions():
            yield tuple(row)

    def reader(self, epoch: int) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
        """Reads a window of `epoch` (on a world size): its ids, batches and sizes (`read_window`)."""
        return lambda world, window: read_window(self.index, self.layout_on(world), window, epoch, self.seed)

    def shapes(self, epoch: int | None = None) -> set[tuple[int, int]]:
        """The distinct `(batch size, padded length)` of `epoch`'s batches on every rank (from the windows'
        histograms: nothing read)."""
        plan = self.layout_on(self.epoch_rows(self.epoch if epoch is None else epoch)[2])
        return row_shapes(plan.window_histograms, plan.window_splits, plan.rounded, plan.spec)

    def _key(self) -> str:
        rungs = () if self.spec.rungs is None else (self.spec.rungs[0].lengths,)  # old states keep their key
        return cache_key(*self.key_parts(), *rungs, version="1")
