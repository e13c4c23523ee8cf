"""MSR-VTT retrieval protocols from the four files its users have: the data JSON, a train list, the 1k-A pairs.

CLIP4Clip-style code distributes MSR-VTT's captions as `MSRVTT_DATA_URL`
(`msrvtt_data.zip`), four files:

- `MSRVTT_data.json`: `videos[*]` (`video_id`, `split` train / validate / test) and
  `sentences[*]` (`video_id`, `caption`; 20 per video);
- `MSRVTT_train.9k.csv` and `MSRVTT_train.7k.csv`: a `video_id` column, the training videos of
  the 9k protocol (every video but the 1k-A test ones) and of the 7k one (the official train split);
- `MSRVTT_JSFUSION_test.csv`: `key,vid_key,video_id,sentence`, the 1k-A test set of JSFusion
  (Yu, Kim and Kim, ECCV 2018): one sentence for each of 1,000 videos.

`read_msrvtt_protocol` joins them into one `CaptionTable` whose
`subsets` give each video's split (see `protocol_subset`); the DataModule splits by them
and carves validation from the training videos when no video is "validate" (the 9k protocol).
Captions describe whole videos; the features' length is each video's length (features sampled
at any rate, e.g. 12 frames per video, fit their captions).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from varlen.datasets.files import read_text
from varlen.datasets.video_text.captions import (
    MSRVTT_DATA_URL,
    TEST_NAMES,
    VAL_NAMES,
    CaptionTable,
    _show,
    read_msrvtt,
)
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.report import SOURCE, DataReport

__all__ = ["PAIR_COLUMNS", "protocol_subset", "read_msrvtt_protocol", "read_test_pairs", "read_video_list"]

#: the columns of MSRVTT_JSFUSION_test.csv that are read (`key` and `vid_key` are not needed)
PAIR_COLUMNS = ("video_id", "sentence")
UNLISTED = "video in neither the train list nor the test pairs"
OUTSIDE_PAIRS = "test video outside the test pairs"
LEFT_OUT = "caption of a video left out"
REPLACED = "JSON caption of a test-pair video (the pair's sentence is used)"


def _csv_rows(path: Path, what: str, columns: Sequence[str]) -> list[tuple[int, dict]]:
    """`(line, row)` of every data row of a CSV with a header holding `columns`."""
    if not path.is_file():
        raise DatasetNotFoundError(what, path, f"download {MSRVTT_DATA_URL} and extract {path.name} to {path}")
    reader = csv.DictReader(io.StringIO(read_text(path)))  # decompressed (.gz, .bz2, .xz, .zst) by its suffix
    try:
        header = [name.strip() for name in reader.fieldnames or []]
        reader.fieldnames = header  # pandas' to_csv may add an unnamed index column: harmless
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(
                f"{path}: no column {', '.join(map(repr, missing))} (header: {header}); {what} needs "
                f"a header with {', '.join(columns)}"
            )
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as err:
        raise DataError(f"{path}, line {reader.line_num}: not a readable CSV ({err})") from err
    if not rows:
        raise DataError(f"{path}: holds no rows")
    return rows


def _value(row: Mapping, column: str) -> str:
    """The stripped value of `column`, "" when the row is too short to have one."""
    value = row.get(column)
    return value.strip() if isinstance(value, str) else ""


def read_video_list(path: str | os.PathLike, report: DataReport | None = None) -> dict[str, int]:
    """The videos of a train list (`MSRVTT_train.9k.csv`: a `video_id` column) -> their line.

    A row without a video id goes through `report.bad`; a repeated id counts once.
    """
    path, report = Path(path), report or DataReport()
    listed: dict[str, int] = {}
    for line, row in _csv_rows(path, "MSR-VTT train list (MSRVTT_train.9k.csv)", ("video_id",)):
        if vid := _value(row, "video_id"):
            listed.setdefault(vid, line)
        else:
            report.bad(f"{path}, line {line} (got {_show(row)})", "needs a video_id", item="video")
    return listed


def read_test_pairs(path: str | os.PathLike, report: DataReport | None = None) -> list[tuple[str, str, int]]:
    """`(video_id, sentence, line)` of every row of the 1k-A test pairs (`MSRVTT_JSFUSION_test.csv`).

    A row without a video id, or too short to have a sentence column, goes through
    `report.bad`; an empty sentence is kept (the dataset reports it with its video and row).
    """
    path, report = Path(path), report or DataReport()
    pairs = []
    for line, row in _csv_rows(path, "MSR-VTT test pairs (MSRVTT_JSFUSION_test.csv)", PAIR_COLUMNS):
        vid, sentence = _value(row, "video_id"), row.get("sentence")
        if not vid or sentence is None:
            report.bad(f"{path}, line {line} (got {_show(row)})", "needs video_id and sentence", item="caption")
            continue
        pairs.append((vid, sentence.strip(), line))
    return pairs


def protocol_subset(json_split: str, in_pairs: bool, listed: bool | None, has_pairs: bool) -> str | None:
    """A video's split under the protocol, or None (left out).

    In order: a test-pair video is "test"; a video of the train list is "train"; a JSON
    "validate" video is "validate"; a JSON "test" video is "test" when there are no test pairs
    (the full test split) and left out otherwise; any other video is "train" without a train
    list (`listed` None) and left out with one.
    """
    split = json_split.lower()
    if in_pairs:
        return "test"
    if listed:
        return "train"
    if split in VAL_NAMES:
        return "validate"
    if split in TEST_NAMES:
        return None if has_pairs else "test"
    return (split or "train") if listed is None else None


def _check_list(listed: dict[str, int], path: Path, known: set[str], pairs: dict, report: DataReport) -> None:
    """A train list that shares a video with the test pairs raises; a listed video absent from the JSON is bad."""
    if leak := [v for v in listed if v in pairs]:
        raise DataError(
            f"{path} lists {len(leak)} video(s) of the test pairs (e.g. {leak[:3]}): the training and test "
            "videos of a protocol must not overlap (use MSRVTT_train.9k.csv or .7k.csv with MSRVTT_JSFUSION_test.csv)"
        )
    for vid in (v for v in listed if v not in known):
        where = f"{path}, line {listed[vid]}, video {vid!r}"
        report.bad(where, "listed video has no captions in the JSON", item="video")


def read_msrvtt_protocol(
    annotations: str | os.PathLike,
    train_list: str | os.PathLike | None = None,
    test_pairs: str | os.PathLike | None = None,
    report: DataReport | None = None,
) -> CaptionTable:
    """MSR-VTT captions under a protocol: the data JSON, optionally a train list and the 1k-A pairs.

    Without `train_list` and `test_pairs` this is `read_msrvtt` (the JSON's own
    split). Otherwise training videos are the listed ones, with every JSON caption; test videos
    are the pairs' videos, each with its pair's sentence only; the rest follows
    `protocol_subset`. Videos and JSON captions left out are counted in `report` as unused.

    Raises:
        DatasetNotFoundError: a file is missing (the message says where to get it).
        DataError: a file is not readable, lacks a column or holds no rows; the train list shares
            a video with the test pairs; a bad row under `on_bad="raise"`.
    """
    report = report or DataReport()
    table = read_msrvtt(annotations, report)
    if train_list is None and test_pairs is None:
        return table
    listed = read_video_list(train_list, report) if train_list is not None else None
    pairs = read_test_pairs(test_pairs, report) if test_pairs is not None else []
    pair_videos = dict.fromkeys(vid for vid, _, _ in pairs)
    if listed is not None:
        _check_list(listed, Path(train_list), set(table.videos), pair_videos, report)
    subsets = {
        vid: protocol_subset(split, vid in pair_videos, None if listed is None else vid in listed, bool(pairs))
        for vid, split in zip(table.videos, table.subsets, strict=True)
    }
    left_out = np.array([subsets[vid] is None for vid in table.videos], bool)
    replaced = np.array([vid in pair_videos for vid in table.videos], bool)
    outside = left_out & np.isin([s.lower() for s in table.subsets], TEST_NAMES)
    report.leave_unused(SOURCE, OUTSIDE_PAIRS, int(outside.sum()), "video")
    report.leave_unused(SOURCE, UNLISTED, int((left_out & ~outside).sum()), "video")
    report.leave_unused(SOURCE, LEFT_OUT, int(left_out[table.video].sum()), "caption")
    report.leave_unused(SOURCE, REPLACED, int(replaced[table.video].sum()), "caption")
    serves = ~left_out & ~replaced
    records = [
        (table.videos[v], 0.0, np.nan, text, int(row))
        for v, text, row in zip(table.video.tolist(), table.text, table.rows, strict=True)
        if serves[v]
    ]
    records += [(vid, 0.0, np.nan, sentence, line) for vid, sentence, line in pairs]
    kept = [vid for vid in table.videos if subsets[vid] is not None]
    files = [str(annotations), *(str(p) for p in (train_list, test_pairs) if p is not None)]
    return CaptionTable.from_records(
        records,
        subsets={vid: s for vid, s in subsets.items() if s is not None} | dict.fromkeys(pair_videos, "test"),
        source=" + ".join(files),
        extra_videos=[*kept, *pair_videos],
        video_sources={**{vid: str(annotations) for vid in kept}, **dict.fromkeys(pair_videos, str(test_pairs))},
    )
