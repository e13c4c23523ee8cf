"""`Ragged`: samples of different sizes kept in one array, and a whole batch gathered at once.

Storage is one `values` array `[total, *trailing]` plus, per *row*, where it starts and how
long it is. A row is a sample (one ragged level: token ids, a window of a signal, a molecule's
atoms) or, with `groups`, a segment of a sample (two ragged levels: the segments of a video
and their frames, the captions of a video and their tokens). Rows may overlap (sliding windows
are spans of one recording buffer: the signal is stored once).

A batch of sample indices is gathered with index arithmetic only (`np.repeat`, `arange`,
one `np.take` read, several times faster than fancy indexing for rows of a 2-D array), never a
Python loop per sample, token, frame or window, into either

* `Ragged.pad`: `[B, L, *trailing]` or `[B, S, L, *trailing]` with the pad value,
  lengths and keep masks (True = real), the ragged axis moved where the model wants it; or
* `Ragged.pack`: the rows back to back `[sum, *trailing]` with `cu_seqlens` (row
  offsets), the sample offsets over rows (two levels) and segment ids: no padding at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from varlen.batching.padding import numpy_dtype
from varlen.batching.shape_policy import PadTo, pad_length

__all__ = ["PackedBatch", "PaddedBatch", "Ragged", "concat_ranges"]


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])` without the loop."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


class PaddedBatch(NamedTuple):
    """A padded batch of one ragged field.

    Attributes:
        values: `[B, L, *trailing]` (one level) or `[B, S, L, *trailing]` (two levels), the
            ragged axis moved to `axis` when asked; the pad value where there is no data.
        lengths: `[B]` row lengths (one level) or `[B, S]` (two levels, 0 on padded rows).
        mask: keep mask over the ragged axes, `[B, L]` or `[B, S, L]` (True = real).
        rows: `[B]` rows per sample (two levels), else None.
        row_mask: `[B, S]` keep mask of real rows (two levels), else None.
    """

    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor
    rows: torch.Tensor | None = None
    row_mask: torch.Tensor | None = None


class PackedBatch(NamedTuple):
    """A packed batch of one ragged field: its rows back to back, nothing padded.

    Attributes:
        values: `[sum of row lengths, *trailing]`.
        cu_seqlens: `[R + 1]` int32 offsets of the `R` rows in `values` (FlashAttention's name).
        segment_ids: `[sum]` int64 row of each element.
        sample_rows: `[B + 1]` offsets of each sample's rows (two levels), else None.
        max_len: the longest row (what varlen attention kernels ask for).
    """

    values: torch.Tensor
    cu_seqlens: torch.Tensor
    segment_ids: torch.Tensor
    sample_rows: torch.Tensor | None
    max_len: int


#: rows checked at a time when a Ragged is made: the check's temporaries stay small whatever the
#: corpus (over a memory-mapped table in a new worker, whole-array temporaries would stay in its heap)
CHECK_CHUNK = 1 << 16


def _non_decreasing(offsets: np.ndarray) -> bool:
    steps = (np.diff(offsets[i : i + CHECK_CHUNK + 1]) for i in range(0, len(offsets) - 1, CHECK_CHUNK))
    return all(step.min() >= 0 for step in steps)


@dataclass(frozen=True)
class Ragged:
    """Rows of different lengths stored in one array (see the module docstring).

    Attributes:
        values: `[total, *trailing]`.
        starts: `[R]` int64 first element of each row in `values`.
        lengths: `[R]` int64 elements of each row.
        groups: `[N + 1]` int64 offsets of each sample's rows (two levels), or None (one
            level: row `i` is sample `i`).
    """

    values: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    groups: np.ndarray | None = None

    def __post_init__(self) -> None:
        starts, lengths = np.asarray(self.starts, np.int64), np.asarray(self.lengths, np.int64)
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "lengths", lengths)
        if starts.shape != lengths.shape or starts.ndim != 1:
            raise ValueError(f"starts {starts.shape} and lengths {lengths.shape} must be [R] each")
        total = len(self.values)
        for i in range(0, len(starts), CHECK_CHUNK):
            s, n = starts[i : i + CHECK_CHUNK], lengths[i : i + CHECK_CHUNK]
            if n.min() < 0 or s.min() < 0 or (s + n).max() > total:
                raise ValueError(f"rows reach outside values ({total} elements) or have negative lengths")
        if self.groups is not None:
            groups = np.asarray(self.groups, np.int64)
            object.__setattr__(self, "groups", groups)
            if groups.ndim != 1 or groups[0] != 0 or groups[-1] != len(starts) or not _non_decreasing(groups):
                raise ValueError(f"groups must be [N + 1] non-decreasing offsets from 0 to {len(starts)} rows")

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def from_offsets(cls, values: np.ndarray, offsets: np.ndarray, groups: np.ndarray | None = None) -> Ragged:
        """Rows stored back to back: row `r` is `values[offsets[r]:offsets[r + 1]]`."""
        offsets = np.asarray(offsets, np.int64)
        return cls(values, offsets[:-1], np.diff(offsets), groups)

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> Ragged:
        """One row per array (concatenated once)."""
        lengths = np.fromiter((len(a) for a in arrays), np.int64, len(arrays))
        values = np.concatenate(arrays) if arrays else np.zeros(0)
        return cls(values, np.cumsum(lengths) - lengths, lengths)

    # -- sizes ----------------------------------------------------------------------------------

    @property
    def levels(self) -> int:
        return 1 if self.groups is None else 2

    def __len__(self) -> int:
        return len(self.lengths) if self.groups is None else len(self.groups) - 1

    @property
    def rows_per_sample(self) -> np.ndarray:
        """`[N]` rows of each sample (1 with one level)."""
        return np.ones(len(self), np.int64) if self.groups is None else np.diff(self.groups)

    @property
    def sizes(self) -> np.ndarray:
        """`[N]` elements of each sample (summed over its rows)."""
        if self.groups is None:
            return self.lengths
        total = np.concatenate([[0], np.cumsum(self.lengths)])
        return total[self.groups[1:]] - total[self.groups[:-1]]

    @property
    def longest_row(self) -> np.ndarray:
        """`[N]` length of each sample's longest row (0 for a sample with no rows)."""
        if self.groups is None:
            return self.lengths
        out = np.zeros(len(self), np.int64)
        rows = self.rows_per_sample
        if len(self.lengths):
            np.maximum.at(out, np.repeat(np.arange(len(self)), rows), self.lengths)
        return out

    def _rows_of(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row indices of `indices`' samples back to back, and each sample's row count."""
        if self.groups is None:
            return indices, np.ones(len(indices), np.int64)
        counts = self.groups[indices + 1] - self.groups[indices]
        return concat_ranges(self.groups[indices], counts), counts

    # -- gathering ------------------------------------------------------------------------------

    def element_ids(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions in `values` of the samples `indices`' elements, back to back, with their rows.

        Returns `(ids, rows, rows_per_sample)`: `values[ids]` is the batch packed; arrays that
        share these rows (e.g. `edge_index [2, E]` beside `edge_attr [E, 4]`) are read with the
        same `ids` along their own ragged axis.
        """
        indices = np.asarray(indices, np.int64)
        rows, counts = self._rows_of(indices)
        return concat_ranges(self.starts[rows], self.lengths[rows]), rows, counts

    def take(self, indices: Sequence[int] | np.ndarray) -> Ragged:
        """A compact copy holding only `indices` (values gathered once; rows renumbered)."""
        ids, rows, counts = self.element_ids(indices)
        values = np.take(self.values, ids, axis=0)
        lengths = self.lengths[rows]
        groups = None if self.groups is None else np.concatenate([[0], np.cumsum(counts)])
        return Ragged(values, np.cumsum(lengths) - lengths, lengths, groups)

    def pad(
        self,
        indices: Sequence[int] | np.ndarray,
        pad_value: float | int = 0,
        pad_to_multiple_of: PadTo = None,
        dtype: torch.dtype | None = None,
        axis: int = 1,
    ) -> PaddedBatch:
        """The samples `indices` padded to the batch's longest row (and most rows): one gather.

        Args:
            indices: sample indices (the batch).
            pad_value: written where there is no data.
            pad_to_multiple_of: round the row length `L` up to this multiple, or to its rung.
            dtype: output dtype (default: the values').
            axis: where the row axis `L` goes in the output: `1` (`[B, L, *trailing]`, or
                `[B, S, L, ...]` with two levels, after `S`) or `-1` (last, e.g. signals
                `[B, C, L]`). The result is contiguous.
        """
        indices = np.asarray(indices, np.int64)
        if len(indices) == 0:
            raise ValueError("cannot pad an empty batch")
        if self.groups is None:
            starts, lengths = self.starts[indices], self.lengths[indices]
            width = pad_length(int(lengths.max()), pad_to_multiple_of)
            mask = np.arange(width) < lengths[:, None]  # [B, L]
            source = starts[:, None] + np.arange(width)  # past a row's end: read (clipped), then padded
            row_lengths, rows, row_mask = lengths, None, None
        else:
            counts = self.groups[indices + 1] - self.groups[indices]
            depth = int(counts.max())
            row_mask = np.arange(depth) < counts[:, None]  # [B, S]
            row = np.where(row_mask, self.groups[indices][:, None] + np.arange(depth), 0)
            row_lengths = np.where(row_mask, self.lengths[row] if len(self.lengths) else 0, 0)
            width = pad_length(int(row_lengths.max()), pad_to_multiple_of)
            mask = np.arange(width) < row_lengths[..., None]  # [B, S, L]
            source = np.where(mask, self.starts[row][..., None] + np.arange(width), 0)
            rows = counts
        out = self._read(source, mask, pad_value, dtype)
        if axis not in (1, -1, out.ndim - 1):
            raise ValueError(f"axis must be 1 or -1, got {axis}")
        if axis in (-1, out.ndim - 1) and out.ndim > mask.ndim:
            out = np.ascontiguousarray(np.moveaxis(out, mask.ndim - 1, -1))
        tensor = lambda a: None if a is None else torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        return PaddedBatch(tensor(out), tensor(row_lengths), tensor(mask), tensor(rows), tensor(row_mask))

    def _read(self, source: np.ndarray, mask: np.ndarray, pad_value, dtype: torch.dtype | None) -> np.ndarray:
        """`values[source]` with `pad_value` where `mask` is False, in the output dtype."""
        out_dtype = numpy_dtype(dtype) if dtype is not None else self.values.dtype
        if len(self.values) == 0:
            return np.full((*source.shape, *self.values.shape[1:]), pad_value, dtype=out_dtype)
        out = np.take(self.values, source, axis=0, mode="clip")
        if out.dtype != out_dtype:
            out = out.astype(out_dtype)
        out[~mask] = pad_value
        return out

    def pack(self, indices: Sequence[int] | np.ndarray, dtype: torch.dtype | None = None) -> PackedBatch:
        """The rows of `indices` back to back with their offsets: nothing padded."""
        ids, rows, counts = self.element_ids(indices)
        lengths = self.lengths[rows]
        values = np.take(self.values, ids, axis=0)
        if dtype is not None and values.dtype != numpy_dtype(dtype):
            values = values.astype(numpy_dtype(dtype))
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        segment = np.repeat(np.arange(len(rows)), lengths)
        sample_rows = None if self.groups is None else torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]))
        return PackedBatch(
            torch.from_numpy(values),
            torch.from_numpy(cu),
            torch.from_numpy(segment),
            sample_rows,
            int(lengths.max()) if len(lengths) else 0,
        )
