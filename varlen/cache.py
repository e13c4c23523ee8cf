"""On-disk caches that are safe to share: atomic writes, content keys, no pickles.

Rules every cache of varlen follows (token ids, recordings, molecular graphs, caption tokens and
video features, converted cubes); the tables themselves are :mod:`varlen.tables`:

* **Atomic**: every write goes through :func:`atomic_write` (a temporary file in the same
  folder, then ``os.replace``), so two DDP ranks or an interrupted run never leave a torn file
  where a cache is expected.
* **Keyed by content**: :func:`cache_key` hashes what the cache was built from (a file's
  SHA-256, the settings) together with a format version, so an edited file, new settings or a
  new format never read a stale cache.
* **No pickles**: tables are Arrow IPC (:mod:`varlen.tables`), cubes ``.npy`` read with
  ``allow_pickle=False``: a cache file someone else wrote cannot run code.
* **Rebuilt, never fatal**: a file that is cut short, of another format version or built from
  other inputs is reported with a warning and built again (:func:`varlen.tables.open_table`).
* Built once, in ``prepare_data`` (one process per node), and only mapped in ``setup`` and by
  every loader worker.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from varlen.errors import DataError

__all__ = [
    "array_hash",
    "atomic_write",
    "cache_key",
    "default_cache_dir",
    "file_hash",
    "tokenizer_identity",
    "writable_folder",
]


def default_cache_dir() -> Path:
    """``$VARLEN_CACHE``, else ``~/.cache/varlen``."""
    return Path(os.environ.get("VARLEN_CACHE", Path.home() / ".cache" / "varlen")).expanduser()


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Create ``path`` through a temporary file in its folder: ``write(tmp)`` fills it, then it is renamed.

    Readers see either no file or the complete one; a failed ``write`` leaves nothing behind.
    """
    path = Path(path)
    handle, tmp = _temporary(path, suffix=".part")
    os.close(handle)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)
    return path


def _temporary(path: Path, suffix: str) -> tuple[int, str]:
    """A new temporary file beside ``path`` (its folder made first), or a DataError naming the folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as error:
        raise DataError(
            f"cannot write in {path.parent} ({error.strerror or error}): give a folder you can write to "
            "(cache_dir=..., or $VARLEN_CACHE)"
        ) from error


def writable_folder(path: str | Path) -> Path:
    """``path``'s folder, made if needed and checked writable (a DataError naming it otherwise)."""
    handle, tmp = _temporary(Path(path), suffix=".probe")
    os.close(handle)
    os.unlink(tmp)
    return Path(path).parent


@functools.lru_cache(maxsize=64)
def _file_hash(path: str, size: int, mtime_ns: int, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_hash(path: str | Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's content (memoised per process while its size and mtime are unchanged)."""
    stat = os.stat(path)
    return _file_hash(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, algorithm)


def array_hash(*arrays: np.ndarray) -> str:
    """SHA-256 of arrays' dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.data)
    return digest.hexdigest()


def cache_key(*parts: Any, version: str) -> str:
    """A short key of ``parts`` (content hashes, settings: anything JSON can write) and ``version``."""
    text = json.dumps([version, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash of what decides a tokenizer's ids: its class and name, its whole definition (a fast
    tokenizer's JSON less the call-time truncation and padding; else its vocabulary) and the side it
    truncates (``truncation_side``: a setting of the Python tokenizer, which its calls pass on).
    Memoised per tokenizer object, size and side: a token added later, or another side, is a new identity."""
    return _tokenizer_identity(tokenizer, len(tokenizer), getattr(tokenizer, "truncation_side", "right"))


@functools.lru_cache(maxsize=8)
def _tokenizer_identity(tokenizer: Any, size: int, side: str) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = json.loads(backend.to_str())
        definition.pop("truncation", None)
        definition.pop("padding", None)
    else:
        definition = sorted(tokenizer.get_vocab().items())
    text = json.dumps([type(tokenizer).__name__, tokenizer.name_or_path, definition, side])  # the library's order
    return hashlib.sha256(text.encode()).hexdigest()
