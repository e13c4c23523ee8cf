"""Open and check text-classification tables: local files in their real formats.

A reader returns the columns it is asked for (a `pyarrow.Table`, or a `TextTable` of raw
texts, optional second texts and labels) or raises `DataError` naming the
file and, where it applies, the line: a missing file (`DatasetNotFoundError`),
an empty file, bytes that are not UTF-8, a file that does not parse, a header without rows, a
missing column. Rows that cannot be used (an empty text, a missing, non-finite or unknown label)
are a matter of policy: `encode_rows` sends each through `report.bad` and keeps the others,
with their row numbers, so nothing after a skipped row shifts.

Local files are read with pyarrow directly (no `datasets` cache on disk): CSV (quoted fields
may hold commas and newlines), TSV (GLUE layout: no quoting), JSON Lines, a JSON array of
records, Parquet; each also compressed (`.gz`, `.bz2`, `.xz`, `.zst`, see
`varlen.datasets.files`). Rows are kept as positions (0 = the first row after the header);
messages name them as `places` says (a file's line, or a row from 1).
Hugging Face datasets and Arrow files are `hf_tables`'.
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
from varlen.datasets.text.places import RowPlaces, json_layout
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.report import DataReport

__all__ = [
    "FILE_TYPES",
    "UNLABELLED",
    "UNUSABLE",
    "TextColumns",
    "TextTable",
    "check_columns",
    "check_rows",
    "check_utf8",
    "encode_rows",
    "file_places",
    "iter_columns",
    "local_file",
    "read_columns",
    "read_schema",
    "row_problem",
    "wanted_columns",
]

#: local file suffixes the readers understand (each may be followed by one of `COMPRESSIONS`)
FILE_TYPES = (".csv", ".tsv", ".json", ".jsonl", ".parquet")
#: where a user can fetch the usual real data, for the not-found hint
SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"
#: the class id `check_rows` gives a row without a label column (a table to predict on)
UNLABELLED = -1
#: the class id `check_rows` gives an unusable row
UNUSABLE = -2


class TextColumns(NamedTuple):
    """The columns of a table that a DataModule reads: text, optional second text, label (None: the
    table has none, as a table to predict on may not)."""

    text: str
    pair: str | None
    label: str | None


@dataclass
class TextTable:
    """The rows of one source, as read (labels not yet mapped to classes).

    Attributes:
        name: the file (or `"<hub name>[<split>]"`) that error messages name.
        texts: the text of each row.
        labels: the raw label of each row (int, float, str or None).
        pairs: the second text of each row, or None.
        rows: the row number of each entry in its source (0 = the first row after the header).
        splits: the raw value of the split column of each row (`split_column`), or None.
        places: how messages name its rows (default: `"row N"`, from 1).
    """

    name: str
    texts: list[Any]
    labels: list[Any]
    pairs: list[Any] | None = None
    rows: np.ndarray | None = None
    splits: list[Any] | None = None
    places: RowPlaces | None = None

    def __post_init__(self) -> None:
        if self.rows is None:
            self.rows = np.arange(len(self.texts), dtype=np.int64)
        if self.places is None:
            self.places = RowPlaces()

    def __len__(self) -> int:
        return len(self.texts)

    def where(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        """The places of the entries `positions` (`"line 7"`, `"row 7"`) in their source."""
        return self.places(self.rows[np.asarray(positions, dtype=np.int64)])

    def select(self, indices: Sequence[int] | np.ndarray) -> TextTable:
        """The entries `indices` (positions in this table), keeping their source row numbers."""
        indices = np.asarray(indices, dtype=np.int64)
        pick = [int(i) for i in indices]
        return TextTable(
            self.name,
            [self.texts[i] for i in pick],
            [self.labels[i] for i in pick],
            None if self.pairs is None else [self.pairs[i] for i in pick],
            self.rows[indices],
            None if self.splits is None else [self.splits[i] for i in pick],
            self.places,
        )


# -- local files ------------------------------------------------------------------------------


def _csv_options(path: Path, columns: TextColumns, refuse) -> dict[str, Any]:
    """pyarrow's options for a CSV / TSV file (TSV: GLUE's layout, no quoting); text columns stay text."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    tsv = table_suffix(path) == ".tsv"
    parse = pcsv.ParseOptions(
        delimiter="\t" if tsv else ",",
        quote_char=False if tsv else '"',
        newlines_in_values=not tsv,
        invalid_row_handler=refuse,
    )
    texts = {c: pa.string() for c in (columns.text, columns.pair) if c}  # "5" or "NA" stays a text
    return {"read_options": pcsv.ReadOptions(use_threads=False), "parse_options": parse, "texts": texts}


def _read_csv(path: Path, columns: TextColumns, include: Sequence[str] | None):
    """The columns `include` of a CSV / TSV file (those it has; None: only its header and first block's
    types), and its schema (from the header and the first block)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    bad_rows: list[Any] = []

    def refuse(row) -> str:
        bad_rows.append(row)
        return "error"

    options = _csv_options(path, columns, refuse)
    texts = options.pop("texts")
    tsv = table_suffix(path) == ".tsv"
    try:
        with open_binary(path) as source:  # decompressed by the file's suffix (checked by check_utf8 already)
            schema = pcsv.open_csv(source, convert_options=pcsv.ConvertOptions(column_types=texts), **options).schema
        if include is None:
            return None, schema
        convert = pcsv.ConvertOptions(column_types=texts, include_columns=[c for c in include if c in schema.names])
        with open_binary(path) as source:
            return pcsv.read_csv(source, convert_options=convert, **options), schema
    except pa.ArrowInvalid as error:
        if bad_rows:
            row = bad_rows[0]
            raise DataError(
                f"{path}: line {row.number} has {row.actual_columns} fields, the header {row.expected_columns}: "
                f"{row.text[:80]!r}" + ("" if tsv else " (a field with a comma or newline must be in double quotes)")
            ) from None
        raise DataError(f"{path}: cannot read it as {'TSV' if tsv else 'CSV'}: {error}") from None


def _starts_array(path: Path) -> bool:
    """Whether a `.json` file holds one JSON array (else JSON Lines)."""
    with open_binary(path) as handle:
        return json_layout(handle.read(4096)) == "rows"


def _read_json(path: Path):
    import pyarrow as pa
    import pyarrow.json as pjson

    try:
        if not _starts_array(path):
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


def _read_parquet(path: Path, include: Sequence[str] | None):
    """The columns `include` of a Parquet file (those it has; None: none), and its schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        source = path if compression(path) is None else pa.BufferReader(read_bytes(path))  # read at offsets
        parquet = pq.ParquetFile(source)
        schema = parquet.schema_arrow
        if include is None:
            return None, schema
        return parquet.read([c for c in include if c in schema.names]), schema
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
    """The columns `include` of one local table, checked as `read_columns` checks it, as
    record batches of at most `size` rows. A Parquet file is read a batch at a time (memory holds
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


def local_file(path: str | Path, role: str) -> tuple[Path, str]:
    """`path` and its table suffix, once it is checked to be a file of one of `FILE_TYPES`.

    Raises:
        DatasetNotFoundError: there is no such file.
        DataError: its suffix is none of `FILE_TYPES`.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetNotFoundError(
            f"text table ({role})",
            path.resolve(),
            f"point {role} at a CSV, TSV, JSON(L), Parquet or Arrow file, a folder written by Dataset.save_to_disk, "
            "or (from Python) a datasets.Dataset; or leave train_file unset for the embedded synthetic reviews; "
            f"SST-2: download {SST2_URL} and use its train.tsv and dev.tsv",
        )
    suffix = table_suffix(path)
    if suffix not in FILE_TYPES:
        raise DataError(
            f"{path}: unsupported file type {suffix!r}; use one of {[*FILE_TYPES, '.arrow']}, optionally compressed "
            f"({', '.join(COMPRESSIONS)}; not .arrow), a folder written by Dataset.save_to_disk, or (from Python) "
            "a datasets.Dataset"
        )
    return path, suffix


def _read(path: Path, suffix: str, columns: TextColumns, include: Sequence[str] | None):
    """`(table of the columns include or None, schema)` of a checked local file."""
    if suffix == ".parquet":
        return _read_parquet(path, include)
    check_utf8(path)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path, columns, include)
    table = _read_json(path)
    return table, table.schema


def read_schema(path: str | Path, columns: TextColumns, role: str = "train_file"):
    """A local table's columns and their types (`pyarrow.Schema`; a CSV's from its header and first
    block: a column of token ids there is text), read as cheaply as the format allows."""
    path, suffix = local_file(path, role)
    return _read(path, suffix, columns, None)[1]


def file_places(path: str | Path) -> RowPlaces:
    """How messages name a local file's rows: its lines (CSV, TSV, JSON Lines), else rows from 1."""
    path = Path(path).expanduser()
    suffix = table_suffix(path)
    if suffix == ".json":
        return RowPlaces("rows" if _starts_array(path) else "jsonl", path)
    layouts = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}
    return RowPlaces(layouts[suffix], path) if suffix in layouts else RowPlaces()


def read_columns(
    path: str | Path,
    columns: TextColumns,
    role: str = "train_file",
    split_column: str | None = None,
    include: Sequence[str] | None = None,
):
    """One local table, checked, as a `pyarrow.Table` of the columns `include` only.

    Checked (it exists, is not empty, is UTF-8, parses, has rows and every column of `columns` and
    `split_column`), whatever `include` takes: CSV, TSV and Parquet convert only those columns
    (the label column alone, for the class list); JSON is read whole, then projected.

    Args:
        path: a `.csv`, `.tsv`, `.json`, `.jsonl` or `.parquet` file, or one of them
            compressed (`.csv.gz`, `.tsv.bz2`, `.jsonl.xz`, `.csv.zst`...).
        columns: the columns it must have.
        role: the argument that named the file, for the not-found hint.
        split_column: a column it must have too (each row's split).
        include: the columns to return (default: every column of `columns` and `split_column`).

    Raises:
        DatasetNotFoundError: there is no such file.
        DataError: the file cannot be used (the message names it, and the line where it applies).
    """
    path, suffix = local_file(path, role)
    wanted = wanted_columns(columns, split_column)
    include = wanted if include is None else list(include)
    table, schema = _read(path, suffix, columns, include)
    if table.num_rows == 0:
        header = f"a header {schema.names} but " if schema.names else ""
        raise DataError(f"{path}: the file has {header}no rows")
    check_columns(schema.names, wanted, str(path))
    return table.select(include)


def check_columns(names: Sequence[str], wanted: Sequence[str], name: str) -> None:
    """Refuse a table without one of the `wanted` columns, naming those missing and those it has."""
    missing = [c for c in wanted if c not in names]
    if missing:
        raise DataError(
            f"{name}: missing column(s) {missing}; it has {list(names)} (set text_column / text_pair_column / "
            "label_column / split_column to the names the file uses)"
        )


# -- labels and rows --------------------------------------------------------------------------


def _blank(value: Any) -> bool:
    """Whether a text (or a row of token ids) holds nothing: missing, blank, or an empty list."""
    if value is None:
        return True
    if isinstance(value, (list, tuple, np.ndarray)):
        return len(value) == 0
    return not str(value).strip()


def row_problem(
    text: Any, pair: Any, label: Any, lookup: dict[str, int], columns: TextColumns
) -> tuple[str, str] | int:
    """A row's class id (`UNLABELLED` without a label column), or why it cannot be used: (a detail
    for the place, the reason).

    `pair` is only looked at when `columns.pair` is set.
    """
    for name, value in ((columns.text, text), (columns.pair, pair)):
        if name is not None and _blank(value):
            return "", f"empty text in column {name!r}"
    if columns.label is None:
        return UNLABELLED
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
    """The class id of each row (`UNUSABLE` for an unusable one, `UNLABELLED` for each row
    of a table without a label column), and `(position, detail, reason)` of each unusable row (see
    `row_problem`)."""
    lookup = {name: k for k, name in enumerate(classes)}
    ids = np.full(len(texts), UNUSABLE, dtype=np.int64)
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
    """The usable rows of `table` and their class ids; each unusable row goes through `report.bad`.

    Args:
        table: rows as read.
        classes: the class names, in id order.
        columns: the columns the table was read with (named in the reasons).
        report: where bad rows go (default: a raising one).
        split: the split the rows belong to, for the report.

    Raises:
        DataError: a bad row under `on_bad="raise"`, naming the file and the row's place.
    """
    report = report or DataReport("raise")
    if table.pairs is None:
        columns = columns._replace(pair=None)
    ids, problems = check_rows(table.texts, table.pairs, table.labels, classes, columns)
    places = table.where([i for i, _, _ in problems])
    for (_, detail, reason), place in zip(problems, places, strict=True):
        report.bad(f"{table.name}: {place}{detail}", reason, item="row", split=split)
    keep = np.flatnonzero(ids != UNUSABLE)
    kept = table if len(keep) == len(table) else table.select(keep)
    return kept, ids[keep]
