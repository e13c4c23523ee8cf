"""What a streamed dataset's size index records of the bytes beside it, checked at a node's first open.

LitData's `index.json` gives each chunk's bytes, not their content: a chunk whose values changed after
`varlen optimize` (the same size, the same item count) would be served as it is, and a draw sidecar
with the right key but other class ids would change who is drawn without a word. So the size index's
`histograms.arrow` records, when it is written, an xxh3-64 (`varlen.storage.checksums.file_checksum`) of

* each chunk file (column `checksum`; empty for a chunk that was not there to hash),
* `sizes.arrow` and the draw sidecar's files (metadata `varlen.files`: written before it,
  `varlen.stream.sidecars`; a sidecar written alone is recorded again by
  `varlen.stream.size_index.record_files`),
* and its own data and metadata (`varlen.checksum`).

Each is checked where it is first opened on a node (`varlen.storage.checksums.mismatch`: once per file per
process, once per node where the file takes the marker, as the Arrow caches are): the size index when it
is mapped, the sidecar when it is opened (its class ids and weights with it), a chunk before it is
decoded. A mismatch is a DataError naming the file and the command that writes it again (an
`IntegrityError`, so that a store's cached copy can be fetched again). A size index written
before checksums were recorded opens with a warning, once per folder, naming that command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pyarrow as pa

import varlen.storage.checksums as checksums
from varlen import notices
from varlen.errors import DataError

__all__ = [
    "CHECKSUM",
    "CHUNK_CHECKSUM",
    "FILES",
    "IntegrityError",
    "chunk_checksums",
    "file_checksums",
    "file_problem",
    "own_checksum",
    "recorded_files",
    "table_problem",
    "warn_unverified",
]

#: histograms.arrow's checksum of its own data and metadata (absent: written before checksums were recorded)
CHECKSUM = b"varlen.checksum"
#: histograms.arrow's record of the files beside it: `{name: "xxh3_64:<hex>"}` as JSON
FILES = b"varlen.files"
#: histograms.arrow's column of each chunk file's checksum
CHUNK_CHECKSUM = "checksum"

_WARNED: set[str] = set()  # folders whose unverified size index this process warned about


class IntegrityError(DataError):
    """A file of a streamed dataset is not the one its size index recorded (or cannot be read).

    Args:
        path: the file.
        message: the whole message (naming the file and the command that writes it again).
    """

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = str(path)
        super().__init__(message)

    def __reduce__(self):  # picklable across loader workers and DDP ranks, with its arguments
        return type(self), (self.path, str(self))


def own_checksum(batch: pa.RecordBatch, metadata: Mapping[bytes, bytes]) -> str:
    """The checksum a size index table records of itself: its data and every metadata entry but this one."""
    return checksums.table_checksum(batch, {key: value for key, value in metadata.items() if key != CHECKSUM})


def recorded_files(metadata: Mapping[bytes, bytes]) -> dict[str, str] | None:
    """The checksums a size index recorded of the files beside it; None: it records none (written before)."""
    if CHECKSUM not in metadata:
        return None
    try:
        files = json.loads(metadata.get(FILES, b"{}"))
    except ValueError:
        return {}  # a record that does not parse holds no file: each is refused as unrecorded
    return files if isinstance(files, dict) else {}


def file_checksums(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """The checksum of each file of `names` in `folder` that is there."""
    return {name: checksums.file_checksum(folder / name) for name in names if (folder / name).is_file()}


def chunk_checksums(dataset_dir: Path, names: Iterable[str]) -> list[str]:
    """Each chunk file's checksum, empty for a chunk not in `dataset_dir` (an `index.json` alone)."""
    return [checksums.file_checksum(path) if (path := dataset_dir / name).is_file() else "" for name in names]


def file_problem(path: Path, recorded: str | None, values: Callable[[], None] | None = None) -> str | None:
    """Why `path` is not the file the size index recorded as `recorded`, or None when it is.

    `values()` checks what the file holds (it raises a DataError) once its checksum agrees, in the same
    once-per-node verification: a file a process of the node verified was checked whole.
    """
    if not recorded:
        return "not recorded in the size index (written after it, by something else than varlen)"
    if not path.is_file():
        return "missing"

    def compute() -> str:
        found = checksums.file_checksum(path)
        if found == recorded and values is not None:
            values()
        return found

    found = checksums.mismatch(path, recorded, compute)
    if found is None:
        return None
    return f"corrupt: its checksum is {found}, not the {recorded} the size index recorded when it was written"


def table_problem(path: Path, batch: pa.RecordBatch, metadata: Mapping[bytes, bytes]) -> str | None:
    """Why the size index table `batch` (mapped from `path`) is not as written, or None when it is."""
    recorded = metadata[CHECKSUM].decode()
    found = checksums.mismatch(path, recorded, lambda: own_checksum(batch, metadata))
    if found is None:
        return None
    return f"corrupt: its checksum is {found}, not the {recorded} recorded when it was written"


def warn_unverified(folder: Path, command: str) -> None:
    """Warn, once per folder in this process, that its size index records no checksums."""
    if str(folder) in _WARNED:
        return
    _WARNED.add(str(folder))
    notices.warn(
        f"{folder}: the size index records no checksums (written by an older varlen): its chunks, sizes and draw "
        f"sidecar are read unverified. Write it again to verify them: {command}"
    )
