"""Tables in files with lines, CSV and JSON Lines (`.csv`, `.jsonl`, `.ndjson`, a `.json` of JSON
Lines; compressed by suffix as `varlen.datasets.files` reads them), read with pyarrow's readers.

A JSON Lines record holds a variable-length field as a list (`{"signal": [[0.1, 0.2], [0.3, 0.4]], "label":
1}`); a CSV cell holds it as a JSON list (`"[[0.1, 0.2], [0.3, 0.4]]"`, what `json.dumps(a.tolist())`
writes): a string column whose first value is a JSON list, or whose values are JSON lists and numbers, is
parsed as one (a number among lists, or lists nested otherwise than the first, is refused naming its line).
Numbers come as JSON gives them (float64, int64): `dtypes` casts them. A row is named as an editor shows
it, `line N` (a CSV's header is line 1; blank lines and a quoted field's newlines count): a record pyarrow
cannot read, a value of another type than its column's, a cell that is no JSON, each is a
`DataError` naming the file and the line, found by reading the file again only when a
message needs it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from varlen.datasets.files import check_utf8, open_binary, read_text, record_lines, table_suffix, utf8_blocks
from varlen.errors import DataError

__all__ = ["LINE_TABLES", "Layout", "layout_of", "read_line_table", "record_lines"]

Layout = Literal["csv", "jsonl"]
#: suffix (inside any compression) -> how its rows sit in the file
LINE_TABLES: dict[str, Layout] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
#: a cell of a CSV column of lists starts so
LIST_START = "["
#: a CSV cell that is a number as pyarrow reads one (a list written as a scalar beside lists)
NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
#: the way out of a scalar among lists
ONE_VALUE = "a sequence of one value is a list too, e.g. [5]"


def layout_of(path: str | Path) -> Layout | None:
    """`csv` or `jsonl` by the file's suffix (inside its compression), None for other files."""
    return LINE_TABLES.get(table_suffix(path))


def read_line_table(path: str | Path, rows: int | None = None, columns: list[str] | None = None) -> pa.Table:
    """The table of a CSV or JSON Lines file (its first `rows`; only `columns`), list cells parsed.

    Raises:
        DataError: the file cannot be read as its format, naming the file and, where it can be found, the line.
    """
    path = Path(path)
    layout = layout_of(path)
    if layout == "jsonl" and path.suffix.lower() == ".json" and _starts_with_array(path):
        raise DataError(f"{path}: a JSON array; give JSON Lines (one record a line: Dataset.to_json writes them)")
    try:
        table = _read_csv(path, rows, columns) if layout == "csv" else _read_jsonl(path, rows, columns)
    except pa.ArrowInvalid as error:
        raise _placed(path, layout, error) from error
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path}: not a readable {layout.upper()} file ({type(error).__name__}: {error})") from error
    if any(pa.types.is_binary(kind) or pa.types.is_large_binary(kind) for kind in table.schema.types):
        check_utf8(path)  # pyarrow reads a column that is not UTF-8 as bytes: name the line
    return _list_cells(table, path) if layout == "csv" else table


def _starts_with_array(path: Path) -> bool:
    first = next(utf8_blocks(path, chunk=1 << 12), "")
    return first.lstrip().startswith("[")


def _read_csv(path: Path, rows: int | None, columns: list[str] | None) -> pa.Table:
    parse = pacsv.ParseOptions(newlines_in_values=True)
    convert = pacsv.ConvertOptions(include_columns=columns) if columns else None
    with open_binary(path) as stream:
        if rows is None:
            return pacsv.read_csv(stream, parse_options=parse, convert_options=convert)
        reader = pacsv.open_csv(stream, parse_options=parse, convert_options=convert)
        batches, held = [], 0
        while held < rows:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            batches.append(batch)
            held += batch.num_rows
        return pa.Table.from_batches(batches, reader.schema).slice(0, rows)


def _read_jsonl(path: Path, rows: int | None, columns: list[str] | None) -> pa.Table:
    if rows is None:
        with open_binary(path) as stream:
            table = pajson.read_json(stream)
    else:
        head: list[str] = []
        for block in utf8_blocks(path):
            head += [line for line in block.splitlines() if line.strip()]
            if len(head) >= rows:
                break
        table = pajson.read_json(io.BytesIO("\n".join(head[: max(rows, 1)]).encode()))
    return table.select(columns) if columns else table


def _list_cells(table: pa.Table, path: Path) -> pa.Table:
    """`table` with each string column of JSON lists parsed (the lists of a CSV): a column whose first value
    is a list, or whose other values beside its lists are all numbers (a list written as a scalar)."""
    for position, name in enumerate(table.column_names):
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        cells = pc.utf8_ltrim_whitespace(column.combine_chunks())
        lists = pc.fill_null(pc.starts_with(cells, LIST_START), False)
        if not pc.any(lists).as_py():
            continue
        others = pc.drop_null(pc.filter(cells, pc.invert(lists)))
        first = pc.drop_null(cells)[0].as_py()
        if not first.startswith(LIST_START) and not pc.all(pc.match_substring_regex(others, NUMBER)).as_py():
            continue  # text, some of it starting with '[': not a column of lists
        if len(others):
            raise _scalar_cell(path, name, column, lists)
        records = pc.binary_join_element_wise('{"v":', pc.fill_null(column.combine_chunks(), "null"), "}", "")
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(records)], pa.int32()), records), "\n")
        try:
            parsed = pajson.read_json(pa.BufferReader(joined[0].as_buffer())).column("v")
        except pa.ArrowInvalid as error:
            raise _bad_cell(path, name, column, error) from error
        table = table.set_column(position, name, parsed)
    return table


def _scalar_cell(path: Path, name: str, column: pa.ChunkedArray, lists: pa.Array) -> DataError:
    """The first cell of a column of lists that holds no list, named by its line."""
    missing = column.combine_chunks().is_null().to_numpy(zero_copy_only=False)
    row = int(np.flatnonzero(~lists.to_numpy(zero_copy_only=False) & ~missing)[0])
    cell = str(column[row].as_py())
    return DataError(
        f"{path}, {_line(path, 'csv', row)}: column {name!r} holds {cell[:40]!r}, not a JSON list, where its other "
        f"cells are lists: {ONE_VALUE}"
    )


def _depth(value: object) -> int | None:
    """How deep lists nest in a parsed cell (0: a scalar; None: an empty list, which fits any depth)."""
    depth = 0
    while isinstance(value, list):
        if not value:
            return None
        value, depth = value[0], depth + 1
    return depth


def _bad_cell(path: Path, name: str, column: pa.ChunkedArray, error: Exception) -> DataError:
    """The first cell of `column` that is no JSON list, or whose lists nest otherwise than the first's, named
    by its line."""
    first: tuple[int, int] | None = None  # (row, depth) of the first list that is not empty
    for row, cell in enumerate(column.to_pylist()):
        if cell is None:
            continue
        try:
            value = json.loads(cell)
        except ValueError as bad:
            return DataError(
                f"{path}, {_line(path, 'csv', row)}: column {name!r} holds {cell[:40]!r}, not a JSON list ({bad})"
            )
        depth = _depth(value)
        if depth == 0:
            return DataError(
                f"{path}, {_line(path, 'csv', row)}: column {name!r} holds {cell[:40]!r}, not a JSON list, where its "
                f"other cells are lists: {ONE_VALUE}"
            )
        if depth is not None and first is None:
            first = (row, depth)
        elif depth is not None and depth != first[1]:
            return DataError(
                f"{path}, {_line(path, 'csv', row)}: column {name!r} holds {cell[:40]!r}, {_nesting(depth)} where "
                f"{_line(path, 'csv', first[0])} holds {_nesting(first[1])}: every cell of a field nests alike"
            )
    return DataError(f"{path}: column {name!r}: its JSON lists cannot be read as one type ({error})")


def _nesting(depth: int) -> str:
    return "a list of numbers" if depth == 1 else "a list of lists" if depth == 2 else f"lists nested {depth} deep"


def _line(path: Path, layout: Layout, row: int) -> str:
    lines = record_lines(path, layout)
    return f"line {lines[row]}" if 0 <= row < len(lines) else f"row {row + 1}"


def _placed(path: Path, layout: Layout, error: Exception) -> DataError:
    """pyarrow's error on `path` as a DataError naming the line it is about (read again to find it)."""
    message = str(error)
    if "UTF8" in message or "UTF-8" in message:
        check_utf8(path)  # names the line of the first byte that is not UTF-8
    found = _csv_line(path, message) if layout == "csv" else _jsonl_line(path, message)
    where = f"{path}, line {found[0]}" if found else str(path)
    why = found[1] if found else message
    return DataError(f"{where}: not a readable {layout.upper()} record ({why})")


def _csv_line(path: Path, message: str) -> tuple[int, str] | None:
    """(line, why) of the first record with other fields than the header, or holding the value pyarrow named."""
    value = re.search(r"CSV column #(\d+): CSV conversion error to (\w+): invalid value '(.*)'", message)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = next(reader, [])
        last = reader.line_num
        for record in reader:
            line, last = last + 1, reader.line_num
            if not record:
                continue
            if len(record) != len(header):
                return line, f"{len(record)} fields where the header has {len(header)}"
            if value and record[int(value[1])] == value[3]:
                column = header[int(value[1])]
                return line, f"column {column!r} holds {value[3]!r} where its values are {value[2]}"
    except csv.Error as bad:
        return reader.line_num, str(bad)
    return None


def _jsonl_line(path: Path, message: str) -> tuple[int, str] | None:
    """(line, why) of the first line that is no JSON object, or whose value changes a column's type."""
    changed = re.search(r"Column\(/?([^)]*)\) changed from (\w+) to (\w+)", message)
    kinds = {str: "string", bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}
    for number, line in enumerate(io.StringIO(read_text(path), newline=""), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as bad:
            return number, f"not JSON: {bad}"
        if not isinstance(record, dict):
            return number, f"a JSON {kinds.get(type(record), 'value')}, not an object"
        if changed:
            value = record.get(changed[1].split("/")[0])
            if value is not None and kinds.get(type(value)) == changed[3]:
                return number, f"column {changed[1]!r} holds a {changed[3]} where its values are {changed[2]}s"
    return None
