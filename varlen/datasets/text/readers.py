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
from collections.abc import Iterator, Sequence
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
from varlen.datasets.text.labels import label_key
from varlen.errors import DataError, DatasetNotFoundError
from varlen.report import DataReport

__all__ = [
    "FILE_TYPES",
    "HUB_SPLITS",
    "TextColumns",
    "TextTable",
    "check_columns",
    "check_rows",
    "check_utf8",
    "encode_rows",
    "hidden_labels",
    "iter_columns",
    "load_hub",
    "read_columns",
    "read_hub",
    "read_table",
    "row_problem",
    "wanted_columns",
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


def _read_csv(path: Path, columns: TextColumns, include: Sequence[str]):
    """The columns ``include`` of a CSV / TSV file (those it has), and every column name it has."""
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
    options = {"read_options": pcsv.ReadOptions(use_threads=False), "parse_options": parse}
    try:
        with open_binary(path) as source:  # decompressed by the file's suffix (checked by check_utf8 already)
            names = pcsv.open_csv(source, **options).schema.names  # the header (and the first block)
        convert = pcsv.ConvertOptions(column_types=texts, include_columns=[c for c in include if c in names])
        with open_binary(path) as source:
            return pcsv.read_csv(source, convert_options=convert, **options), names
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


def _read_parquet(path: Path, include: Sequence[str]):
    """The columns ``include`` of a Parquet file (those it has), and every column name it has."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        source = path if compression(path) is None else pa.BufferReader(read_bytes(path))  # read at offsets
        parquet = pq.ParquetFile(source)
        names = parquet.schema_arrow.names
        return parquet.read([c for c in include if c in names]), names
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path}: cannot read it as Parquet: {error}") from None


def iter_columns(
    path: str | Path,
    columns: TextColumns,
    role: str = "train_file",
    split_column: str | None = None,
    include: Sequence[str] | None = None,
    size: int = 10_000,
) -> Iterator[Any]:
    """The columns ``include`` of one local table, checked as :func:`read_columns` checks it, as
    record batches of at most ``size`` rows. A Parquet file is read a batch at a time (memory holds
    one batch, whatever the file); other formats are read whole (in Arrow), then cut."""
    path = Path(path).expanduser()
    if table_suffix(path) != ".parquet" or compression(path) is not None or not path.is_file():
        yield from read_columns(path, columns, role, split_column, include).to_batches(max_chunksize=size)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = wanted_columns(columns, split_column)
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        check_columns(names, wanted, str(path))
        if parquet.metadata.num_rows == 0:
            raise DataError(f"{path}: the file has a header {names} but no rows")
        yield from parquet.iter_batches(batch_size=size, columns=list(wanted if include is None else include))
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path}: cannot read it as Parquet: {error}") from None


def wanted_columns(columns: TextColumns, split_column: str | None = None) -> list[str]:
    """The columns a table must have: text, optional second text, label, optional split column."""
    return [c for c in (*columns, split_column) if c is not None]


def read_columns(
    path: str | Path,
    columns: TextColumns,
    role: str = "train_file",
    split_column: str | None = None,
    include: Sequence[str] | None = None,
):
    """One local table, checked, as a ``pyarrow.Table`` of the columns ``include`` only.

    Checked as :func:`read_table` checks it (it exists, is not empty, is UTF-8, parses, has rows
    and every column of ``columns`` and ``split_column``), whatever ``include`` takes: CSV, TSV
    and Parquet convert only those columns (the label column alone, for the class list); JSON is
    read whole, then projected.

    Args:
        path, columns, role, split_column: as :func:`read_table`.
        include: the columns to return (default: every column of ``columns`` and ``split_column``).
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
    wanted = wanted_columns(columns, split_column)
    include = wanted if include is None else list(include)
    if suffix == ".parquet":
        table, names = _read_parquet(path, include)
    else:
        check_utf8(path)
        if suffix in (".csv", ".tsv"):
            table, names = _read_csv(path, columns, include)
        else:
            table = _read_json(path)
            names = table.column_names
    if table.num_rows == 0:
        header = f"a header {names} but " if names else ""
        raise DataError(f"{path}: the file has {header}no rows")
    check_columns(names, wanted, str(path))
    return table.select(include)


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
    table = read_columns(path, columns, role, split_column)
    name = str(Path(path).expanduser())
    return _take(table.column_names, lambda c: table.column(c).to_pylist(), columns, name, split_column)


def check_columns(names: Sequence[str], wanted: Sequence[str], name: str) -> None:
    """Refuse a table without one of the ``wanted`` columns, naming those missing and those it has."""
    missing = [c for c in wanted if c not in names]
    if missing:
        raise DataError(
            f"{name}: missing column(s) {missing}; it has {list(names)} (set text_column / text_pair_column / "
            "label_column / split_column to the names the file uses)"
        )


def _take(names: Sequence[str], column, columns: TextColumns, name: str, split_column: str | None = None) -> TextTable:
    """The wanted columns of a table (``column(name) -> list``), or an error naming those missing."""
    check_columns(names, wanted_columns(columns, split_column), name)
    pairs = column(columns.pair) if columns.pair else None
    splits = column(split_column) if split_column else None
    return TextTable(name, column(columns.text), column(columns.label), pairs, splits=splits)


# -- the Hub ----------------------------------------------------------------------------------


def load_hub(name: str, config_name: str | None) -> dict[str, Any]:
    """The ``train`` / ``val`` / ``test`` splits of a Hub dataset (or a local dataset folder) as
    ``datasets.Dataset`` objects (Arrow tables on disk, in the ``datasets`` cache).

    Raises:
        DatasetNotFoundError: the dataset is neither on the Hub (when online) nor in the local cache.
        DataError: it cannot be loaded, or has no ``train`` split.
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
    if "train" not in hub:
        raise DataError(f"dataset {name!r} has no 'train' split (it has {sorted(hub)})")
    return {split: hub[hub_split] for split, hub_split in HUB_SPLITS.items() if hub_split in hub}


#: our split -> the Hub's name for it
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}


def hidden_labels(labels: Sequence[Any]) -> bool:
    """Whether every label is -1 (GLUE hides its test labels so): such a split is left out."""
    return all(label_key(v) == "-1" for v in labels)


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
    tables = {}
    for split, part in load_hub(name, config_name).items():
        extra = split_column if split == "train" else None
        name_of = f"{name}[{HUB_SPLITS[split]}]"
        tables[split] = _take(part.column_names, lambda c, p=part: list(p[c]), columns, name_of, extra)
    if "test" in tables and hidden_labels(tables["test"].labels):
        del tables["test"]
    return tables


# -- labels and rows --------------------------------------------------------------------------


def row_problem(
    text: Any, pair: Any, label: Any, lookup: dict[str, int], columns: TextColumns
) -> tuple[str, str] | int:
    """A row's class id, or why it cannot be used: (a detail for the place, the reason).

    ``pair`` is only looked at when ``columns.pair`` is set.
    """
    for name, value in ((columns.text, text), (columns.pair, pair)):
        if name is not None and (value is None or not str(value).strip()):
            return "", f"empty text in column {name!r}"
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


def check_rows(
    texts: Sequence[Any],
    pairs: Sequence[Any] | None,
    labels: Sequence[Any],
    classes: Sequence[str],
    columns: TextColumns,
) -> tuple[np.ndarray, list[tuple[int, str, str]]]:
    """The class id of each row (-1 for an unusable one), and ``(position, detail, reason)`` of each
    unusable row (see :func:`row_problem`)."""
    lookup = {name: k for k, name in enumerate(classes)}
    ids = np.full(len(texts), -1, dtype=np.int64)
    problems = []
    for i, (text, label) in enumerate(zip(texts, labels, strict=True)):
        found = row_problem(text, None if pairs is None else pairs[i], label, lookup, columns)
        if isinstance(found, tuple):
            problems.append((i, *found))
        else:
            ids[i] = found
    return ids, problems


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
    if table.pairs is None:
        columns = columns._replace(pair=None)
    ids, problems = check_rows(table.texts, table.pairs, table.labels, classes, columns)
    for i, detail, reason in problems:
        report.bad(f"{table.name}: row {int(table.rows[i])}{detail}", reason, item="row", split=split)
    keep = np.flatnonzero(ids >= 0)
    kept = table if len(keep) == len(table) else table.select(keep)
    return kept, ids[keep]
