"""`StreamSource`: where a streamed split's chunks are, a local folder or object storage LitData reads.

The plan needs the size index and `index.json` on local disk (it maps them); the chunks can stay
remote. For a URL (`s3://`, `gs://`, `azure://`, `r2://`...) `StreamSource.fetched`
copies `index.json` and `varlen_sizes/` (a few bytes per sample) into the local cache with
LitData's client for that store, once per process that sets up; the chunks are downloaded into the
same cache as they are read (`varlen.stream.dataset`), under LitData's budget
(`max_cache_size`), shared by the processes of a node. `index.json` and the data state (small)
are fetched every time; a size index file is kept while the store's copy is the one fetched (S3: its
ETag and size, from a HEAD request; other stores: fetched every time), so an index rebuilt in the
store is fetched again, and one the store holds for an older chunk list is refused by
`check`. A kept copy that fails its checksums
(`varlen.stream.integrity`: a disk, a tool or a cut-short write changed it since) is fetched again
with a warning, not left broken; a copy fetched just now that fails them is the store's, refused by name.
Every store call ends within `timeout` seconds (`varlen.stream.store`). `verify="always"` hashes
each chunk every time a process reads it from disk, and the size index and draw sidecar every time a
dataset opens them, instead of once per node (`varlen.storage.checksums`: bytes a failing disk changes under
the same modification time are then found).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import varlen.stream.store as store
from varlen.errors import DataError
from varlen.storage.cache import default_cache_dir
from varlen.stream.chunks import INDEX_JSON, ChunkList, parse_index_json
from varlen.stream.draw_index import DRAW, DRAW_TOTALS, DrawTable
from varlen.stream.engine import litdata
from varlen.stream.integrity import IntegrityError
from varlen.stream.size_index import FOLDER, HISTOGRAMS, SIZES, SizeIndex
from varlen.stream.write import DATA_STATE

__all__ = ["StreamSource"]

log = logging.getLogger(__name__)

#: the files beside the chunks that a rank reads itself (the data state is optional: index-sizes writes none)
INDEX_FILES = (f"{FOLDER}/{SIZES}", f"{FOLDER}/{HISTOGRAMS}")
#: fetched where the store has them: the writer's data state, each sample's class and weights (weighted draws)
OPTIONAL_FILES = (f"{FOLDER}/{DATA_STATE}", f"{FOLDER}/{DRAW}", f"{FOLDER}/{DRAW_TOTALS}")
#: files fetched again only when the store's stamp changed (large ones; a missing one has none)
STAMPED = (*INDEX_FILES, f"{FOLDER}/{DRAW}", f"{FOLDER}/{DRAW_TOTALS}")
KEYS = ("url", "storage_options", "cache_dir", "timeout", "verify")
#: how often a stream's files are hashed: once per node (the default), or at every open
VERIFY = ("once", "always")
#: what identified each fetched index file in the store (`varlen.stream.store.stamp`), beside the copy
STAMPS = "stamps.json"
#: the URL prefixes LitData's downloaders read
SCHEMES = ("s3://", "gs://", "azure://", "r2://", "hf://")


@dataclass(frozen=True)
class StreamSource:
    """A LitData dataset with a size index: `url` a local folder or a store's URL.

    Args:
        url: the dataset folder (`index.json`, chunks, `varlen_sizes/`), local or `s3://...`.
        storage_options: LitData's `storage_options` for the store (e.g. `endpoint_url`, keys).
        cache_dir: where a remote dataset's index and chunks are kept (default: `$VARLEN_CACHE/stream`).
        timeout: seconds a store call may take (retries included) before it fails with a DataError.
        verify: `"once"` (each file hashed once per node) or `"always"` (each chunk at every read from
            disk, the size index and sidecar at every open: see the module docstring).
        index_dir: the local folder holding `index.json` and the size index (set by `fetched`).
    """

    url: str
    storage_options: Mapping[str, Any] | None = None
    cache_dir: str | None = None
    timeout: float = store.DEFAULT_TIMEOUT
    verify: str = "once"
    index_dir: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.verify not in VERIFY:
            raise ValueError(f"StreamSource: verify must be one of {list(VERIFY)}, got {self.verify!r}")

    @classmethod
    def parse(cls, value: Any, owner: str) -> StreamSource:
        """A source from a DataModule's `stream` argument: a folder or URL, or a mapping of `KEYS`.

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
                f"'url' (and 'storage_options', 'cache_dir', 'timeout', 'verify'), got {value!r}"
            )
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise ValueError(f"{owner}: stream takes {list(KEYS)}, not {unknown}")
        options = value.get("storage_options")
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"{owner}: stream's storage_options must be a mapping, got {options!r}")
        timeout = value.get("timeout", store.DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"{owner}: stream's timeout must be a number of seconds > 0, got {timeout!r}")
        verify = value.get("verify", "once")
        if verify not in VERIFY:
            raise ValueError(
                f"{owner}: stream's verify must be 'once' (each file hashed once per node) or 'always' (at every "
                f"open: finds bytes a failing disk changed), got {verify!r}"
            )
        given = (dict(options) if options else None, value.get("cache_dir"), float(timeout), verify)
        source = cls(value["url"], *given)
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

    @property
    def options(self) -> dict[str, Any]:
        """The store's `storage_options` as read: the environment's S3 endpoint where they name none."""
        return store.storage_options(self.url, self.storage_options)

    def fetch(self, name: str, target: Path, retried: Any = None) -> bool:
        """`<url>/<name>` into `target` within `timeout` (False: not in the store); see
        `varlen.stream.store.fetch`."""
        litdata()  # the tested release
        return store.fetch(f"{self.url.rstrip('/')}/{name}", target, self.options, self.timeout, retried)

    def fetched(self) -> StreamSource:
        """This source with `index_dir` set: the folder itself when local, else a local copy of
        the store's `index.json` and size index (see the module docstring).

        Raises:
            DataError: the store has no `index.json` or no size index there, or cannot be read in
                `timeout`; each names the URL.
        """
        if not self.remote:
            return replace(self, index_dir=self.url)
        folder = self.cache / "index" / hashlib.sha256(self.url.encode()).hexdigest()[:16]
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
        kept = self._fetch_index(folder)
        for _ in INDEX_FILES + OPTIONAL_FILES:  # each round fetches one kept copy again, at most each once
            damaged = _damaged_copy(folder)
            if damaged is None:
                break
            name, message = damaged
            if name not in kept:
                raise DataError(
                    f"{self.url.rstrip('/')}/{name} is damaged in the store (its copy fetched just now fails its "
                    f"check): {message} Then copy {FOLDER}/ to the store again."
                )
            log.warning("%s: fetching it again from %s", message.partition(". ")[0], self.url)
            kept.discard(name)
            fresh = self._download(name, folder, required=name in INDEX_FILES)
            if fresh is not None:
                os.replace(fresh, folder / name)
            else:  # gone from the store since the stamps were read
                (folder / name).unlink(missing_ok=True)
        return replace(self, index_dir=str(folder))

    def _fetch_index(self, folder: Path) -> set[str]:
        """The store's `index.json` and size index into `folder` (see the module docstring); the names
        of the files kept from an earlier fetch (the store's copy unchanged)."""
        listed = self._download(INDEX_JSON, folder)
        ChunkList.from_index(parse_index_json(listed, f"{self.url}/{INDEX_JSON}"), self.url)
        stamped, stamps, kept = _read_stamps(folder), {}, set()
        for name in INDEX_FILES + OPTIONAL_FILES:
            remote = f"{self.url.rstrip('/')}/{name}"
            stamp = store.stamp(remote, self.options, self.timeout) if name in STAMPED else None
            if stamp is not None and stamp == stamped.get(name) and (folder / name).is_file():
                stamps[name] = stamp  # the store's file is the copy's
                kept.add(name)
                continue
            fresh = self._download(name, folder, required=name in INDEX_FILES)
            if fresh is not None:
                os.replace(fresh, folder / name)
                stamps[name] = stamp
            else:  # not in the store: an earlier fetch's copy must not stand for it
                (folder / name).unlink(missing_ok=True)
        os.replace(listed, folder / INDEX_JSON)
        _write_stamps(folder, stamps)
        return kept

    def _download(self, name: str, folder: Path, required: bool = True) -> Path | None:
        """`<url>/<name>` into a new file in `folder` (its path), or None where the store has none and
        it is not `required`."""
        target = folder / f"{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
        if self.fetch(name, target):
            return target
        if not required:
            return None
        if name == INDEX_JSON:
            raise DataError(
                f"{self.url} has no {INDEX_JSON}: not a LitData dataset (write one locally with `varlen optimize "
                "--config CONFIG --output DIR`, then copy the whole folder to the store)"
            )
        raise DataError(
            f"{self.url} has no size index ({self.url.rstrip('/')}/{name} is missing): build it beside the chunks "
            f"with `varlen index-sizes` on a local copy, then copy {FOLDER}/ to the store"
        )


def _damaged_copy(folder: Path) -> tuple[str, str] | None:
    """The first file of the local copy in `folder` that fails its checksums or cannot be read, as its
    name in the dataset folder and the error's message; None when none does. The size index is opened
    (and verified: the processes that open it next find it verified), and the draw sidecar where there is
    one (any other fault of it is refused where a weighted draw reads it)."""
    try:
        index = SizeIndex(folder)
        if (folder / FOLDER / DRAW).is_file() or (folder / FOLDER / DRAW_TOTALS).is_file():
            try:
                DrawTable(folder, index)
            except IntegrityError:
                raise
            except DataError:
                pass
    except IntegrityError as error:
        return Path(error.path).relative_to(folder).as_posix(), str(error)
    return None


def _read_stamps(folder: Path) -> dict[str, str]:
    """The stamps of an earlier fetch into `folder` (none: every index file is fetched)."""
    try:
        stamps = json.loads((folder / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _write_stamps(folder: Path, stamps: dict[str, str | None]) -> None:
    part = folder / f"{STAMPS}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
    part.write_text(json.dumps({name: value for name, value in stamps.items() if value is not None}))
    os.replace(part, folder / STAMPS)
