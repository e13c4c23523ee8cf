"""`BearingWindows`: the windows of one split, spans of the one flat signal buffer, fetched a batch at once.

A copy per window would double the signal at 50% overlap; a span costs a few int64 per window.
The DataModule's datasets hold nothing per window of their own: the signal and the window
columns are views of mapped files, so pickling one (a spawned loader worker) sends paths and
small arrays, and the worker maps the files again. Batches are standardized as they are
gathered (the mapped signal is read-only). Training windows may be augmented
(`WindowAugment`): a batch that carries its epoch is read
at shifted starts, then scaled and noised, in the same one gather.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.ragged import Ragged
from varlen.batching.shape_policy import PadTo, pad_length
from varlen.datasets.bearing.augment import WindowAugment
from varlen.datasets.bearing.storage import PaddedWindows, RecordingBuffer, gather_windows, standardize
from varlen.datasets.bearing.window_tables import WINDOW_COLUMNS
from varlen.storage.tables import MappedTable

__all__ = ["BearingWindows", "WindowBatch"]


@dataclass
class WindowBatch:
    """A padded batch of windows, as gathered: what `BearingCollator` names.

    Attributes:
        index: `[B]` int64 position of each window in its split.
        signals: `[B, C, W]` float32, zeros after each window's length.
        lengths: `[B]` int64 true length of each window.
        mask: `[B, W]` bool keep mask (True = real sample).
        labels: `[B]` int64 class of each window's recording.
        recording_ids: `[B]` int64 recording of each window.
        window_index: `[B]` int64 position of each window among its recording's windows in the split.
        starts: `[B]` int64 first sample of each window in its recording.
    """

    index: torch.Tensor
    signals: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    recording_ids: torch.Tensor
    window_index: torch.Tensor
    starts: torch.Tensor


class BearingWindows(PadsToWidths, Dataset):
    """Windows of recordings: spans of one flat buffer holding every recording, never copies.

    Memory: the shared `RecordingBuffer` plus, per window,
    its recording, start, length and window index (views of a mapped table with
    `from_table`). A sample's `signal` is `buffers[r][:, start:start + length]`: a view
    (a standardized copy with `normalization`); a batch (`__getitems__`) is one gather of
    all its windows, padded.

    Args:
        buffers: the shared store of all recordings (indexed by `recording`), or their `[C, T]`
            float32 arrays, which are then copied once into a store of this dataset's own.
        labels: class index per recording.
        recording: recording index per window.
        starts: start sample per window (in the recording's resampled time line).
        lengths: true length per window (a tail window is shorter).
        window_index: the window's position among its recording's windows in this split.
        pad_to_multiple_of: round a fetched batch's width up to this multiple; a batch that carries its padded
            length pads to it (`pad_to`).
        augment: augmentation of batches that carry their epoch (training); None: none.
        bounds: `[N, 2]` the span (start, end) of its recording each window may be shifted
            within (its split's block); needed when `augment` shifts.
        normalization: `(mean, std)` `[C]` float32: samples and batches are served as
            `(x - mean) / std` per channel (None: as stored). Replace it to standardize otherwise.

    Samples: `index`, `signal` `[C, length]` float32 view, `label`, `recording_id`,
    `window_index`, `start`.
    """

    def __init__(
        self,
        buffers: RecordingBuffer | Sequence[np.ndarray],
        labels: np.ndarray,
        recording: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        window_index: np.ndarray,
        pad_to_multiple_of: int | None = None,
        augment: WindowAugment | None = None,
        bounds: np.ndarray | None = None,
        normalization: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self._columns(recording, starts, lengths, window_index, bounds)
        if not isinstance(buffers, RecordingBuffer):
            widest = pad_length(int(self.lengths.max()), pad_to_multiple_of) if len(self.lengths) else 0
            buffers = RecordingBuffer.join(buffers, slack=widest)
        self.store = buffers
        self.recording_labels = np.asarray(labels, dtype=np.int64)
        self.pad_to_multiple_of = pad_to_multiple_of
        if augment is not None and augment.moves and bounds is None:
            raise ValueError("augment's shifts and speeds need the bounds each window may move within")
        self.augment = augment
        self.normalization = normalization
        self.table: MappedTable | None = None

    @classmethod
    def from_table(
        cls, buffers: RecordingBuffer, labels: np.ndarray, table: MappedTable, **kwargs: Any
    ) -> BearingWindows:
        """The windows of a mapped table (`mapped_windows`):
        their columns are views of the file, and the dataset pickles as its path."""
        *columns, bounds = cls._read(table)
        dataset = cls(buffers, labels, *columns, bounds=bounds, **kwargs)
        dataset.table = table
        return dataset

    @staticmethod
    def _read(table: MappedTable) -> tuple[np.ndarray, ...]:
        bounds = table.numpy("bounds") if "bounds" in table.columns else None
        return (*(table.numpy(name) for name in WINDOW_COLUMNS), bounds)

    def _columns(
        self,
        recording: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        window_index: np.ndarray,
        bounds: np.ndarray | None,
    ) -> None:
        self.recording = np.asarray(recording, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.window_index = np.asarray(window_index, dtype=np.int64)
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=np.int64).reshape(-1, 2)

    def __getstate__(self) -> dict[str, Any]:
        # a dataset over a mapped table sends the table (its path); the worker maps it again
        state = dict(self.__dict__)
        if self.table is not None:
            for name in ("recording", "starts", "lengths", "window_index", "bounds"):
                del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.table is not None:
            self._columns(*self._read(self.table))

    @property
    def buffers(self) -> list[np.ndarray]:
        """`[C, T]` view of each recording (all recordings, shared with the other splits)."""
        return self.store.buffers

    @property
    def labels(self) -> np.ndarray:
        """`[N]` int64 class of each window's recording (computed on each call)."""
        return self.recording_labels[self.recording]

    @property
    def signals(self) -> Ragged:
        """The windows as a two-level `Ragged` over the flat buffer:
        window `i` owns rows `i * C` to `i * C + C - 1` (computed on each call; batches
        build the rows of their own windows only). Unstandardized."""
        return self.store.windows(self.recording, self.starts, self.lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r, start, length = int(self.recording[i]), int(self.starts[i]), int(self.lengths[i])
        signal = self.buffers[r][:, start : start + length]
        return {
            "index": int(i),
            "signal": signal if self.normalization is None else standardize(signal.copy(), self.normalization),
            "label": int(self.recording_labels[r]),
            "recording_id": r,
            "window_index": int(self.window_index[i]),
            "start": start,
        }

    def __getitems__(self, indices: Sequence[int]) -> WindowBatch:
        """A whole batch at once (the loader's batched fetch): one gather of the windows, padded.

        A batch that carries its `epoch` (an `EpochIndices`
        of the training sampler) is augmented when the dataset has an `augment`; plain lists never are.
        """
        epoch, padding = getattr(indices, "epoch", None), pad_to(indices, self.pad_to_multiple_of)
        indices = np.asarray(indices, dtype=np.int64)
        recording = self.recording[indices]
        if self.augment is None or epoch is None:
            starts = self.starts[indices]
            rows = self.store.windows(recording, starts, self.lengths[indices])
            padded = self._gather(rows, np.arange(len(indices)), padding)
        else:
            starts, padded = self._augmented(indices, epoch, padding)
        tensor = torch.from_numpy
        return WindowBatch(
            index=tensor(indices),
            signals=tensor(padded.signals),
            lengths=tensor(padded.lengths),
            mask=tensor(padded.mask),
            labels=tensor(self.recording_labels[recording]),
            recording_ids=tensor(recording),
            window_index=tensor(self.window_index[indices]),
            starts=tensor(starts),
        )

    def _augmented(self, indices: np.ndarray, epoch: int, padding: PadTo) -> tuple[np.ndarray, PaddedWindows]:
        """The windows read at their shifted starts and speeds (one gather), then scaled and noised in place."""
        lengths, starts, augment = self.lengths[indices], self.starts[indices], self.augment
        if augment.moves:
            starts, spans, rates = augment.place(indices, epoch, starts, lengths, self.bounds[indices])
        rows = self.store.windows(self.recording[indices], starts, spans if augment.speed else lengths)
        if augment.speed:
            width = pad_length(int(lengths.max()), padding)
            row_starts = rows.starts.reshape(len(indices), self.store.channels)
            signals = augment.resampled(rows.values, row_starts, rates, lengths, width, self.normalization)
            padded = PaddedWindows(signals, lengths, np.arange(width) < lengths[:, None])
        else:
            padded = self._gather(rows, np.arange(len(indices)), padding)
        augment.perturb(padded.signals, padded.mask, indices, epoch)
        return starts + (2 if augment.speed else 0), padded  # where each window's first sample is

    def _gather(self, rows: Ragged, indices: np.ndarray, padding: PadTo) -> PaddedWindows:
        return gather_windows(rows, self.store.channels, indices, padding, normalization=self.normalization)

    def index_nbytes(self) -> int:
        """Bytes of this split's index arrays (per window; views of a mapped file with
        `from_table`, else its own; the signal store is shared)."""
        own = (self.recording, self.starts, self.lengths, self.window_index)
        arrays = {id(a): a.nbytes for a in (*own, *(() if self.bounds is None else (self.bounds,)))}
        return int(sum(arrays.values()))

    def nbytes(self) -> int:
        """Bytes this dataset refers to: the whole signal store (slack included) plus its index arrays.

        An accounting figure, not a measurement: tests check views with `np.shares_memory`
        and held memory with `tracemalloc`.
        """
        return int(self.store.values.nbytes + self.index_nbytes())
