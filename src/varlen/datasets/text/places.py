"""Where a row of a text table is, as messages say it: one convention for every reader.

A file with lines (CSV, TSV, JSON Lines) names the file's line, the header being line 1, as an
editor shows it: `"line 7"`. A table without lines (Parquet, Arrow, a `datasets.Dataset`, a
JSON array, a Hub split) names the row counted from 1: `"row 7"`. Rows are kept in the tables
as positions (0 = the first data row); only a message turns them into places.

A row's line is not its position plus two: readers skip blank lines and a quoted CSV field may
hold newlines. The lines are found by reading the file again, once, and only when a message needs
them (an error, a skipped row): reading never pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from varlen.datasets.files import record_lines

__all__ = ["Layout", "Places", "RowPlaces", "json_layout"]

#: how a table's rows sit in its file: `rows` (no lines), `csv` (a header, records that may span
#: lines), `tsv` (a header, a line a record), `jsonl` (a line a record, no header)
Layout = Literal["rows", "csv", "tsv", "jsonl"]
#: row positions -> their places in messages (`"line 7"`, `"row 7"`): what a `RowPlaces` is
Places = Callable[[Sequence[int]], list[str]]


def json_layout(start: bytes) -> Layout:
    """A `.json` file's layout from its first bytes: a JSON array has no lines, else JSON Lines."""
    return "rows" if start.lstrip().startswith((b"[", b"\xef\xbb\xbf[")) else "jsonl"


class RowPlaces:
    """The places of a table's rows (positions, 0 = the first data row) as messages say them.

    Args:
        layout: how the rows sit in their file (see `Layout`).
        path: the file, for the layouts with lines.
    """

    def __init__(self, layout: Layout = "rows", path: str | Path | None = None) -> None:
        if layout != "rows" and path is None:
            raise ValueError(f"a {layout} table's places need its file")
        self.layout, self.path = layout, path
        self._lines: np.ndarray | None = None  # the line of each row, once a message needed one

    def __call__(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """`"line N"` / `"row N"` of each row."""
        rows = [int(r) for r in rows]
        if self.layout == "rows" or not rows:
            return [f"row {r + 1}" for r in rows]
        if self._lines is None:
            self._lines = np.asarray(record_lines(self.path, self.layout), np.int64)
        return [f"line {self._lines[r]}" if r < len(self._lines) else f"row {r + 1}" for r in rows]

    def of(self, row: int) -> str:
        """The place of one row."""
        return self([row])[0]
