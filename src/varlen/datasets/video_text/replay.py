"""What building the split tables reported, stored beside them and replayed into `dm.report` by every setup.

Reading and checking the source happens once, in `prepare_data`; every `setup` (every rank,
every later run) must still count what was skipped, truncated and left unused. The build reports
into a `RecordingReport`, which keeps every call in order; `write_events` stores
them as a small Arrow table (`kind, split, item, where, reason, count`) and `replay`
makes the same calls on a fresh report. Under `on_bad="raise"` the first bad item raises the
same `DataError` a build would have raised.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from varlen.prepare.report import SOURCE, DataReport, OnBad
from varlen.storage.tables import MappedTable, write_table

__all__ = ["COLUMNS", "Event", "RecordingReport", "replay", "write_events"]

#: `(kind, split, item or unit, where, reason, count)`; kind is "bad", "truncate" or "unused"
Event = tuple[str, str, str, str, str, int]
COLUMNS = ("kind", "split", "item", "where", "reason", "count")


class RecordingReport(DataReport):
    """A `DataReport` that also keeps every call, in order, in `events`."""

    def __init__(self, on_bad: OnBad = "raise", max_examples: int = 3) -> None:
        super().__init__(on_bad, max_examples)
        self.events: list[Event] = []

    def bad(self, where: str, reason: str, *, item: str = "sample", split: str = SOURCE) -> None:
        self.events.append(("bad", split, item, where, reason, 1))
        super().bad(where, reason, item=item, split=split)

    def truncate(self, split: str, count: int, item: str = "sample") -> None:
        if count:
            self.events.append(("truncate", split, item, "", "", int(count)))
        super().truncate(split, count, item)

    def leave_unused(self, split: str, reason: str, amount: int, unit: str) -> None:
        if amount:
            self.events.append(("unused", split, unit, "", reason, int(amount)))
        super().leave_unused(split, reason, amount, unit)


def write_events(path: str | os.PathLike, events: Sequence[Event], *, version: str, key: str) -> Path:
    """Store `events` as a table at `path` (atomically, with the tables' version and key)."""
    values = list(zip(*events, strict=True)) if events else [()] * len(COLUMNS)
    columns = {name: np.array(list(v), dtype=str) for name, v in zip(COLUMNS[:-1], values, strict=False)}
    columns["count"] = np.array(list(values[-1]), dtype=np.int64)
    return write_table(path, columns, version=version, key=key)


def replay(table: MappedTable, report: DataReport) -> None:
    """Make the stored calls on `report`, in order (under `on_bad="raise"`, the first bad item raises)."""
    kinds, splits, items, wheres, reasons = (table.numpy(name).tolist() for name in COLUMNS[:-1])
    counts = table.numpy("count").tolist()
    for kind, split, item, where, reason, count in zip(kinds, splits, items, wheres, reasons, counts, strict=True):
        if kind == "bad":
            report.bad(where, reason, item=item, split=split)
        elif kind == "truncate":
            report.truncate(split, count, item)
        else:
            report.leave_unused(split, reason, count, item)
