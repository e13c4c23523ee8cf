"""`StreamBatchPlan`: the streamed plan (:mod:`varlen.stream.plan`) behind a rank's epochs, with a small,
rank-independent state that resumes exactly on the same or another number of ranks.

A rank's batches come in *lanes*, one per loader worker (:func:`interleave`): a DataLoader deals
batches to its workers in turn, so worker w serves lane w, a stretch of whole windows in order, and
decodes only their chunks (with one lane, every worker would decode every chunk of every window).
The lanes change the order of a rank's batches, never which batches it serves.

The state is ``{epoch, batches_served, num_replicas, segments, lanes, seed, index, plan}``, as the
in-memory sampler's: restoring computes descriptors only, and serving the next batch reads one window.
A state loaded into a plan of other lanes finishes its epoch in the saved order, then serves the new
lanes (a loader's own state needs the same ``num_workers``: ``VarLenLoader`` refuses another). Resumed on
W' ranks, the epoch's global batches are the W-plan's, interleaved (rank r's t-th batch is global batch
``t * W + r``); the first ``W * served`` were served, the rest are dealt to the W' ranks, a few split so
that they divide evenly (as :func:`varlen.batching.plan.remaining_batches` deals the in-memory plan's),
in that order (no lanes until the epoch ends). The next epoch is the W'-plan's own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

from varlen.batching.plan import PlanSpec, saved_position, split_to_multiple
from varlen.cache import cache_key
from varlen.stream.plan import (
    WINDOW_BATCHES,
    SizeIndexLike,
    StreamLayout,
    layout,
    rank_batches,
    window_batches,
    window_bounds,
)

__all__ = ["StreamBatchPlan", "dealt_batches", "interleave"]

#: descriptors turned into Python tuples at a time (a rank's epoch holds millions at 1 B samples)
_ROWS = 4096


def interleave(rows: np.ndarray, lanes: int) -> np.ndarray:
    """``rows`` cut into ``lanes`` contiguous stretches (the first ``len(rows) % lanes`` a row longer),
    dealt in turn: row t of the result is the next row of stretch ``t % lanes``."""
    lanes = max(1, min(int(lanes), len(rows)))
    if lanes == 1:
        return rows
    lengths = len(rows) // lanes + (np.arange(lanes) < len(rows) % lanes)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    turn = np.arange(int(lengths[0]))[:, None]  # [turns, 1]: a stretch's row; each turn visits every lane
    return rows[(starts + turn)[turn < lengths]]


def _split_tail(batches: np.ndarray, multiple: int, plan: StreamLayout, epoch: int, seed: int) -> np.ndarray:
    """``batches`` (descriptors) made to divide over ``multiple`` ranks by splitting the largest of the
    shortest tail that can take the splits (batch sizes from the windows' histograms: no chunk read)."""
    need = (-len(batches)) % multiple
    if need == 0:
        return batches
    bounds: dict[int, np.ndarray] = {}
    tail = batches.copy()
    first, room = len(tail), 0
    while room < need and first > 0:
        first -= 1
        window, batch, low, high = tail[first].tolist()
        if window not in bounds:
            bounds[window] = window_bounds(plan, window, epoch, seed)
        if high < 0:
            tail[first, 3] = high = int(bounds[window][batch, 1] - bounds[window][batch, 0])
        room += high - low - 1
    if room < need:
        raise ValueError(f"{len(batches)} batches cannot be split into a multiple of {multiple}: too few samples")
    parts = tail[first:]
    lengths = parts[:, 3] - parts[:, 2]
    tiles = np.concatenate([[0], np.cumsum(lengths)])  # each part as a tile of one line, split there
    split = split_to_multiple(np.stack([tiles[:-1], tiles[1:]], axis=1), len(parts) + need)
    owner = np.searchsorted(tiles, split[:, 0], side="right") - 1
    out = parts[owner].copy()
    out[:, 2] = parts[owner, 2] + split[:, 0] - tiles[owner]
    out[:, 3] = parts[owner, 2] + split[:, 1] - tiles[owner]
    return np.concatenate([tail[:first], out])


def dealt_batches(plan_on, epoch: int, seed: int, segments, num_replicas: int, lanes: int = 1) -> np.ndarray:
    """The global batches of ``epoch`` not served in ``segments`` (``(world size, batches served per
    rank)``, the first on the plan ``plan_on(world size)`` laid out and served in ``lanes``), dealt to
    ``num_replicas`` ranks: rank r takes rows ``r, r + num_replicas, ...``."""
    plan = plan_on(segments[0][0])
    ranks = [interleave(rank_batches(plan, r, epoch, seed), lanes) for r in range(plan.num_replicas)]
    batches = np.stack(ranks, axis=1).reshape(-1, 4)  # rank r's t-th batch is global batch t * W + r
    worlds = [world for world, _ in segments[1:]] + [num_replicas]
    for (world, served), next_world in zip(segments, worlds, strict=True):
        batches = _split_tail(batches[world * served :], next_world, plan, epoch, seed)
    return batches


class StreamBatchPlan:
    """A rank's batches of a streamed data set, epoch after epoch, from its size index.

    Args:
        index: the size index (:class:`~varlen.stream.plan.SizeIndexLike`).
        batch_size, max_tokens, cost, max_batch_size, pad_to_multiple_of: as for
            :class:`~varlen.batching.BucketBatchSampler` (one budget axis: ``axis`` of the sizes).
        seed: the run's seed (chunk order, pieces and windows; with the epoch, every order).
        num_replicas, rank: the world size and this rank.
        window_batches: a window's size in batches. A window's buckets hold fewer samples than the
            whole data set's: smaller windows pad more and re-mix less between epochs (at 40 batches,
            three quarters of the pairs batched together are again the next epoch; at 2000, a third).
        lanes: the loader's workers (``num_workers``, 1 for none): each reads its own windows.
    """

    def __init__(
        self,
        index: SizeIndexLike,
        *,
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
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        if int(lanes) < 1:
            raise ValueError(f"lanes must be >= 1 (the loader's workers, 1 for none), got {lanes}")
        tokens = None if max_tokens is None else (int(max_tokens),)
        self.spec = PlanSpec(batch_size, tokens, cost, max_batch_size, None, pad_to_multiple_of)
        self.index, self.seed, self.rank, self.num_replicas = index, int(seed), int(rank), int(num_replicas)
        self.window_size, self.axis, self.lanes = int(window_batches), int(axis), int(lanes)
        self._layouts: dict[int, StreamLayout] = {}
        self.layout = self.layout_on(num_replicas)
        self.epoch = 0
        self._start_afresh()

    def _start_afresh(self) -> None:
        """No position and no loaded state: each epoch from its start."""
        self._position = (0, 0)  # (epoch, batches served per rank) of the current iteration
        self._resume: tuple[int, int] | None = None
        self._elastic: tuple[int, tuple[tuple[int, int], ...]] | None = None
        self._dealt: tuple[tuple, np.ndarray] | None = None
        self._saved_lanes: tuple[int, int] | None = None  # (epoch, lanes) of a loaded state

    def on_rank(self, rank: int) -> StreamBatchPlan:
        """This plan as rank ``rank``'s, from an epoch's start (its layouts shared, nothing read)."""
        plan = copy.copy(self)
        plan.rank = int(rank)
        plan._start_afresh()
        return plan

    def layout_on(self, num_replicas: int) -> StreamLayout:
        """The run laid out on ``num_replicas`` ranks (kept: an elastic resume needs the saved one)."""
        if num_replicas not in self._layouts:
            self._layouts[num_replicas] = layout(
                self.index, self.spec, seed=self.seed, num_replicas=num_replicas,
                window_batches=self.window_size, axis=self.axis,
            )  # fmt: skip
        return self._layouts[num_replicas]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _segments(self, epoch: int) -> tuple[tuple[int, int], ...]:
        return self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else ()

    def lanes_of(self, epoch: int) -> int:
        """The lanes ``epoch`` is served in: a loaded state's for its epoch, else :attr:`lanes`."""
        return self._saved_lanes[1] if self._saved_lanes is not None and self._saved_lanes[0] == epoch else self.lanes

    def epoch_batches(self, epoch: int | None = None) -> tuple[StreamLayout, np.ndarray, int]:
        """The layout whose windows ``epoch`` serves, this rank's descriptors ``[n, 4]`` (window, batch,
        lo, hi; hi = -1: the batch's end), and the batches per rank served before them on other world
        sizes (0 unless the epoch was resumed on another number of ranks)."""
        epoch = self.epoch if epoch is None else epoch
        segments, lanes = self._segments(epoch), self.lanes_of(epoch)
        if not segments:
            return self.layout, interleave(rank_batches(self.layout, self.rank, epoch, self.seed), lanes), 0
        key = (epoch, segments, lanes)
        if self._dealt is None or self._dealt[0] != key:
            dealt = dealt_batches(self.layout_on, epoch, self.seed, segments, self.num_replicas, lanes)
            self._dealt = (key, dealt)
        mine = self._dealt[1][self.rank :: self.num_replicas]
        return self.layout_on(segments[0][0]), mine, sum(served for _, served in segments)

    def __len__(self) -> int:
        if not self._segments(self.epoch):
            return self.layout.batches_per_rank
        _, mine, before = self.epoch_batches()
        return before + len(mine)

    def descriptors(self) -> Iterator[tuple[int, int, int, int]]:
        """This epoch's descriptors for this rank, from a loaded state's position (nothing read)."""
        for _, row in self._rows():
            yield row

    def _rows(self) -> Iterator[tuple[StreamLayout, tuple[int, int, int, int]]]:
        epoch = self.epoch
        plan, mine, before = self.epoch_batches(epoch)
        start = self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0
        self._resume, self._position = None, (epoch, start)
        served = start
        for first in range(start - before, len(mine), _ROWS):
            for row in mine[first : first + _ROWS].tolist():
                served += 1
                self._position = (epoch, served)
                yield plan, tuple(row)

    def __iter__(self) -> Iterator[np.ndarray]:
        """This epoch's batches for this rank, as global sample ids: a window is read when its lane reaches
        it (up to ``lanes + 1`` windows held, the least recently used out first)."""
        epoch, loaded = self.epoch, {}
        for plan, (window, batch, low, high) in self._rows():
            if window in loaded:
                loaded[window] = loaded.pop(window)
            else:
                if len(loaded) > self.lanes_of(epoch):
                    loaded.pop(next(iter(loaded)))
                loaded[window] = window_batches(self.index, plan, window, epoch, self.seed)
            ids, bounds = loaded[window]
            samples = ids[bounds[batch, 0] : bounds[batch, 1]]
            yield samples[low:] if high < 0 else samples[low:high]

    def _key(self) -> str:
        spec = (self.spec.batch_size, self.spec.max_tokens, self.spec.cost, self.spec.max_batch_size)
        return cache_key(spec, self.spec.pad_to_multiple_of, self.window_size, self.axis, version="1")

    def state_dict(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches."""
        epoch, served = self._resume or self._position
        if epoch != self.epoch:
            epoch, served = self.epoch, 0
        return {
            "epoch": epoch,
            "batches_served": served,
            "num_replicas": self.num_replicas,
            "segments": [list(part) for part in self._segments(epoch)],
            "lanes": self.lanes_of(epoch),
            "seed": self.seed,
            "index": self.index.key,
            "plan": self._key(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume mid-epoch on any number of ranks and lanes (see the module docstring).

        Raises:
            ValueError: the state is of another index, seed or plan settings, or inconsistent.
        """
        for name, mine in (("index", self.index.key), ("seed", self.seed), ("plan", self._key())):
            if state[name] != mine:
                raise ValueError(f"plan state was saved with {name} {state[name]!r}, this plan has {mine!r}")
        epoch, served, segments = saved_position(state, self.num_replicas, "plan")
        lanes = int(state.get("lanes", 1))  # a state without lanes was served in one
        if lanes < 1:
            raise ValueError(f"plan state is inconsistent: {lanes} lanes")
        self._elastic = (epoch, segments) if segments else None
        self._saved_lanes = (epoch, lanes) if served else None  # an epoch not begun takes this plan's lanes
        self.set_epoch(epoch)
        if served >= len(self):
            epoch, served = epoch + 1, 0
            self.set_epoch(epoch)
        self._resume = (epoch, served)
