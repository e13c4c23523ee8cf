"""The size index: every sample's sizes and every chunk's size histogram, beside LitData's `index.json`.

LitData's index holds chunk bytes, not sample sizes, and varlen's plan needs sizes. The size index
is two Arrow IPC files (random-access file format, memory-mapped) in `<dataset>/varlen_sizes/`:

* `sizes.arrow`: one record batch per chunk, in `index.json`'s order, one row per item: its
  sizes, one int32 per budget axis (column `sizes`, `[n, D]`). Reading one chunk's sizes reads
  that batch only, so a rank maps what it plans and nothing else.
* `histograms.arrow`: one record batch, one row per chunk: its file name, items, bytes and a
  histogram per axis over the fixed grid `varlen.batching.plan.SIZE_GRID` (`[chunks, D,
  bins]`, uint16, or uint32 for chunks of 65,536 items or more): a plan can count batches per
  chunk from it without reading any size.

Both carry the content key of the chunk list (`ChunkList`):
`SizeIndex.check` refuses an `index.json` that lists other chunks (a dataset rewritten or
appended to) with the command that rebuilds the index. `histograms.arrow` also records a checksum
of each chunk file, of `sizes.arrow` and the draw sidecar, and of itself, checked at a node's first
open (`varlen.stream.integrity`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import varlen.storage.checksums as checksums
from varlen.batching.plan import SIZE_GRID, as_size_matrix
from varlen.errors import DataError, DatasetNotFoundError
from varlen.storage.cache import atomic_write
from varlen.storage.tables import as_numpy, to_arrow
from varlen.stream.chunks import INDEX_JSON, ChunkList, local_folder, read_index_json
from varlen.stream.integrity import (
    CHECKSUM,
    CHUNK_CHECKSUM,
    FILES,
    IntegrityError,
    chunk_checksums,
    file_checksums,
    file_problem,
    own_checksum,
    recorded_files,
    table_problem,
    warn_unverified,
)

__all__ = ["FOLDER", "SizeIndex", "histograms", "record_files", "write_size_index"]

#: the size index's folder inside a LitData dataset folder
FOLDER = "varlen_sizes"
SIZES, HISTOGRAMS = "sizes.arrow", "histograms.arrow"
#: the draw sidecar's files beside it (`varlen.stream.draw_index`), whose checksums the index records
SIDECARS = ("draw.arrow", "draw_totals.arrow")
VERSION = "1"
_INT32_MAX = np.iinfo(np.int32).max


def histograms(sizes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """Per chunk and axis, the count of sizes in each bin of `SIZE_GRID`: `[chunks, D, bins]`.

    `sizes` `[N, D]` holds the chunks' items back to back, `samples` each chunk's item count.
    """
    chunks, (_, dims), bins = len(samples), sizes.shape, len(SIZE_GRID)
    dtype = np.uint16 if samples.size == 0 or samples.max() < 2**16 else np.uint32
    chunk_of = np.repeat(np.arange(chunks), samples)
    out = np.empty((chunks, dims, bins), dtype)
    for axis in range(dims):
        cells = chunk_of * bins + np.searchsorted(SIZE_GRID, sizes[:, axis], side="left")
        out[:, axis] = np.bincount(cells, minlength=chunks * bins).reshape(chunks, bins)
    return out


def rebuild_command(dataset_dir: str | Path, axes: Sequence[str], size_fn: str | None) -> str:
    """The command that writes the size index again."""
    command = f"varlen index-sizes {dataset_dir} --size-fn {size_fn or 'MODULE:FUNCTION'} --axes {','.join(axes)}"
    return command if size_fn else f"{command} (a function of one item giving its sizes)"


def rewrite_command(dataset_dir: str | Path, axes: Sequence[str], size_fn: str | None) -> str:
    """The commands that write a size index again: with the chunks, or alone over chunks written elsewhere."""
    return (
        "varlen optimize --config CONFIG --output DIR (the chunks and their index, then copied to where they are "
        f"read from), or, for chunks written elsewhere, {rebuild_command(dataset_dir, axes, size_fn)}"
    )


def write_size_index(
    dataset_dir: str | Path,
    sizes: np.ndarray,
    axes: Sequence[str],
    *,
    chunks: ChunkList | None = None,
    size_fn: str | None = None,
) -> Path:
    """Write the size index of the LitData dataset in `dataset_dir`; returns its folder. `histograms.arrow`,
    written last, records the checksums of the chunks, of `sizes.arrow` and of the draw sidecar's files there
    (`varlen.stream.sidecars.write_sidecars` writes the sidecar first).

    Args:
        dataset_dir: a local LitData dataset folder (its `index.json` gives the chunks).
        sizes: `[N]` or `[N, D]` sizes of the dataset's items in `index.json`'s order.
        axes: what each column of `sizes` counts (a DataModule's `size_axes`).
        chunks: the chunk list, when the caller read it already.
        size_fn: `module:function` that computed the sizes, named in the rebuild command.

    Raises:
        DataError: the sizes are not one whole number >= 0 below 2**31 per item and axis, or not
            one row per item of the chunks.
    """
    dataset_dir = local_folder(dataset_dir)
    chunks = chunks if chunks is not None else ChunkList.read(dataset_dir)
    sizes = checked_sizes(dataset_dir, sizes, axes, chunks)
    metadata = {
        b"varlen.version": VERSION.encode(),
        b"varlen.key": chunks.key.encode(),
        b"varlen.axes": json.dumps(list(axes)).encode(),
        b"varlen.size_fn": (size_fn or "").encode(),
    }
    folder = dataset_dir / FOLDER
    sizes_schema = schema_of({"sizes": to_arrow(sizes[:0])}, metadata)
    write_arrow_file(folder / SIZES, sizes_schema, ([to_arrow(part)] for part in per_chunk(sizes, chunks)))
    table = {
        "chunk": pa.array(chunks.names, pa.string()),
        "samples": pa.array(chunks.samples),
        "bytes": pa.array(chunks.nbytes),
        "histograms": to_arrow(histograms(sizes, chunks.samples)),
        CHUNK_CHECKSUM: pa.array(chunk_checksums(dataset_dir, chunks.names), pa.string()),
    }
    files = {SIZES: checksums.file_checksum(folder / SIZES)} | file_checksums(folder, SIDECARS)
    grid = {b"varlen.grid": json.dumps(SIZE_GRID.tolist()).encode()}
    _write_histograms(folder, pa.record_batch(list(table.values()), schema=schema_of(table)), metadata | grid, files)
    return folder


def checked_sizes(dataset_dir: Path, sizes: np.ndarray, axes: Sequence[str], chunks: ChunkList) -> np.ndarray:
    """`sizes` as the size index holds them (`[N, D]` int32), or a DataError naming `dataset_dir` where they
    are not one row per item of `chunks`, one column per name of `axes`, each a whole number from 0 to 2**31 - 1.
    """
    try:
        sizes = as_size_matrix(sizes)
    except ValueError as error:
        raise DataError(f"{dataset_dir}: {error}") from error
    if len(sizes) != int(chunks.samples.sum()):
        raise DataError(
            f"{dataset_dir}: {INDEX_JSON} lists {int(chunks.samples.sum())} items in {len(chunks)} chunks, "
            f"but {len(sizes)} sizes were given"
        )
    if sizes.size and sizes.max() > _INT32_MAX:
        row = int(np.flatnonzero((sizes > _INT32_MAX).any(axis=1))[0])
        raise DataError(f"{dataset_dir}: item {row} has sizes {sizes[row].tolist()}, over the int32 the index holds")
    if len(axes) != sizes.shape[1]:
        raise DataError(f"{dataset_dir}: {sizes.shape[1]} sizes per item but {len(axes)} axis names {list(axes)}")
    return np.ascontiguousarray(sizes, dtype=np.int32)


def per_chunk(values: np.ndarray, chunks: ChunkList) -> list[np.ndarray]:
    """`values` (one row per item, the chunks' items back to back) cut into each chunk's rows (views)."""
    ends = np.cumsum(chunks.samples)
    return [values[end - count : end] for end, count in zip(ends.tolist(), chunks.samples.tolist(), strict=True)]


def schema_of(columns: Mapping[str, pa.Array], metadata: Mapping[bytes, bytes] | None = None) -> pa.Schema:
    """The schema of the non-null `columns` (name -> an array of its type), with `metadata`."""
    return pa.schema([pa.field(name, array.type, nullable=False) for name, array in columns.items()], metadata=metadata)


def write_arrow_file(path: Path, schema: pa.Schema, batches: Iterable[list[pa.Array]]) -> None:
    """`path` written whole (`atomic_write`) as an Arrow IPC file of `schema`: a
    record batch of each list of arrays of `batches`."""

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for arrays in batches:
                writer.write_batch(pa.record_batch(arrays, schema=schema))

    atomic_write(path, write)


def _write_histograms(folder: Path, batch: pa.RecordBatch, metadata: dict[bytes, bytes], files: dict) -> None:
    """`histograms.arrow` of `batch` with `metadata`, the checksums of `files` and its own."""
    metadata = {key: value for key, value in metadata.items() if key not in (CHECKSUM, FILES)}
    metadata[FILES] = json.dumps(files, sort_keys=True).encode()
    metadata[CHECKSUM] = own_checksum(batch, metadata).encode()
    batch = batch.replace_schema_metadata(metadata)
    write_arrow_file(folder / HISTOGRAMS, batch.schema, [batch.columns])


def record_files(dataset_dir: str | Path, names: Sequence[str] = SIDECARS) -> None:
    """Record again, in the size index of the local `dataset_dir`, the checksums of the files `names`
    beside it (the draw sidecar, just written or removed: a removed one is no longer recorded). An index
    that is not there, records no checksums (an older one) or fails its own check is left as it is: it
    is written again, or refused when opened."""
    folder = local_folder(dataset_dir) / FOLDER
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(folder / HISTOGRAMS), "r"))
        metadata = dict(reader.schema.metadata or {})
        recorded = recorded_files(metadata)
        if recorded is None or metadata.get(b"varlen.version") != VERSION.encode() or reader.num_record_batches != 1:
            return
        batch = reader.get_batch(0)
    except (OSError, pa.ArrowException):
        return
    if table_problem(folder / HISTOGRAMS, batch, metadata) is not None:
        return
    files = {name: value for name, value in recorded.items() if name not in names} | file_checksums(folder, names)
    _write_histograms(folder, batch, metadata, files)


class SizeIndex:
    """The size index of a local LitData dataset, memory-mapped: per chunk, its items' sizes and its
    histograms (see the module docstring). Pickles as its folder: a process that receives it maps it.

    Raises:
        DataError: (when made) the index is missing, unreadable, of another format version, or its
            two files are of two different builds; each names the command that rebuilds it.
    """

    def __init__(self, dataset_dir: str | Path) -> None:
        self.dataset_dir = Path(dataset_dir)
        self._sizes = self._open(SIZES)
        table = self._open(HISTOGRAMS)
        metadata = table.schema.metadata
        try:
            self.axes: tuple[str, ...] = tuple(json.loads(metadata[b"varlen.axes"]))
            self.key = metadata[b"varlen.key"].decode()
            self.size_fn = metadata[b"varlen.size_fn"].decode() or None
            #: the histograms' bin edges (a size `s` falls in the first bin whose edge is `>= s`)
            self.edges = np.asarray(json.loads(metadata[b"varlen.grid"]), np.int64)
        except (KeyError, ValueError) as error:  # a damaged file's metadata
            path = self.dataset_dir / FOLDER / HISTOGRAMS
            command = rebuild_command(self.dataset_dir, ["AXIS"], None)
            said = f"{path} is unreadable (its metadata: {error!r}); rebuild it with {command}"
            raise IntegrityError(path, said) from error
        if table.num_record_batches != 1:
            self._refuse(f"{HISTOGRAMS} holds {table.num_record_batches} record batches, not 1")
        self._table = table.get_batch(0)
        #: the checksums of the files beside it recorded when it was written (None: it records none, an
        #: older index); the chunks' are `chunk_checksum`'s
        self.recorded = recorded_files(metadata)
        if self._sizes.schema.metadata.get(b"varlen.key") != metadata[b"varlen.key"]:
            self._refuse(f"{SIZES} and {HISTOGRAMS} were written for different chunk lists")
        if self._sizes.num_record_batches != self._table.num_rows:
            self._refuse(f"{SIZES} holds {self._sizes.num_record_batches} chunks, {HISTOGRAMS} {self._table.num_rows}")
        self._verify(metadata)

    def _open(self, name: str) -> pa.ipc.RecordBatchFileReader:
        path = self.dataset_dir / FOLDER / name
        if not self.dataset_dir.exists():
            raise DatasetNotFoundError(
                "a streamed dataset (LitData chunks and their size index)", self.dataset_dir,
                f"write a config's training split there: varlen optimize --config CONFIG --output {self.dataset_dir}",
            )  # fmt: skip
        if not path.is_file():
            raise DataError(
                f"{self.dataset_dir} has no size index ({path} is missing): build it with "
                f"{rebuild_command(self.dataset_dir, ['AXIS'], None)}"
            )
        try:
            reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        except (OSError, pa.ArrowException) as error:
            raise IntegrityError(
                path,
                f"{path} is unreadable ({type(error).__name__}: {error}); rebuild it with "
                f"{rebuild_command(self.dataset_dir, ['AXIS'], None)}",
            ) from error
        version = (reader.schema.metadata or {}).get(b"varlen.version", b"").decode()
        if version != VERSION:
            raise DataError(
                f"{path} is of size index version {version!r}, this varlen reads {VERSION!r}: rebuild it with "
                f"{rebuild_command(self.dataset_dir, ['AXIS'], None)}"
            )
        return reader

    def _refuse(self, what: str) -> None:
        raise DataError(
            f"{self.dataset_dir / FOLDER}: {what}; rebuild it with {rebuild_command(self.dataset_dir, self.axes, None)}"
        )

    def _verify(self, metadata: dict[bytes, bytes]) -> None:
        """Check `histograms.arrow` against its own checksum, then `sizes.arrow` against the one it
        recorded (once per node: `varlen.stream.integrity`); warn once about an index without any."""
        folder = self.dataset_dir / FOLDER
        command = rewrite_command(self.dataset_dir, self.axes, self.size_fn)
        if self.recorded is None:
            warn_unverified(folder, command)
            return
        name, problem = HISTOGRAMS, table_problem(folder / HISTOGRAMS, self._table, metadata)
        if problem is None:
            name, problem = SIZES, file_problem(folder / SIZES, self.recorded.get(SIZES))
        if problem is not None:
            raise IntegrityError(folder / name, f"{folder / name} is {problem}. Write the size index again: {command}")

    def chunk_checksum(self, chunk: int) -> str | None:
        """The checksum of chunk `chunk`'s file recorded when the index was written (None: none was)."""
        if self.recorded is None or CHUNK_CHECKSUM not in self._table.schema.names:
            return None
        return self._table.column(CHUNK_CHECKSUM)[chunk].as_py() or None

    def __reduce__(self) -> tuple[Any, ...]:
        return (SizeIndex, (str(self.dataset_dir),))

    @property
    def num_chunks(self) -> int:
        return self._table.num_rows

    @property
    def samples_per_chunk(self) -> np.ndarray:
        """Items of each chunk, `[chunks]` int64 (a read-only view)."""
        return as_numpy(self._table.column("samples"))

    @property
    def chunks(self) -> ChunkList:
        """The chunk list the index was written for."""
        names = tuple(self._table.column("chunk").to_pylist())
        return ChunkList(names, self.samples_per_chunk, as_numpy(self._table.column("bytes")))

    def sizes(self, chunk: int) -> np.ndarray:
        """The sizes of chunk `chunk`'s items, `[n, D]` int32 (a read-only view of that batch only)."""
        if not 0 <= chunk < self.num_chunks:
            raise IndexError(f"chunk {chunk} of a size index of {self.num_chunks} chunks")
        return as_numpy(self._sizes.get_batch(chunk).column("sizes"))

    def histograms(self, axis: int | str = 0) -> np.ndarray:
        """Each chunk's histogram of axis `axis` (a position or a name of `axes`) over
        `edges`: `[chunks, bins]` uint16 (uint32 for chunks of 65,536 items or more)."""
        position = self.axes.index(axis) if isinstance(axis, str) else axis
        return as_numpy(self._table.column("histograms"))[:, position]

    def check(self, index_json: Mapping[str, Any] | str | Path | None = None) -> None:
        """Refuse an `index.json` (parsed, its path, or None: the dataset's own) whose chunk list is
        not the one the index was written for: the dataset was rewritten or appended to.

        Raises:
            DataError: naming the dataset folder, what differs and the command that rebuilds the index.
        """
        if index_json is None or isinstance(index_json, (str, Path)):
            path = Path(index_json) if index_json is not None else self.dataset_dir
            index_json = read_index_json(path.parent if path.name == INDEX_JSON else path)
        listed = ChunkList.from_index(index_json, self.dataset_dir)
        if listed.key == self.key:
            return
        difference = listed.difference(self.chunks, INDEX_JSON, "the size index")
        raise DataError(
            f"{self.dataset_dir}: the size index does not describe this dataset ({difference}): it was rewritten "
            f"or appended to since the index was written. Rebuild the index: "
            f"{rebuild_command(self.dataset_dir, self.axes, self.size_fn)}"
        )
