"""`StreamSource`: where a streamed split's chunks are, a local folder or object storage LitData reads.

The plan needs the size index and ``index.json`` on local disk (it maps them); the chunks can stay
remote. For a URL (``s3://``, ``gs://``, ``azure://``, ``r2://``...) :meth:`StreamSource.fetched`
copies ``index.json`` and ``varlen_sizes/`` (a few bytes per sample) into the local cache with
LitData's downloader for that store, once per process that sets up; LitData downloads the chunks
into the same cache as they are read, under its own budget (``max_cache_size``), shared by the
processes of a node. A fetched copy whose chunk list is the store's is kept; one of another list
(the dataset was rewritten) is fetched again, and a size index the store holds for an older list
is refused by :meth:`~varlen.stream.size_index.SizeIndex.check`.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from varlen.cache import default_cache_dir
from varlen.errors import DataError
from varlen.stream.chunks import INDEX_JSON, ChunkList, parse_index_json
from varlen.stream.engine import litdata
from varlen.stream.size_index import FOLDER, HISTOGRAMS, SIZES, SizeIndex
from varlen.stream.write import DATA_STATE

__all__ = ["StreamSource"]

#: the files beside the chunks that a rank reads itself (the data state is optional: index-sizes writes none)
INDEX_FILES = (f"{FOLDER}/{SIZES}", f"{FOLDER}/{HISTOGRAMS}")
OPTIONAL_FILES = (f"{FOLDER}/{DATA_STATE}",)
KEYS = ("url", "storage_options", "cache_dir")
#: the URL prefixes LitData's downloaders read
SCHEMES = ("s3://", "gs://", "azure://", "r2://", "hf://")


@dataclass(frozen=True)
class StreamSource:
    """A LitData dataset with a size index: ``url`` a local folder or a store's URL.

    Args:
        url: the dataset folder (``index.json``, chunks, ``varlen_sizes/``), local or ``s3://...``.
        storage_options: LitData's ``storage_options`` for the store (e.g. ``endpoint_url``, keys).
        cache_dir: where a remote dataset's index and chunks are kept (default: ``$VARLEN_CACHE/stream``).
        index_dir: the local folder holding ``index.json`` and the size index (set by :meth:`fetched`).
    """

    url: str
    storage_options: Mapping[str, Any] | None = None
    cache_dir: str | None = None
    index_dir: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, value: Any, owner: str) -> StreamSource:
        """A source from a DataModule's ``stream`` argument: a folder or URL, or a mapping of :data:`KEYS`.

        Raises:
            ValueError: neither, unknown keys, or a URL of a store LitData does not read.
        """
        if isinstance(value, StreamSource):
            return value
        if isinstance(value, str):
            value = {"url": value}
        if not isinstance(value, Mapping) or not isinstance(value.get("url"), str) or not value["url"]:
            raise ValueError(
                f"{owner}: stream must be a folder or URL written by `varlen optimize`, or a mapping with "
                f"'url' (and 'storage_options', 'cache_dir'), got {value!r}"
            )
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise ValueError(f"{owner}: stream takes {list(KEYS)}, not {unknown}")
        options = value.get("storage_options")
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"{owner}: stream's storage_options must be a mapping, got {options!r}")
        source = cls(value["url"], dict(options) if options else None, value.get("cache_dir"))
        if source.remote and not source.url.startswith(SCHEMES):
            raise ValueError(f"{owner}: stream={source.url!r}: LitData reads {list(SCHEMES)} URLs, or a local folder")
        return source

    @property
    def remote(self) -> bool:
        return "://" in self.url

    @property
    def cache(self) -> Path:
        return Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir() / "stream"

    def __str__(self) -> str:
        return self.url

    def fetched(self) -> StreamSource:
        """This source with :attr:`index_dir` set: the folder itself when local, else a local copy of
        the store's ``index.json`` and size index (see the module docstring).

        Raises:
            DataError: the store has no ``index.json`` or no size index there, or cannot be read;
                each names the URL.
        """
        if not self.remote:
            return replace(self, index_dir=self.url)
        folder = self.cache / "index" / hashlib.sha256(self.url.encode()).hexdigest()[:16]
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
        listed = self._download(INDEX_JSON, folder)
        chunks = ChunkList.from_index(parse_index_json(listed, f"{self.url}/{INDEX_JSON}"), self.url)
        if not _holds_index_of(folder, chunks):
            for name in INDEX_FILES + OPTIONAL_FILES:
                fresh = self._download(name, folder, required=name in INDEX_FILES)
                if fresh is not None:
                    os.replace(fresh, folder / name)
                else:  # not in the store: an earlier fetch's copy must not stand for it
                    (folder / name).unlink(missing_ok=True)
        os.replace(listed, folder / INDEX_JSON)
        return replace(self, index_dir=str(folder))

    def _download(self, name: str, folder: Path, required: bool = True) -> Path | None:
        """``<url>/<name>`` into a new file in ``folder`` (its path), with LitData's downloader."""
        litdata()  # the tested release
        target = folder / f"{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
        remote = f"{self.url.rstrip('/')}/{name}"
        try:
            _download(remote, target, dict(self.storage_options or {}))
        except Exception as error:  # the store's client raises its own (botocore, obstore, google...)
            if not _not_found(error):
                raise DataError(f"{remote} could not be read ({type(error).__name__}: {error})") from error
        if target.is_file():
            return target
        if not required:
            return None
        if name == INDEX_JSON:
            raise DataError(
                f"{self.url} has no {INDEX_JSON}: not a LitData dataset (write one locally with `varlen optimize "
                "--config CONFIG --output DIR`, then copy the whole folder to the store)"
            )
        raise DataError(
            f"{self.url} has no size index ({remote} is missing): build it beside the chunks with `varlen "
            f"index-sizes` on a local copy, then copy {FOLDER}/ to the store"
        )


def _download(remote: str, target: Path, storage_options: dict[str, Any]) -> None:
    """One file of a store to ``target`` with LitData's client for it. S3 goes through LitData's boto3
    client, as LitData fetches its own ``index.json``: its other downloader (obstore) would start a
    runtime in this process that forked loader workers cannot use."""
    from litdata.streaming.client import S3Client
    from litdata.streaming.downloader import get_downloader

    if remote.startswith("s3://"):
        bucket, _, key = remote[len("s3://") :].partition("/")
        S3Client(storage_options=storage_options).client.download_file(bucket, key, str(target))
    else:
        get_downloader(remote, str(target.parent), [], storage_options).download_file(remote, str(target))


def _not_found(error: Exception) -> bool:
    """Whether a store's error says the object does not exist (LitData's S3 reader drops some itself)."""
    code = (getattr(error, "response", None) or {}).get("Error", {}).get("Code")
    return isinstance(error, FileNotFoundError) or code in {"404", "NoSuchKey", "NotFound"}


def _holds_index_of(folder: Path, chunks: ChunkList) -> bool:
    """Whether ``folder`` holds a size index written for ``chunks`` (kept from an earlier fetch)."""
    try:
        return SizeIndex(folder).key == chunks.key
    except DataError:
        return False
