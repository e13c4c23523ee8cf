"""What a video-text split serves, as one Arrow table: written once per node, mapped by every process.

`prepare_data` indexes each split with `VideoTextDataset` (which checks the
source and reports bad items) and `write_split` writes what it serves, one row per video:

================  =========================================  ==============================================
column            Arrow type                                 what
================  =========================================  ==============================================
`video_id`      string                                     the video's id
`video`         list<fixed_size_list<float32, D>>          pooled segment features (`frames=False`), or
                  list<list<fixed_size_list<float32, D>>>    the kept frames of each segment
`frame_counts`  list<int64>                                kept frames per segment (`frames=True` only)
`video_times`   list<fixed_size_list<float32, 2>>          (start, end) seconds of each segment
`frame_range`   list<fixed_size_list<int64, 2>>            each segment's first and one-past-last frame
`text`          list<list<int64>>                          token ids of each caption
`token_counts`  list<int64>                                tokens per caption
`text_times`    list<fixed_size_list<float32, 2>>          (start, end) seconds of each caption
`caption_text`  list<string>                               the captions as the source wrote them
`caption_row`   list<int64>                                their rows in the source's caption table
`num_frames`    int64                                      feature frames of the video
`duration`      float64                                    seconds of the video
`lengths`       fixed_size_list<int64, 2>                  the sampler's sizes (see `VideoTextDataset`)
`shapes`        fixed_size_list<int64, 4>                  the padded axes' maxima (idem)
================  =========================================  ==============================================

(`list` is Arrow's `large_list`, 64-bit offsets.) The features go through a scratch file
mapped in the cache folder, video by video, so building holds one video's frames in memory, not
the split's. `MappedVideoTextDataset` serves a table: every array a read-only view of the
file (processes share one copy through the page cache), and it pickles as the table's path. The
files open in pyarrow too (`pyarrow.ipc.open_stream(path).read_all()`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.video_text.dataset import VideoTextDataset
from varlen.datasets.video_text.features import FeatureStore
from varlen.prepare.report import SOURCE
from varlen.storage.cache import file_hash, reserve, scratch
from varlen.storage.tables import MappedTable, write_table

__all__ = ["VERSION", "MappedVideoTextDataset", "input_fingerprint", "split_columns", "write_split"]

#: format of the split tables (and of what the build puts in them); a new one is a new key
VERSION = "video-text split 1"


def input_fingerprint(path: str | os.PathLike | None) -> list[Any] | None:
    """What a cache key says of an input file or folder: its path as given (the report's messages
    name it) and its content.

    A file: its SHA-256. A folder of `.npy` features: each file's name, size and modification
    time (as Hugging Face `datasets` fingerprints local files), because hashing them would read
    every feature file again in every process on every setup. A missing path: "missing" (the
    reader then says what is missing and where to get it).
    """
    if path is None:
        return None
    found = Path(path)
    if found.is_dir():
        files = [entry for entry in os.scandir(found) if entry.name.endswith(".npy")]
        return [str(path), sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)]
    return [str(path), file_hash(found) if found.is_file() else "missing"]


def split_columns(dataset: VideoTextDataset, video: Ragged) -> dict[str, np.ndarray | Ragged]:
    """The columns of `dataset`'s table (the module docstring), its served features being `video`."""
    segments, captions = dataset.segment_offsets, dataset.text_offsets
    texts = np.array([dataset.table.text[r] for r in dataset.rows.tolist()], dtype=str)
    columns: dict[str, np.ndarray | Ragged] = {"video_id": np.array(dataset.video_ids, dtype=str), "video": video}
    if dataset.frames:
        columns["frame_counts"] = Ragged.from_offsets(video.lengths, segments)
    frame_range = np.stack([dataset.frame_first, dataset.frame_last], 1).astype(np.int64)
    return columns | {
        "video_times": dataset.video_times,
        "frame_range": Ragged.from_offsets(frame_range, segments),
        "text": dataset.text,
        "token_counts": Ragged.from_offsets(dataset.token_counts, captions),
        "text_times": dataset.text_times,
        "caption_text": Ragged.from_offsets(texts, captions),
        "caption_row": Ragged.from_offsets(dataset.rows, captions),
        "num_frames": np.asarray(dataset.num_frames, np.int64),
        "duration": np.asarray(dataset.duration, np.float64),
        "lengths": dataset.lengths,
        "shapes": dataset.shapes,
    }


def write_split(path: str | os.PathLike, dataset: VideoTextDataset, key: str) -> Path:
    """Write what `dataset` serves to the table `path` (atomically), its features read from the
    store video by video into a scratch file beside it (memory holds one video's frames)."""
    path = Path(path)
    rows = int(dataset.video_bounds()[-1])
    features = scratch(path, ".features")
    try:
        shape = (rows, dataset.feature_dim)
        if rows:
            reserve(features, rows * dataset.feature_dim * 4)  # a full disk: an error now, not a SIGBUS mid-copy
        values = np.memmap(features, np.float32, "r+", shape=shape) if rows else np.zeros(shape, np.float32)
        dataset.read_video(values)
        columns = split_columns(dataset, dataset.video_field(values))
        return write_table(path, columns, version=VERSION, key=key)
    finally:
        features.unlink(missing_ok=True)


def _offsets(table: MappedTable, name: str, inner: bool = False) -> np.ndarray:
    """The `[R + 1]` offsets of list column `name` (of its inner lists), a view of the file."""
    column = table.batch.column(name)
    return (column.values if inner else column).offsets.to_numpy(zero_copy_only=True)


class MappedVideoTextDataset(VideoTextDataset):
    """A split served from its table: the samples and batches of the `VideoTextDataset` it was written from.

    Every array (features, tokens, times, sizes) is a read-only view of the mapped file: nothing
    is read from the source or the feature store, and a loader worker under any start method
    shares the pages instead of holding a copy. Pickled (a spawned worker, `ddp_spawn`), it is
    the table's path and two settings: the receiving process maps the file again.

    `dataset[i]` re-reads video `i` from `features` and checks it again when given a store
    (real feature files, in the process that set the dataset up: a file changed since the table
    was written is caught); without one (generated features, or a process it was sent to) it
    serves the table's sample, the same values.

    Args:
        table: the split's mapped table (`write_split`).
        features: the feature store it was written from, or None.
        max_frames_per_segment: the setting it was written with (for re-reading frames).
        split: the split's name.
    """

    def __init__(
        self,
        table: MappedTable,
        features: FeatureStore | None = None,
        max_frames_per_segment: int | None = None,
        split: str = SOURCE,
    ) -> None:
        self.served, self.features, self.split = table, features, split
        self.max_frames_per_segment = max_frames_per_segment
        self.fps = None if features is None else float(features.fps)
        self._map()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.served, None, self.max_frames_per_segment, self.split))

    def _map(self) -> None:
        """Every field and per-sample array as a view of the table (lengths from its stored columns)."""
        table = self.served
        self.lengths, self.shapes = table.numpy("lengths"), table.numpy("shapes")
        segments, captions = self.shapes[:, 0], self.shapes[:, 2]
        self.video_times = table.ragged("video_times", lengths=segments)
        self.text_times = table.ragged("text_times", lengths=captions)
        self.token_counts = table.ragged("token_counts", lengths=captions).values
        self.text = table.ragged("text", lengths=self.token_counts)
        self.rows = table.ragged("caption_row", lengths=captions).values
        frame_range = table.ragged("frame_range", lengths=segments).values
        self.frame_first, self.frame_last = frame_range[:, 0], frame_range[:, 1]
        self.frames = "frame_counts" in table.columns
        counts = table.ragged("frame_counts", lengths=segments).values if self.frames else segments
        self.video = table.ragged("video", lengths=counts)  # the served features: never read from the store
        self.feature_dim = int(self.video.values.shape[1])
        self.segment_offsets, self.text_offsets = _offsets(table, "video_times"), self.text.groups
        self.token_ids, self.token_offsets = self.text.values, _offsets(table, "text", inner=True)
        self.num_frames, self.duration = table.numpy("num_frames"), table.numpy("duration")

    def __len__(self) -> int:
        return len(self.served)

    @functools.cached_property
    def video_ids(self) -> list[str]:  # type: ignore[override]
        return self.served.numpy("video_id").tolist()

    def captions(self, i: int) -> list[str]:
        return self.served.batch.column("caption_text")[int(i)].as_py()

    def load(self, i: int) -> np.ndarray:
        if self.features is None:
            raise ValueError("this dataset has no feature store (its served features are dataset.video)")
        return super().load(i)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if self.features is not None or not 0 <= i < len(self):
            return super().__getitem__(i)  # re-read and checked (or an IndexError)
        return self.fields.sample(i, i)
