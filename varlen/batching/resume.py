"""Where a rank stands in an epoch, the state that names it, and its resume on any world size: one state
machine for the in-memory sampler (:class:`~varlen.batching.BucketBatchSampler`) and the streamed plan
(:class:`~varlen.stream.plan_state.StreamBatchPlan`).

An epoch's batches are *rows* (bounds into the plan's sample order, or a streamed plan's descriptors): a
plan gives every rank its rows on a world size, in the order they are laid out (a streamed rank's windows
one after the other). A rank serves its rows in ``lanes`` (:func:`interleave`: one contiguous stretch per
loader worker, dealt in turn; one lane for the in-memory plan), and all ranks serve the same number.

So a state names the epoch, the batches each rank served, the world size and lanes it served them on,
and the *segments*: ``(world size, batches per rank, lanes)`` of the epoch's parts served before on other
world sizes or lanes. That fixes which rows were served: of each rank's rows, the first ``served`` in its
lane order. Resumed on another world size or lanes, the rows not served are taken rank after rank, each
rank's in its laid-out order (so a window's rows stay together), split until they divide evenly, and cut
into one contiguous stretch per new rank (:func:`rest_of_epoch`): every remaining sample once, the same
number of batches on every rank, and a streamed rank reads each window of its stretch once.

When fewer samples are left than the new ranks (a late checkpoint resumed on more GPUs), some rows are
served twice so that every rank gets a batch, as ``DistributedSampler`` pads its ranks: a rank without a
batch would leave the others waiting in their first collective. Nothing is lost; the repeats are warned
about with their count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from varlen import notices
from varlen.batching.plan import repeat_to_multiple

__all__ = ["ResumableEpochs", "Segment", "deal", "interleave", "rest_of_epoch", "saved_position", "unserved"]

#: (world size, batches served per rank, lanes) of a part of an epoch
Segment = tuple[int, int, int]
#: rows turned into Python values at a time (a streamed rank's epoch holds millions at 1 B samples)
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


def unserved(rows: np.ndarray, served: int, lanes: int) -> np.ndarray:
    """The ``rows`` (laid out in order) not among the first ``served`` of their ``lanes`` order, in order."""
    keep = np.ones(len(rows), dtype=bool)
    keep[interleave(np.arange(len(rows)), lanes)[:served]] = False
    return rows[keep]


def deal(rows: np.ndarray, world: int, split: Callable[[np.ndarray, int], np.ndarray], drop_last: bool = False):
    """``rows`` as ``world`` contiguous stretches of one length, and how many rows were repeated for it.

    ``split(rows, n)`` splits up to ``n`` of them (as many as their samples allow), keeping each piece
    where its row was. With ``drop_last``, the surplus rows are cut instead; else, when too few samples
    are left to split into a multiple of ``world`` rows, the first rows are repeated (counted).
    """
    if drop_last:
        rows = rows[: len(rows) - len(rows) % world]
    elif len(rows) % world:
        rows = split(rows, -len(rows) % world)
    rows, repeated = repeat_to_multiple(rows, world)
    return np.split(rows, world), repeated


def rest_of_epoch(
    ranks: Sequence[np.ndarray],
    segments: Sequence[Segment],
    num_replicas: int,
    split: Callable[[np.ndarray, int], np.ndarray],
    drop_last: bool = False,
) -> tuple[list[np.ndarray], int]:
    """Each of ``num_replicas`` ranks' rows of an epoch whose parts ``segments`` were served, from every
    rank's laid-out rows on the first segment's world size (``ranks``); and the rows repeated to give
    every rank a batch (see the module docstring)."""
    repeated = 0
    worlds = [world for world, _, _ in segments[1:]] + [num_replicas]
    for (_, served, lanes), next_world in zip(segments, worlds, strict=True):
        rest = np.concatenate([unserved(rows, served, lanes) for rows in ranks])
        ranks, more = deal(rest, next_world, split, drop_last)
        repeated += more
    return list(ranks), repeated


def saved_position(state: dict, num_replicas: int, lanes: int, what: str) -> tuple[int, int, tuple[Segment, ...]]:
    """A saved state's ``(epoch, batches served per rank, segments)`` on ``num_replicas`` ranks in
    ``lanes``: the saved world size's own part is a segment when it served something on another world size
    or lanes. ``what`` names the state in errors.

    Raises:
        ValueError: a state whose counts do not add up.
    """
    served = int(state["batches_served"])
    segments = tuple(_segment(part, what) for part in state.get("segments", ()))
    here = served - sum(count for _, count, _ in segments)  # served on the saved world size and lanes
    if here < 0 or any(count < 0 or world < 1 or ways < 1 for world, count, ways in segments):
        raise ValueError(f"{what} state is inconsistent: {served} batches served, segments {list(segments)}")
    saved = (int(state["num_replicas"]), int(state.get("lanes", 1)))
    if saved[1] < 1:
        raise ValueError(f"{what} state is inconsistent: {saved[1]} lanes")
    if saved != (num_replicas, lanes) and here:
        segments += ((saved[0], here, saved[1]),)
    return int(state["epoch"]), served, segments


def _segment(part: Sequence[int], what: str) -> Segment:
    if len(part) == 2:  # before lanes were recorded, an epoch's rest was dealt otherwise
        raise _LegacySegments(what)
    world, count, lanes = (int(v) for v in part)
    return world, count, lanes


class _LegacySegments(ValueError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} state was saved by an older varlen in an epoch already resumed on other ranks")


class ResumableEpochs:
    """The stateful part every plan shares: the position in the current epoch, a loaded state not yet
    iterated, and the segments of an epoch resumed on other world sizes or lanes.

    A subclass sets ``num_replicas``, ``rank``, ``epoch`` and ``lanes``, and gives :meth:`rank_rows` (a
    rank's laid-out rows of an epoch on a world size) and :meth:`split_rows`.
    """

    num_replicas: int
    rank: int
    epoch: int
    lanes: int = 1
    drop_last: bool = False
    #: what the state is called in messages
    state_name = "sampler"

    def _start_afresh(self) -> None:
        self._position = (0, 0)  # (epoch, batches served per rank) of the current iteration
        self._resume: tuple[int, int] | None = None  # the same, loaded and not yet iterated
        self._elastic: tuple[int, tuple[Segment, ...]] | None = None  # (epoch, its segments)
        self._rest: tuple[tuple, list[np.ndarray]] | None = None

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        """Rank ``rank``'s rows of ``epoch`` on ``world`` ranks, laid out in order (before lanes)."""
        raise NotImplementedError

    def split_rows(self, rows: np.ndarray, count: int, epoch: int, world: int) -> np.ndarray:
        """``rows`` of ``epoch``'s plan on ``world`` ranks with up to ``count`` of them split in two (as
        many as their samples allow), each piece where its row was."""
        raise NotImplementedError

    def plain_length(self, epoch: int) -> int:
        """Batches per rank of an epoch served from its start on this world size."""
        return len(self.rank_rows(epoch, self.num_replicas, self.rank))

    def segments(self, epoch: int) -> tuple[Segment, ...]:
        """``epoch``'s parts served on other world sizes or lanes before this one (usually none)."""
        return self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else ()

    def epoch_rows(self, epoch: int) -> tuple[np.ndarray, int, int]:
        """This rank's rows of ``epoch`` in serving order, the batches per rank served before them (on other
        world sizes or lanes), and the world size whose plan the rows belong to."""
        segments = self.segments(epoch)
        if not segments:
            return interleave(self.rank_rows(epoch, self.num_replicas, self.rank), self.lanes), 0, self.num_replicas
        world = segments[0][0]
        key = (epoch, segments, self.num_replicas)
        if self._rest is None or self._rest[0] != key:
            first = [self.rank_rows(epoch, world, rank) for rank in range(world)]
            split = lambda rows, count: self.split_rows(rows, count, epoch, world)  # noqa: E731
            ranks, repeated = rest_of_epoch(first, segments, self.num_replicas, split, self.drop_last)
            if repeated:
                notices.warn(
                    f"epoch {epoch} resumed on {self.num_replicas} ranks with fewer samples left than ranks: "
                    f"{repeated} batch(es) repeat a sample already in this epoch's rest so that every rank "
                    "gets one (a rank without a batch would hang the others); nothing was dropped"
                )
            self._rest = (key, ranks)
        before = sum(served for _, served, _ in segments)
        return interleave(self._rest[1][self.rank], self.lanes), before, world

    def __len__(self) -> int:
        epoch = self.epoch
        if not self.segments(epoch):
            return self.plain_length(epoch)
        rows, before, _ = self.epoch_rows(epoch)
        return before + len(rows)

    def first_batch(self, epoch: int) -> int:
        """Where ``epoch`` starts on this rank: a loaded state's position in that epoch, else 0."""
        return self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0

    def positions(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """This epoch's rows for this rank, from a loaded state's position: ``(world, row)`` each, the
        world size whose plan the row belongs to; the position advances as they are taken."""
        epoch = self.epoch
        rows, before, world = self.epoch_rows(epoch)
        start = self.first_batch(epoch)
        self._resume, self._position = None, (epoch, start)
        served = start
        for first in range(start - before, len(rows), _ROWS):
            for row in rows[first : first + _ROWS].tolist():
                served += 1
                self._position = (epoch, served)
                yield world, row

    def position_state(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches."""
        epoch, served = self._resume or self._position
        if epoch != self.epoch:  # the epoch moved on and nothing of the new one was served yet
            epoch, served = self.epoch, 0
        return {
            "epoch": epoch,
            "batches_served": served,
            "num_replicas": self.num_replicas,
            "lanes": self.lanes,
            "segments": [list(part) for part in self.segments(epoch)],
        }

    def load_position(self, state: dict[str, Any], set_epoch: Callable[[int], None]) -> None:
        """Resume where ``state`` stood, on this world size and lanes (see the module docstring); a state
        of a finished epoch resumes at the next one's start. ``set_epoch`` moves the plan's epoch."""
        try:
            epoch, served, segments = saved_position(state, self.num_replicas, self.lanes, self.state_name)
        except _LegacySegments as error:
            epoch = int(state["epoch"])
            notices.warn(
                f"{error}: its rest of epoch {epoch} is served in no order this version can tell, so it is "
                f"skipped ({int(state['batches_served'])} batches per rank were served of it); training resumes "
                f"at the start of epoch {epoch + 1}"
            )
            self._elastic, self._rest = None, None
            set_epoch(epoch + 1)
            self._resume = (epoch + 1, 0)
            return
        self._elastic = (epoch, segments) if segments else None
        set_epoch(epoch)
        if served >= len(self):
            # The saved epoch was complete: resume at the start of the next. A loader may plan
            # its first batches before anyone calls set_epoch (torchdata's, when restoring workers).
            epoch, served = epoch + 1, 0
            set_epoch(epoch)
        self._resume = (epoch, served)
