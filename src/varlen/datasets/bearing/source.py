"""`BearingSource`: a data folder's format, channels and classes, and its recordings, read and checked.

The one place that detects a folder's format, knows its default channels and classes, says how
to get a missing dataset, and turns files into validated `Recording` objects. Bad
recordings (unreadable, a channel missing, NaN/inf, empty, an unknown label) go through a
`DataReport`: raised, or counted under `on_bad="skip"`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from varlen.datasets.bearing.formats import (
    CWRU_CLASSES,
    CWRU_PAGE,
    METADATA_COLUMNS,
    PADERBORN_CLASSES,
    PADERBORN_PAGE,
    PADERBORN_RATE,
    Recording,
    parse_cwru_name,
    parse_paderborn_name,
)
from varlen.datasets.bearing.rates import rate_problem
from varlen.datasets.bearing.readers import (
    default_channels,
    download_cwru,
    read_cwru,
    read_metadata,
    read_paderborn,
    read_signal_file,
)
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.labels import check_labels, class_order
from varlen.prepare.report import DataReport
from varlen.storage.cache import file_hash

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMATS", "BearingSource", "Format", "resolve_format"]

Format = Literal["auto", "cwru", "paderborn", "folder"]
FORMATS = ("auto", "cwru", "paderborn", "folder")
ITEM = "recording"


def resolve_format(root: Path, data_format: str = "auto", metadata: str | Path | None = None) -> str:
    """`cwru`, `paderborn` or `folder`: the given format, else what `root` holds.

    `auto`: a metadata CSV -> `folder`; `.mat` files all named like Paderborn's ->
    `paderborn`; anything else (including a folder that does not exist yet) -> `cwru`.
    """
    if data_format not in FORMATS:
        raise ValueError(f"data_format must be one of {FORMATS}, got {data_format!r}")
    if data_format == "folder" and metadata is None:
        raise ValueError(f"data_format='folder' needs metadata= (a CSV listing {METADATA_COLUMNS} per file)")
    if data_format != "auto":
        return data_format
    if metadata is not None:
        return "folder"
    mats = sorted(root.glob("*.mat")) if root.is_dir() else []
    if mats and all(parse_paderborn_name(p.name) for p in mats):
        return "paderborn"
    return "cwru"


def _content(path: Path) -> str | None:
    """A file's SHA-256, or None when there is no such file (its reader reports that)."""
    return file_hash(path) if path.is_file() else None


@dataclass
class BearingSource:
    """A folder of recordings in one format, with the channels and classes to read.

    Build it with `open`, which fills in the defaults; `load` reads the recordings.

    Attributes:
        root: the data folder.
        data_format: `cwru`, `paderborn` or `folder`.
        metadata: the metadata CSV (absolute), or None.
        channels: channels read from every file.
        class_names: the classes, in label-index order; other labels are bad input.
    """

    root: Path
    data_format: str
    metadata: Path | None
    channels: list[str]
    class_names: list[str]

    @classmethod
    def open(
        cls,
        root: str | Path,
        data_format: str = "auto",
        metadata: str | Path | None = None,
        channels: Sequence[str] | None = None,
        class_names: Sequence[str] | None = None,
    ) -> BearingSource:
        """The source of `root`, its format detected and its defaults filled in.

        Default channels: `DE` (CWRU), `vibration_1` (Paderborn), or what the first listed
        file usually means (every column of a `.npy` / `.csv`). Default classes: the sorted
        labels of the metadata CSV, else the 4 Paderborn or the 10 CWRU classes. Only the
        metadata CSV (and one file's header) is read, and only when a default needs it.

        Raises:
            DatasetNotFoundError: a default needs the metadata CSV and it is not there.
            DataError: the metadata CSV is unreadable or lists nothing.
            ValueError: an unknown `data_format`, `folder` without metadata, no channels.
        """
        if channels is not None and not channels:
            raise ValueError("channels=[] reads nothing: name at least one channel, or pass None for the default")
        root = Path(root)
        fmt = resolve_format(root, data_format, metadata)
        meta = None if metadata is None else Path(metadata) if Path(metadata).is_absolute() else root / metadata
        source = cls(root, fmt, meta, list(channels or []), list(class_names or []))
        if channels is None:
            source.channels = source._default_channels()
        if class_names is None:
            source.class_names = source._default_classes()
        return source

    # -- defaults and the not-found hint --------------------------------------------------------

    def _default_channels(self) -> list[str]:
        if self.metadata is None:
            return ["vibration_1"] if self.data_format == "paderborn" else ["DE"]
        paths = self.read_metadata()["path"].astype(str).tolist()
        for path in paths:  # the first listed file that can say; the others are read (and judged) later
            try:
                return default_channels(self.root / path)
            except DataError:
                continue
        return default_channels(self.root / paths[0])  # none can: raise the first file's error

    def _default_classes(self) -> list[str]:
        """The metadata CSV's labels in `varlen.prepare.labels.class_order` (by number when all are numbers),
        refused when they mix numbers with words or spell one number two ways
        (`varlen.prepare.labels.check_labels`);
        else the format's classes."""
        if self.metadata is None:
            return list(PADERBORN_CLASSES if self.data_format == "paderborn" else CWRU_CLASSES)
        labels = self.read_metadata()["label"]
        first = {}
        for line, label in zip(labels.index + 2, labels, strict=True):  # line 1 is the header
            if isinstance(label, str) and label.strip():  # a blank cell is read as NaN: a missing label
                first.setdefault(label, line)
        check_labels(list(first), [f"line {line}" for line in first.values()], str(self.metadata), "label")
        return class_order(labels.astype(str).unique())

    def not_found(self, what: str | None = None) -> DatasetNotFoundError:
        """The error for a missing folder or recordings, with how to get them (the one place that says so)."""
        if self.metadata is not None:
            what = what or f"the signal files listed in {self.metadata.name}"
            fetch = f"copy the signal files into {self.root} and list them in a metadata CSV ({METADATA_COLUMNS})"
        elif self.data_format == "paderborn":
            what = what or "Paderborn recordings (*.mat named like N15_M07_F10_KA01_1.mat)"
            fetch = f"copy the Paderborn .mat files from {PADERBORN_PAGE} into {self.root}"
        else:
            what = what or "CWRU recordings (*.mat)"
            fetch = (
                f"pass download=True to fetch the standard 10-class CWRU set into {self.root}, "
                f"or copy the .mat files from {CWRU_PAGE} there"
            )
        return DatasetNotFoundError(what, self.root, fetch)

    def read_metadata(self) -> pd.DataFrame:
        """The metadata CSV as a DataFrame (see `read_metadata`)."""
        if not self.root.is_dir():
            raise self.not_found(f"data folder {self.root}")
        if not self.metadata.is_file():
            raise DatasetNotFoundError(
                f"metadata CSV {self.metadata.name}",
                self.metadata,
                f"write it with the columns {METADATA_COLUMNS}, one row per signal file, or pass the right metadata=",
            )
        return read_metadata(self.metadata)

    # -- reading --------------------------------------------------------------------------------

    def download(self) -> list[Path]:
        """Fetch the standard CWRU files into `root` (MD5-checked); other formats cannot be."""
        if self.data_format != "cwru" or self.metadata is not None:
            raise ValueError(f"download=True fetches the CWRU files only; {self.root} is read as {self.data_format}")
        return download_cwru(self.root)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per file to read: `path` (relative to root), `where` (for messages), metadata columns.

        Raises:
            DatasetNotFoundError: no folder, or no recordings in it.
        """
        if not self.root.is_dir():
            raise self.not_found(f"data folder {self.root}")
        if self.metadata is None:
            rows = [{"path": p.name, "where": str(p)} for p in sorted(self.root.glob("*.mat"))]
            if not rows:
                raise self.not_found()
            return rows
        rows = []
        frame = self.read_metadata()
        for number, row in zip(frame.index + 2, frame.to_dict("records"), strict=True):  # line 1 is the header
            row = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
            rows.append({**row, "where": f"{self.metadata}, line {number}"})
        return rows

    def fingerprint(self) -> dict[str, Any]:
        """What the recordings read from this source depend on: the folder, the format, the metadata
        CSV's and every listed file's content (SHA-256; None for a file that is not there), the
        channels and classes. A cache keyed by it is never read for other files or settings.

        Raises:
            DatasetNotFoundError: no folder, or no recordings in it.
        """
        files = [(str(row["path"]), _content(self.root / str(row["path"]))) for row in self.rows()]
        metadata = None if self.metadata is None else [str(self.metadata.resolve()), _content(self.metadata)]
        return {
            "root": str(self.root.resolve()),
            "format": self.data_format,
            "metadata": metadata,
            "files": files,
            "channels": list(self.channels),
            "classes": list(self.class_names),
        }

    def load(self, report: DataReport | None = None) -> list[Recording]:
        """Every recording, validated: readable, a label in `class_names`, finite, not empty.

        Args:
            report: where bad recordings go (default: raise at the first).

        Raises:
            DatasetNotFoundError: no folder, or no recordings in it.
            DataError: a bad recording under `on_bad="raise"`, or a duplicate recording id.
        """
        return list(self.iter_load(report))

    def iter_load(self, report: DataReport | None = None) -> Iterator[Recording]:
        """`load` one recording at a time (a cache is written as they come: memory holds one).

        Raises:
            DatasetNotFoundError: no folder, or no recordings in it (before the first recording).
            DataError: as `load`.
        """
        report = report or DataReport("raise")
        return self._validated(self.rows(), report)

    def _validated(self, rows: list[dict[str, Any]], report: DataReport) -> Iterator[Recording]:
        names = set()
        for row in rows:
            path = self.root / str(row["path"])
            try:
                rec = self._read(path, row)
            except DataError as error:
                # the reader's message starts with the file; a metadata row adds where it is listed
                reason = str(error).removeprefix(f"{path}: ") if row["where"] == str(path) else str(error)
                report.bad(row["where"], reason, item=ITEM)
                continue
            if rec.name in names:
                raise DataError(f"{row['where']}: duplicate recording id {rec.name!r}")
            names.add(rec.name)
            problem = self.problem(rec)
            if problem is None:
                yield rec
            else:
                report.bad(*problem, item=ITEM)

    def problem(self, rec: Recording) -> tuple[str, str] | None:
        """`(where, reason)` when `rec` cannot be used (an unknown label, a sampling rate outside
        `RATE_RANGE`, a non-finite value, no samples).

        Reasons stay general (the place goes into `where`), so that the report counts alike
        problems of many files under one reason.
        """
        if rec.label not in self.class_names:
            classes = sorted(self.class_names)
            return rec.where, f"unknown label {rec.label!r} (classes: {classes}; list it in class_names to keep it)"
        wrong_rate = rate_problem(rec.sampling_rate)
        if wrong_rate is not None:
            return f"{rec.where} (sampling rate {rec.sampling_rate:g} Hz)", wrong_rate
        finite = np.isfinite(rec.signal)
        if not finite.all():
            channel, sample = np.argwhere(~finite)[0]
            return (
                f"{rec.where} (channel {channel}, sample {sample})",
                f"non-finite value {rec.signal[channel, sample]}",
            )
        if rec.signal.shape[1] == 0:
            return rec.where, "empty signal (0 samples)"
        return None

    def _read(self, path: Path, row: dict[str, Any]) -> Recording:
        suffix = path.suffix.lower()
        label, rate, condition, rpm = row.get("label"), row.get("sampling_rate"), row.get("condition", ""), None
        paderborn = self.data_format == "paderborn" or (
            self.data_format == "folder" and parse_paderborn_name(path.name)
        )
        if suffix == ".mat" and paderborn:
            info = parse_paderborn_name(path.name) or {}
            signal = read_paderborn(path, self.channels)
            rate = rate or PADERBORN_RATE
            label = label or info.get("label")
            condition = condition or info.get("condition", "")
        elif suffix == ".mat":
            info = parse_cwru_name(path.name) or {}
            signal, rpm = read_cwru(path, self.channels)
            rate = rate or info.get("sampling_rate")
            label = label or info.get("label")
            if not condition and "load" in info:
                condition = str(info["load"])
        else:
            signal = read_signal_file(path, self.channels)
        if label is None:
            raise DataError(f"{path}: no label (not a usual CWRU/Paderborn name; give it in a metadata CSV)")
        if rate is None:
            raise DataError(f"{path}: no sampling rate (give a sampling_rate column in the metadata CSV)")
        try:
            rate = float(rate)
        except (TypeError, ValueError):
            raise DataError(f"{path}: sampling rate {rate!r} is not a number") from None
        if not rate > 0:
            raise DataError(f"{path}: sampling rate must be positive, got {rate:g}")
        name = str(row.get("recording_id", path.stem))
        return Recording(signal, rate, str(label), name, str(condition), rpm, str(path))
