"""`StreamedDataset`: a LitData dataset (a local folder or a store's URL) read as a map-style dataset,
by varlen's batches.

Items are read with LitData's storage and decoding (a `StreamingDataset` opened lazily in each
process, never iterated: its shuffler and worker sharding play no part). A batch's global sample ids
are read chunk by chunk, each item addressed as `ChunkedIndex(index=id, chunk_index=c)` with the
chunk computed from the size index, so LitData never searches for it. A local folder's chunks are read
in place. A store's chunk is downloaded whole by this process, within the source's `timeout`
(`varlen.stream.store`: each retry logged and counted), into LitData's cache folder before LitData
reads it, and kept while the cache is under LitData's budget (`max_cache_size`): a store that cannot
be reached is told apart from a chunk that is missing or damaged, each a DataError of its own, and
LitData neither waits for a chunk cut short nor prints its download thread's crash.

A chunk whose file is not the size `index.json` gives, whose bytes are not those the size index
recorded when it was written (checked before it is decoded, once per node, or at every read from disk
with the source's `verify="always"`: `varlen.stream.integrity`), or that fails to decode, is
damaged: reported at once (never read again), naming the chunk and how to write it again; a store's
cached copy that fails the check is fetched again once first. Chunks compressed inside their files
(LitData's zstd) are fetched and checked as the file written, the same way; chunks compressed whole
are refused (`refuse_whole_file_compression`). Every decoded
sample's sizes are computed by the DataModule's `sample_sizes` and compared with its size index entry:
a dataset rewritten under its index, or an index built with another size function, raises a
`DataError` naming the chunk, the sample and the rebuild command. Given
`sample_labels`, each decoded sample's class is compared with the draw sidecar's in the same way.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset, get_worker_info

import varlen.storage.checksums as checksums
import varlen.stream.store as store
from varlen.batching.indices import with_widths
from varlen.errors import DataError
from varlen.stream.chunks import INDEX_JSON, ChunkList, read_index_json, refuse_whole_file_compression
from varlen.stream.draw_index import DRAW, REWRITE_DRAW, DrawTable
from varlen.stream.engine import litdata, plain_http_downloads
from varlen.stream.integrity import file_problem
from varlen.stream.size_index import FOLDER, SizeIndex, rebuild_command
from varlen.stream.source import StreamSource

__all__ = ["LabelFn", "SizeFn", "StreamedDataset"]

#: slots of the shared retry count: this process and up to 63 loader workers (more share slots)
_SLOTS = 64

#: what a missing or damaged chunk's message says to do
REWRITE = (
    "Write the dataset again (varlen optimize --config CONFIG --output DIR) and copy the whole folder to where "
    "it is read from"
)

#: samples -> their sizes `[n, D]` (what the size index holds for them: a DataModule's `sample_sizes`)
SizeFn = Callable[[Sequence[Any]], np.ndarray]
#: samples -> their class ids `[n]` (-1: none), or None where they carry none (a DataModule's `sample_labels`)
LabelFn = Callable[[Sequence[Any]], np.ndarray | None]


class StreamedDataset(Dataset):
    """The items of a LitData dataset with a size index (`varlen optimize` writes both).

    Args:
        source: the dataset (`index.json`, chunks, `varlen_sizes/`): a local folder, a URL, or a
            `StreamSource` (a store's options and cache).
        sample_sizes: samples -> `[n, D]` sizes; must pickle (a module-level function or a
            static method: loader workers receive it with the dataset).
        sample_labels: samples -> `[n]` class ids, compared with the draw sidecar's classes where it
            has them (None: not compared); must pickle too.

    The dataset pickles as `(source, sample_sizes, sample_labels)`, the source's index fetched already: a worker
    maps the local size index and opens its own `StreamingDataset` at its first read, under fork,
    spawn or forkserver alike. A loader's workers share its retry count (`retries`).
    """

    #: bytes of chunk files whose decoded items a process keeps (the most recent chunk always): a
    #: window's batches draw on a few consecutive chunks (`varlen optimize` writes 64 MB ones)
    cache_bytes = 256 * 2**20

    def __init__(
        self,
        source: StreamSource | str | Path,
        sample_sizes: SizeFn,
        sample_labels: LabelFn | None = None,
        _retried: Any | None = None,
    ) -> None:
        source = source if isinstance(source, StreamSource) else StreamSource.parse(str(source), "StreamedDataset")
        self.source = source if source.index_dir is not None else source.fetched()
        self.url = self.source.url  # the dataset as given: what messages name
        self.index_dir = str(self.source.index_dir)  # index.json and the size index, on local disk
        self.sample_sizes = sample_sizes
        self.sample_labels = sample_labels
        listed = read_index_json(self.index_dir)
        refuse_whole_file_compression(listed, self.url)
        self.nbytes = ChunkList.from_index(listed, self.url).nbytes  # each chunk file's bytes
        #: every file hashed at every open (chunks: at every read from disk), not once per node
        self.always = self.source.verify == "always"
        with checksums.verifying(self.always):
            self.index = SizeIndex(self.index_dir)
        self._draw: DrawTable | None | bool = False  # the draw sidecar, opened at the first label check
        self.offsets = np.concatenate([[0], np.cumsum(self.index.samples_per_chunk)]).astype(np.int64)
        self.names = self.index.chunks.names
        self._stream: Any = None
        self._chunks: dict[int, list[Any]] = {}  # decoded chunks, least recently used first
        # chunk reads retried, in shared memory, a slot per process (this one, then each loader worker
        # started with this dataset): each process adds to its own, so no lock is needed
        self._retried = _retried if _retried is not None else multiprocessing.RawArray("q", _SLOTS)

    @property
    def retries(self) -> int:
        """Chunk downloads retried by this process and the loader workers started with it (each logged)."""
        return int(sum(self._retried))

    def __reduce__(self) -> tuple[Any, ...]:
        # the shared count travels only to a process being started with this dataset (spawn, forkserver);
        # anywhere else a copy counts afresh (shared memory cannot be pickled to a file)
        starting = multiprocessing.context.get_spawning_popen() is not None
        retried = self._retried if starting else None
        return (StreamedDataset, (self.source, self.sample_sizes, self.sample_labels, retried))

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        """Every sample's sizes from the size index (`[N]`, or `[N, D]` for several axes): for a
        look at the whole split (`varlen inspect`); the sampler reads chunks, not this."""
        sizes = np.concatenate([self.index.sizes(c) for c in range(self.index.num_chunks)])
        return sizes[:, 0] if sizes.shape[1] == 1 else sizes

    def _open(self) -> Any:
        if self._stream is None:
            source, options = self.source, {}
            if source.remote:  # LitData reads index.json from the local copy, and its client is bounded too
                options = {"storage_options": store.bounded(source.options, source.timeout)}
                options.update(
                    cache_dir=str(source.cache / "chunks"), index_path=str(Path(self.index_dir) / INDEX_JSON)
                )
                plain_http_downloads(source.options)
            self._stream = litdata().StreamingDataset(source.url, shuffle=False, **options)
            # whole chunks into the cache (as LitData's own iteration does), not one ranged GET per item:
            # a process decodes a chunk whole, and the node's other processes and later windows reuse it
            self._stream._on_demand_bytes = False
        return self._stream

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def __getitems__(self, ids: Sequence[int]) -> list[Any]:
        """The samples of global ids `ids`, in that order, from their chunks (each checked when decoded); with
        the padded lengths `ids` carry (`varlen.batching.indices`)."""
        given, ids = ids, np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self)):
            bad = int(ids[(ids < 0) | (ids >= len(self))][0])
            raise IndexError(f"sample {bad} of {self.url}, which holds {len(self)}")
        order = np.argsort(ids, kind="stable")  # ids ascending: chunk by chunk, in each chunk in order
        chunks = np.searchsorted(self.offsets, ids[order], side="right") - 1
        out: list[Any] = [None] * len(ids)
        cuts = np.flatnonzero(np.diff(chunks)) + 1
        for positions, chunk in zip(np.split(order, cuts), chunks[np.r_[0, cuts]].tolist(), strict=False):
            items = self._decoded(chunk)
            for position, item in zip(positions.tolist(), (ids[positions] - self.offsets[chunk]).tolist(), strict=True):
                out[position] = items[item]
        return with_widths(out, given)

    def _where(self, chunk: int, sample: int) -> str:
        item = sample - int(self.offsets[chunk])
        return f"{self.url}: chunk {chunk} ({self.names[chunk]}), item {item} (sample {sample})"

    def _decoded(self, chunk: int) -> list[Any]:
        """Every item of `chunk`, decoded in order once, size-checked, and kept while the chunks kept
        hold at most `cache_bytes` (least recently used out first).

        LitData decodes a chunk a block of items at a time and keeps the last block: read in order,
        each block is decoded once; read in a batch's scattered order, a block per item (measured:
        about 100 items decoded per item served). A window's batches draw on a few chunks, so this
        process decodes each of them once per window.
        """
        if chunk in self._chunks:
            self._chunks[chunk] = self._chunks.pop(chunk)  # most recently used last
            return self._chunks[chunk]
        items = self._read(chunk)
        self._check(chunk, items)
        self._chunks[chunk] = items
        nbytes = self.index.chunks.nbytes
        while len(self._chunks) > 1 and sum(int(nbytes[c]) for c in self._chunks) > self.cache_bytes:
            self._chunks.pop(next(iter(self._chunks)))
        return items

    def _read(self, chunk: int) -> list[Any]:
        """Every item of `chunk`: its file fetched from the store first (within the source's timeout),
        checked to be whole, then decoded by LitData.

        Raises:
            DataError: the store did not serve it in time (naming the URL, endpoint and last error), or
                the chunk is missing, or damaged (cut short, or failing to decode).
        """
        stream, first = self._open(), int(self.offsets[chunk])
        path = Path(stream.input_dir.path) / self.names[chunk]
        fetched = self.source.remote and not path.is_file() and self._fetch(chunk, path)
        if not path.is_file():
            missing = f"{self.names[chunk]} is missing from {self.url}"
            raise DataError(f"{self._where(chunk, first)} could not be read: {missing}. {REWRITE}")
        problem = self._problem(chunk, path)
        if problem is not None and self.source.remote and not fetched:  # the cache's copy: the store's again
            path.unlink(missing_ok=True)
            problem = self._problem(chunk, path) if self._fetch(chunk, path) else "missing from the store"
        if problem is not None:
            self._damaged(chunk, first, problem)
        try:
            return self._decode(chunk)
        except _Unread as unread:
            self._damaged(chunk, unread.sample, store.said(unread.__cause__))

    def _fetch(self, chunk: int, path: Path) -> bool:
        """A store's `chunk` into `path`, whole or not at all (LitData waits for a file it finds short)."""
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        if not self.source.fetch(self.names[chunk], part, retried=self._count_retry):
            return False
        os.replace(part, path)
        return True

    def _problem(self, chunk: int, path: Path) -> str | None:
        """What is wrong with `chunk`'s file at `path` (None: nothing): not the size `index.json` gives,
        or not the bytes the size index recorded (hashed once per node; unchecked where none was recorded)."""
        if path.stat().st_size != int(self.nbytes[chunk]):
            return f"{path.stat().st_size} bytes where {INDEX_JSON} says {self.nbytes[chunk]}"
        recorded = self.index.chunk_checksum(chunk)
        if recorded is None:
            return None
        with checksums.verifying(self.always):
            return file_problem(path, recorded)

    def _damaged(self, chunk: int, sample: int, what: str) -> None:
        """Refuse a chunk that downloaded but is not what was written, removing a store's copy from the
        cache (a chunk written again is fetched again) after LitData's reader, whose download thread
        would fetch it again, is let go (its `__del__` stops the thread)."""
        if self.source.remote:
            path = Path(self._open().input_dir.path) / self.names[chunk]
            self._stream = None
            path.unlink(missing_ok=True)
        raise DataError(f"{self._where(chunk, sample)} could not be read: the chunk is damaged ({what}). {REWRITE}")

    def _count_retry(self) -> None:
        worker = get_worker_info()
        self._retried[0 if worker is None else 1 + worker.id % (_SLOTS - 1)] += 1

    def _decode(self, chunk: int) -> list[Any]:
        """Every item of `chunk` from LitData, in order (an `_Unread` names the item that failed)."""
        from litdata.streaming.sampler import ChunkedIndex

        stream, items = self._open(), []
        for sample in range(int(self.offsets[chunk]), int(self.offsets[chunk + 1])):
            try:
                items.append(stream[ChunkedIndex(index=sample, chunk_index=chunk)])
            except Exception as error:  # LitData raises what its reader met in the chunk's bytes
                raise _Unread(sample) from error
        return items

    def _check(self, chunk: int, items: list[Any]) -> None:
        """Refuse a decoded chunk with an item that is another sample, or whose sizes differ from its size
        index entry (once a chunk: every item served was checked)."""
        members = np.arange(self.offsets[chunk], self.offsets[chunk + 1])
        for sample, item in zip(members.tolist(), items, strict=True):
            found = item.get("index", sample) if isinstance(item, Mapping) else sample
            if int(found) != sample:
                raise DataError(f"{self._where(chunk, sample)} is sample {int(found)}: the chunks are out of order")
        sizes = np.asarray(self.sample_sizes(items), dtype=np.int64).reshape(len(items), -1)
        indexed = self.index.sizes(chunk)
        differ = np.flatnonzero((sizes != indexed).any(axis=1)) if sizes.shape == indexed.shape else [0]
        if len(differ):
            row = int(differ[0])
            raise DataError(
                f"{self._where(chunk, int(members[row]))}: its sizes are {sizes[row].tolist()} "
                f"({', '.join(self.index.axes)}), its size index says {indexed[row].tolist()}: the chunks were "
                "rewritten under the index, or the index was built with another size function. Rebuild the index: "
                f"{rebuild_command(self.url, self.index.axes, self.index.size_fn)}"
            )
        self._check_labels(chunk, items, members)

    def _check_labels(self, chunk: int, items: list[Any], members: np.ndarray) -> None:
        """Refuse a decoded chunk with a sample whose class is not the one the draw sidecar holds for it
        (the sidecar of other labels draws other samples); nothing to compare without `sample_labels`,
        a sidecar with classes, or labels in the samples."""
        if self.sample_labels is None:
            return
        if self._draw is False:  # opened (and verified) once, where a chunk is first checked
            with checksums.verifying(self.always):
                there = (Path(self.index_dir) / FOLDER / DRAW).is_file()
                draw = DrawTable(self.index_dir, self.index) if there else None
            self._draw = draw if draw is not None and draw.classes >= 0 else None
        found = None if self._draw is None else self.sample_labels(items)
        if found is None:
            return
        found, drawn = np.asarray(found, dtype=np.int64).reshape(-1), self._draw.labels(chunk)
        if found.shape != drawn.shape:
            raise DataError(f"{self.url}: chunk {chunk}: sample_labels gave {len(found)} labels for {len(drawn)} items")
        differ = np.flatnonzero(found != drawn)
        if len(differ):
            row = int(differ[0])
            raise DataError(
                f"{self._where(chunk, int(members[row]))}: its label is class {int(found[row])}, its draw sidecar "
                f"({self.url}/{FOLDER}/{DRAW}) says class {int(drawn[row])}: the sidecar was written for other labels, "
                f"or the chunks were rewritten under it. {REWRITE_DRAW[0].upper()}{REWRITE_DRAW[1:]}"
            )


class _Unread(Exception):
    """LitData could not read sample `sample` (the cause is LitData's error)."""

    def __init__(self, sample: int) -> None:
        super().__init__(sample)
        self.sample = sample
