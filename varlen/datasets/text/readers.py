"""Open and check text-classification tables: local files in their real formats, or the Hub.

A reader returns a :class:`TextTable` (the raw texts, optional second texts and labels of one
source) or raises :class:`~varlen.errors.DataError` naming the file and, where it applies, the
line: a missing file (:class:`~varlen.errors.DatasetNotFoundError`), an empty file, bytes that
are not UTF-8, a file that does not parse, a header without rows, a missing column. Rows that
cannot be used (an empty text, a missing, non-finite or unknown label) are a matter of policy:
:func:`encode_rows` sends each through ``report.bad`` and keeps the others, with their row
numbers, so nothing after a skipped row shifts.

Local files are read with pyarrow directly (no ``datasets`` cache on disk): CSV (quoted fields
may hold commas and newlines), TSV (GLUE layout: no quoting), JSON Lines, a JSON array of
records, Parquet; each also compressed (``.gz``, ``.bz2``, ``.xz``, ``.zst``, see
:mod:`varlen.datasets.files`). Rows are numbered from 0, after the header.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from varlen.datasets.files import (
    COMPRESSIONS,
    check_utf8,
    compression,
    open_binary,
    read_bytes,
    read_text,
    table_suffix,
)
from varlen.errors import DataError, DatasetNotFoundError
from varlen.report import DataReport

__all__ = [
    "FILE_TYPES",
    "TextColumns",
    "TextTable",
    "check_classes",
    "check_utf8",
    "class_list",
    "encode_rows",
    "label_key",
    "read_hub",
    "read_table",
]

#: local file suffixes the readers understand (each may be followed by one of ``COMPRESSIONS``)
FILE_TYPES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")
#: where a user can fetch the usual real data, for the not-found hint
SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"


class TextColumns(NamedTuple):
    """The columns of a table that a DataModule reads: text, optional second text, label."""

    text: str
    pair: str | None
    label: str


@dataclass
class TextTable:
    """The rows of one source, as read (labels not yet mapped to classes).

    Attributes:
        name: the file (or ``"<hub name>[<split>]"``) that error messages name.
        texts: the text of each row.
        labels: the raw label of each row (int, float, str or None).
        pairs: the second text of each row, or None.
        rows: the row number of each entry in its source (0 = the first row after the header).
        splits: the raw value of the split column of each row (``split_column``), or None.
    """

    name: str
    texts: list[Any]
    labels: list[Any]
    pairs: list[Any] | None = None
    rows: np.ndarray | None = None
    splits: list[Any] | None = None

    def __post_init__(self) -> None:
        if self.rows is None:
            self.rows = np.arange(len(self.texts), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.texts)

    def select(self, indices: Sequence[int] | np.ndarray) -> TextTable:
        """The entries ``indices`` (positions in this table), keeping their source row numbers."""
        indices = np.asarray(indices, dtype=np.int64)
        pick = [int(i) for i in indices]
        return TextTable(
            self.name,
            [self.texts[i] for i in pick],
            [self.labels[i] for i in pick],
            None if self.pairs is None else [self.pairs[i] for i in pick],
            self.rows[indices],
            None if self.splits is None else [self.splits[i] for i in pick],
        )


# -- local files ------------------------------------------------------------------------------


def _read_csv(path: Path, columns: TextColumns):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    bad_rows: list[Any] = []

    def refuse(row) -> str:
        bad_rows.append(row)
        return "error"

    tsv = table_suffix(path) == ".tsv"
    parse = pcsv.ParseOptions(
        delimiter="\t" if tsv else ",",
        quote_char=False if tsv else '"',
        newlines_in_values=not tsv,
        invalid_row_handler=refuse,
    )
    texts = {c: pa.string() for c in (columns.text, columns.pair) if c}  # "5" or "NA" stays a text
    try:
        with open_binary(path) as source:  # decompressed by the file's suffix (checked by check_utf8 already)
            return pcsv.read_csv(
                source,
                read_options=pcsv.ReadOptions(use_threads=False),
                parse_options=parse,
                convert_options=pcsv.ConvertOptions(column_types=texts),
            )
    except pa.ArrowInvalid as error:
        if bad_rows:
            row = bad_rows[0]
            raise DataError(
                f"{path}: line {row.number} has {row.actual_columns} fields, the header {row.expected_columns}: "
                f"{row.text[:80]!r}" + ("" if tsv else " (a field with a comma or newline must be in double quotes)")
            ) from None
        raise DataError(f"{path}: cannot read it as {'TSV' if tsv else 'CSV'}: {error}") from None


def _read_json(path: Path):
    import pyarrow as pa
    import pyarrow.json as pjson

    with open_binary(path) as handle:
        starts_array = handle.read(4096).lstrip().startswith((b"[", b"\xef\xbb\xbf["))
    try:
        if not starts_array:
            with open_binary(path) as handle:
                return pjson.read_json(handle)
        records = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: line {error.lineno} is not valid JSON: {error.msg}") from None
    except pa.ArrowInvalid as error:
        raise DataError(f"{path}: cannot read it as JSON Lines (one object per line): {error}") from None
    if not all(isinstance(r, dict) for r in records):
        raise DataError(f"{path}: a JSON file must hold an array of objects (one per row) or one object per line")
    try:
        return pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DataError(f"{path}: the rows' fields do not have one type per column: {error}") from None


def _read_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if compression(path) is None:
            return pq.read_table(path)
        return pq.read_table(pa.BufferReader(read_bytes(path)))  # Parquet reads at offsets: decompressed in memory
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path}: cannot read it as Parquet: {error}") from None


def read_table(
    path: str | Path, columns: TextColumns, role: str = "train_file", split_column: str | None = None
) -> TextTable:
    """One local table, checked: it exists, is not empty, is UTF-8, parses, has rows and the columns.

    Args:
        path: a ``.csv``, ``.tsv``, ``.json``, ``.jsonl`` or ``.parquet`` file, or one of them
            compressed (``.csv.gz``, ``.tsv.bz2``, ``.jsonl.xz``, ``.csv.zst``...).
        columns: the columns to take.
        role: the argument that named the file, for the not-found hint.
        split_column: also take this column (each row's split, see
            :func:`~varlen.datasets.text.column_splits.split_by_column`).

    Raises:
        DatasetNotFoundError: there is no such file.
        DataError: the file cannot be used (the message names it, and the line where it applies).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetNotFoundError(
            f"text table ({role})",
            path.resolve(),
            f"point {role} at a CSV, TSV, JSON(L) or Parquet file, or leave train_file unset for the embedded "
            f"synthetic reviews; SST-2: download {SST2_URL} and use its train.tsv and dev.tsv",
        )
    suffix = table_suffix(path)
    if suffix not in FILE_TYPES:
        raise DataError(
            f"{path}: unsupported file type {suffix!r}; use one of {list(FILE_TYPES)}, optionally compressed "
            f"({', '.join(COMPRESSIONS)})"
        )
    if suffix == ".parquet":
        table = _read_parquet(path)
    else:
        check_utf8(path)
        table = _read_csv(path, columns) if suffix in (".csv", ".tsv") else _read_json(path)
    if table.num_rows == 0:
        header = f"a header {table.column_names} but " if table.column_names else ""
        raise DataError(f"{path}: the file has {header}no rows")
    return _take(table.column_names, lambda c: table.column(c).to_pylist(), columns, str(path), split_column)


def _take(names: Sequence[str], column, columns: TextColumns, name: str, split_column: str | None = None) -> TextTable:
    """The wanted columns of a table (``column(name) -> list``), or an error naming those missing."""
    missing = [c for c in (*columns, split_column) if c is not None and c not in names]
    if missing:
        raise DataError(
            f"{name}: missing column(s) {missing}; it has {list(names)} (set text_column / text_pair_column / "
            "label_column / split_column to the names the file uses)"
        )
    pairs = column(columns.pair) if columns.pair else None
    splits = column(split_column) if split_column else None
    return TextTable(name, column(columns.text), column(columns.label), pairs, splits=splits)


# -- the Hub ----------------------------------------------------------------------------------


def read_hub(
    name: str, config_name: str | None, columns: TextColumns, split_column: str | None = None
) -> dict[str, TextTable]:
    """The ``train`` / ``val`` / ``test`` tables of a Hub dataset (or a local dataset folder).

    A test split whose labels are all -1 (GLUE hides its test labels) is left out. A
    ``split_column`` is read from the ``train`` split only.

    Raises:
        DatasetNotFoundError: the dataset is neither on the Hub (when online) nor in the local cache.
        DataError: it cannot be loaded, or lacks a column.
    """
    import datasets

    try:
        hub = datasets.load_dataset(name, config_name)
    except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as error:
        raise DatasetNotFoundError(
            f"dataset {name!r}" + (f" (configuration {config_name!r})" if config_name else ""),
            ["the Hugging Face Hub", datasets.config.HF_DATASETS_CACHE],
            "run once online (without HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) so that datasets caches it, "
            f"or save its splits as files and pass train_file / val_file ({type(error).__name__}: {error})",
        ) from None
    except Exception as error:  # datasets wraps builder and parser failures in several types
        cause = error.__cause__ or error
        raise DataError(f"dataset {name!r}: cannot load it: {type(cause).__name__}: {cause}") from None
    tables = {}
    for split, hub_split in (("train", "train"), ("val", "validation"), ("test", "test")):
        if hub_split in hub:
            part = hub[hub_split]
            extra = split_column if split == "train" else None
            name_of = f"{name}[{hub_split}]"
            tables[split] = _take(part.column_names, lambda c, p=part: list(p[c]), columns, name_of, extra)
    if "train" not in tables:
        raise DataError(f"dataset {name!r} has no 'train' split (it has {sorted(hub)})")
    if "test" in tables and all(label_key(v) == "-1" for v in tables["test"].labels):
        del tables["test"]
    return tables


# -- labels and rows --------------------------------------------------------------------------


def label_key(label: Any) -> str | None:
    """A label as its class name: ints (and integral floats, which a column with one blank cell
    becomes) as ``"1"``, other values as text; None for a missing or non-finite label."""
    if label is None:
        return None
    if isinstance(label, (float, np.floating)):
        if not np.isfinite(label):
            return None
        if label.is_integer():
            return str(int(label))
    if isinstance(label, (bool, int, np.integer)):
        return str(int(label))
    return str(label).strip() or None


def class_list(labels: Sequence[Any]) -> list[str]:
    """The stable class list of some labels: sorted numerically when all are ints, else as strings."""
    unique = {key for key in map(label_key, labels) if key is not None}
    try:
        return [str(v) for v in sorted(int(v) for v in unique)]
    except ValueError:
        return sorted(unique)


def check_classes(classes: Sequence[str], name: str, column: str) -> list[str]:
    """Refuse fewer than two classes (a classifier with one class learns nothing), naming the source."""
    classes = list(classes)
    if len(classes) < 2:
        held = f"only the class {classes[0]!r}" if classes else "no usable label"
        raise DataError(
            f"{name}: the label column {column!r} holds {held}; a classifier needs two classes or more "
            "(check label_column, or give class_names)"
        )
    return classes


def _row_problem(table: TextTable, i: int, lookup: dict[str, int], columns: TextColumns) -> tuple[str, str] | int:
    """Row ``i``'s class id, or why it cannot be used: (a detail for the place, the reason)."""
    for name, values in ((columns.text, table.texts), (columns.pair, table.pairs)):
        if values is not None and (values[i] is None or not str(values[i]).strip()):
            return "", f"empty text in column {name!r}"
    label = table.labels[i]
    key = label_key(label)
    if key is None:
        missing = label is None or not str(label).strip()
        if missing or (isinstance(label, (float, np.floating)) and np.isnan(label)):
            return "", "no label (empty cell)"
        return f" (label {label!r})", "label is not a finite number"
    if key not in lookup:
        shown = list(lookup)[:10] + (["..."] if len(lookup) > 10 else [])
        return f" (label {label!r})", f"label not one of the {len(lookup)} classes {shown}"
    return lookup[key]


def encode_rows(
    table: TextTable,
    classes: Sequence[str],
    columns: TextColumns,
    report: DataReport | None = None,
    split: str = "train",
) -> tuple[TextTable, np.ndarray]:
    """The usable rows of ``table`` and their class ids; each unusable row goes through ``report.bad``.

    Args:
        table: rows as read.
        classes: the class names, in id order.
        columns: the columns the table was read with (named in the reasons).
        report: where bad rows go (default: a raising one).
        split: the split the rows belong to, for the report.

    Raises:
        DataError: a bad row under ``on_bad="raise"``, naming the file and the row.
    """
    report = report or DataReport("raise")
    lookup = {name: k for k, name in enumerate(classes)}
    keep, ids = [], []
    for i in range(len(table)):
        found = _row_problem(table, i, lookup, columns)
        if isinstance(found, int):
            keep.append(i)
            ids.append(found)
        else:
            detail, reason = found
            report.bad(f"{table.name}: row {int(table.rows[i])}{detail}", reason, item="row", split=split)
    kept = table if len(keep) == len(table) else table.select(keep)
    return kept, np.asarray(ids, dtype=np.int64)
