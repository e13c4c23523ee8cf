"""Where a rank stands in an epoch, the state that names it, and its resume on any world size: one state
machine for the in-memory sampler (`BucketBatchSampler`) and the streamed plan
(`StreamBatchPlan`).

An epoch's batches are *rows* (bounds into the plan's sample order, or a streamed plan's descriptors): a
plan gives every rank its rows on a world size, in the order they are laid out (a streamed rank's windows
one after the other). A rank serves its rows in `lanes` (`interleave`: one contiguous stretch per
loader worker, dealt in turn; one lane for the in-memory plan), and all ranks serve the same number.

So a state names the epoch, the batches each rank served, the world size and lanes it served them on,
and the *segments*: `(world size, batches per rank, lanes)` of the epoch's parts served before on other
world sizes or lanes. That fixes which rows were served: of each rank's rows, the first `served` in its
lane order. Resumed on another world size or lanes, the rows not served are taken rank after rank, each
rank's in its laid-out order (so a window's rows stay together), split until they divide evenly, and cut
into one contiguous stretch per new rank (`rest_of_epoch`): every remaining sample once, the same
number of batches on every rank, and a streamed rank reads each window of its stretch once.

When fewer samples are left than the new ranks (a late checkpoint resumed on more GPUs), some rows are
served twice so that every rank gets a batch, as `DistributedSampler` pads its ranks: a rank without a
batch would leave the others waiting in their first collective. Nothing is lost; the repeats are warned
about with their count.

A part may also have been served under other *settings* (a plan's `batch_size`, `max_tokens`, rungs...:
a run resumed with a lower budget after an out-of-memory error). A segment then carries its settings, and
where they change the rows not served are turned into their samples and planned again under the next
part's settings (the plan's `replan`), dealt over its ranks as above: every sample of the epoch once, and
the next epoch is the new settings' own. A state whose epoch cannot be planned again here (its weighted draw,
or a streamed plan's settings) resumes at its epoch's start or end, and is refused inside it, unless
`VARLEN_RESUME=next_epoch` (`RESUME_VARIABLE`) asks to skip the rest of that epoch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from varlen import notices
from varlen.batching.plan import repeat_to_multiple

__all__ = [
    "RESUME_VARIABLE",
    "ResumableEpochs",
    "Segment",
    "canonical",
    "changes",
    "deal",
    "interleave",
    "mid_epoch",
    "plain_segments",
    "rest_of_epoch",
    "saved_position",
    "skip_requested",
    "unserved",
    "warn_once",
]

#: (world size, batches served per rank, lanes, settings) of a part of an epoch; settings: `canonical`
#: of the plan's settings it was served under (None for a plan whose settings never change on resume)
Segment = tuple[int, int, int, str | None]
#: the environment variable that makes a checkpoint saved inside an epoch resume at the next epoch's start
RESUME_VARIABLE = "VARLEN_RESUME"
#: rows turned into Python values at a time (a streamed rank's epoch holds millions at 1 B samples)
_ROWS = 4096
#: the lines said in this process (a DataModule and its loader load one state twice; DDP rebuilds the sampler)
_SAID: set[str] = set()


def warn_once(message: str) -> None:
    """`varlen.notices.warn` a resume's line once in this process, however many times its state loads."""
    if message not in _SAID:
        _SAID.add(message)
        notices.warn(message)


def interleave(rows: np.ndarray, lanes: int) -> np.ndarray:
    """`rows` cut into `lanes` contiguous stretches (the first `len(rows) % lanes` a row longer),
    dealt in turn: row t of the result is the next row of stretch `t % lanes`."""
    lanes = max(1, min(int(lanes), len(rows)))
    if lanes == 1:
        return rows
    lengths = len(rows) // lanes + (np.arange(lanes) < len(rows) % lanes)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    turn = np.arange(int(lengths[0]))[:, None]  # [turns, 1]: a stretch's row; each turn visits every lane
    return rows[(starts + turn)[turn < lengths]]


def unserved(rows: np.ndarray, served: int, lanes: int) -> np.ndarray:
    """The `rows` (laid out in order) not among the first `served` of their `lanes` order, in order."""
    keep = np.ones(len(rows), dtype=bool)
    keep[interleave(np.arange(len(rows)), lanes)[:served]] = False
    return rows[keep]


def deal(rows: np.ndarray, world: int, split: Callable[[np.ndarray, int], np.ndarray], drop_last: bool = False):
    """`rows` as `world` contiguous stretches of one length, and how many rows were repeated for it.

    `split(rows, n)` splits up to `n` of them (as many as their samples allow), keeping each piece
    where its row was. With `drop_last`, the surplus rows are cut instead; else, when too few samples
    are left to split into a multiple of `world` rows, the first rows are repeated (counted).
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
    settings: str | None = None,
    replan: Callable[[np.ndarray, int, str | None], tuple[list[np.ndarray], int]] | None = None,
) -> tuple[list[np.ndarray], int]:
    """Each of `num_replicas` ranks' rows of an epoch whose parts `segments` were served, from every
    rank's laid-out rows on the first segment's world size and settings (`ranks`); and the rows repeated to
    give every rank a batch (see the module docstring). Where the next part's settings (the last: `settings`)
    differ, `replan(rows not served, its world size, its settings)` gives its ranks' rows."""
    repeated = 0
    nexts = [(world, key) for world, _, _, key in segments[1:]] + [(num_replicas, settings)]
    for (_, served, lanes, key), (next_world, next_key) in zip(segments, nexts, strict=True):
        rest = np.concatenate([unserved(rows, served, lanes) for rows in ranks])
        if next_key != key:
            if replan is None:
                raise ValueError("this plan cannot plan an epoch's rest under other settings")
            ranks, more = replan(rest, next_world, next_key)
        else:
            ranks, more = deal(rest, next_world, split, drop_last)
        repeated += more
    return list(ranks), repeated


def canonical(settings: Mapping[str, Any] | None) -> str | None:
    """A plan's settings (plain values) as one comparable string (None stays None)."""
    return None if settings is None else json.dumps(dict(settings), sort_keys=True, separators=(",", ":"))


def changes(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """`name saved -> new` of each setting that differs, e.g. `max_tokens 512 -> 1024, rungs [12 values] ->
    [7 values]`."""
    said = []
    for name in sorted(set(saved) | set(mine)):
        before, after = saved.get(name), mine.get(name)
        if before != after:
            said.append(f"{name} {_short(before)} -> {_short(after)}")
    return ", ".join(said)


def _short(value: Any) -> str:
    """A setting's value in a line: one size axis's as a number, a long list as its count of values."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]  # max_tokens [512], rungs [[...]]: one size axis
    if isinstance(value, list) and len(str(value)) > 30:
        return f"[{len(value)} values]"
    return repr(value) if isinstance(value, str) else str(value)


def mid_epoch(state: Mapping[str, Any]) -> bool:
    """Whether a saved position stands inside its epoch: some of it served, and not all (a state that does not
    say its epoch's length counts as inside when it served any)."""
    served = int(state.get("batches_served", 0))
    total = state.get("epoch_batches")
    return served > 0 and (total is None or served < int(total))


def skip_requested() -> bool:
    """Whether `VARLEN_RESUME=next_epoch` asks a checkpoint saved inside an epoch to resume at the next one.

    Raises:
        ValueError: another value, naming the variable and the values it takes.
    """
    value = os.environ.get(RESUME_VARIABLE, "").strip()
    if value not in ("", "exact", "next_epoch"):
        raise ValueError(
            f"{RESUME_VARIABLE}={value!r}: set it to 'next_epoch' (a checkpoint saved inside an epoch resumes at "
            "the next epoch's start) or 'exact' (the default: it resumes where it stopped)"
        )
    return value == "next_epoch"


def saved_position(
    state: dict, num_replicas: int, lanes: int, what: str, settings: str | None = None, saved: str | None = None
) -> tuple[int, int, tuple[Segment, ...]]:
    """A saved state's `(epoch, batches served per rank, segments)` on `num_replicas` ranks in
    `lanes` under `settings`: the saved world size's own part is a segment when it served something on
    another world size, lanes or settings (`saved`: the state's, `canonical`). `what` names the
    state in errors.

    Raises:
        ValueError: a state whose counts do not add up.
    """
    served = int(state["batches_served"])
    segments = tuple(_segment(part, what, saved) for part in state.get("segments", ()))
    here = served - sum(count for _, count, _, _ in segments)  # served on the saved world size and lanes
    if here < 0 or any(count < 0 or world < 1 or ways < 1 for world, count, ways, _ in segments):
        raise ValueError(f"{what} state is inconsistent: {served} batches served, segments {list(segments)}")
    ours = (int(state["num_replicas"]), int(state.get("lanes", 1)), saved)
    if ours[1] < 1:
        raise ValueError(f"{what} state is inconsistent: {ours[1]} lanes")
    if ours != (num_replicas, lanes, settings) and here:
        segments += ((ours[0], here, ours[1], ours[2]),)
    return int(state["epoch"]), served, segments


def _segment(part: Sequence[Any], what: str, saved: str | None) -> Segment:
    if len(part) == 2:  # before lanes were recorded, an epoch's rest was dealt otherwise
        raise _LegacySegments(what)
    world, count, lanes = (int(v) for v in part[:3])
    return world, count, lanes, canonical(part[3]) if len(part) > 3 else saved


def plain_segments(segments: Sequence[Segment], settings: str | None) -> list[list[Any]]:
    """Segments as a state holds them: `[world, count, lanes]`, and the settings where they are not
    `settings` (the state's own)."""
    return [[w, c, n] if key == settings else [w, c, n, json.loads(key)] for w, c, n, key in segments]


class _LegacySegments(ValueError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} state was saved by an older varlen in an epoch already resumed on other ranks")


class ResumableEpochs:
    """The stateful part every plan shares: the position in the current epoch, a loaded state not yet
    iterated, and the segments of an epoch resumed on other world sizes, lanes or settings.

    A subclass sets `num_replicas`, `rank`, `epoch` and `lanes`, and gives `rank_rows` (a
    rank's laid-out rows of an epoch on a world size) and `split_rows`; one that plans an epoch's rest
    under other settings gives `settings_key` and `rest_rows`.
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
        self._skipped: tuple[int, int] | None = None  # (epoch, batches served): its rest skipped
        self._rest: tuple[tuple, list[np.ndarray], Any] | None = None

    def rank_rows(self, epoch: int, world: int, rank: int) -> np.ndarray:
        """Rank `rank`'s rows of `epoch` on `world` ranks, laid out in order (before lanes)."""
        raise NotImplementedError

    def split_rows(self, rows: np.ndarray, count: int, epoch: int, world: int) -> np.ndarray:
        """`rows` of `epoch`'s plan on `world` ranks with up to `count` of them split in two (as
        many as their samples allow), each piece where its row was."""
        raise NotImplementedError

    def settings_key(self) -> str | None:
        """`canonical` of the settings this plan cuts by (None: a plan whose settings a resume never changes)."""
        return None

    def rest_rows(self, epoch: int, segments: tuple[Segment, ...]) -> tuple[list[np.ndarray], int, Any]:
        """Every rank's rows of the rest of `epoch` after `segments` on this world size, the rows repeated
        to feed every rank, and what the rows index (here: the world size whose plan they belong to)."""
        world = segments[0][0]
        first = [self.rank_rows(epoch, world, rank) for rank in range(world)]
        split = lambda rows, count: self.split_rows(rows, count, epoch, world)  # noqa: E731
        ranks, repeated = rest_of_epoch(first, segments, self.num_replicas, split, self.drop_last)
        return ranks, repeated, world

    def plain_length(self, epoch: int) -> int:
        """Batches per rank of an epoch served from its start on this world size."""
        return len(self.rank_rows(epoch, self.num_replicas, self.rank))

    def segments(self, epoch: int) -> tuple[Segment, ...]:
        """`epoch`'s parts served on other world sizes, lanes or settings before this one (usually none)."""
        return self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else ()

    def saved_segments(self, epoch: int) -> list[list[Any]]:
        """`epoch`'s segments as a state holds them (`plain_segments`)."""
        return plain_segments(self.segments(epoch), self.settings_key())

    def resumed_epoch(self) -> bool:
        """Whether the current epoch is a resumed one of its own length (served in part on other world sizes,
        lanes or settings, or its rest skipped): the next epochs' length differs."""
        skipped = self._skipped is not None and self._skipped[0] == self.epoch
        return skipped or bool(self.segments(self.epoch))

    def epoch_rows(self, epoch: int) -> tuple[np.ndarray, int, Any]:
        """This rank's rows of `epoch` in serving order, the batches per rank served before them (on other
        world sizes, lanes or settings), and what the rows index (the world size whose plan they belong to)."""
        if self._skipped is not None and self._skipped[0] == epoch:
            return np.zeros((0, 2), dtype=np.int64), self._skipped[1], self.num_replicas
        segments = self.segments(epoch)
        if not segments:
            return interleave(self.rank_rows(epoch, self.num_replicas, self.rank), self.lanes), 0, self.num_replicas
        key = (epoch, segments, self.num_replicas)
        if self._rest is None or self._rest[0] != key:
            ranks, repeated, source = self.rest_rows(epoch, segments)
            if repeated:
                notices.warn(
                    f"epoch {epoch} resumed on {self.num_replicas} ranks with fewer samples left than ranks: "
                    f"{repeated} batch(es) repeat a sample already in this epoch's rest so that every rank "
                    "gets one (a rank without a batch would hang the others); nothing was dropped"
                )
            self._rest = (key, ranks, source)
        before = sum(served for _, served, _, _ in segments)
        return interleave(self._rest[1][self.rank], self.lanes), before, self._rest[2]

    def __len__(self) -> int:
        epoch = self.epoch
        if not self.segments(epoch) and (self._skipped is None or self._skipped[0] != epoch):
            return self.plain_length(epoch)
        rows, before, _ = self.epoch_rows(epoch)
        return before + len(rows)

    def first_batch(self, epoch: int) -> int:
        """Where `epoch` starts on this rank: a loaded state's position in that epoch, else 0."""
        return self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0

    def positions(self) -> Iterator[tuple[Any, tuple[int, ...]]]:
        """This epoch's rows for this rank, from a loaded state's position: `(source, row)` each, what the
        row indexes (`epoch_rows`); the position advances as they are taken."""
        epoch = self.epoch
        rows, before, source = self.epoch_rows(epoch)
        start = self.first_batch(epoch)
        self._resume, self._position = None, (epoch, start)
        served = start
        for first in range(start - before, len(rows), _ROWS):
            for row in rows[first : first + _ROWS].tolist():
                served += 1
                self._position = (epoch, served)
                yield source, row

    def position_state(self) -> dict[str, Any]:
        """Rank-independent: every rank has served the same number of batches. `epoch_batches` is the
        epoch's length, so that a resume tells a finished epoch from one in progress without planning it."""
        epoch, served = self._resume or self._position
        if epoch != self.epoch:  # the epoch moved on and nothing of the new one was served yet
            epoch, served = self.epoch, 0
        return {
            "epoch": epoch,
            "batches_served": served,
            "num_replicas": self.num_replicas,
            "lanes": self.lanes,
            "segments": self.saved_segments(epoch),
            "epoch_batches": len(self),
        }

    def load_position(self, state: dict[str, Any], set_epoch: Callable[[int], None], saved: str | None = None) -> None:
        """Resume where `state` stood, on this world size, lanes and settings (see the module docstring); a
        state of a finished epoch resumes at the next one's start, and one inside its epoch too where
        `VARLEN_RESUME=next_epoch`. `set_epoch` moves the plan's epoch; `saved` is `canonical`
        of the settings the state was saved under (None: this plan's)."""
        settings = self.settings_key()
        saved = settings if saved is None else saved
        try:
            epoch, served, segments = saved_position(
                state, self.num_replicas, self.lanes, self.state_name, settings, saved
            )
        except _LegacySegments as error:
            epoch = int(state["epoch"])
            notices.warn(
                f"{error}: its rest of epoch {epoch} is served in no order this version can tell, so it is "
                f"skipped ({int(state['batches_served'])} batches per rank were served of it); training resumes "
                f"at the start of epoch {epoch + 1}"
            )
            self._elastic, self._rest, self._skipped = None, None, None
            set_epoch(epoch + 1)
            self._resume = (epoch + 1, 0)
            return
        if mid_epoch(state) and skip_requested():
            self.skip_rest(state, set_epoch)
            return
        self._elastic = (epoch, segments) if segments else None
        self._skipped = None
        set_epoch(epoch)
        if served >= len(self):
            # The saved epoch was complete: resume at the start of the next. A loader may plan
            # its first batches before anyone calls set_epoch (torchdata's, when restoring workers).
            epoch, served = epoch + 1, 0
            set_epoch(epoch)
        self._resume = (epoch, served)

    def load_boundary(self, state: dict[str, Any], set_epoch: Callable[[int], None], refusal: str) -> None:
        """Resume a state whose epoch this plan cannot plan again (its draw, or a streamed plan's settings,
        differ): at its epoch's start, or at the next one's when it was finished or `VARLEN_RESUME=next_epoch`
        skips its rest.

        Raises:
            ValueError: `refusal`, for a state inside its epoch without `VARLEN_RESUME=next_epoch`.
        """
        if mid_epoch(state):
            if not skip_requested():
                raise ValueError(refusal)
            self.skip_rest(state, set_epoch)
            return
        self._elastic, self._rest, self._skipped = None, None, None
        epoch = int(state["epoch"]) + (int(state["batches_served"]) > 0)
        set_epoch(epoch)
        self._resume = (epoch, 0)

    def skip_rest(self, state: dict[str, Any], set_epoch: Callable[[int], None]) -> None:
        """End the saved epoch where the state stood (its length: the batches served), so that the trainer
        moves to the next one, whose plan is this plan's own; said with the count skipped."""
        epoch, served = int(state["epoch"]), int(state["batches_served"])
        total = state.get("epoch_batches")
        left = f"{int(total) - served} of its {int(total)}" if total is not None else "the rest of its"
        warn_once(
            f"{RESUME_VARIABLE}=next_epoch: epoch {epoch} ends at batch {served} per rank where the checkpoint "
            f"stopped ({left} batches per rank are skipped, their samples not trained on in this epoch); "
            f"epoch {epoch + 1} starts afresh"
        )
        self._elastic, self._rest = None, None
        self._skipped = (epoch, served)
        set_epoch(epoch)
        self._resume = (epoch, served)
