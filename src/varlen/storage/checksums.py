"""Checksums of a table's data: recorded when it is built, verified when a process first maps it.

A cache file's format version and content key (its schema's metadata) say what it was built from,
not that its bytes are still the ones written: bytes flipped in the middle of a table by a disk, a
copy or a tool would be served as data (a token id of -1013 reaches an embedding, a molecule's
values change). So `table_checksum` digests a table's data (every column's values and
offsets, with its type and length) with xxh3-64 when it is built, the table records it, and
`verify` compares it when a process maps the file. A streamed dataset's size index records
`file_checksum` of each LitData chunk and of the files beside it the same way
(`varlen.stream.integrity`), checked through `mismatch`. xxh3 hashes about 15 GB/s on one core:
SST-2's token table costs milliseconds (`scripts/benchmark_checksums.py`). It runs

* once per file per process: a verified file (device, inode, size, modification time) is
  remembered, and forked loader workers inherit that;
* once per file per node: a successful verification leaves an extended attribute on the file
  (`MARKER`: its inode, size, modification time and checksum), so other ranks and spawned
  workers skip the hash. A file written since has another modification time, a copy another
  inode: both are hashed again. Where the file system or the file's owner refuses the attribute,
  every process hashes.

The marker's blind spot: bytes that change while the inode, size and modification time stay (a failing
disk, a tool that restores the mtime) are served after the first check. Where that matters,
`VARLEN_VERIFY=always` (`VERIFY`) hashes every file at every open, in every process (the
variable travels to loader workers and ranks), and `verifying` does so for what a block of code
opens (a stream's `verify: always`); `varlen verify PATH` hashes every file of a stream or cache
against what it recorded, markers ignored.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

from varlen.errors import DataError

__all__ = [
    "ALGORITHM",
    "MARKER",
    "VERIFY",
    "ChecksumError",
    "always_verified",
    "file_checksum",
    "mismatch",
    "table_checksum",
    "verify",
    "verifying",
]

#: the digest a table records (its name prefixes the value: another one is a new format)
ALGORITHM = "xxh3_64"
#: the extended attribute that says a file was verified (see the module docstring)
MARKER = "user.varlen.verified"
#: the environment variable that says how often a file is hashed: `once` (the default: once per node,
#: see the module docstring) or `always` (at every open, in every process)
VERIFY = "VARLEN_VERIFY"
#: bytes `file_checksum` reads at a time
_BLOCK = 8 * 2**20

_VERIFIED: set[tuple[int, int, int, int]] = set()  # (device, inode, size, mtime) verified in this process
_ALWAYS: contextvars.ContextVar[bool] = contextvars.ContextVar("varlen_verify_always", default=False)


def always_verified() -> bool:
    """Whether a file opened now is hashed whatever this process or the node verified already:
    `VARLEN_VERIFY=always`, or inside `verifying`.

    Raises:
        ValueError: `VARLEN_VERIFY` is set to something else than `once` or `always`.
    """
    setting = os.environ.get(VERIFY, "").strip().lower()
    if setting not in ("", "once", "always"):
        raise ValueError(
            f"{VERIFY}={os.environ[VERIFY]!r}: give 'always' (every file hashed at every open) or 'once' "
            "(once per file per node, the default)"
        )
    return setting == "always" or _ALWAYS.get()


@contextlib.contextmanager
def verifying(always: bool = True) -> Iterator[None]:
    """Inside it, with `always`, every file `mismatch` checks is hashed, markers and this process's
    memory of verified files ignored (a stream's `verify: always`); without, as outside."""
    token = _ALWAYS.set(_ALWAYS.get() or always)
    try:
        yield
    finally:
        _ALWAYS.reset(token)


class ChecksumError(DataError):
    """A table's data do not match the checksum it recorded when it was built (or it recorded none).

    Args:
        path: the table's file.
        reason: what is wrong, as `varlen.storage.tables.open_table` says it ("cache <path> is <reason>").
    """

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"cache {path} is {reason}")

    def __reduce__(self):  # picklable across loader workers and DDP ranks, with its arguments
        return type(self), (self.path, self.reason)


def table_checksum(batch: pa.RecordBatch, metadata: Mapping[bytes, bytes] | None = None) -> str:
    """`"xxh3_64:<hex>"` of a record batch's data: each column's name, type, length and the bytes
    of its values (and offsets, nulls) that its rows span, so a table equal in content has the same
    checksum however its buffers are laid out in memory or in the file; with `metadata`, those
    schema metadata entries too (what a table says of other files: the stream's size index)."""
    digest = xxhash.xxh3_64()
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        digest.update(name.encode())
        _feed(digest, column)
    for key, value in sorted((metadata or {}).items()):
        digest.update(struct.pack("<qq", len(key), len(value)) + key + value)
    return f"{ALGORITHM}:{digest.hexdigest()}"


def file_checksum(path: str | Path) -> str:
    """`"xxh3_64:<hex>"` of a file's bytes (a LitData chunk, a size index file), read a block at a time."""
    digest, block = xxhash.xxh3_64(), bytearray(_BLOCK)
    view = memoryview(block)
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(block):
            digest.update(view[:read])
    return f"{ALGORITHM}:{digest.hexdigest()}"


_OFFSET_WIDTH = {
    pa.lib.Type_LIST: 4,
    pa.lib.Type_STRING: 4,
    pa.lib.Type_BINARY: 4,
    pa.lib.Type_LARGE_LIST: 8,
    pa.lib.Type_LARGE_STRING: 8,
    pa.lib.Type_LARGE_BINARY: 8,
}


def _feed(digest: xxhash.xxh3_64, array: pa.Array) -> None:
    """Add `array`'s type, length, nulls and the bytes its rows span to `digest` (children too)."""
    kind = array.type
    digest.update(struct.pack("<qqq", kind.id, len(array), array.null_count))
    if array.null_count:
        digest.update(np.packbits(array.is_null().to_numpy(zero_copy_only=False)).tobytes())
    if pa.types.is_fixed_size_list(kind):
        digest.update(struct.pack("<q", kind.list_size))
        _feed(digest, array.values.slice(array.offset * kind.list_size, len(array) * kind.list_size))
    elif kind.id in _OFFSET_WIDTH:
        width = _OFFSET_WIDTH[kind.id]
        offsets = _region(array.buffers()[1], array.offset * width, (len(array) + 1) * width, f"<i{width}")
        first, last = (int(offsets[0]), int(offsets[-1])) if len(array) else (0, 0)
        digest.update(offsets - first if first else offsets)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            _feed(digest, array.values.slice(first, last - first))
        else:
            digest.update(_region(array.buffers()[2], first, last - first, "u1"))
    elif pa.types.is_boolean(kind):
        digest.update(np.packbits(array.to_numpy(zero_copy_only=False)).tobytes())
    elif pa.types.is_primitive(kind):
        width = kind.bit_width // 8
        digest.update(_region(array.buffers()[1], array.offset * width, len(array) * width, "u1"))
    else:
        raise TypeError(f"a varlen table holds no {kind} column")


def _region(buffer: pa.Buffer | None, start: int, size: int, dtype: str) -> np.ndarray:
    """`size` bytes of `buffer` from `start` as a numpy view (empty when there is no buffer)."""
    if buffer is None or size == 0:
        return np.zeros(0, dtype)
    if start + size > buffer.size:
        raise ValueError(f"a column's rows span bytes {start}-{start + size} of a {buffer.size}-byte buffer")
    return np.frombuffer(buffer, dtype, size // np.dtype(dtype).itemsize, start)


def verify(path: str | Path, batch: pa.RecordBatch, recorded: str) -> None:
    """Check the data of the table `batch` mapped from `path` against the checksum `recorded`
    when it was built, unless this process or another one on the node verified this file already.

    Raises:
        ChecksumError: naming the file: it recorded no checksum, or its data differ from what was written.
    """
    if not recorded:
        raise ChecksumError(path, "without a checksum of its data (written by an older varlen)")
    found = mismatch(path, recorded, lambda: table_checksum(batch))
    if found is not None:
        reason = f"corrupt: its data's checksum is {found}, not the {recorded} recorded when it was built"
        raise ChecksumError(path, reason)


def mismatch(path: str | Path, recorded: str, compute: Callable[[], str]) -> str | None:
    """What `compute()` (the checksum of `path`'s content, and any check of its values, which may
    raise) gives where it differs from `recorded`; None where it agrees, or where this process or
    another one on the node verified this very file already (see the module docstring): each file is
    hashed once per node however many processes open it, at every open where `always_verified`."""
    identity, stat = _identity(path)
    if not always_verified() and (identity in _VERIFIED or _marked(path, stat, recorded)):
        _VERIFIED.add(identity)
        return None
    found = compute()
    if found != recorded:
        return found
    if _identity(path)[0] == identity:  # the same file all along (not replaced while being hashed)
        _VERIFIED.add(identity)
        _mark(path, stat, recorded)
    return None


def _identity(path: str | Path) -> tuple[tuple[int, int, int, int], os.stat_result]:
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns), stat


def _marker(stat: os.stat_result, recorded: str) -> bytes:
    return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{recorded}".encode()


def _marked(path: str | Path, stat: os.stat_result, recorded: str) -> bool:
    """Whether a process verified this very file (its inode, size and mtime) against `recorded`."""
    try:
        return os.getxattr(path, MARKER) == _marker(stat, recorded)
    except (AttributeError, OSError):  # no xattrs on this platform or file system, or no marker
        return False


def _mark(path: str | Path, stat: os.stat_result, recorded: str) -> None:
    """Leave the marker (setting it changes the file's ctime, not its mtime); refused: hash next time."""
    try:
        os.setxattr(path, MARKER, _marker(stat, recorded))
    except (AttributeError, OSError):
        pass
