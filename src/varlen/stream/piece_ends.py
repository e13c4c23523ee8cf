"""Where each rank's piece of a streamed run ends: cut at real batch counts, so that the ranks need (almost)
no batch split to serve equal counts (`piece_bounds`, for `varlen.stream.layout.layout`).

The run is the chunks in the plan's seeded order. Cut at equal expected batch count (`sum(samples /
room)`), pieces would differ by a few real batches each (a bucket's last batch is partial), and every rank
serves the fullest one's count: about 0.16% of the batches split at 512 ranks. So the cuts are walked from
the first piece on at real counts: T is the run's batches on equal-expected pieces over W, rounded; each
piece but the last ends where it holds exactly T batches (counted from histograms at a few hundred
candidate ends at once: a piece's count never falls as it grows, and rises by one at most), at the end of
that range nearest an equal share of the expected batches left; the piece before the last ends where it
leaves the last the most batches up to T. Only the last piece can then be short: by 0 to a few batches
in most runs, by up to about W / 3 when the run's batches fall midway between multiples of W.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "Run", "expected_batches", "piece_bounds"]

#: rows of histograms summed at a time (bounded temporaries at a billion samples)
BLOCK = 4096
#: walks of `piece_bounds` at most (a walk is redone when its last piece has more than the others)
_TRIES = 4


def expected_batches(histograms: np.ndarray, per_bin: np.ndarray) -> np.ndarray:
    """Each chunk's expected batch count `histogram @ (1 / room)`, a block of chunks at a time."""
    return np.concatenate(
        [histograms[i : i + BLOCK].astype(np.float64) @ per_bin for i in range(0, len(histograms), BLOCK)]
        or [np.zeros(0)]
    )


class Run:
    """The run (the non-empty chunks in their order) as `piece_bounds` walks it: the batches of a piece
    ending at many candidate positions, in one `count` call (the plan's `batch_counts` of rows of bucket
    counts). A position is a sample offset into the run: ordered chunk `k` holds `starts[k]:starts[k + 1]`;
    a piece's windows are `per_window` chunks from its first (the layout groups them so). `read_bins(chunk)`
    gives a chunk's grid bin of each sample (its sizes read)."""

    def __init__(self, histograms, order, samples, expected, bin_bucket, per_bin, per_window, count, read_bins):
        self.histograms, self.count, self.read_bins = histograms, count, read_bins
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
        """The ordered chunk of each position (a chunk's start: that chunk; the run's end: `len(chunks)`)."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    def rows(self, k0: int, k1: int) -> np.ndarray:
        """`[k1 - k0, B]` samples per bucket of ordered chunks `k0:k1`."""
        if k1 <= k0:
            return np.zeros((0, self.buckets), np.int64)
        return np.add.reduceat(self.histograms[self.chunks[k0:k1]], self.first_bins, axis=1, dtype=np.int64)

    def chunk(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Ordered chunk `k`'s bucket of each sample (its sizes read once) and expected batches before
        each offset."""
        chunk = int(self.chunks[k])
        if chunk not in self.read:
            bins = self.read_bins(chunk)
            self.read[chunk] = self.bin_bucket[bins].astype(np.int16 if self.buckets < 2**15 else np.int32)
        if k not in self._recent:
            if len(self._recent) >= 4:
                del self._recent[next(iter(self._recent))]
            self._recent[k] = np.concatenate([[0.0], np.cumsum(self.per_bucket[self.read[chunk]])])
        return self.read[chunk], self._recent[k]

    def prefix(self, k: int, offsets: np.ndarray) -> np.ndarray:
        """`[len(offsets), B]`: samples per bucket among the first `o` samples of ordered chunk `k`,
        for each `o` of `offsets` (ascending; the chunk is read unless they are all 0)."""
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
        """Expected batches of the run before each of `positions` (chunk starts, or inside one chunk)."""
        k = np.minimum(self.chunk_of(positions), len(self.chunks) - 1)
        out = self.expected[k].copy()
        inside = positions > self.starts[k]
        if inside.any():
            chunk = int(k[inside][0])
            out[inside] += self.chunk(chunk)[1][positions[inside] - self.starts[chunk]]
        return out

    def _batches(self, positions, window, done, base, piece) -> np.ndarray:
        """The batches of a piece ending at each of `positions` (ascending, inside its window that starts
        at ordered chunk `window`): `done` (its earlier windows') plus the window's, whose samples
        before each chunk of the window are `base[k - window]`; `piece`: the piece's first chunk and
        that chunk's samples before the piece."""
        chunk = self.chunk_of(positions)
        offsets = positions - self.starts[chunk]
        rows = base[chunk - window]
        for k in np.unique(chunk[offsets > 0]).tolist():
            part = (chunk == k) & (offsets > 0)
            rows[part] += self.prefix(k, offsets[part]) - (piece[1] if k == piece[0] else 0)
        return done + self.count(rows)

    def ends(self, start: int, most: int, hint: float | None, span: int = 160):
        """Where a piece from `start` may end with `most` batches: ascending consecutive positions,
        inside one chunk, that each give it `most` batches, and the rounding (batches minus expected
        batches) of the piece's last window at the last of them; `(the run's end, None)` when the whole
        rest of the run fits. `hint`: that rounding as guessed (the `span` positions either side of
        the end it gives are counted first, in the same call as the window's chunk ends). A piece's
        batches never fall when it takes a sample more (the greedy cut is the fewest batches, and a
        sample added never lowers those) and rise by one at most, so the last end of `most` is found
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
            whole = min((min(reach, num) - window) // pw, BLOCK // pw)
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
            x, fx, i = self._narrow(x, fx, most, (window, done, base, piece))
            # x[i - 1] is the last end of `most` batches; the consecutive ends of `most` before it, in its chunk
            breaks = np.flatnonzero((np.diff(x[:i]) != 1) | (fx[1:i] != fx[: i - 1]))
            in_chunk = int(np.searchsorted(x, self.starts[self.chunk_of(x[i - 1])]))
            j = max(int(breaks[-1]) + 1 if breaks.size else 0, in_chunk)
            return x[j:i], most - done - (float(self.expected_at(x[i - 1 : i])[0]) - before)
        return np.array([self.total]), None

    def _narrow(self, x: np.ndarray, fx: np.ndarray, most: int, where: tuple) -> tuple[np.ndarray, np.ndarray, int]:
        """Positions `x` (ascending) and their batches `fx` with more counted (`_batches` `where`) until
        the first of over `most` batches, `x[i]`, is the neighbour of the last of `most` (between them,
        positions of one chunk); and `i`."""
        i = int(np.argmax(fx > most))
        while x[i] - x[i - 1] > 1:
            step = -(-(x[i] - x[i - 1]) // 256)
            new = np.arange(x[i - 1] + step, x[i], step)
            x, fx = np.concatenate([x, new]), np.concatenate([fx, self._batches(new, *where)])
            order = np.argsort(x, kind="stable")
            x, fx = x[order], fx[order]
            i = int(np.argmax(fx > most))
        return x, fx, i

    def rest(self, ends: np.ndarray) -> np.ndarray:
        """The batches of the piece from each of `ends` (inside one chunk) to the run's end."""
        pw, num = self.per_window, len(self.chunks)
        k = int(self.chunk_of(ends[0]))
        first = self.rows(k, min(k + pw, num)).sum(axis=0) - self.prefix(k, ends - self.starts[k])
        later = self.rows(k + pw, num)
        if len(later):
            later = np.add.reduceat(later, np.arange(0, len(later), pw), axis=0)
        counts = self.count(np.concatenate([first, later]))
        return counts[: len(first)] + counts[len(first) :].sum()

    def equal_expected(self, ranks: int) -> tuple[np.ndarray, np.ndarray]:
        """Pieces of equal expected batches (`piece_bounds` before the walk): their boundaries
        `[ranks + 1]` and batches `[ranks]` (the boundary chunks read)."""
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
        """`[len(positions), B]` samples per bucket of the run before each of `positions` (ascending;
        a chunk a position falls inside is read), a block of chunks at a time."""
        num = len(self.chunks)
        k = self.chunk_of(positions)
        offsets = positions - self.starts[k]
        out = np.empty((len(positions), self.buckets), np.int64)
        running = np.zeros(self.buckets, np.int64)
        for k0 in range(0, num, BLOCK):
            block = self.rows(k0, min(num, k0 + BLOCK))
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
        """Pieces of `most` batches, the last one's left over: the boundaries `[ranks + 1]` and the last
        piece's batches. Of the ends that give a piece `most`, it takes the one whose expected batches
        are nearest an equal share of what is left after the last piece's `reserve` (expected batches);
        the piece before the last, the end that leaves the last piece the most batches up to `most`."""
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


def piece_bounds(run: Run, num_replicas: int) -> np.ndarray:
    """The W + 1 piece boundaries, in sample positions of the run.

    Pieces of equal expected batches give the run's batches S (their boundary chunks read). A walk then
    cuts pieces of T = round(S / W) real batches, the last one's left over (`Run.walk`); when the
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
