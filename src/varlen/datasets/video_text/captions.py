"""Caption files with timestamps -> a `CaptionTable`: YouCook2, MSR-VTT and a generic JSONL.

A file that cannot be read at all (missing, not JSON, not the expected layout, no videos)
raises; a single bad caption or video in it goes through `report.bad(...)`: raised under
`on_bad="raise"` (the default `DataReport`), counted and left out
under `"skip"`. Every file may be compressed (`.gz`, `.bz2`, `.xz`, `.zst`:
`varlen.datasets.files`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from varlen.datasets.files import read_text, table_suffix
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.report import DataReport

__all__ = [
    "MSRVTT_DATA_URL",
    "READERS",
    "TEST_NAMES",
    "VAL_NAMES",
    "YOUCOOK2_URL",
    "CaptionTable",
    "read_jsonl",
    "read_msrvtt",
    "read_youcook2",
]

YOUCOOK2_URL = "http://youcook2.eecs.umich.edu/static/YouCookII/youcookii_annotations_trainval.tar.gz"
#: CLIP4Clip's MSR-VTT split files: MSRVTT_data.json, MSRVTT_train.9k.csv / .7k.csv, MSRVTT_JSFUSION_test.csv
MSRVTT_DATA_URL = "https://github.com/ArrowLuo/CLIP4Clip/releases/download/v0.0/msrvtt_data.zip"
#: caption files whose rows are named by their line (the others: a JSON entry's position from 1)
LINE_FILES = (".jsonl", ".csv")
#: subset names (lower case) that mean the validation / the test split
VAL_NAMES = ("validation", "validate", "val")
TEST_NAMES = ("testing", "test")


@dataclass
class CaptionTable:
    """Captions with timestamps, one row per caption, plus per-video metadata.

    Attributes:
        videos: video ids; row `video[k]` indexes this list.
        durations: seconds per video (NaN when the source does not say; then the features do).
        subsets: split name per video as the source names it ("training", "validate", ...) or "".
        video: `[R]` video index of each caption row.
        start, end: `[R]` seconds (`end` NaN: the caption spans its whole video).
        text: `[R]` caption strings.
        source: file(s) the table was read from (for error messages).
        rows: `[R]` where each caption is in its source, for error messages: the file's line in a file
            with lines (JSONL, CSV: the test pairs), else its position counted from 1 (JSON).
        video_sources: the file each video's captions come from (default: `source` for every
            video); a table joined from several files (MSR-VTT's JSON and its test pairs) names
            the right one in every message.
    """

    videos: list[str]
    durations: np.ndarray
    subsets: list[str]
    video: np.ndarray
    start: np.ndarray
    end: np.ndarray
    text: list[str]
    source: str = "<memory>"
    rows: np.ndarray | None = None
    video_sources: list[str] | None = None

    def __post_init__(self) -> None:
        self.durations = np.asarray(self.durations, dtype=np.float64)
        self.video = np.asarray(self.video, dtype=np.int64)
        self.start = np.asarray(self.start, dtype=np.float64)
        self.end = np.asarray(self.end, dtype=np.float64)
        self.rows = np.arange(1, len(self.text) + 1) if self.rows is None else np.asarray(self.rows, dtype=np.int64)
        if self.video_sources is None:
            self.video_sources = [self.source] * len(self.videos)

    @classmethod
    def from_records(
        cls,
        records: Iterable[tuple[str, float, float, str, int]],
        durations: Mapping[str, float] | None = None,
        subsets: Mapping[str, str] | None = None,
        source: str = "<memory>",
        extra_videos: Sequence[str] = (),
        video_sources: Mapping[str, str] | None = None,
    ) -> CaptionTable:
        """Build from `(video_id, start, end, text, row)` records (videos in first-seen order).

        `extra_videos` come first, in their order, even without a caption (so that the
        dataset can report a video with no captions). `video_sources`: the file of a video's
        captions, where it is not `source`.
        """
        ids: dict[str, int] = {v: i for i, v in enumerate(dict.fromkeys(extra_videos))}
        columns: list[list[Any]] = [[], [], [], [], []]
        for vid, s, e, t, r in records:
            for column, value in zip(columns, (ids.setdefault(vid, len(ids)), s, e, t, r), strict=True):
                column.append(value)
        video, start, end, text, rows = columns
        videos, durations, subsets = list(ids), durations or {}, subsets or {}
        return cls(
            videos=videos,
            durations=np.array([durations.get(v, np.nan) for v in videos], dtype=np.float64),
            subsets=[subsets.get(v, "") for v in videos],
            video=np.asarray(video, dtype=np.int64),
            start=np.asarray(start, dtype=np.float64),
            end=np.asarray(end, dtype=np.float64),
            text=[str(t) for t in text],
            source=source,
            rows=np.asarray(rows, dtype=np.int64),
            video_sources=[(video_sources or {}).get(v, source) for v in videos],
        )

    def __len__(self) -> int:
        return len(self.text)

    def video_where(self, video: int) -> str:
        """Human-readable location of video `video` (its file and id), for error messages."""
        return f"{self.video_sources[video]}, video {self.videos[video]!r}"

    def where(self, row: int) -> str:
        """Human-readable location of caption row `row`, for error messages: `line N` in a file with
        lines (JSONL, CSV), else `row N` (from 1), as every reader names rows."""
        video = int(self.video[row])
        lines = table_suffix(self.video_sources[video]) in LINE_FILES
        return f"{self.video_where(video)}, {'line' if lines else 'row'} {int(self.rows[row])}"

    def head(self, count: int) -> CaptionTable:
        """The first `count` videos and their captions (quick runs)."""
        keep = self.video < count
        return CaptionTable(
            videos=self.videos[:count],
            durations=self.durations[:count],
            subsets=self.subsets[:count],
            video=self.video[keep],
            start=self.start[keep],
            end=self.end[keep],
            text=[t for t, k in zip(self.text, keep, strict=True) if k],
            source=self.source,
            rows=self.rows[keep],
            video_sources=self.video_sources[:count],
        )


# -- helpers shared by the readers ------------------------------------------------------------


def _seconds(value: Any) -> float | None:
    """A finite time in seconds, or None."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


def _show(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _open_json(path: Path, what: str, fetch: str) -> Any:
    """The parsed JSON of `path`; a missing file or invalid JSON says so."""
    if not path.is_file():
        raise DatasetNotFoundError(what, path, fetch)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err})") from err


def _non_empty(table: CaptionTable) -> CaptionTable:
    if not table.videos:
        raise DataError(f"{table.source}: holds no videos")
    return table


# -- the readers --------------------------------------------------------------------------------


def read_youcook2(path: str | os.PathLike, report: DataReport | None = None) -> CaptionTable:
    """Read the YouCook2 annotation JSON (`database[vid].annotations[*].segment / .sentence`).

    Keeps `duration` and `subset` ("training" / "validation") per video. A video with an
    empty `annotations` list is kept (with no rows) so that the dataset can report it.

    Raises:
        DatasetNotFoundError: no file at `path` (it comes in `YOUCOOK2_URL`).
        DataError: not JSON, no `database`, no videos; or a bad video / caption under `"raise"`.
    """
    path, report = Path(path), report or DataReport()
    fetch = f"download {YOUCOOK2_URL} and extract youcookii_annotations_trainval.json to {path}"
    data = _open_json(path, "YouCook2 annotation JSON", fetch)
    database = data.get("database") if isinstance(data, dict) else None
    if not isinstance(database, dict):
        raise DataError(f"{path}: not a YouCook2 annotation file (expected {{'database': {{video id: ...}}}})")
    records, durations, kept = [], {}, []
    for vid, entry in database.items():
        entry = entry if isinstance(entry, dict) else {}
        if "duration" in entry and (seconds := _seconds(entry["duration"])) is None:
            where = f"{path}, video {vid!r} (duration {_show(entry['duration'])})"
            report.bad(where, "duration must be a finite number of seconds", item="video")
            continue
        if "duration" in entry:
            durations[vid] = seconds
        kept.append(vid)
        for k, ann in enumerate(entry.get("annotations", []), 1):
            try:
                (s, e), sentence = ann["segment"], ann["sentence"]
                records.append((vid, float(s), float(e), str(sentence), k))
            except (KeyError, TypeError, ValueError):
                where = f"{path}, video {vid!r}, annotation {k} (got {_show(ann)})"
                report.bad(where, "needs segment [start, end] in seconds and sentence", item="caption")
    subsets = {v: str(e.get("subset", "")) for v, e in database.items() if isinstance(e, dict)}
    return _non_empty(CaptionTable.from_records(records, durations, subsets, str(path), extra_videos=kept))


def _msrvtt_videos(path: Path, videos: list, report: DataReport) -> tuple[list[str], dict, dict]:
    """Ids, durations and subsets of the `videos` list of an MSR-VTT `videodatainfo` file."""
    kept, durations, subsets = [], {}, {}
    for k, v in enumerate(videos, 1):
        if not isinstance(v, dict) or "video_id" not in v:
            report.bad(f"{path}, video entry {k} (got {_show(v)})", "needs a video_id", item="video")
            continue
        vid = str(v["video_id"])
        if "start time" in v or "end time" in v:
            start, end = _seconds(v.get("start time")), _seconds(v.get("end time"))
            if start is None or end is None:
                times = f"start time {_show(v.get('start time'))}, end time {_show(v.get('end time'))}"
                where = f"{path}, video {vid!r} ({times})"
                report.bad(where, "start time and end time must be finite numbers of seconds", item="video")
                continue
            durations[vid] = end - start
        kept.append(vid)
        subsets[vid] = str(v.get("split", ""))
    return kept, durations, subsets


def read_msrvtt(path: str | os.PathLike, report: DataReport | None = None) -> CaptionTable:
    """Read MSR-VTT-style captions: every caption describes its whole video.

    Accepts the MSR-VTT `videodatainfo` JSON (`videos[*]` with `video_id`, `start time`,
    `end time`, `split`; `sentences[*]` with `video_id`, `caption`) or a JSON list of
    `{"video_id", "caption"}` (no durations: they come from the features). Each caption spans
    `[0, duration]` (its `end` is NaN until the dataset knows the duration).
    """
    path, report = Path(path), report or DataReport()
    if path.is_file() and table_suffix(path) == ".csv":
        raise DataError(
            f"{path}: a CSV, not the MSR-VTT caption JSON. Pass MSRVTT_data.json as annotations=, the 1k-A "
            "test pairs (MSRVTT_JSFUSION_test.csv: key,vid_key,video_id,sentence) as test_pairs= and a "
            "training list (MSRVTT_train.9k.csv / MSRVTT_train.7k.csv: video_id) as train_list="
        )
    fetch = f"download {MSRVTT_DATA_URL} and extract MSRVTT_data.json to {path}"
    data = _open_json(path, "MSR-VTT caption JSON (MSRVTT_data.json)", fetch)
    if not isinstance(data, (dict, list)):
        raise DataError(f"{path}: expected {{'videos': [...], 'sentences': [...]}} or a list of captions")
    videos = data.get("videos", []) if isinstance(data, dict) else []
    sentences = data.get("sentences", []) if isinstance(data, dict) else data
    kept, durations, subsets = _msrvtt_videos(path, videos, report)
    dropped = {str(v["video_id"]) for v in videos if isinstance(v, dict) and "video_id" in v} - set(kept)
    records = []
    for k, s in enumerate(sentences, 1):
        if not isinstance(s, dict) or "video_id" not in s or "caption" not in s:
            report.bad(f"{path}, sentence {k} (got {_show(s)})", "needs video_id and caption", item="caption")
        elif str(s["video_id"]) not in dropped:  # the captions of a skipped video go with it
            records.append((str(s["video_id"]), 0.0, np.nan, str(s["caption"]), k))
    return _non_empty(CaptionTable.from_records(records, durations, subsets, str(path), extra_videos=kept))


def _jsonl_record(obj: Any) -> tuple[tuple[str, float, float, str], float | None]:
    """`(video_id, start, end, text)` and the optional duration of one JSONL object."""
    vid, s, e, t = obj["video_id"], float(obj["start"]), float(obj["end"]), obj["text"]
    duration = None
    if "duration" in obj and (duration := _seconds(obj["duration"])) is None:
        raise ValueError(f"duration must be a finite number of seconds, got {_show(obj['duration'])}")
    return (str(vid), s, e, str(t)), duration


def read_jsonl(path: str | os.PathLike, report: DataReport | None = None) -> CaptionTable:
    """Read a generic JSONL: one `{"video_id", "start", "end", "text"}` object per line.

    Optional keys: `duration` (seconds) and `subset` per line (the last one seen per video wins).
    """
    path, report = Path(path), report or DataReport()
    if not path.is_file():
        raise DatasetNotFoundError(
            "caption JSONL", path, f"write one {{video_id, start, end, text}} per line to {path}"
        )
    records, durations, subsets = [], {}, {}
    lines = read_text(path).splitlines()
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            (vid, s, e, t), duration = _jsonl_record(obj)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            where = f"{path}, line {line_no} (got {_show(line.strip())}: {err})"
            report.bad(where, "expected {video_id, start, end, text} with numbers of seconds", item="caption")
            continue
        if duration is not None:
            durations[vid] = duration
        if "subset" in obj:
            subsets[vid] = str(obj["subset"])
        records.append((vid, s, e, t, line_no))
    return _non_empty(CaptionTable.from_records(records, durations=durations, subsets=subsets, source=str(path)))


#: source name -> reader
READERS: dict[str, Callable[..., CaptionTable]] = {
    "youcook2": read_youcook2,
    "msrvtt": read_msrvtt,
    "jsonl": read_jsonl,
}
