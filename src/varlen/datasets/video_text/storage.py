"""What a video-text dataset serves, as `Ragged` fields, and a batch of them.

Four fields share one sample index (a video):

- `video`: pooled segment features (one level: video -> segments, values `[R_v, D]`) or
  frames (two levels: video -> segments -> frames, values `[F, D]`);
- `video_times`: `(start, end)` seconds of each segment (one level, values `[R_v, 2]`);
- `text`: caption token ids (two levels: video -> captions -> tokens, values `[T]`);
- `text_times`: `(start, end)` seconds of each caption (one level, values `[R_t, 2]`).

`VideoTextSelection` is what `VideoTextDataset.__getitems__` returns: the fields and
the rows of the batch, nothing copied; the collate gathers each field once (`Ragged.pad` or
`Ragged.pack`). It is also a sequence of per-sample dicts, for code that iterates a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged

__all__ = ["VideoTextFields", "VideoTextSelection", "segment_means", "two_levels"]


def two_levels(values: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> Ragged:
    """A two-level `Ragged` from per-sample flat values and per-row counts (one concatenation each)."""
    lengths = np.concatenate([np.asarray(c, np.int64).reshape(-1) for c in counts])
    rows = np.fromiter((len(np.asarray(c).reshape(-1)) for c in counts), np.int64, len(counts))
    flat = np.concatenate([np.asarray(v) for v in values])
    if int(lengths.sum()) != len(flat):
        raise ValueError(f"counts add up to {int(lengths.sum())} items but the arrays hold {len(flat)}")
    return Ragged(flat, np.cumsum(lengths) - lengths, lengths, np.concatenate([[0], np.cumsum(rows)]))


def segment_means(feats: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """`[S, D]` float32 mean of `feats[first[s]:last[s]]` per segment (float64 running sums)."""
    cumulative = np.concatenate([np.zeros((1, feats.shape[1])), np.cumsum(feats, 0, dtype=np.float64)])
    return ((cumulative[last] - cumulative[first]) / (last - first)[:, None]).astype(np.float32)


def _times(samples: Sequence[Mapping[str, Any]], key: str) -> Ragged:
    return Ragged.from_arrays([np.asarray(s[key], np.float32).reshape(-1, 2) for s in samples])


@dataclass(frozen=True)
class VideoTextFields:
    """The four ragged fields of a set of videos (see the module docstring), one sample per video."""

    video: Ragged
    video_times: Ragged
    text: Ragged
    text_times: Ragged

    @property
    def frames(self) -> bool:
        """Whether `video` holds frames per segment (two levels) rather than pooled segments."""
        return self.video.levels == 2

    @classmethod
    def from_samples(cls, samples: Sequence[Mapping[str, Any]]) -> VideoTextFields:
        """The fields of per-sample dicts (`dataset[i]`): each field concatenated once."""
        if "frames" in samples[0]:
            video = two_levels([s["frames"] for s in samples], [s["frame_counts"] for s in samples])
        else:
            video = Ragged.from_arrays([np.asarray(s["video"]) for s in samples])
        text = two_levels([s["text_ids"] for s in samples], [s["token_counts"] for s in samples])
        return cls(video, _times(samples, "video_times"), text, _times(samples, "text_times"))

    def sample(self, row: int, index: int) -> dict[str, Any]:
        """Sample `row` as the per-sample dict `dataset[index]` returns (a compact copy)."""
        video = self.video.take([row])
        text = self.text.take([row])
        sample: dict[str, Any] = {"index": int(index)}
        if self.frames:
            sample["frames"], sample["frame_counts"] = video.values, video.lengths
        else:
            sample["video"] = video.values
        sample["video_times"] = self.video_times.take([row]).values
        sample["text_times"] = self.text_times.take([row]).values
        sample["token_counts"], sample["text_ids"] = text.lengths, text.values
        return sample


@dataclass(frozen=True, eq=False)
class VideoTextSelection(Sequence):
    """A batch: which samples (`rows`) of `fields`, and their dataset `indices`. Nothing is copied.

    Iterating it (or indexing it) gives per-sample dicts, so code written for a list of samples
    keeps working; the collate reads `fields` and `rows` directly.
    """

    fields: VideoTextFields
    rows: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_samples(cls, samples: Sequence[Mapping[str, Any]]) -> VideoTextSelection:
        """A selection of per-sample dicts (their arrays concatenated once per field)."""
        if len(samples) == 0:
            raise ValueError("cannot collate an empty batch")
        indices = np.fromiter((int(s["index"]) for s in samples), np.int64, len(samples))
        return cls(VideoTextFields.from_samples(samples), np.arange(len(samples)), indices)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        return self.fields.sample(int(self.rows[k]), int(self.indices[k]))
