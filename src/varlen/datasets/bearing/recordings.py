"""The recordings at one sampling rate, built once per node into one Arrow table that every process maps.

`prepare_data` reads every recording (or runs the simulator), resamples it to the common rate
and appends it to one Arrow IPC table in the cache folder (`build_recordings`: a recording
at a time, so memory holds one). One row per recording: `signal` holds its `[C, T]` float32
samples channel after channel, so the column's values are exactly the flat buffer that
`RecordingBuffer` serves windows from; beside it `length`
(`T`), `channels` (`C`), name, label, condition, rate, the rate it was recorded at
(`source_rate`), rpm and file. Recordings found bad
while reading are rows too, after the kept ones, with no signal and the `where` and `problem`
the report needs: every `setup` replays them into `dm.report`, so nothing is dropped silently.

The file is named by a content key (`recordings_key`: the source's files and settings, or
the simulator's, and the format version). `setup` in every rank and every loader worker maps it
(`open_recordings`); a cut-short file, one of another format version or of other inputs is
built again with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.bearing.formats import Recording
from varlen.datasets.bearing.storage import RecordingBuffer
from varlen.datasets.bearing.windows import resample
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.storage.cache import cache_key
from varlen.storage.tables import MappedTable, TableBuilder, open_table, write_table

__all__ = ["VERSION", "RecordingTable", "build_recordings", "open_recordings", "recordings_key", "recordings_path"]

#: the format of the table; a file of another version is built again
VERSION = "bearing-recordings-2"
ITEM = "recording"
TEXT_COLUMNS = ("name", "label", "condition", "source", "where", "problem")


def recordings_key(content: Mapping[str, Any], sampling_rate: int | None) -> str:
    """The content key of the recordings of `content` (a source's fingerprint or the simulator's
    settings) at `sampling_rate` (None: their own rates)."""
    return cache_key(dict(content), sampling_rate, version=VERSION)


def recordings_path(folder: str | Path, key: str) -> Path:
    """Where the table of `key` lives in `folder`."""
    return Path(folder) / f"recordings-{key}.arrow"


class _Collected(DataReport):
    """Every bad recording met while building, in order (the build never raises for them: the
    DataModule's report judges them, under its own `on_bad`, when it replays them)."""

    def __init__(self) -> None:
        super().__init__("skip")
        self.bad_items: list[tuple[str, str]] = []

    def bad(self, where: str, reason: str, *, item: str = "sample", split: str = "source") -> None:
        self.bad_items.append((where, reason))


def _row(
    rec: Recording, signal: np.ndarray, where: str = "", problem: str = "", source_rate: float = 0.0
) -> dict[str, Any]:
    text = (rec.name, rec.label, rec.condition, rec.source, where, problem)
    return {
        "signal": [np.ascontiguousarray(signal, dtype=np.float32).reshape(-1)],
        "length": np.array([signal.shape[-1]], np.int64),
        "channels": np.array([signal.shape[0]], np.int64),
        "sampling_rate": np.array([rec.sampling_rate], np.float64),
        "source_rate": np.array([source_rate], np.float64),
        "rpm": np.array([np.nan if rec.rpm is None else rec.rpm], np.float64),
        **{name: np.array([value]) for name, value in zip(TEXT_COLUMNS, text, strict=True)},
    }


def _skipped_row(where: str, problem: str) -> dict[str, Any]:
    return _row(Recording(np.zeros((1, 0), np.float32), 0.0, "", ""), np.zeros((1, 0)), where, problem)


def build_recordings(
    path: str | Path,
    key: str,
    read: Callable[[DataReport], Iterable[Recording]],
    sampling_rate: int | None,
) -> Path:
    """Write the table of `key` at `path`: every recording `read(report)` yields, resampled.

    Args:
        path: the table (written atomically).
        key: its content key.
        read: yields the validated recordings and puts the bad ones in the report it is given.
        sampling_rate: the common rate every recording is resampled to (polyphase); None: keep
            the rates, which must then all agree.

    Raises:
        DataError: `sampling_rate=None` and the recordings have several rates; or what `read`
            raises (a missing folder, a duplicate recording id): nothing is written then.
    """
    collected = _Collected()
    builder = TableBuilder(path, version=VERSION, key=key, ragged={"signal": (np.float32, ())})
    try:
        rates = set()
        for rec in read(collected):
            target = float(sampling_rate or rec.sampling_rate)
            try:
                signal = resample(rec.signal, rec.sampling_rate, target)
            except ValueError as error:
                collected.bad(rec.where, str(error), item=ITEM)
                continue
            rates.add(rec.sampling_rate)
            source_rate, rec.sampling_rate = rec.sampling_rate, target
            builder.append(**_row(rec, signal, source_rate=source_rate))
        if sampling_rate is None and len(rates) > 1:
            raise DataError(f"recordings have sampling rates {sorted(rates)}; set sampling_rate to resample them")
        for where, problem in collected.bad_items:
            builder.append(**_skipped_row(where, problem))
        if builder.rows == 0:  # nothing at all: a builder without rows has no columns
            builder.abandon()
            return write_table(path, _empty(), version=VERSION, key=key)
        return builder.finish()
    except BaseException:
        builder.abandon()
        raise


def _empty() -> dict[str, Any]:
    columns = {name: value[:0] for name, value in _skipped_row("", "").items() if name != "signal"}
    empty = np.zeros(0, np.int64)
    return {"signal": Ragged(np.zeros(0, np.float32), empty, empty), **columns}


def open_recordings(path: str | Path, key: str) -> RecordingTable | None:
    """The table of `key` at `path` mapped, or None when it must be built (with a warning when
    the file is cut short, of another format version or of other inputs)."""
    table = open_table(path, version=VERSION, key=key)
    return None if table is None else RecordingTable(table)


class RecordingTable:
    """A mapped recordings table: the kept recordings as views of the file, and the skipped ones.

    Attributes:
        table: the `MappedTable`.
        skipped: `(where, problem)` of every recording found bad while reading, in order.
        source_rates: float64 `[kept]` the rate each kept recording was recorded at (before resampling).
    """

    def __init__(self, table: MappedTable) -> None:
        self.table = table
        problem = table.numpy("problem")
        self._kept = int(np.count_nonzero(problem == ""))  # the kept rows come first
        wheres, problems = table.numpy("where")[self._kept :].tolist(), problem[self._kept :].tolist()
        self.skipped = list(zip(wheres, problems, strict=True))
        signal = table.ragged("signal")
        self.offsets = np.asarray(signal.starts[: self._kept], np.int64)
        self.lengths = table.numpy("length")[: self._kept]
        self.source_rates = table.numpy("source_rate")[: self._kept]
        channels = set(table.numpy("channels")[: self._kept].tolist())
        if len(channels) > 1:
            raise ValueError(f"recordings have different channel counts {sorted(channels)}")
        self.channels = channels.pop() if channels else 1

    @property
    def key(self) -> str:
        return self.table.key

    def recordings(self) -> list[Recording]:
        """Every kept recording, its `signal` a read-only `[C, T]` view of the file."""
        views = self.store().buffers
        rates, rpms = (self.table.numpy(name)[: self._kept].tolist() for name in ("sampling_rate", "rpm"))
        text = {name: self.table.numpy(name)[: self._kept].tolist() for name in TEXT_COLUMNS}
        return [
            Recording(
                views[i],
                float(rates[i]),
                text["label"][i],
                text["name"][i],
                text["condition"][i],
                None if np.isnan(rpms[i]) else float(rpms[i]),
                text["source"][i],
            )
            for i in range(self._kept)
        ]

    def store(self, rows: np.ndarray | None = None) -> RecordingBuffer:
        """The recordings `rows` (default: every kept one) as a `RecordingBuffer` over the
        mapped file: nothing is copied, and it pickles as the file's path and its small arrays."""
        rows = np.arange(self._kept) if rows is None else np.asarray(rows, np.int64)
        return RecordingBuffer.mapped(self.table, "signal", self.offsets[rows], self.lengths[rows], self.channels)
