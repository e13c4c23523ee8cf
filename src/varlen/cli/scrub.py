"""`varlen verify PATH`: every stored byte of a stream or a cache hashed against the checksum recorded when
it was written, markers ignored and nothing rebuilt or refreshed (a scrub).

A read checks each file once per node (`varlen.storage.checksums`): bytes a failing disk changes under the
same inode, size and modification time are served after that first check. This command reads every byte
again, whenever it is run (after a disk error, a copy, before a long job):

* a stream folder (LitData's `index.json`, its chunks, `varlen_sizes/`): the size index against its own
  checksum, each file it recorded (`sizes.arrow`, the draw sidecar), each chunk against the checksum and
  (uncompressed, or compressed inside its file) the bytes `index.json` gives, and `index.json`'s chunk
  list against the one the size index was written for;
* a cache folder (`$VARLEN_CACHE`, a DataModule's `cache_dir`): every varlen table in it, and every size
  index (a store's fetched copy: its chunks are checked as they are read);
* one varlen table (`.arrow`), or one file of a size index (the size index and every file it recorded).

It prints a row per file (file, kind, bytes, status: ok, MISMATCH, missing, unreadable, or unrecorded: no
checksum to compare, written by an older varlen or by something else) and a summary line, and exits 0
when every file is ok, 1 otherwise, 2 on a path that is none of these. Imports no Lightning and no scenario.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

import varlen.storage.checksums as checksums
from varlen.errors import DataError, OneLineParser
from varlen.storage.tables import CHECKSUM_FIELD, VERSION_FIELD, as_numpy
from varlen.stream.chunks import IN_FILE, INDEX_JSON, ChunkList, read_index_json
from varlen.stream.integrity import CHECKSUM, CHUNK_CHECKSUM, own_checksum, recorded_files
from varlen.stream.size_index import FOLDER, HISTOGRAMS

__all__ = ["Row", "main", "scrub"]

#: a row's statuses; every one but OK makes the command exit 1
OK, MISMATCH, MISSING, UNREADABLE, UNRECORDED = STATUSES = ("ok", "MISMATCH", "missing", "unreadable", "unrecorded")
#: the way out the summary names where a file is not ok
REWRITE_STREAM = (
    "Write it again: varlen optimize --config CONFIG --output DIR (chunks written elsewhere: varlen index-sizes)"
)
REBUILD_CACHE = "Remove the files named: the next run builds them again"


@dataclass(frozen=True)
class Row:
    """One file verified: its path (relative to what was given), what it is, its bytes, its status and why."""

    file: str
    kind: str
    nbytes: int | None
    status: str
    detail: str = ""


def _compared(found: str, recorded: str) -> tuple[str, str]:
    if found == recorded:
        return OK, ""
    return MISMATCH, f"its checksum is {found}, {recorded} was recorded"


def _file_row(path: Path, name: str, kind: str, recorded: str | None, nbytes: int | None = None) -> Row:
    """`path` hashed against `recorded` (None or empty: nothing recorded), its size against `nbytes`."""
    if not path.is_file():
        return Row(name, kind, None, MISSING, "recorded but not there" if recorded else "")
    size = path.stat().st_size
    if not recorded:
        return Row(name, kind, size, UNRECORDED, "no checksum recorded of it")
    if nbytes is not None and size != nbytes:
        return Row(name, kind, size, MISMATCH, f"{size} bytes where {INDEX_JSON} says {nbytes}")
    return Row(name, kind, size, *_compared(checksums.file_checksum(path), recorded))


def _read_ipc(path: Path, stream: bool) -> tuple[pa.RecordBatch, dict[bytes, bytes]]:
    """The one record batch of an Arrow IPC stream (a varlen table) or file (a size index) and its metadata."""
    source = pa.memory_map(str(path), "r")
    reader = pa.ipc.open_stream(source) if stream else pa.ipc.open_file(source)
    batches = list(reader) if stream else [reader.get_batch(i) for i in range(reader.num_record_batches)]
    if len(batches) != 1:
        raise ValueError(f"{len(batches)} record batches, not 1")
    return batches[0], dict(reader.schema.metadata or {})


def table_row(path: Path, name: str) -> Row | None:
    """A varlen table (an Arrow IPC stream with varlen's metadata) against its data's checksum; None: the file
    is no varlen table."""
    try:
        batch, metadata = _read_ipc(path, stream=True)
    except (OSError, ValueError, pa.ArrowException) as error:
        if path.suffix != ".arrow":
            return None
        return Row(name, "table", path.stat().st_size, UNREADABLE, f"{type(error).__name__}: {error}")
    if VERSION_FIELD not in metadata:
        return None
    recorded = metadata.get(CHECKSUM_FIELD, b"").decode()
    if not recorded:
        return Row(name, "table", path.stat().st_size, UNRECORDED, "no checksum (an older varlen's: rebuilt when read)")
    return Row(name, "table", path.stat().st_size, *_compared(checksums.table_checksum(batch), recorded))


def size_index_rows(folder: Path, prefix: str) -> tuple[list[Row], pa.RecordBatch | None]:
    """The size index in `folder/varlen_sizes` against its own checksum and each file it recorded against
    theirs; with its table where it is readable and records checksums (None: no chunk can be checked)."""
    path, name = folder / FOLDER / HISTOGRAMS, f"{prefix}{FOLDER}/{HISTOGRAMS}"
    if not path.is_file():
        return [Row(name, "size index", None, MISSING, "build it: varlen index-sizes")], None
    size = path.stat().st_size
    try:
        batch, metadata = _read_ipc(path, stream=False)
    except (OSError, ValueError, pa.ArrowException) as error:
        return [Row(name, "size index", size, UNREADABLE, f"{type(error).__name__}: {error}")], None
    files = recorded_files(metadata)
    if files is None:
        return [Row(name, "size index", size, UNRECORDED, "records no checksums (an older varlen)")], None
    rows = [Row(name, "size index", size, *_compared(own_checksum(batch, metadata), metadata[CHECKSUM].decode()))]
    there = {p.name for p in (folder / FOLDER).iterdir() if p.is_file() and p.suffix == ".arrow"}
    for file in sorted(set(files) | (there - {HISTOGRAMS})):
        kind = "sizes" if file.startswith("sizes") else "draw sidecar"
        rows.append(_file_row(folder / FOLDER / file, f"{prefix}{FOLDER}/{file}", kind, files.get(file)))
    return rows, batch.replace_schema_metadata(metadata)


def stream_rows(folder: Path) -> list[Row]:
    """A stream folder's size index, the files it recorded, `index.json`'s chunk list and every chunk."""
    rows, table = size_index_rows(folder, "")
    try:
        listed = read_index_json(folder)
        chunks = ChunkList.from_index(listed, folder)
    except DataError as error:
        return [Row(INDEX_JSON, "chunk list", (folder / INDEX_JSON).stat().st_size, UNREADABLE, str(error)), *rows]
    recorded: dict[str, str] = {}
    size = (folder / INDEX_JSON).stat().st_size
    if table is None:
        rows.insert(0, Row(INDEX_JSON, "chunk list", size, UNRECORDED, "no size index to compare it with"))
    else:
        names = table.column("chunk").to_pylist()
        sums = table.column(CHUNK_CHECKSUM).to_pylist() if CHUNK_CHECKSUM in table.schema.names else []
        recorded = dict(zip(names, sums, strict=False))
        written = ChunkList(tuple(names), as_numpy(table.column("samples")), as_numpy(table.column("bytes")))
        differ = chunks.difference(written, INDEX_JSON, "the size index")
        rows.insert(0, Row(INDEX_JSON, "chunk list", size, MISMATCH if differ else OK, differ or ""))
    config = listed.get("config") if isinstance(listed.get("config"), dict) else {}
    whole = bool(config.get("compression")) and config.get("compression_level") not in IN_FILE
    for number, name in enumerate(chunks.names):  # a chunk compressed whole: index.json gives its bytes decompressed
        nbytes = None if whole else int(chunks.nbytes[number])
        rows.append(_file_row(folder / name, name, "chunk", recorded.get(name), nbytes))
    return rows


def cache_rows(folder: Path) -> tuple[list[Row], list[str]]:
    """Every varlen table under `folder` and every size index (without chunks: a store's copy); the files
    that hold no checksum varlen recorded (LitData's chunk cache, JSON, arrays, scratch), not checked."""
    rows: list[Row] = []
    skipped: list[str] = []
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if not path.is_file():
            continue
        if path.parent.name == FOLDER and (path.parent / HISTOGRAMS).is_file():  # a size index: its rows say them
            if path.name == HISTOGRAMS:
                rows += size_index_rows(path.parent.parent, f"{path.parent.parent.relative_to(folder).as_posix()}/")[0]
            elif path.suffix != ".arrow":
                skipped.append(name)
            continue
        row = table_row(path, name) if path.suffix == ".arrow" and not path.name.startswith(".") else None
        if row is None:
            skipped.append(name)
        else:
            rows.append(row)
    return [Row(r.file.removeprefix("./"), r.kind, r.nbytes, r.status, r.detail) for r in rows], skipped


def scrub(path: str | Path) -> tuple[list[Row], list[str]]:
    """The rows of every file under `path` that records a checksum (see the module docstring), and the files
    not checked (nothing recorded of them).

    Raises:
        ValueError: `path` is no stream folder, cache folder or varlen table (naming it).
    """
    if "://" in str(path):
        raise ValueError(f"{path}: give a local folder or file (a store's copy: verify the folder it was copied from)")
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if path.is_file() and path.parent.name == FOLDER and path.suffix == ".arrow":  # a size index's file: all of it
        return size_index_rows(path.parent.parent, "")[0], []
    if path.is_file():
        row = table_row(path, path.name)
        if row is None:
            raise ValueError(
                f"{path} is no varlen table: give a stream folder (holding {INDEX_JSON}), a cache folder or a table"
            )
        return [row], []
    if (path / INDEX_JSON).is_file():
        rows = stream_rows(path)
        listed = {row.file for row in rows}
        skipped = [p.name for p in sorted(path.iterdir()) if p.is_file() and p.name not in listed]
        skipped += [
            f"{FOLDER}/{p.name}" for p in sorted((path / FOLDER).glob("*")) if f"{FOLDER}/{p.name}" not in listed
        ]
        return rows, skipped
    rows, skipped = cache_rows(path)
    if not rows:
        raise ValueError(f"{path} holds no stream ({INDEX_JSON}), no size index and no varlen table")
    return rows, skipped


def render(rows: Sequence[Row], quiet: bool = False) -> list[str]:
    """The table's lines: a header and a row per file (with `quiet`, the files that are not ok)."""
    shown = [row for row in rows if not quiet or row.status != OK]
    if not shown:
        return []
    cells = [(r.file, r.kind, "-" if r.nbytes is None else f"{r.nbytes:,}", r.status, r.detail) for r in shown]
    header = ("file", "kind", "bytes", "status", "")
    widths = [max(len(str(cell[i])) for cell in [header, *cells]) for i in range(4)]

    def line(cell: tuple) -> str:
        file, kind, nbytes, status, detail = cell
        text = f"{file:<{widths[0]}}  {kind:<{widths[1]}}  {nbytes:>{widths[2]}}  {status:<{widths[3]}}"
        return f"{text}  {detail}".rstrip()

    return [line(header), *(line(cell) for cell in cells)]


def summary(path: Path, rows: Sequence[Row], skipped: Iterable[str], seconds: float) -> str:
    """One line: what was read, how many files of each status, what was not checked, the way out."""
    counts = {status: sum(row.status == status for row in rows) for status in STATUSES}
    counts = {status: count for status, count in counts.items() if count}
    read = sum(row.nbytes or 0 for row in rows if row.status in (OK, MISMATCH))
    said = ", ".join(f"{count} {status}" for status, count in counts.items())
    files = f"{len(rows)} file{'s' * (len(rows) != 1)}"
    line = f"{path}: {files}, {read / 2**20:.1f} MiB hashed in {seconds:.1f} s: {said}"
    skipped = list(skipped)
    if skipped:
        named = f": {', '.join(skipped)}" if len(skipped) <= 3 else ""
        line += f"; {len(skipped)} other file{'s' * (len(skipped) != 1)} not checked (no checksum recorded{named})"
    if set(counts) - {OK}:
        stream = (path / INDEX_JSON).is_file() or (path / FOLDER).is_dir()
        line += f". {REWRITE_STREAM if stream else REBUILD_CACHE}"
    return line


def main(argv: Sequence[str]) -> int:
    """`varlen verify PATH`: the table and summary printed; 0 when every file is ok, 1 otherwise, 2 on a bad
    path (one line on stderr)."""
    parser = OneLineParser(
        prog="varlen verify",
        description="Hash every chunk, sidecar and cache table under PATH against the checksum recorded when it "
        "was written (markers ignored, nothing rebuilt). Exit 0: every file ok; 1: any other; 2: a bad path.",
    )
    parser.add_argument("path", help="a stream folder (index.json, chunks, varlen_sizes/), a cache folder or a table")
    parser.add_argument("-q", "--quiet", action="store_true", help="list only the files that are not ok")
    options = parser.parse_args(list(argv))
    started = time.perf_counter()
    try:
        rows, skipped = scrub(options.path)
    except ValueError as error:
        print(f"varlen verify: error: {error}", file=sys.stderr)
        return 2
    lines = render(rows, options.quiet)
    lines.append(summary(Path(options.path), rows, skipped, time.perf_counter() - started))
    print("\n".join(lines), flush=True)
    return 0 if all(row.status == OK for row in rows) else 1
