"""`VideoTextDataset`: one sample per video over unpadded storage, and the pure functions that index it.

Checking (which videos and captions are usable) and indexing (where each sample's segments,
frames and tokens lie) are separate vectorised steps; only the per-video feature checks call
the store once per video (headers, plus one scan for NaN / inf in stored features). Every bad
video or caption goes through `report.bad(...)` under the dataset's split name.

What a batch is gathered from is four `Ragged` fields
(`.storage`): tokens and timestamps are indexed at construction; the served video features
(pooled segments, or the kept frames) are read from the store once, when first needed, so a
batch never touches the store. The DataModule builds these datasets only in `prepare_data`, to
write what they serve to split tables (`.served`); every process then serves the mapped
tables (`MappedVideoTextDataset`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from torch.utils.data import Dataset

from varlen.batching.ragged import Ragged
from varlen.datasets.video_text.captions import CaptionTable
from varlen.datasets.video_text.features import SHOWN_FRAMES, FeatureStore, bad_frames, frame_ranges
from varlen.datasets.video_text.storage import VideoTextFields, VideoTextSelection, segment_means
from varlen.datasets.video_text.tokenize import Tokenized
from varlen.errors import DataError
from varlen.prepare.report import SOURCE, DataReport

__all__ = [
    "Segmentation",
    "VideoTextDataset",
    "caption_layout",
    "caption_problems",
    "check_video",
    "concat_ranges",
    "fixed_cuts",
    "resolve_times",
    "sample_shapes",
    "subsample",
]

Segmentation = Literal["annotated", "fixed"]
#: (item, where, reason) of one bad video or caption
Problem = tuple[str, str, str]


# -- pure helpers -------------------------------------------------------------------------------


def concat_ranges(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """`concatenate([arange(a, b) for a, b in zip(first, last)])` without the loop."""
    counts = np.asarray(last) - np.asarray(first)
    offsets = np.repeat(np.asarray(first) - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(int(counts.sum())) + offsets


def subsample(first: np.ndarray, last: np.ndarray, cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices of each segment, at most `cap` per segment (evenly spaced); and the counts."""
    counts = last - first
    if cap is None or counts.max(initial=0) <= cap:
        return concat_ranges(first, last), counts
    kept = np.minimum(counts, cap)
    seg = np.repeat(np.arange(len(first)), kept)
    pos = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    return first[seg] + (pos * counts[seg]) // kept[seg], kept  # evenly spaced picks inside each segment


# -- checking -----------------------------------------------------------------------------------


def check_video(
    table: CaptionTable, store: FeatureStore, video: int, feature_dim: int, has_captions: bool
) -> tuple[int, Problem | None]:
    """Feature frames of `table.videos[video]`, or 0 and what is wrong with it."""
    vid = table.videos[video]
    if vid not in store:
        return 0, (
            "video",
            table.video_where(video),
            f"captions refer to a video with no features in {store.source}",
        )
    where = f"{store.source}, video {vid!r}"
    try:
        frames, dim = store.shape(vid)
        if frames > 0 and dim == feature_dim and has_captions and store.checks_finite:
            nonfinite = bad_frames(store.load(vid))
        else:
            nonfinite = np.zeros(0, np.int64)
    except DataError as err:
        return 0, ("video", f"{where} ({err})", "features cannot be read")
    if dim != feature_dim:
        return 0, ("video", f"{where} (dimension {dim})", f"feature dimension differs from the expected {feature_dim}")
    if frames <= 0:
        return 0, ("video", where, "video has no feature frames (T = 0)")
    if not has_captions:
        return 0, ("video", table.video_where(video), "video has no segments (no captions)")
    if len(nonfinite):
        return 0, ("video", f"{where} (frame(s) {nonfinite[:SHOWN_FRAMES].tolist()})", "features hold NaN or inf")
    return frames, None


def resolve_times(table: CaptionTable, frames: np.ndarray, fps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(duration [V], feature_end [V], caption end [R])`: whole-video captions end with their video."""
    feature_end = frames / fps  # seconds the features cover
    duration = np.where(np.isfinite(table.durations), table.durations, feature_end)
    return duration, feature_end, np.where(np.isnan(table.end), duration[table.video], table.end)


def caption_problems(
    table: CaptionTable, end: np.ndarray, duration: np.ndarray, feature_end: np.ndarray, fps: float
) -> list[tuple[np.ndarray, str]]:
    """`(bad rows [R], reason)` of every caption check, in the order they are reported."""
    start, video = table.start, table.video
    # one frame of slack for rounding (a 12.4 s annotation on 12 frames at 1 fps is fine)
    tolerance = 1.0 / fps
    with np.errstate(invalid="ignore"):
        return [
            (~np.isfinite(start) | ~np.isfinite(end), "timestamps are not finite numbers"),
            (start < 0, "segment starts before 0 s"),
            (end <= start, "segment end is not after its start"),
            (end > duration[video] + tolerance, "segment ends past the video's end"),
            # the annotated duration may promise more than the features hold: frame ranges
            # would then be clamped to the last frame and the segment filled with other frames
            (end > feature_end[video] + tolerance, "segment ends past the end of the video's features"),
            (np.array([not t.strip() for t in table.text], bool).reshape(-1), "caption is empty"),
        ]


# -- indexing -----------------------------------------------------------------------------------


def caption_layout(
    video_of_row: np.ndarray, start: np.ndarray, keep: np.ndarray, videos: np.ndarray, num_videos: int
) -> tuple[np.ndarray, np.ndarray]:
    """Kept caption rows grouped by video (in `videos` order), by start inside a video; and offsets."""
    position = np.full(num_videos, -1, np.int64)
    position[videos] = np.arange(len(videos))
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((start[rows], position[video_of_row[rows]]))]
    per_video = np.bincount(position[video_of_row[rows]], minlength=len(videos))
    return rows, np.concatenate([[0], np.cumsum(per_video)]).astype(np.int64)


def fixed_cuts(duration: np.ndarray, segment_duration: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(start, end, offsets)` of consecutive `segment_duration` cuts of every video."""
    cuts = np.maximum(1, np.ceil(duration / segment_duration).astype(np.int64))
    offsets = np.concatenate([[0], np.cumsum(cuts)]).astype(np.int64)
    k = np.arange(int(cuts.sum())) - np.repeat(offsets[:-1], cuts)
    return k * segment_duration, np.minimum((k + 1) * segment_duration, np.repeat(duration, cuts)), offsets


def _per_sample(reduce: np.ufunc, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """`reduce` of `values` within each sample's `offsets` range (every sample non-empty)."""
    return reduce.reduceat(values, offsets[:-1]) if len(offsets) > 1 else np.zeros(0, np.int64)


def sample_shapes(
    segment_offsets: np.ndarray, text_offsets: np.ndarray, segment_sizes: np.ndarray, token_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`lengths [N, 2]` (video elements, caption tokens) and `shapes [N, 4]` (see the dataset)."""
    segments, captions = np.diff(segment_offsets), np.diff(text_offsets)
    video = _per_sample(np.add, segment_sizes, segment_offsets)
    tokens = _per_sample(np.add, token_counts, text_offsets)
    lengths = np.stack([video, tokens], axis=1).astype(np.int64)
    longest = [
        _per_sample(np.maximum, segment_sizes, segment_offsets),
        _per_sample(np.maximum, token_counts, text_offsets),
    ]
    return lengths, np.stack([segments, longest[0], captions, longest[1]], axis=1).astype(np.int64)


# -- the dataset --------------------------------------------------------------------------------


class VideoTextDataset(Dataset):
    """Videos with their segments and captions, one sample per video, unpadded.

    Video segments are the annotated segments (`segmentation="annotated"`: one caption per
    segment, a diagonal alignment) or fixed-duration cuts of the whole video
    (`segmentation="fixed"`; captions keep their own spans). A segment's features are its
    frames' mean (`frames=False`) or the frames themselves, at most
    `max_frames_per_segment` evenly spaced ones (`frames=True`).

    A sample is a dict of numpy arrays:

    - `index`: position in this dataset;
    - `video` `[S_v, D]` float32 (pooled), or `frames` `[F_total, D]` with
      `frame_counts` `[S_v]` (frames of each segment, in order);
    - `video_times` `[S_v, 2]` and `text_times` `[S_t, 2]` (start, end seconds);
    - `text_ids` `[L_total]` int64 and `token_counts` `[S_t]` (tokens of each caption).

    `lengths` `[N, 2]`: real elements per sample (video segments, or frames when
    `frames=True`; caption tokens in total). `shapes` `[N, 4]`: the axes a padded batch
    takes its maxima over, per video: (segments, its longest segment in frames (1 when
    pooled), captions, its longest caption in tokens). The DataModule budgets on these.

    `__getitems__(indices)` returns a `VideoTextSelection`
    over the `fields` (no copy, no store read); the collate gathers it. `dataset[i]`
    reads sample `i` from the store, checked again (a file changed since `setup` is caught).
    Memory: `video` holds the served features once, `4 * D` bytes per pooled segment
    or kept frame (at most `max_frames_per_segment` per segment), never the whole videos; a
    mapped split table holds them on disk instead (`.served`).

    Args:
        table: captions with timestamps.
        features: the feature store.
        tokenized: token ids of `table.text` (same row order).
        videos: indices into `table.videos` that form this split (default: all).
        segmentation, segment_duration, frames, max_frames_per_segment: see above.
        feature_dim: expected feature size; default: the store's (majority) `dim`. A video
            with another size is bad input.
        report: where bad videos / captions go (raised or counted) and truncated captions are
            counted; default: a raising `DataReport`.
        split: the split name this dataset reports under.
    """

    def __init__(
        self,
        table: CaptionTable,
        features: FeatureStore,
        tokenized: Tokenized,
        videos: Sequence[int] | np.ndarray | None = None,
        segmentation: Segmentation = "annotated",
        segment_duration: float = 10.0,
        frames: bool = False,
        max_frames_per_segment: int | None = 32,
        feature_dim: int | None = None,
        report: DataReport | None = None,
        split: str = SOURCE,
    ) -> None:
        if segmentation not in ("annotated", "fixed"):
            raise ValueError(f"segmentation must be 'annotated' or 'fixed', got {segmentation!r}")
        if segment_duration <= 0:
            raise ValueError(f"segment_duration must be > 0, got {segment_duration}")
        self.table, self.features, self.fps = table, features, float(features.fps)
        self.segmentation, self.segment_duration = segmentation, float(segment_duration)
        self.frames, self.max_frames_per_segment = frames, max_frames_per_segment
        self.feature_dim = int(features.dim if feature_dim is None else feature_dim)
        self.report, self.split = report or DataReport(), split
        videos = np.arange(len(table.videos)) if videos is None else np.asarray(videos, dtype=np.int64)
        kept, keep, frame_counts, duration, end = self._select(videos)
        self._index(kept, keep, frame_counts, duration, end, tokenized)

    def _bad(self, problem: Problem) -> None:
        item, where, reason = problem
        self.report.bad(where, reason, item=item, split=self.split)

    def _select(self, videos: np.ndarray) -> tuple[np.ndarray, ...]:
        """The usable videos (in split order) and caption rows; every other one is reported."""
        table, num_videos = self.table, len(self.table.videos)
        has_captions = np.bincount(table.video, minlength=num_videos) > 0
        frame_counts = np.zeros(num_videos, np.int64)
        for v in videos.tolist():
            frame_counts[v], problem = check_video(table, self.features, v, self.feature_dim, bool(has_captions[v]))
            if problem is not None:
                self._bad(problem)
        duration, feature_end, end = resolve_times(table, frame_counts, self.fps)
        keep = frame_counts[table.video] > 0  # frame counts are > 0 only for this split's good videos
        for bad, reason in caption_problems(table, end, duration, feature_end, self.fps):
            for r in np.flatnonzero(bad & keep).tolist():
                v = table.video[r]
                detail = (
                    f"start={table.start[r]:g} s, end={end[r]:g} s, duration={duration[v]:g} s, "
                    f"{frame_counts[v]} feature frames at {self.fps:g} fps"
                )
                self._bad(("caption", f"{table.where(r)} ({detail})", reason))
            keep &= ~bad
        alive = np.bincount(table.video[keep], minlength=num_videos) > 0
        for v in np.flatnonzero((frame_counts > 0) & ~alive).tolist():
            self._bad(("video", table.video_where(v), "video has no segments left after skipping its bad captions"))
        return videos[alive[videos]], keep, frame_counts, duration, end

    def _index(
        self,
        kept: np.ndarray,
        keep: np.ndarray,
        frame_counts: np.ndarray,
        duration: np.ndarray,
        end: np.ndarray,
        tokenized: Tokenized,
    ) -> None:
        """Where each sample's captions, tokens, segments and frames lie (pure array work)."""
        table = self.table
        self.video_ids = [table.videos[v] for v in kept.tolist()]
        self.rows, self.text_offsets = caption_layout(table.video, table.start, keep, kept, len(table.videos))
        self.text_start, self.text_end = table.start[self.rows], end[self.rows]
        first = tokenized.offsets[self.rows]
        self.token_counts = tokenized.lengths[self.rows]
        self.token_ids = tokenized.ids[concat_ranges(first, first + self.token_counts)]
        self.token_offsets = np.concatenate([[0], np.cumsum(self.token_counts)]).astype(np.int64)
        self.report.truncate(self.split, int(tokenized.truncated[self.rows].sum()), "caption")
        self.num_frames, self.duration = frame_counts[kept], duration[kept]
        if self.segmentation == "annotated":
            self.video_start, self.video_end = self.text_start, self.text_end
            self.segment_offsets = self.text_offsets
        else:
            self.video_start, self.video_end, self.segment_offsets = fixed_cuts(self.duration, self.segment_duration)
        segments = np.diff(self.segment_offsets)
        self.frame_first, self.frame_last = frame_ranges(
            self.video_start, self.video_end, self.fps, np.repeat(self.num_frames, segments)
        )
        if self.frames:
            sizes = self.frame_last - self.frame_first
            sizes = sizes if self.max_frames_per_segment is None else np.minimum(sizes, self.max_frames_per_segment)
        else:
            sizes = np.ones(len(self.frame_first), np.int64)
        self.lengths, self.shapes = sample_shapes(self.segment_offsets, self.text_offsets, sizes, self.token_counts)
        self.text = Ragged(self.token_ids, self.token_offsets[:-1], self.token_counts, self.text_offsets)
        spans = np.stack([self.video_start, self.video_end], 1).astype(np.float32)
        self.video_times = Ragged.from_offsets(spans, self.segment_offsets)
        spans = np.stack([self.text_start, self.text_end], 1).astype(np.float32)
        self.text_times = Ragged.from_offsets(spans, self.text_offsets)

    @functools.cached_property
    def _frame_picks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Frames kept (`frames=True`): `(picks [F], kept per segment [R_v], offsets [R_v + 1])`."""
        picks, counts = subsample(self.frame_first, self.frame_last, self.max_frames_per_segment)
        return picks, counts, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def video_bounds(self) -> np.ndarray:
        """`[N + 1]`: each sample's rows of the served features (segments pooled, or kept frames)."""
        return self._frame_picks[2][self.segment_offsets] if self.frames else self.segment_offsets

    def read_video(self, values: np.ndarray) -> np.ndarray:
        """Fill `values` `[video_bounds()[-1], D]` with every sample's served features, one store
        read per video (the store is keyed by video); any array will do (memory, or a mapped file)."""
        bounds, segments = self.video_bounds(), self.segment_offsets
        for i in range(len(self)):
            feats, part = self.load(i), slice(bounds[i], bounds[i + 1])
            if self.frames:
                values[part] = feats[self._frame_picks[0][part]]
            else:
                seg = slice(segments[i], segments[i + 1])
                values[part] = segment_means(feats, self.frame_first[seg], self.frame_last[seg])
        return values

    def video_field(self, values: np.ndarray) -> Ragged:
        """The `video` field over `values` as `read_video` fills them."""
        if self.frames:
            _, counts, per_segment = self._frame_picks
            return Ragged(values, per_segment[:-1], counts, self.segment_offsets)
        return Ragged.from_offsets(values, self.segment_offsets)

    @functools.cached_property
    def video(self) -> Ragged:
        """The served video features of every sample: read from the store once, one call per video.

        Pooled: one level, `[segments, D]` means. Frames: two levels (video -> segments ->
        frames), the kept frames `[frames, D]`. Built on first use, in memory (the DataModule
        writes them to its split tables instead, `.served`, and serves those).
        """
        values = np.empty((int(self.video_bounds()[-1]), self.feature_dim), np.float32)
        return self.video_field(self.read_video(values))

    def captions(self, i: int) -> list[str]:
        """The caption texts of sample `i`, in served order."""
        rows = self.rows[self.text_offsets[i] : self.text_offsets[i + 1]]
        return [self.table.text[r] for r in rows.tolist()]

    @property
    def fields(self) -> VideoTextFields:
        """What batches are gathered from (builds `video` on first use)."""
        return VideoTextFields(self.video, self.video_times, self.text, self.text_times)

    def __len__(self) -> int:
        return len(self.video_ids)

    def load(self, i: int) -> np.ndarray:
        """Video `i`'s frames, checked again (a file changed since the dataset was built)."""
        vid = self.video_ids[i]
        feats = self.features.load(vid)
        where = f"{self.features.source}, video {vid!r}"
        if feats.ndim != 2 or feats.shape[1] != self.feature_dim:
            raise DataError(f"{where}: features of shape {feats.shape}, expected [T, {self.feature_dim}]")
        if self.features.checks_finite and len(bad := bad_frames(feats)):  # NaN would spread to the whole batch
            raise DataError(f"{where}: features hold NaN or inf in frame(s) {bad[:SHOWN_FRAMES].tolist()}")
        return feats

    def __getitems__(self, indices: Sequence[int]) -> VideoTextSelection:
        """The batch `indices` as a selection of `fields`: no loop, no copy (the collate gathers)."""
        rows = np.asarray(indices, np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"samples {rows.min()}..{rows.max()} out of range for {len(self)} videos")
        return VideoTextSelection(self.fields, rows, rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} videos")
        feats = self.load(i)
        seg = slice(self.segment_offsets[i], self.segment_offsets[i + 1])
        cap = slice(self.text_offsets[i], self.text_offsets[i + 1])
        first, last = self.frame_first[seg], self.frame_last[seg]
        sample: dict[str, Any] = {"index": i}
        if self.frames:
            picks, counts = subsample(first, last, self.max_frames_per_segment)
            sample["frames"], sample["frame_counts"] = feats[picks], counts
        else:
            sample["video"] = segment_means(feats, first, last)
        sample["video_times"] = self.video_times.values[seg].copy()
        sample["text_times"] = self.text_times.values[cap].copy()
        sample["token_counts"] = self.token_counts[cap]
        sample["text_ids"] = self.token_ids[self.token_offsets[cap.start] : self.token_offsets[cap.stop]]
        return sample
