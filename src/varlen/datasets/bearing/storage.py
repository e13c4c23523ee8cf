"""The signal stored once, windows as `Ragged` rows of it, a batch read in one gather.

All recordings live back to back in one flat float32 array (`RecordingBuffer`); each
recording's `[C, T]` buffer is a view of it. A window is a sample whose `C` rows are spans of
that array (channel `c` of recording `r` starts at `offsets[r] + c * T_r`), so 50%-overlapping
windows cost index numbers, not signal. The DataModule's flat array is the mapped, read-only
values of the recordings table (`recordings`), never written:
normalization happens on each gathered batch.

`gather_windows` reads a batch `[B, C, W]` with one fancy index on a strided view of
the flat array (each row is one contiguous block copy); a batch whose widest read would pass the
array's end (`slack` zeros after it avoid that for arrays joined in memory) goes through a
clipped index grid instead. The core's `Ragged.pad`
gives the same values by building a `[B, C, W]` index grid first, several times slower for
windows of thousands of samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.batching.shape_policy import PadTo, pad_length
from varlen.storage.tables import MappedTable

__all__ = ["PaddedWindows", "RecordingBuffer", "gather_windows", "standardize"]


class RecordingBuffer:
    """Every recording's `[C, T]` signal in one flat float32 array, plus `slack` zeros at the end.

    Attributes:
        values: `[sum of C * T_r + slack]` float32, the only copy of the signal.
        offsets: `[R]` int64 first element of each recording in `values`.
        lengths: `[R]` int64 samples `T_r` of each recording.
        channels: `C`, the same for every recording.
        buffers: `[C, T_r]` views of `values`, one per recording (what `Recording.signal`
            and single samples use).
        table: the mapped table `values` is a column of (`mapped`), or None.
    """

    def __init__(self, values: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, channels: int) -> None:
        self.values = values
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.channels = int(channels)
        self.buffers = self._views()
        self.table: MappedTable | None = None
        self.column = ""

    @classmethod
    def mapped(
        cls, table: MappedTable, column: str, offsets: np.ndarray, lengths: np.ndarray, channels: int
    ) -> RecordingBuffer:
        """The recordings of list column `column` of a mapped table (read-only views of the file).

        Args:
            table: the table.
            column: its list column whose values are the flat signal.
            offsets, lengths, channels: as the attributes (a subset of the rows may be given).
        """
        store = cls(table.ragged(column).values, offsets, lengths, channels)
        store.table, store.column = table, column
        return store

    @classmethod
    def join(cls, signals: Sequence[np.ndarray], slack: int = 0) -> RecordingBuffer:
        """Copy `signals` (`[C, T_r]` each) once into one flat array.

        The caller should drop its own arrays (e.g. rebind `Recording.signal` to
        `buffers`) so that the signal is held once.

        Raises:
            ValueError: when the recordings have different channel counts.
        """
        channels = {s.shape[0] for s in signals}
        if len(channels) > 1:
            raise ValueError(f"recordings have different channel counts {sorted(channels)}")
        sizes = np.fromiter((s.size for s in signals), np.int64, len(signals))
        offsets = np.cumsum(sizes) - sizes
        values = np.zeros(int(sizes.sum()) + int(slack), dtype=np.float32)
        store = cls(values, offsets, [s.shape[1] for s in signals], channels.pop() if channels else 1)
        for view, signal in zip(store.buffers, signals, strict=True):
            view[...] = signal
        return store

    @property
    def slack(self) -> int:
        """Values after the end of the last recording (how far past its end a window may be read)."""
        end = int((self.offsets + self.channels * self.lengths).max()) if len(self.offsets) else 0
        return len(self.values) - end

    def _views(self) -> list[np.ndarray]:
        sizes = self.channels * self.lengths
        return [
            self.values[start : start + size].reshape(self.channels, -1)
            for start, size in zip(self.offsets.tolist(), sizes.tolist(), strict=True)
        ]

    def windows(self, recording: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Ragged:
        """Windows as a two-level `Ragged`: window `i` owns rows `i * C` to `i * C + C - 1`.

        Args:
            recording: recording of each window.
            starts: first sample of each window in its recording.
            lengths: samples of each window.
        """
        recording, starts = np.asarray(recording, np.int64), np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        channel = np.arange(self.channels) * self.lengths[recording][:, None]  # [N, C]
        row_starts = (self.offsets[recording] + starts)[:, None] + channel
        row_lengths = lengths if self.channels == 1 else np.repeat(lengths, self.channels)
        groups = np.arange(0, len(row_lengths) + 1, self.channels, dtype=np.int64)
        return Ragged(self.values, row_starts.ravel(), row_lengths, groups)

    def __getstate__(self) -> dict:
        # pickled into spawned workers: the views would each be pickled as a copy of their signal,
        # and a mapped store sends its table (a path), which the worker maps again
        state = {"offsets": self.offsets, "lengths": self.lengths, "channels": self.channels}
        if self.table is not None:
            return {**state, "table": self.table, "column": self.column}
        return {**state, "values": self.values}

    def __setstate__(self, state: dict) -> None:
        if "table" in state:
            table, column = state.pop("table"), state.pop("column")
            self.__dict__.update(RecordingBuffer.mapped(table, column, **state).__dict__)
        else:
            self.__init__(**state)


class PaddedWindows(NamedTuple):
    """A batch of windows, padded: `signals` `[B, C, W]`, `lengths` `[B]`, keep `mask` `[B, W]`."""

    signals: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray


def gather_windows(
    windows: Ragged,
    channels: int,
    indices: np.ndarray,
    pad_to_multiple_of: PadTo = None,
    pad_value: float = 0.0,
    normalization: tuple[np.ndarray, np.ndarray] | None = None,
) -> PaddedWindows:
    """The windows `indices` padded to the batch's longest (rounded up): one read of the flat array.

    `W` wide reads of the rows past their end (the next recording, or the slack) are overwritten
    with `pad_value`: the columns past the batch's longest window in one slice, then the rows of
    the batch's shorter windows only (in the default batch, the one tail or none).
    Without enough slack the read goes through a clipped index grid instead (same values, slower).

    Args:
        windows: from `RecordingBuffer.windows` (every window has `channels` rows, in order).
        channels: `C`.
        indices: `[B]` window indices.
        pad_to_multiple_of: round `W` up to this multiple, or to its rung (the shape policy's).
        pad_value: written after each window's length.
        normalization: `(mean, std)` `[C]` float32: the batch becomes `(x - mean) / std` per
            channel (the stored signal is never changed), before the padding is written.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) == 0:
        raise ValueError("cannot gather an empty batch of windows")
    rows = windows.groups[indices][:, None] + np.arange(channels)  # [B, C]
    starts, lengths = windows.starts[rows], windows.lengths[rows[:, 0]]
    width = pad_length(int(lengths.max()), pad_to_multiple_of)
    values = windows.values
    if int(starts.max()) + width <= len(values):
        step = values.strides[0]
        view = np.lib.stride_tricks.as_strided(values, (len(values) - width + 1, width), (step, step), writeable=False)
        signals = view[starts]  # [B, C, W], one block copy per row
    else:
        signals = values.take(starts[..., None] + np.arange(width), mode="clip")
    if normalization is not None:
        standardize(signals, normalization)
    longest = int(lengths.max())
    mask = np.ones((len(indices), width), dtype=bool)
    signals[:, :, longest:], mask[:, longest:] = pad_value, False  # the rounding, one slice for the batch
    short = np.flatnonzero(lengths < longest)  # the tails
    if len(short):
        keep = np.arange(longest) < lengths[short, None]
        mask[short, :longest] = keep
        signals[short, :, :longest] = np.where(keep[:, None, :], signals[short, :, :longest], np.float32(pad_value))
    return PaddedWindows(signals, lengths, mask)


def standardize(signals: np.ndarray, normalization: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """`signals` `[..., C, W]` float32 standardized in place per channel: `(x - mean) / std`."""
    mean, std = normalization
    signals -= mean[:, None]
    signals /= std[:, None]
    return signals
