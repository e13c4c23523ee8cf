"""LitData's `index.json`: the chunk list a size index is keyed by.

A LitData dataset is a folder of chunk files and an `index.json` listing them in order, each with
its item count (`chunk_size`) and bytes (`chunk_bytes`); the items of the dataset are those of
the chunks in that order. A dataset rewritten or appended to (`optimize(mode="append")`,
`dataset_update`) lists other chunks, so the key of that list (`ChunkList.key`) tells
whether a size index still describes the dataset.

A chunk compressed inside its file (LitData's `compression="zstd"`: each block of items a zstd frame) is
read where it lies and checked as any other; one compressed whole (`compression_level="chunk"`, and
LitData's releases before in-file compression) is decompressed by LitData beside itself, the file as
written removed, so nothing could check it against what was written: `refuse_whole_file_compression`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from varlen.errors import DataError, DatasetNotFoundError
from varlen.storage.cache import cache_key

__all__ = [
    "INDEX_JSON",
    "ChunkList",
    "local_folder",
    "parse_index_json",
    "read_index_json",
    "refuse_whole_file_compression",
]

INDEX_JSON = "index.json"
_KEY_VERSION = "litdata-chunks-1"
#: LitData's `compression_level` values that compress inside the chunk file (read in place)
IN_FILE = ("batch", "sample")


def local_folder(dataset_dir: str | Path) -> Path:
    """`dataset_dir` as a local path; a DataError for a URL (`s3://...`): the size index is written locally."""
    if "://" in str(dataset_dir):
        raise DataError(
            f"{dataset_dir}: give a local folder; write the dataset and its size index there, then copy the whole "
            f"folder (chunks, {INDEX_JSON}, varlen_sizes/) to object storage"
        )
    return Path(dataset_dir)


def read_index_json(dataset_dir: str | Path) -> dict[str, Any]:
    """The parsed `index.json` of a local LitData dataset folder, or a DataError naming the folder (a
    DatasetNotFoundError where the folder is not there)."""
    folder = local_folder(dataset_dir)
    if not folder.exists():
        raise DatasetNotFoundError(
            "a streamed dataset (LitData chunks and their size index)", folder,
            f"write a config's training split there: varlen optimize --config CONFIG --output {folder} (an "
            "interrupted or failed varlen optimize leaves no folder half-written: run the same command again)",
        )  # fmt: skip
    path = folder / INDEX_JSON
    if not path.is_file():
        raise DataError(
            f"{dataset_dir} has no {INDEX_JSON}: not a LitData dataset (write one with `varlen optimize --config "
            "CONFIG --output DIR`, or litdata.optimize; an interrupted or failed varlen optimize leaves no folder "
            "half-written: run the same command again)"
        )
    return parse_index_json(path, path)


def parse_index_json(path: Path, where: str | Path) -> dict[str, Any]:
    """The parsed `index.json` at `path` (a copy, perhaps), or a DataError naming it as `where`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{where} is unreadable ({type(error).__name__}: {error})") from error


def refuse_whole_file_compression(index: Mapping[str, Any], where: str | Path) -> None:
    """Refuse a parsed `index.json` whose chunks are compressed whole (see the module docstring), naming
    `where` and the way out; chunks not compressed, or compressed inside their files, pass."""
    config = index.get("config") if isinstance(index, Mapping) else None
    config = config if isinstance(config, Mapping) else {}
    compression, level = config.get("compression"), config.get("compression_level")
    if not compression or level in IN_FILE:
        return
    raise DataError(
        f"{where}: its chunks are compressed whole (compression_level={level or 'chunk'!r}, {compression}): LitData "
        "decompresses such a chunk where it lies and removes the file as written, so its bytes cannot be checked "
        "against what was written. Write them compressed inside each file: varlen optimize --compression zstd "
        f"--config CONFIG --output DIR, or litdata.optimize(compression={compression!r}) without compression_level"
    )


@dataclass(frozen=True)
class ChunkList:
    """The chunks of a LitData dataset, in its order: file names, items and bytes of each."""

    names: tuple[str, ...]
    samples: np.ndarray  # [chunks] int64
    nbytes: np.ndarray  # [chunks] int64

    @classmethod
    def from_index(cls, index: Mapping[str, Any], where: str | Path) -> ChunkList:
        """Read the `chunks` of a parsed `index.json` (`where` names it in errors)."""
        chunks = index.get("chunks") if isinstance(index, Mapping) else None
        if not isinstance(chunks, list):
            raise DataError(f"{where}: {INDEX_JSON} has no list of chunks (found {type(chunks).__name__})")
        names, samples, nbytes = [], [], []
        for number, chunk in enumerate(chunks):
            try:
                names.append(str(chunk["filename"]))
                samples.append(int(chunk["chunk_size"]))
                nbytes.append(int(chunk["chunk_bytes"]))
            except (KeyError, TypeError, ValueError) as error:
                raise DataError(
                    f"{where}: chunk {number} of {INDEX_JSON} lacks a filename, chunk_size or chunk_bytes ({chunk!r})"
                ) from error
        return cls(tuple(names), np.asarray(samples, np.int64), np.asarray(nbytes, np.int64))

    @classmethod
    def read(cls, dataset_dir: str | Path) -> ChunkList:
        """The chunk list of a local dataset folder's `index.json`."""
        return cls.from_index(read_index_json(dataset_dir), dataset_dir)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def key(self) -> str:
        """A content key of the list: every chunk's file name, item count and bytes, in order."""
        listed = zip(self.names, self.samples.tolist(), self.nbytes.tolist(), strict=True)
        return cache_key([list(chunk) for chunk in listed], version=_KEY_VERSION)

    def describe(self, number: int) -> str:
        return f"{self.names[number]} ({self.samples[number]} samples, {self.nbytes[number]} bytes)"

    def difference(self, other: ChunkList, this: str, that: str) -> str | None:
        """What differs from `other` (None: nothing), naming this list `this` and the other `that`:
        e.g. `index.json lists 12 chunks, the size index 10`."""
        if len(self) != len(other):
            return f"{this} lists {len(self)} chunks, {that} {len(other)}"
        for number in range(len(self)):
            if self.describe(number) != other.describe(number):
                return f"chunk {number}: {this} lists {self.describe(number)}, {that} {other.describe(number)}"
        return None
