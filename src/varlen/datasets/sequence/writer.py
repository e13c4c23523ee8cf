"""Your arrays written as a table `SequenceDataModule` reads, each
field in its own dtype: `varlen.write_arrays("train.parquet", {"signal": arrays, "label": labels})`.

A column of arrays (one per sample, of any length along its first axis and one shape beyond it: `[T]`,
`[T, D]`) becomes a variable-length field, stored as `large_list<fixed_size_list<dtype, D>>` (the
layout `mapping_table` builds for a mapping given in memory); a
column of numbers or strings, or an array `[N, *trailing]`, a fixed column. float16, float32, int64...
stay what they are: `pandas.to_parquet` refuses `[T, D]` arrays, and `.tolist()` turns float32
into float64. Parquet (`.parquet`, `.pq`) or Arrow IPC (`.arrow`, `.feather`, `.ipc`), by the
suffix; written through a temporary file, so a reader never sees half a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from varlen.datasets.sequence.sources import ARROW, PARQUET, mapping_table
from varlen.storage.cache import atomic_write

__all__ = ["write_arrays"]


def write_arrays(path: str | Path, columns: Mapping[str, Any]) -> Path:
    """Write `columns` (column name -> one array per sample, or numbers / strings) to `path`.

    Args:
        path: a new Parquet or Arrow IPC file (its folder is made); the suffix says which.
        columns: as `SequenceDataModule(train=...)` takes a mapping: a list of arrays per sample (None:
            missing) for a variable-length field, a list of numbers or strings (labels) or an `[N, ...]`
            array for a fixed one. Every column holds one entry per sample.

    Returns:
        `path`, which `SequenceDataModule(train=path)` (or `--data.train=PATH`) reads, serving each
        field in the dtype it was written in.

    Raises:
        ValueError: a suffix of neither format.
        DataError: columns of different lengths, or a field's arrays of other trailing shapes or of values
            that are not numbers (naming the column and the row).
    """
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in PARQUET + ARROW:
        raise ValueError(
            f"{path}: write_arrays writes Parquet ({', '.join(PARQUET)}) or Arrow IPC ({', '.join(ARROW)}) files; "
            "name the file with one of those suffixes"
        )
    table = mapping_table(columns, f"write_arrays({str(path)!r})")
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        if suffix in PARQUET:
            pq.write_table(table, str(tmp))
            return
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    return atomic_write(path, write, size=table.nbytes)
