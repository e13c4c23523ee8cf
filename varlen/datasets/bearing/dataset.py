"""`BearingWindows`: the windows of one split, served as views into one buffer per recording.

A copy per window would double the signal at 50% overlap; a view costs five int64 per window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

__all__ = ["BearingWindows"]


class BearingWindows(Dataset):
    """Windows of recordings, served as views into one buffer per recording.

    Memory: the buffers (shared with the other splits) plus five int64 per window (recording,
    start, length, window index, label). A sample's ``signal`` is
    ``buffers[r][:, start:start + length]``: a view, never a copy.

    Args:
        buffers: ``[C, T]`` float32 per recording (all recordings; indexed by ``recording``).
        labels: class index per recording.
        recording: recording index per window.
        starts: start sample per window (in the recording's resampled time line).
        lengths: true length per window (a tail window is shorter).
        window_index: the window's position among its recording's windows in this split.

    Samples: ``index``, ``signal`` ``[C, length]`` float32 view, ``label``, ``recording_id``,
    ``window_index``, ``start``.
    """

    def __init__(
        self,
        buffers: Sequence[np.ndarray],
        labels: np.ndarray,
        recording: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        window_index: np.ndarray,
    ) -> None:
        self.buffers = buffers
        self.recording_labels = np.asarray(labels, dtype=np.int64)
        self.recording = np.asarray(recording, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.window_index = np.asarray(window_index, dtype=np.int64)
        self.labels = self.recording_labels[self.recording]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r, start, length = int(self.recording[i]), int(self.starts[i]), int(self.lengths[i])
        return {
            "index": int(i),
            "signal": self.buffers[r][:, start : start + length],
            "label": int(self.labels[i]),
            "recording_id": r,
            "window_index": int(self.window_index[i]),
            "start": start,
        }

    def nbytes(self) -> int:
        """Bytes this dataset refers to: the buffers of its recordings plus its index arrays.

        An accounting figure, not a measurement: tests check views with ``np.shares_memory``
        and held memory with ``tracemalloc``.
        """
        used = np.unique(self.recording)
        index = self.recording.nbytes + self.starts.nbytes + self.lengths.nbytes + self.window_index.nbytes
        return int(sum(self.buffers[r].nbytes for r in used.tolist()) + index + self.labels.nbytes)
