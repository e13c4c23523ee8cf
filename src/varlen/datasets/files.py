"""Text files as the table readers see them: decompressed by their suffix, checked as UTF-8 line by line.

Public tables travel compressed (MoleculeNet's `HIV.csv.gz`, Tox21, ToxCast...), so every table
reader opens its file through `open_binary`, which decompresses `.gz`, `.bz2` and
`.zst` with pyarrow's codecs and `.xz` with Python's `lzma` (pyarrow has no LZMA codec), and
decodes through `utf8_blocks`, which names the file and the line of a byte that is not
UTF-8, counted in the decompressed text, as an editor shows it after `gunzip`.
"""

from __future__ import annotations

import csv
import io
import lzma
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from varlen.errors import DataError

__all__ = [
    "record_lines",
    "COMPRESSIONS",
    "check_utf8",
    "compression",
    "open_binary",
    "read_bytes",
    "read_text",
    "table_suffix",
    "utf8_blocks",
]

#: file suffix -> the compression it means
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}


def compression(path: str | Path) -> str | None:
    """The compression `path`'s suffix names (`"gzip"`, `"bz2"`, `"xz"`, `"zstd"`), or None."""
    return COMPRESSIONS.get(Path(path).suffix.lower())


def table_suffix(path: str | Path) -> str:
    """The suffix of the file inside the compression, lower case: `.csv` for `HIV.CSV.gz` and `HIV.csv`."""
    path = Path(path)
    return Path(path.stem).suffix.lower() if compression(path) else path.suffix.lower()


def open_binary(path: str | Path) -> BinaryIO:
    """`path` opened for reading, decompressed when its suffix names a compression (a stream)."""
    kind = compression(path)
    if kind == "xz":
        return lzma.open(path, "rb")
    import pyarrow as pa

    return pa.input_stream(str(path), compression=kind)  # a native stream: pyarrow's readers take it as is


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turns what a missing, unreadable, corrupt or truncated file raises while it is read into a DataError."""
    import pyarrow as pa

    try:
        yield
    except (OSError, EOFError, lzma.LZMAError, pa.ArrowException) as error:
        how = f"decompress it as {compression(path)}" if compression(path) else "read it"
        raise DataError(f"{path}: cannot {how} ({type(error).__name__}: {error})") from error


def read_bytes(path: str | Path) -> bytes:
    """The whole decompressed content of `path` (for formats read at offsets, such as Parquet).

    Raises:
        DataError: the file cannot be read or decompressed.
    """
    with _reading(Path(path)), open_binary(path) as handle:
        return handle.read()


def utf8_blocks(path: str | Path, chunk: int = 1 << 20) -> Iterator[str]:
    """The decompressed text of `path` in blocks cut at line ends (a leading byte-order mark dropped).

    Raises:
        DataError: a byte that is not UTF-8 (naming the file, the line and the bytes), or a file
            that cannot be read or decompressed.
    """
    path = Path(path)
    line, offset, carry, first = 1, 0, b"", True
    with _reading(path), open_binary(path) as handle:
        while True:
            block = handle.read(chunk)
            data = carry + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            part, carry = data[:cut], data[cut:]
            try:
                text = part.decode("utf-8")  # not utf-8-sig: its error positions skip the mark
            except UnicodeDecodeError as error:
                where = line + part.count(b"\n", 0, error.start)
                inside = " of the decompressed text" if compression(path) else ""
                raise DataError(
                    f"{path}, line {where}: bytes that are not UTF-8 ({part[error.start : error.start + 4]!r} "
                    f"at byte {offset + error.start}{inside}: {error.reason}); save the file as UTF-8 "
                    "(e.g. iconv -f latin1 -t utf-8)"
                ) from None
            if first and part:
                text, first = text.removeprefix("\ufeff"), False
            line, offset = line + part.count(b"\n"), offset + len(part)
            if text:
                yield text
            if not block:
                return


def check_utf8(path: str | Path) -> None:
    """Refuse a file that is empty (or blank) or holds bytes that are not UTF-8, naming the line."""
    blank = True
    for text in utf8_blocks(path):  # every block is decoded, also after the first that is not blank
        blank = blank and not text.strip()
    if blank:
        raise DataError(f"{path}: the file is empty (no header, no rows)")


def read_text(path: str | Path) -> str:
    """The whole decompressed text of `path` (UTF-8, with or without a byte-order mark).

    Raises:
        DataError: as `utf8_blocks`.
    """
    return "".join(utf8_blocks(path))


def record_lines(path: str | Path, layout: str) -> list[int]:
    """The line (from 1) where each record of a file starts, as pyarrow reads it (`layout`: `csv`, `tsv`
    with a header line, `jsonl`): blank lines are no records; a CSV record spans the lines its quoted fields
    hold (the records after one Python's csv cannot read, a field over its size limit, are named as rows)."""
    text = io.StringIO(read_text(path), newline="")
    lines: list[int] = []
    if layout == "csv":
        reader = csv.reader(text)
        try:
            next(reader, None)  # the header
            last = reader.line_num
            for record in reader:
                if record:  # a blank line reads as []
                    lines.append(last + 1)
                last = reader.line_num
        except csv.Error:
            pass
        return lines
    for number, line in enumerate(text, 1):
        if (layout == "tsv" and number == 1) or not line.strip("\r\n" if layout == "tsv" else None):
            continue
        lines.append(number)
    return lines
