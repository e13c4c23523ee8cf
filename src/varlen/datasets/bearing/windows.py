"""Signal to windows: resampling, window plans as index tables, what they leave out, train statistics.

A window is one row of a `WindowTable` (recording, start, length, window index): four
int64 numbers, never a copy of the signal. Every sample that no window covers is counted (gaps
between split blocks, strides longer than a window, dropped tails), so the DataModule can put
it in its report. The train statistics standardize every gathered batch (the stored signal is
mapped read-only and never changed), so restoring a checkpoint's statistics replaces two vectors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import scipy.signal

__all__ = [
    "Segments",
    "WindowTable",
    "cut_windows",
    "plan_windows",
    "resample",
    "train_statistics",
    "uncovered_between_segments",
]


class WindowTable(NamedTuple):
    """Windows as index arrays, one entry per window."""

    recording: np.ndarray
    start: np.ndarray
    length: np.ndarray
    window_index: np.ndarray

    def take(self, rows: np.ndarray) -> WindowTable:
        """The windows `rows` of this table."""
        return WindowTable(*(column[rows] for column in self))


class Segments(NamedTuple):
    """Spans `[start, end)` of recordings that one split owns."""

    recording: np.ndarray
    start: np.ndarray
    end: np.ndarray


def resample(signal: np.ndarray, rate: float, target: float) -> np.ndarray:
    """`signal` `[C, T]` from `rate` to `target` Hz by polyphase filtering (float32).

    Raises:
        ValueError: when a rate is not a whole number of Hz (e.g. 12000.5 Hz).
    """
    if rate == target:
        return np.ascontiguousarray(signal, dtype=np.float32)
    if abs(rate - round(rate)) > 1e-6 or abs(target - round(target)) > 1e-6:
        raise ValueError(f"cannot resample {rate} Hz to {target} Hz: rates must be whole numbers of Hz")
    ratio = math.gcd(int(round(rate)), int(round(target)))
    up, down = int(round(target)) // ratio, int(round(rate)) // ratio
    out = scipy.signal.resample_poly(signal, up, down, axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32)


def plan_windows(
    segment_lengths: np.ndarray, window: int, stride: int, drop_tail: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows of every segment, vectorised.

    A segment of length `L` gets full windows at `0, stride, ...` and, unless `drop_tail`,
    one shorter tail window at the next stride position that covers the rest (so no sample is
    lost); a segment shorter than a window is one tail window.

    Returns:
        `(segment, offset, length)` per window: the segment it belongs to, its start within
        the segment, its true length (`< window` for a tail).
    """
    lengths = np.asarray(segment_lengths, dtype=np.int64)
    full = np.where(lengths >= window, (lengths - window) // stride + 1, 0)
    covered = np.where(full > 0, (full - 1) * stride + window, 0)
    tail_start = full * stride
    tail = (~np.bool_(drop_tail)) & (covered < lengths) & (tail_start < lengths)
    counts = full + tail
    segment = np.repeat(np.arange(len(lengths)), counts)
    first = np.cumsum(counts) - counts
    ordinal = np.arange(int(counts.sum())) - np.repeat(first, counts)
    offset = ordinal * stride
    length = np.where(ordinal < full[segment], window, lengths[segment] - offset)
    return segment, offset, length.astype(np.int64)


def cut_windows(segments: Segments, window: int, hop: int, drop_tail: bool) -> tuple[WindowTable, int, int]:
    """The windows of `segments`, and the samples of the segments they leave out.

    Returns:
        `(table, between, dropped_tail)`: the windows; samples between windows (a stride
        longer than the window, including a stride that jumps past a segment's end); samples
        of tails dropped by `drop_tail`.
    """
    recording, starts, ends = (np.asarray(a, dtype=np.int64) for a in segments)
    sizes = ends - starts
    segment, offset, length = plan_windows(sizes, window, hop, drop_tail)
    reach = np.zeros(len(sizes), dtype=np.int64)  # end of each segment's last window
    np.maximum.at(reach, segment, offset + length)
    # windows start every hop samples: each covers min(length, hop) new samples, the last its length
    last = np.append(segment[1:] != segment[:-1], True) if len(segment) else np.zeros(0, bool)
    union = np.bincount(segment, np.where(last, length, np.minimum(length, hop)), minlength=len(sizes))
    after_last = int((sizes - reach).sum())  # a dropped tail, or (no tail dropped) a stride past the end
    between = int((reach - union).sum()) + (0 if drop_tail else after_last)
    dropped = after_last if drop_tail else 0
    table = WindowTable(recording[segment], starts[segment] + offset, length, offset // hop)
    return table, between, dropped


def uncovered_between_segments(lengths: np.ndarray, splits: Mapping[str, Segments]) -> dict[str, int]:
    """Samples of every recording outside all splits' segments (the gaps between time blocks).

    Each uncovered span is charged to the split whose segment follows it in the recording (the
    last span of a recording to the split whose segment precedes it), so the counts add up to
    the recordings' samples minus the segments'.
    """
    names = list(splits)
    owner = np.concatenate([np.full(len(s.recording), k) for k, s in enumerate(splits.values())]).astype(np.int64)
    recording, start, end = (
        np.concatenate([np.asarray(s[i], dtype=np.int64) for s in splits.values()]) for i in range(3)
    )
    order = np.lexsort((start, recording))
    owner, recording, start, end = owner[order], recording[order], start[order], end[order]
    first = np.ones(len(recording), bool)
    first[1:] = recording[1:] != recording[:-1]
    last = np.ones(len(recording), bool)
    last[:-1] = recording[1:] != recording[:-1]
    before = start - np.where(first, 0, np.roll(end, 1))
    after = np.where(last, np.asarray(lengths, dtype=np.int64)[recording] - end, 0)
    charged = np.bincount(owner, before + after, minlength=len(names)).astype(np.int64)
    return {name: int(n) for name, n in zip(names, charged, strict=True)}


def train_statistics(buffers: Sequence[np.ndarray], table: WindowTable) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (float64) over the samples `table`'s windows cover, each counted once.

    A channel with std 0 gets std 1, so normalizing it only centres it.
    """
    channels = buffers[0].shape[0]
    total, square, count = np.zeros(channels), np.zeros(channels), 0
    for r in np.unique(table.recording).tolist():
        mine = table.recording == r
        edges = np.zeros(buffers[r].shape[1] + 1, dtype=np.int64)
        np.add.at(edges, table.start[mine], 1)
        np.add.at(edges, table.start[mine] + table.length[mine], -1)
        covered = np.cumsum(edges[:-1]) > 0
        values = buffers[r][:, covered].astype(np.float64)
        total += values.sum(axis=1)
        square += (values**2).sum(axis=1)
        count += values.shape[1]
    mean = total / count
    std = np.sqrt(np.maximum(square / count - mean**2, 0.0))
    return mean, np.where(std > 0, std, 1.0)
