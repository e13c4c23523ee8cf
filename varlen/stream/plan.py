"""The batch plan of a streamed data set, from its size index alone: per rank, memory that grows with
chunks x buckets plus one window, never with samples.

The in-memory plan (:mod:`varlen.batching.plan`) needs every size on every rank. Here a rank reads the
index's per-chunk histograms (over :data:`~varlen.batching.plan.SIZE_GRID`) and the sizes of about
W - 1 chunks to lay the run out (the pieces' boundary chunks, a few neighbours), then the sizes of one
window at a time:

1. Buckets: the grid's edges that close a bucket of enough samples in the summed histograms
   (:func:`~varlen.batching.plan.keep_populated`, as ``bucketize`` keeps them); a sample is costed at
   its bucket's upper edge (rounded up to ``pad_to_multiple_of``), so budgets hold.
2. Pieces: the chunks in a seeded order, cut into one contiguous piece per rank, inside the boundary
   chunks at sample granularity (their sizes read). Cut at equal expected batch count
   (``sum(samples / room)``), pieces would differ by a few real batches each (a bucket's last batch is
   partial), and every rank serves the fullest one's count. So the cuts are walked from the first
   piece on at real counts (:func:`_pieces`): T is the run's batches on equal-expected pieces over W,
   rounded; each piece but the last ends where it holds exactly T batches (counted from histograms at
   a few hundred candidate ends at once: a piece's count never falls as it grows, and rises by one at
   most), at the end of that range nearest an equal share of the expected batches left; the piece
   before the last ends where it leaves the last the most batches up to T.
3. Windows: K consecutive chunks of a piece (about ``window_batches`` batches). A window's batch count
   follows from its bucket histogram alone (:func:`batch_counts`: the greedy cut only reads the sorted
   rounded sizes); its samples are ordered and cut exactly as the in-memory plan does
   (:func:`read_window`), which gives that count.
4. Equal counts: every rank gets T = the largest rank's count; a shorter rank's windows split their
   largest batches (the splits dealt to its windows, the ones of largest mean batch first). With the
   walked cuts only the last piece can be short: by 0 to a few batches in most runs, by up to about
   W / 3 when the run's batches fall midway between multiples of W (moving a piece's end inside the
   range of its T batches moves its expected batches by about one: half a batch either way).

What is fixed for the run and what changes per epoch. The chunk order comes from the run's seed, not
from ``(seed, epoch)``: pieces and windows are the same every epoch, so each rank keeps its chunks
(a node's chunk cache stays useful) and every window's count, hence ``len()``, never moves (Lightning
reads it once). From ``(seed, epoch)``: the order of a rank's windows, the order of the samples inside
each bucket of a window (so which samples share a batch) and the order of a window's batches. A rank
serves a window's batches one after the other (in each of its lanes, one per loader worker: see
:mod:`varlen.stream.plan_state`), so a reader loads each window once per epoch.

A served batch is a *descriptor* ``(window, batch, lo, hi)``: samples ``lo:hi`` of the window's batch
(``hi = -1``: to its end); the main process never holds a per-sample array. :class:`StreamBatchPlan`
wraps the plan with a rank-independent state that resumes exactly, on the same or another number of
ranks (:mod:`varlen.stream.plan_state`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np

from varlen.batching.collate import round_up
from varlen.batching.plan import (
    PlanSpec,
    batch_room,
    bucketize,
    cut_batches,
    keep_populated,
    order_samples,
    split_to_multiple,
)
from varlen.errors import DataError

__all__ = [
    "WINDOW_BATCHES",
    "SizeIndexLike",
    "StreamLayout",
    "batch_counts",
    "chunk_sizes",
    "layout",
    "rank_batches",
    "read_window",
    "window_bounds",
]

#: a window's default size, in batches. Measured on 600k lognormal(5, 1) sizes, budget 8192, real / padded
#: tokens against the global plan's 99.75%: 98.54% at 500 batches, 98.98% at 1000, 99.35% at 2000, 99.60%
#: at 4000 (a window's buckets hold few samples). 2000 keeps it within 0.5 point; text at 8192 tokens
#: a batch holds 64 MB of int32 tokens per window.
WINDOW_BATCHES = 2000
# the random streams of a run: (seed, _CHUNKS); per epoch (seed, epoch, tag, rank or window)
_CHUNKS, _WINDOWS, _SAMPLES, _BATCHES = 0, 1, 2, 3
#: rows of histograms summed at a time (bounded temporaries at a billion samples)
_BLOCK = 4096
#: walks of :func:`_pieces` at most (a walk is redone when its last piece has more than the others)
_TRIES = 4


class SizeIndexLike(Protocol):
    """What the plan reads of a size index (:class:`varlen.stream.size_index.SizeIndex` is one)."""

    #: content key of the chunk list (a state saved on another index is refused)
    key: str
    #: the histograms' bin edges, ascending: a size ``s`` falls in the first bin whose edge is ``>= s``
    edges: np.ndarray

    @property
    def num_chunks(self) -> int: ...

    @property
    def samples_per_chunk(self) -> np.ndarray: ...

    def histograms(self, axis: int = 0) -> np.ndarray:
        """``[chunks, bins]`` counts of each chunk's sizes on ``axis``."""

    def sizes(self, chunk: int) -> np.ndarray:
        """``[n, D]`` sizes of chunk ``chunk``'s samples, in the chunk's order."""


@dataclass(frozen=True, eq=False)
class StreamLayout:
    """What a run fixes on ``num_replicas`` ranks (see the module docstring).

    Segment ``s`` is samples ``seg_start[s]:seg_stop[s]`` of chunk ``seg_chunk[s]``; window ``w`` holds
    segments ``window_segments[w]:window_segments[w + 1]`` and belongs to rank ``window_rank[w]``; rank
    ``r``'s windows are ``rank_windows[r]:rank_windows[r + 1]``.
    """

    spec: PlanSpec
    axis: int
    num_replicas: int
    bucket_edges: np.ndarray  # [B] each bucket's upper edge (a grid edge), ascending
    rounded: np.ndarray  # [B] the size a bucket's samples are costed at
    bin_bucket: np.ndarray  # [G] the bucket of each grid bin
    chunk_offsets: np.ndarray  # [C + 1] global id of each chunk's first sample
    seg_chunk: np.ndarray
    seg_start: np.ndarray
    seg_stop: np.ndarray
    window_segments: np.ndarray  # [windows + 1]
    window_rank: np.ndarray  # [windows]
    rank_windows: np.ndarray  # [W + 1]
    window_histograms: np.ndarray  # [windows, B] samples per bucket
    window_counts: np.ndarray  # [windows] batches of the cut (batch_counts)
    window_splits: np.ndarray  # [windows] batches split to equalise the ranks
    batches_per_rank: int

    @property
    def num_windows(self) -> int:
        return len(self.window_counts)

    @property
    def extra_batches(self) -> int:
        """Batches added by splitting so that every rank has :attr:`batches_per_rank`."""
        return int(self.window_splits.sum())


def check_spec(spec: PlanSpec) -> None:
    """Refuse what a histogram plan cannot honour, naming it."""
    if spec.max_tokens is not None and len(spec.max_tokens) != 1:
        raise ValueError(
            f"a streamed plan budgets one size axis (its histograms are per axis), got max_tokens={spec.max_tokens}"
        )
    if spec.num_buckets is not None:
        raise ValueError("a streamed plan's buckets come from the size index's grid: leave num_buckets None")


def chunk_sizes(index: SizeIndexLike, chunk: int, axis: int, histograms: np.ndarray | None = None) -> np.ndarray:
    """Chunk ``chunk``'s sizes on ``axis`` (int64), checked against its sample count and histogram.

    Raises:
        DataError: naming the chunk, when the sizes disagree with what the index lists for it.
    """
    return _checked_sizes(index, chunk, axis, histograms)[0]


def _checked_sizes(index: SizeIndexLike, chunk: int, axis: int, histograms: np.ndarray | None):
    """:func:`chunk_sizes` and each size's grid bin."""
    sizes = np.asarray(index.sizes(chunk))
    sizes = sizes[:, None] if sizes.ndim == 1 else sizes
    listed = int(index.samples_per_chunk[chunk])
    if sizes.ndim != 2 or len(sizes) != listed or not 0 <= axis < sizes.shape[1]:
        raise DataError(
            f"size index {index.key}: chunk {chunk} lists {listed} samples but holds sizes of shape {sizes.shape} "
            f"(axis {axis} wanted); rebuild the size index"
        )
    column = sizes[:, axis].astype(np.int64)
    grid_bins = np.searchsorted(index.edges, column)
    counted = np.bincount(grid_bins, minlength=len(index.edges))
    expected = (index.histograms(axis) if histograms is None else histograms)[chunk]
    if len(counted) != len(expected) or not np.array_equal(counted, expected):
        bins = np.flatnonzero(counted[: len(expected)] != expected[: len(counted)])
        where = f"bin <= {int(index.edges[bins[0]])}: {counted[bins[0]]} sizes" if bins.size else "sizes over the grid"
        raise DataError(
            f"size index {index.key}: chunk {chunk}'s sizes do not match its histogram ({where}, "
            f"histogram: {expected[bins[0]] if bins.size else 'none'}); rebuild the size index"
        )
    return column, grid_bins


def checked_histograms(index: SizeIndexLike, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The index's sample counts ``[C]`` and histograms ``[C, G]``, their shapes and sums checked."""
    samples = np.asarray(index.samples_per_chunk, dtype=np.int64)
    histograms = index.histograms(axis)
    edges = np.asarray(index.edges)
    if samples.shape != (index.num_chunks,) or histograms.shape != (index.num_chunks, len(edges)):
        raise DataError(
            f"size index {index.key}: {index.num_chunks} chunks, samples of shape {samples.shape}, histograms "
            f"of shape {histograms.shape} over {len(edges)} bins: the index is inconsistent; rebuild it"
        )
    if len(edges) and np.any(np.diff(edges) <= 0):
        raise DataError(f"size index {index.key}: its bin edges are not increasing; rebuild it")
    if (samples < 0).any():
        raise DataError(f"size index {index.key}: chunk {int(np.argmax(samples < 0))} lists a negative sample count")
    for first in range(0, len(samples), _BLOCK):
        counted = histograms[first : first + _BLOCK].sum(axis=1, dtype=np.int64)
        wrong = np.flatnonzero(counted != samples[first : first + _BLOCK])
        if wrong.size:
            chunk = first + int(wrong[0])
            raise DataError(
                f"size index {index.key}: chunk {chunk} lists {samples[chunk]} samples but its histogram counts "
                f"{counted[wrong[0]]}: the index is inconsistent with its histograms; rebuild it"
            )
    if samples.sum() == 0:
        raise DataError(f"size index {index.key}: no samples in {len(samples)} chunks")
    return samples, histograms


def buckets(total: np.ndarray, edges: np.ndarray, spec: PlanSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket upper edges, each bucket's rounded size and each grid bin's bucket, from the summed
    histogram ``total`` (as ``bucketize`` draws them from sizes, the grid being its finest edges)."""
    present = np.flatnonzero(total)
    candidates = np.asarray(edges)[present].astype(np.int64)
    kept = keep_populated(candidates, np.cumsum(total[present]), spec, 0)
    if kept.size == 0 or kept[-1] != candidates[-1]:
        kept = np.append(kept, candidates[-1])  # the largest bucket, however sparse (as bucketize)
    bin_bucket = np.minimum(np.searchsorted(kept, edges, side="left"), len(kept) - 1)
    return kept, round_up(kept, spec.pad_to_multiple_of), bin_bucket


def batch_counts(histograms: np.ndarray, rounded: np.ndarray, spec: PlanSpec) -> np.ndarray:
    """Batches of :func:`~varlen.batching.plan.cut_batches` over each row's samples (``[N, B]`` counts per
    bucket of rounded size ``rounded[b]``), without the samples: one step per bucket, over all rows.

    The greedy cut reads only the sorted rounded sizes, largest first. ``padded``: a batch started in
    bucket b holds ``room_b`` samples, so what it takes of the next buckets is a carry. ``sum``: a
    bucket's last batch stays open and takes what fits of the next buckets.
    """
    histograms = np.asarray(histograms, dtype=np.int64)
    if spec.batch_size is not None:
        return -(-histograms.sum(axis=1) // spec.batch_size)
    budget, cap = int(spec.max_tokens[0]), spec.max_batch_size or np.iinfo(np.int64).max
    rooms = batch_room(np.asarray(rounded, np.int64), spec, 0).tolist()
    columns = np.ascontiguousarray(histograms.T)
    present = np.flatnonzero(columns.any(axis=1))[::-1].tolist()  # an empty bucket changes nothing
    count = np.zeros(len(histograms), np.int64)
    if spec.cost == "padded":  # in place: the walk of _pieces counts a few hundred rows a call, once a rank
        carry, rest, new = np.zeros_like(count), np.empty_like(count), np.empty_like(count)
        for b in present:
            room = rooms[b]
            np.subtract(columns[b], carry, out=rest)
            np.floor_divide(rest, -room, out=new)
            np.negative(new, out=new)
            np.maximum(new, 0, out=new)  # ceil(rest / room) new batches, if rest > 0
            np.multiply(new, room, out=carry)
            carry -= rest  # samples the open batch still covers
            count += new
        return count
    used, held = np.zeros_like(count), np.zeros_like(count)  # sum: tokens and samples of the open batch
    for b in present:
        n, size, room = columns[b], int(rounded[b]), rooms[b] if rounded[b] else cap
        taken = np.minimum(np.minimum(n, (budget - used) // size if size else cap), cap - held)
        taken = np.where(held > 0, np.maximum(taken, 0), 0)  # what the open batch takes of this bucket
        rest = n - taken  # >= 0
        new = -(-rest // room)
        last = rest - (new - 1) * room  # the bucket's last batch, left open
        opened = rest > 0
        held = np.where(opened, last, held + taken)
        used = np.where(opened, last * size, used + taken * size)
        count += new
    return count


def _expected_batches(histograms: np.ndarray, per_bin: np.ndarray) -> np.ndarray:
    """Each chunk's expected batch count ``histogram @ (1 / room)``, a block of chunks at a time."""
    return np.concatenate(
        [histograms[i : i + _BLOCK].astype(np.float64) @ per_bin for i in range(0, len(histograms), _BLOCK)]
        or [np.zeros(0)]
    )


class _Run:
    """The run (the non-empty chunks in their order) as :func:`_pieces` walks it: the batches of a piece
    ending at many candidate positions, in one :func:`batch_counts` call. A position is a sample offset
    into the run: ordered chunk ``k`` holds ``starts[k]:starts[k + 1]``; a piece's windows are
    ``per_window`` chunks from its first (:func:`layout` groups them so)."""

    def __init__(self, index, axis, histograms, order, samples, expected, bin_bucket, per_bin, per_window, count):
        self.index, self.axis, self.histograms, self.count = index, axis, histograms, count
        self.chunks = order[samples[order] > 0]
        self.sizes = samples[self.chunks]
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)])
        self.expected = np.concatenate([[0.0], np.cumsum(expected[self.chunks])])  # expected batches before
        self.bin_bucket, self.per_window = bin_bucket, per_window
        self.buckets = int(bin_bucket[-1]) + 1
        self.first_bins = np.searchsorted(bin_bucket, np.arange(self.buckets))
        self.per_bucket = per_bin[self.first_bins]  # a sample's expected batches, per bucket
        self.read: dict[int, np.ndarray] = {}  # chunk id -> its samples' buckets, for every chunk read
        self._recent: dict[int, np.ndarray] = {}  # ordered chunk -> expected batches before each offset

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def chunk_of(self, positions):
        """The ordered chunk of each position (a chunk's start: that chunk; the run's end: ``len(chunks)``)."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    def rows(self, k0: int, k1: int) -> np.ndarray:
        """``[k1 - k0, B]`` samples per bucket of ordered chunks ``k0:k1``."""
        if k1 <= k0:
            return np.zeros((0, self.buckets), np.int64)
        return np.add.reduceat(self.histograms[self.chunks[k0:k1]], self.first_bins, axis=1, dtype=np.int64)

    def chunk(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Ordered chunk ``k``'s bucket of each sample (its sizes read once) and expected batches before
        each offset."""
        chunk = int(self.chunks[k])
        if chunk not in self.read:
            bins = _checked_sizes(self.index, chunk, self.axis, self.histograms)[1]
            self.read[chunk] = self.bin_bucket[bins].astype(np.int16 if self.buckets < 2**15 else np.int32)
        if k not in self._recent:
            if len(self._recent) >= 4:
                del self._recent[next(iter(self._recent))]
            self._recent[k] = np.concatenate([[0.0], np.cumsum(self.per_bucket[self.read[chunk]])])
        return self.read[chunk], self._recent[k]

    def prefix(self, k: int, offsets: np.ndarray) -> np.ndarray:
        """``[len(offsets), B]``: samples per bucket among the first ``o`` samples of ordered chunk ``k``,
        for each ``o`` of ``offsets`` (ascending; the chunk is read unless they are all 0)."""
        out = np.zeros((len(offsets), self.buckets), np.int64)
        if len(offsets) == 0 or offsets[-1] == 0:
            return out
        bucket = self.chunk(k)[0]
        lo, hi = int(offsets[0]), int(offsets[-1])
        gap = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))  # sample lo + i: between offsets gap[i]
        between = np.bincount(gap * self.buckets + bucket[lo:hi], minlength=len(offsets) * self.buckets)
        out[1:] = np.cumsum(between.reshape(len(offsets), self.buckets)[:-1], axis=0)
        return out + np.bincount(bucket[:lo], minlength=self.buckets)

    def expected_at(self, positions: np.ndarray) -> np.ndarray:
        """Expected batches of the run before each of ``positions`` (chunk starts, or inside one chunk)."""
        k = np.minimum(self.chunk_of(positions), len(self.chunks) - 1)
        out = self.expected[k].copy()
        inside = positions > self.starts[k]
        if inside.any():
            chunk = int(k[inside][0])
            out[inside] += self.chunk(chunk)[1][positions[inside] - self.starts[chunk]]
        return out

    def _batches(self, positions, window, done, base, piece) -> np.ndarray:
        """The batches of a piece ending at each of ``positions`` (ascending, inside its window that starts
        at ordered chunk ``window``): ``done`` (its earlier windows') plus the window's, whose samples
        before each chunk of the window are ``base[k - window]``; ``piece``: the piece's first chunk and
        that chunk's samples before the piece."""
        chunk = self.chunk_of(positions)
        offsets = positions - self.starts[chunk]
        rows = base[chunk - window]
        for k in np.unique(chunk[offsets > 0]).tolist():
            part = (chunk == k) & (offsets > 0)
            rows[part] += self.prefix(k, offsets[part]) - (piece[1] if k == piece[0] else 0)
        return done + self.count(rows)

    def ends(self, start: int, most: int, hint: float | None, span: int = 160):
        """Where a piece from ``start`` may end with ``most`` batches: ascending consecutive positions,
        inside one chunk, that each give it ``most`` batches, and the rounding (batches minus expected
        batches) of the piece's last window at the last of them; ``(the run's end, None)`` when the whole
        rest of the run fits. ``hint``: that rounding as guessed (the ``span`` positions either side of
        the end it gives are counted first, in the same call as the window's chunk ends). A piece's
        batches never fall when it takes a sample more (the greedy cut is the fewest batches, and a
        sample added never lowers those) and rise by one at most, so the last end of ``most`` is found
        exactly: between two counted positions, more are counted until they are neighbours."""
        pw, num = self.per_window, len(self.chunks)
        first = int(self.chunk_of(start))
        piece = first, self.prefix(first, np.array([start - self.starts[first]]))[0]
        done, window = 0, first  # batches of the piece's windows before the one that starts at `window`
        while window < num:
            before = float(self.expected_at(np.array([start]))[0]) if window == first else self.expected[window]
            # the windows that start before the expected batches alone reach `most`, counted at once (a
            # padded window's batches are at least its expected ones: the end is mostly in one of them)
            reach = int(np.searchsorted(self.expected, before + most - done, side="right"))
            whole = min((min(reach, num) - window) // pw, _BLOCK // pw)
            if whole >= 2:
                inner = self.rows(window, window + whole * pw)
                if window == first:
                    inner[0] -= piece[1]
                counts = np.cumsum(self.count(np.add.reduceat(inner, np.arange(0, len(inner), pw), axis=0)))
                fit = int(np.searchsorted(counts, most - done, side="right"))  # windows that fit whole
                if fit:
                    done, window = done + int(counts[fit - 1]), window + fit * pw
                    if fit == whole:
                        continue
                    before = self.expected[window]
            stop = min(window + pw, num)
            inner = self.rows(window, stop)
            if window == first:
                inner[0] -= piece[1]
            base = np.concatenate([np.zeros((1, self.buckets), np.int64), np.cumsum(inner, axis=0)])
            low = start + 1 if window == first else int(self.starts[window])  # the window's first end
            x = [self.starts[window + 1 : stop + 1], [low]]  # its chunks' ends: counted without a read
            if hint is not None:  # and the positions about the end the hint gives
                target = before + most - done - hint
                k = int(np.clip(np.searchsorted(self.expected, target, side="right") - 1, window, stop - 1))
                lowest = low - self.starts[k] if k == first else 1
                guess = int(np.searchsorted(self.chunk(k)[1], target - self.expected[k]))
                guess = min(max(guess, lowest), int(self.sizes[k]) - 1)
                x.append(self.starts[k] + np.arange(max(lowest, guess - span), min(self.sizes[k], guess + span + 1)))
            x = np.unique(np.concatenate(x).astype(np.int64))
            fx = self._batches(x, window, done, base, piece)
            if fx[-1] <= most:  # the whole window fits
                done, window = int(fx[-1]), stop
                continue
            i = int(np.argmax(fx > most))
            while x[i] - x[i - 1] > 1:  # narrow down (between them, positions of one chunk)
                step = -(-(x[i] - x[i - 1]) // 256)
                new = np.arange(x[i - 1] + step, x[i], step)
                x, fx = np.concatenate([x, new]), np.concatenate([fx, self._batches(new, window, done, base, piece)])
                order = np.argsort(x, kind="stable")
                x, fx = x[order], fx[order]
                i = int(np.argmax(fx > most))
            # x[i - 1] is the last end of `most` batches; the consecutive ends of `most` before it, in its chunk
            breaks = np.flatnonzero((np.diff(x[:i]) != 1) | (fx[1:i] != fx[: i - 1]))
            in_chunk = int(np.searchsorted(x, self.starts[self.chunk_of(x[i - 1])]))
            j = max(int(breaks[-1]) + 1 if breaks.size else 0, in_chunk)
            return x[j:i], most - done - (float(self.expected_at(x[i - 1 : i])[0]) - before)
        return np.array([self.total]), None

    def rest(self, ends: np.ndarray) -> np.ndarray:
        """The batches of the piece from each of ``ends`` (inside one chunk) to the run's end."""
        pw, num = self.per_window, len(self.chunks)
        k = int(self.chunk_of(ends[0]))
        first = self.rows(k, min(k + pw, num)).sum(axis=0) - self.prefix(k, ends - self.starts[k])
        later = self.rows(k + pw, num)
        if len(later):
            later = np.add.reduceat(later, np.arange(0, len(later), pw), axis=0)
        counts = self.count(np.concatenate([first, later]))
        return counts[: len(first)] + counts[len(first) :].sum()

    def equal_expected(self, ranks: int) -> tuple[np.ndarray, np.ndarray]:
        """Pieces of equal expected batches (:func:`_pieces` before the walk): their boundaries
        ``[ranks + 1]`` and batches ``[ranks]`` (the boundary chunks read)."""
        targets = self.expected[-1] * np.arange(1, ranks) / ranks
        k = np.minimum(np.searchsorted(self.expected, targets, side="right") - 1, len(self.chunks) - 1)
        cuts = [0]
        for chunk, target in zip(k.tolist(), targets.tolist(), strict=True):
            offset = int(np.searchsorted(self.chunk(chunk)[1], target - self.expected[chunk], side="right")) - 1
            cuts.append(max(cuts[-1], int(self.starts[chunk]) + offset))
        cuts = np.asarray(cuts + [self.total], np.int64)
        windows = [cuts]  # a piece's windows start at its start, then every per_window chunks
        for first, end in zip(self.chunk_of(cuts[:-1]).tolist(), cuts[1:].tolist(), strict=True):
            later = self.starts[first + self.per_window :: self.per_window]
            windows.append(later[later < end])
        bounds = np.unique(np.concatenate(windows))
        counts = np.concatenate([[0], np.cumsum(self.count(np.diff(self._before(bounds), axis=0)))])
        return cuts, np.diff(counts[np.searchsorted(bounds, cuts)])

    def _before(self, positions: np.ndarray) -> np.ndarray:
        """``[len(positions), B]`` samples per bucket of the run before each of ``positions`` (ascending;
        a chunk a position falls inside is read), a block of chunks at a time."""
        num = len(self.chunks)
        k = self.chunk_of(positions)
        offsets = positions - self.starts[k]
        out = np.empty((len(positions), self.buckets), np.int64)
        running = np.zeros(self.buckets, np.int64)
        for k0 in range(0, num, _BLOCK):
            block = self.rows(k0, min(num, k0 + _BLOCK))
            cumulative = running + np.concatenate([np.zeros((1, self.buckets), np.int64), np.cumsum(block, axis=0)])
            part = np.flatnonzero((k >= k0) & (k < k0 + len(block)))
            out[part] = cumulative[k[part] - k0]
            for chunk in np.unique(k[part][offsets[part] > 0]).tolist():
                inside = part[(k[part] == chunk) & (offsets[part] > 0)]
                out[inside] += self.prefix(chunk, offsets[inside])
            running = cumulative[-1]
        out[k >= num] = running  # the run's end
        return out

    def walk(self, ranks: int, most: int, reserve: float) -> tuple[np.ndarray, int]:
        """Pieces of ``most`` batches, the last one's left over: the boundaries ``[ranks + 1]`` and the last
        piece's batches. Of the ends that give a piece ``most``, it takes the one whose expected batches
        are nearest an equal share of what is left after the last piece's ``reserve`` (expected batches);
        the piece before the last, the end that leaves the last piece the most batches up to ``most``."""
        bounds, rounding, at, last = [0], [], 0.0, most
        for rank in range(ranks - 1):
            ends, rho = self.ends(bounds[-1], most, float(np.mean(rounding[-64:])) if rounding else None)
            if rho is not None:
                rounding.append(rho)
            ends = ends[ends <= self.total - (ranks - 1 - rank)]  # every later piece keeps a sample
            if not len(ends):
                bounds.append(self.total - (ranks - 1 - rank))
                at = float(self.expected_at(np.array(bounds[-1:]))[0])
                continue
            expected = self.expected_at(ends)
            if rank < ranks - 2:
                share = at + (self.expected[-1] - reserve - at) / (ranks - 1 - rank)
                pick = int(np.argmin(np.abs(expected - share)))
            else:
                left = self.rest(ends)
                fit = np.flatnonzero(left <= most)
                pick = int(fit[0]) if fit.size else len(ends) - 1
                last = int(left[pick])
            bounds.append(int(ends[pick]))
            at = float(expected[pick])
        return np.asarray(bounds + [self.total], np.int64), last


def _pieces(run: _Run, num_replicas: int) -> np.ndarray:
    """The W + 1 piece boundaries, in sample positions of the run.

    Pieces of equal expected batches give the run's batches S (their boundary chunks read). A walk then
    cuts pieces of T = round(S / W) real batches, the last one's left over (:meth:`_Run.walk`); when the
    last has a little more than T, the walk is redone aiming it at fewer batches while that helps, else
    with T raised. The boundaries that leave the fewest batches to split win (the equal-expected ones
    too).
    """
    if num_replicas == 1:
        return np.array([0, run.total])
    cuts, counts = run.equal_expected(num_replicas)
    best = num_replicas * int(counts.max()) - int(counts.sum()), cuts
    if run.total < num_replicas:
        return cuts  # layout refuses it
    natural = (counts.sum() - run.expected[-1]) / num_replicas  # a piece's batches less its expected ones
    most, margin, excess = max(1, round(int(counts.sum()) / num_replicas)), 0.0, None
    for attempt in range(_TRIES):
        bounds, last = run.walk(num_replicas, most, most - natural - margin)
        extra = most - last if last <= most else (num_replicas - 1) * (last - most)
        if extra < best[0]:
            best = extra, bounds
        if last <= most:
            break
        retry = last - most <= num_replicas // 16 + 2 and (excess is None or last - most < excess)
        if retry and attempt < _TRIES - 2:  # a little over: the same T, the last piece aimed lower
            margin, excess = margin + last - most, last - most
        else:  # more batches a piece
            most, margin, excess = most + -(-(last - most) // num_replicas), 0.0, None
    return best[1]


def layout(
    index: SizeIndexLike,
    spec: PlanSpec,
    *,
    seed: int,
    num_replicas: int,
    window_batches: int = WINDOW_BATCHES,
    axis: int = 0,
) -> StreamLayout:
    """Lay a run out on ``num_replicas`` ranks (the same on every rank; see the module docstring).

    Raises:
        DataError: the index is inconsistent (shapes, sums, a boundary chunk's sizes), naming the chunk.
        ValueError: a spec a histogram cannot plan, or too few samples to give every rank its batches.
    """
    check_spec(spec)
    if num_replicas < 1 or window_batches < 1:
        raise ValueError(f"num_replicas and window_batches must be >= 1, got {num_replicas} and {window_batches}")
    samples, histograms = checked_histograms(index, axis)
    total = np.zeros(histograms.shape[1], np.int64)
    for i in range(0, len(histograms), _BLOCK):
        total += histograms[i : i + _BLOCK].sum(axis=0, dtype=np.int64)
    edges, rounded, bin_bucket = buckets(total, index.edges, spec)
    per_bin = 1.0 / batch_room(rounded, spec, 0)[bin_bucket]
    expected = _expected_batches(histograms, per_bin)
    chunk_batches = float(expected.sum()) / max(1, int((samples > 0).sum()))  # mean over non-empty chunks
    per_window = max(1, round(window_batches / chunk_batches))  # chunks per window
    order = np.random.default_rng([seed, _CHUNKS]).permutation(len(samples))
    starts = np.concatenate([[0], np.cumsum(samples[order])])
    count = partial(batch_counts, rounded=rounded, spec=spec)
    run = _Run(index, axis, histograms, order, samples, expected, bin_bucket, per_bin, per_window, count)
    bounds = _pieces(run, num_replicas)
    breaks = np.union1d(starts, bounds)
    position = np.searchsorted(starts, breaks[:-1], side="right") - 1
    seg_rank = np.searchsorted(bounds, breaks[:-1], side="right") - 1
    seg_chunk, seg_start, seg_stop = order[position], breaks[:-1] - starts[position], breaks[1:] - starts[position]
    per_rank = np.bincount(seg_rank, minlength=num_replicas)
    if (per_rank == 0).any():
        raise ValueError(
            f"rank {int(np.argmin(per_rank))} of {num_replicas} gets no samples ({int(samples.sum())} samples): "
            "use fewer ranks or more data"
        )
    local = np.arange(len(seg_rank)) - np.searchsorted(seg_rank, np.arange(num_replicas))[seg_rank]
    rank_windows = np.concatenate([[0], np.cumsum(-(-per_rank // per_window))])
    seg_window = rank_windows[seg_rank] + local // per_window
    window_segments = np.searchsorted(seg_window, np.arange(rank_windows[-1] + 1))
    window_rank = np.repeat(np.arange(num_replicas), np.diff(rank_windows))
    segments = (seg_chunk, seg_start, seg_stop)
    window_hist = _window_histograms(segments, window_segments, samples, histograms, bin_bucket, run.read)
    counts = batch_counts(window_hist, rounded, spec)
    splits, most = _equalise(window_hist.sum(axis=1), counts, window_rank, rank_windows)
    return StreamLayout(
        spec, axis, num_replicas, edges, rounded, bin_bucket, np.concatenate([[0], np.cumsum(samples)]),
        seg_chunk, seg_start, seg_stop, window_segments, window_rank, rank_windows, window_hist, counts, splits, most,
    )  # fmt: skip


def _window_histograms(segments, window_segments, samples, histograms, bin_bucket, read) -> np.ndarray:
    """Samples per bucket of each window ``[windows, B]``: full chunks from their histograms, the
    boundary chunks' parts from their samples' buckets (``read``); a block of windows at a time."""
    chunk, start, stop = segments
    num_buckets = int(bin_bucket[-1]) + 1
    first_bins = np.searchsorted(bin_bucket, np.arange(num_buckets))
    out = np.empty((len(window_segments) - 1, num_buckets), np.int32)
    cut = np.flatnonzero((start > 0) | (stop < samples[chunk]))
    for w0 in range(0, len(out), _BLOCK):
        w1 = min(len(out), w0 + _BLOCK)
        s0, s1 = window_segments[w0], window_segments[w1]
        rows = np.add.reduceat(histograms[chunk[s0:s1]], first_bins, axis=1, dtype=np.int64)
        for s in cut[(cut >= s0) & (cut < s1)].tolist():
            rows[s - s0] = np.bincount(read[int(chunk[s])][start[s] : stop[s]], minlength=num_buckets)
        out[w0:w1] = np.add.reduceat(rows, window_segments[w0:w1] - s0, axis=0)
    return out


def _equalise(window_samples, counts, window_rank, rank_windows) -> tuple[np.ndarray, int]:
    """Splits per window that give every rank the largest rank's count, and that count: a rank's missing
    batches dealt to its windows in proportion to what they can split (samples - batches), the
    remainder one each to those of largest mean batch first."""
    ranks = len(rank_windows) - 1
    per_rank = np.bincount(window_rank, counts, minlength=ranks).astype(np.int64)
    most = int(per_rank.max())
    spare = (window_samples - counts).astype(np.int64)
    spare_rank = np.bincount(window_rank, spare, minlength=ranks).astype(np.int64)
    short = np.flatnonzero(most - per_rank > spare_rank)
    if short.size:
        rank = int(short[0])
        raise ValueError(
            f"rank {rank} holds {int(per_rank[rank] + spare_rank[rank])} samples in {int(per_rank[rank])} batches "
            f"and cannot be split to {most} (the fullest of {ranks} ranks): use fewer ranks or more data"
        )
    missing = (most - per_rank)[window_rank]
    splits = missing * spare // np.maximum(spare_rank[window_rank], 1)
    left = (most - per_rank) - np.bincount(window_rank, splits, minlength=ranks).astype(np.int64)
    ranked = np.lexsort((np.arange(len(counts)), -window_samples / counts, splits >= spare, window_rank))
    place = np.empty_like(ranked)
    place[ranked] = np.arange(len(ranked)) - rank_windows[window_rank[ranked]]
    return splits + (place < left[window_rank]), most


def rank_batches(plan: StreamLayout, rank: int, epoch: int, seed: int) -> np.ndarray:
    """Rank ``rank``'s descriptors for ``epoch``: ``[T, 4]`` int32 (window, batch, 0, -1), its windows in an
    order from ``(seed, epoch, rank)``, each window's batches one after the other."""
    windows = np.arange(plan.rank_windows[rank], plan.rank_windows[rank + 1])
    windows = windows[np.random.default_rng([seed, epoch, _WINDOWS, rank]).permutation(len(windows))]
    counts = plan.window_counts[windows] + plan.window_splits[windows]
    out = np.zeros((int(counts.sum()), 4), np.int32)  # 16 bytes a batch: millions a rank at 1 B samples
    out[:, 0] = np.repeat(windows, counts)
    out[:, 1] = np.arange(len(out)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[:, 3] = -1
    return out


def _serve(plan: StreamLayout, window: int, epoch: int, seed: int, starts: np.ndarray) -> np.ndarray:
    bounds = np.stack([starts[:-1], starts[1:]], axis=1)
    if len(bounds) != plan.window_counts[window]:
        raise RuntimeError(f"window {window}: {len(bounds)} batches cut but {plan.window_counts[window]} counted")
    splits = int(plan.window_splits[window])
    if splits:
        bounds = split_to_multiple(bounds, len(bounds) + splits)  # exactly `splits` splits of the largest
    return bounds[np.random.default_rng([seed, epoch, _BATCHES, window]).permutation(len(bounds))]


def window_bounds(plan: StreamLayout, window: int, epoch: int, seed: int) -> np.ndarray:
    """Window ``window``'s batches ``[n, 2]`` (offsets into its ordered samples, in serving order), from
    its histogram alone: the batch sizes :func:`read_window` gives, without reading a chunk."""
    largest_first = np.repeat(plan.rounded[::-1], plan.window_histograms[window][::-1])
    return _serve(plan, window, epoch, seed, cut_batches(largest_first[:, None], plan.spec))


def read_window(index: SizeIndexLike, plan: StreamLayout, window: int, epoch: int, seed: int):
    """Window ``window``'s samples as global ids (chunk offset + position) in the order of ``epoch``,
    and its batches ``[n, 2]`` (offsets into them, in serving order): the in-memory plan's ordering and
    cut over the window's samples, the window's chunks read once.

    Raises:
        DataError: a chunk's sizes disagree with the index's histograms, naming the chunk.
    """
    histograms = index.histograms(plan.axis)
    chunk_range = range(plan.window_segments[window], plan.window_segments[window + 1])
    parts, ids = [], []
    for s in chunk_range:
        chunk, start, stop = int(plan.seg_chunk[s]), int(plan.seg_start[s]), int(plan.seg_stop[s])
        parts.append(chunk_sizes(index, chunk, plan.axis, histograms)[start:stop])
        ids.append(plan.chunk_offsets[chunk] + np.arange(start, stop))
    sizes, ids = np.concatenate(parts), np.concatenate(ids)
    bucket = plan.bin_bucket[np.searchsorted(index.edges, sizes)]
    if not np.array_equal(np.bincount(bucket, minlength=len(plan.rounded)), plan.window_histograms[window]):
        raise DataError(f"size index {index.key}: window {window}'s sizes differ from those it was planned with")
    # inside a bucket, the window's own finer buckets (bucketize's, as the in-memory plan's) come largest
    # first: the cut's positions stay the histogram's, and a batch holds samples of close sizes
    finer, _ = bucketize(sizes[:, None], plan.spec)
    rng = np.random.default_rng([seed, epoch, _SAMPLES, window])
    order = order_samples(np.column_stack([bucket, finer[:, 0]]), rng, sizes[:, None])
    starts = cut_batches(plan.rounded[bucket[order]][:, None], plan.spec)
    return ids[order], _serve(plan, window, epoch, seed, starts)
