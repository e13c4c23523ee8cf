"""On-disk caches that are safe to share: atomic writes, content keys, no pickles.

Rules every cache of varlen follows (token ids, recordings, molecular graphs, caption tokens and
video features, converted cubes); the tables themselves are `varlen.storage.tables`:

* **Atomic**: every write goes through `atomic_write` (a temporary file in the same
  folder, then `os.replace`), so two DDP ranks or an interrupted run never leave a torn file
  where a cache is expected. A full disk, or a file that cannot be replaced, is a DataError naming
  the folder (and the space a write needs), and leaves no scratch.
* **Shared**: written files follow the umask (`0o666 & ~umask`, as tools that create files do),
  not `tempfile`'s 0600: one cache folder can serve every user of a node.
* **Swept**: a build killed outright (SIGKILL: a pre-empted job) cannot remove its scratch, so
  scratch is named by its host and process (`scratch`), and the next build in the folder,
  or open of a table there, removes what a gone process left (`sweep_scratch`).
* **Keyed by content**: `cache_key` hashes what the cache was built from (a file's
  SHA-256, the settings) together with a format version, so an edited file, new settings or a
  new format never read a stale cache.
* **No pickles**: tables are Arrow IPC (`varlen.storage.tables`), cubes `.npy` read with
  `allow_pickle=False`: a cache file someone else wrote cannot run code.
* **Rebuilt, never fatal**: a file that is cut short, of another format version, built from
  other inputs or whose data changed since (`varlen.storage.checksums`) is reported with a warning and
  built again (`varlen.storage.tables.open_table`).
* Built once, in `prepare_data` (one process per node), and only mapped in `setup` and by
  every loader worker.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from varlen import notices
from varlen.errors import DataError

__all__ = [
    "array_hash",
    "atomic_write",
    "cache_key",
    "default_cache_dir",
    "disk_error",
    "file_hash",
    "reserve",
    "scratch",
    "sweep_scratch",
    "tokenizer_identity",
    "writable_folder",
]


def default_cache_dir() -> Path:
    """`$VARLEN_CACHE`, else `~/.cache/varlen`."""
    return Path(os.environ.get("VARLEN_CACHE", Path.home() / ".cache" / "varlen")).expanduser()


def atomic_write(
    path: str | Path, write: Callable[[Path], None], *, size: int | None = None, advice: str | None = None
) -> Path:
    """Create `path` through a temporary file in its folder: `write(tmp)` fills it, then it is renamed.

    Readers see either no file or the complete one; a failed `write` leaves nothing behind. The file
    gets the umask's permissions. `size` (the bytes it will hold, when known) goes in the message of a
    full disk, `advice` (what to do, default: another cache folder) in that of a folder that cannot be written.

    Raises:
        DataError: the folder is full or read-only (naming it, and `size`), or `path` cannot be
            replaced (an immutable file, another user's in a shared folder).
    """
    path = Path(path)
    tmp_path = scratch(path, ".part", advice=advice)
    try:
        try:
            write(tmp_path)
            os.chmod(tmp_path, 0o666 & ~_umask())
        except OSError as error:
            if isinstance(error, DataError) or error.errno not in DISK_ERRNOS:
                raise
            raise disk_error(path.parent, error, size, advice=advice) from error
        try:
            os.replace(tmp_path, path)
        except OSError as error:
            raise DataError(
                f"cannot replace {path} ({error.strerror or error}): it is immutable, or another user's in a "
                "shared folder; remove it, or give another folder (cache_dir=..., or $VARLEN_CACHE)"
            ) from error
    finally:
        with contextlib.suppress(OSError):
            tmp_path.unlink(missing_ok=True)
    return path


#: what a failed write's errno says of the folder (see `disk_error`)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DISK_ERRNOS = (*NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM)


def disk_error(
    folder: str | Path,
    error: OSError,
    needed: int | None = None,
    *,
    floor: bool = False,
    advice: str | None = None,
    needs: str = "the cache needs",
) -> DataError:
    """A write that failed in `folder` as a DataError naming it: out of space (with what is free and
    `needed`, the bytes the write needs, when known; `floor`: at least those; `needs`: whose need), or a
    folder that cannot be written; `advice`: the way out (default: another cache folder)."""
    advice = advice or "give a folder you can write to (cache_dir=..., or $VARLEN_CACHE)"
    if error.errno not in NO_SPACE:
        return DataError(f"cannot write in {folder} ({error.strerror or error}): {advice}")
    try:
        free = f"{_mib(shutil.disk_usage(folder).free)} free"
    except OSError:
        free = "free space unknown"
    need = f"; {needs} {'more than' if floor else 'about'} {_mib(needed)} there" if needed else ""
    return DataError(f"no space left in {folder} ({error.strerror or error}; {free}{need}): free some, or {advice}")


def reserve(path: str | Path, size: int) -> None:
    """Allocate `size` bytes of the file `path` (a scratch file to be written through a memory map):
    a full disk is then a DataError naming the folder now, not a crash (SIGBUS) when a mapped page
    is written later. Where the platform cannot allocate, the file is only extended."""
    try:
        with open(path, "r+b") as handle:
            try:
                os.posix_fallocate(handle.fileno(), 0, size)
            except (AttributeError, OSError) as error:  # no such call, or a file system without it
                if getattr(error, "errno", None) in DISK_ERRNOS:
                    raise
                handle.truncate(size)
    except OSError as error:
        raise disk_error(Path(path).parent, error, size) from error


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _umask() -> int:
    """This process's umask, read without changing it (`os.umask` sets it: a race with other threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def writable_folder(path: str | Path, *, advice: str | None = None) -> Path:
    """`path`'s folder, made if needed and checked writable: a DataError naming it otherwise (a file where a
    folder should be, a read-only folder), with `advice`, the way out (default: another cache folder)."""
    folder = Path(path).parent
    blocking = next((p for p in (folder, *folder.parents) if p.exists() or p.is_symlink()), None)
    if blocking is not None and not blocking.is_dir():
        advice = advice or "give a folder you can write to (cache_dir=..., or $VARLEN_CACHE)"
        raise DataError(f"cannot write in {folder} ({blocking} is a file, not a folder): {advice}")
    scratch(path, ".probe", advice=advice).unlink()
    return folder


#: what a build writes beside its target until it renames it: files, and a table's `.build` folder
SCRATCH_SUFFIXES = (".part", ".probe", ".build", ".features")
#: another host's scratch (its process cannot be asked) is removed once untouched this long
STALE_SECONDS = 24 * 3600
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "-"  # no dot: the name parses back
_ENDS = "(?:" + "|".join(re.escape(suffix) for suffix in SCRATCH_SUFFIXES) + ")$"
_OWNED = re.compile(r"^\..+\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.[^.]+" + _ENDS)
_UNNAMED = re.compile(r"^\..+\.[a-z0-9_]{8}" + _ENDS)  # tempfile's names, before scratch named its owner


def scratch(path: str | Path, suffix: str, *, folder: bool = False, advice: str | None = None) -> Path:
    """A new scratch file (a folder with `folder=True`) beside `path` to build it in, named
    `.<name>.<pid>@<host>.<random><suffix>` so that a later build can tell when its process is gone;
    the folder's abandoned scratch is swept first. A DataError names a folder that cannot be written."""
    path = Path(path)
    prefix = f".{path.name}.{os.getpid()}@{_HOST}."
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_scratch(path.parent)
        if folder:  # the umask's mode, not mkdtemp's 0700: a folder renamed into place is shared as a file is
            made = Path(tempfile.mkdtemp(dir=path.parent, prefix=prefix, suffix=suffix))
            os.chmod(made, 0o777 & ~_umask())
            return made
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
        os.close(handle)
        return Path(name)
    except OSError as error:
        raise disk_error(path.parent, error, advice=advice) from error


def sweep_scratch(folder: str | Path) -> int:
    """Remove the scratch in `folder` that killed builds left: a gone process's of this host, and,
    untouched for `STALE_SECONDS`, another host's or one not named by its owner. Says what it
    removed (a warning) and returns how many entries; never raises (a sweep must not stop a build)."""
    removed, freed, now = 0, 0, time.time()
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(".") and e.name.endswith(SCRATCH_SUFFIXES)]
    except OSError:
        return 0
    for entry in entries:
        try:
            if not _abandoned(entry, now):
                continue
            size = _bytes(entry)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue  # removed meanwhile (another process's sweep), or not ours to remove
        removed, freed = removed + 1, freed + size
    if removed:
        notices.warn(
            f"removed {removed} scratch entries ({freed / 2**20:.1f} MiB) in {folder}, left by builds whose "
            "process is gone (killed or pre-empted)"
        )
    return removed


def _abandoned(entry: os.DirEntry, now: float) -> bool:
    """Whether scratch `entry`'s build is over: its process is gone when it ran on this host; else
    (another host's processes cannot be asked) its newest write is older than `STALE_SECONDS`,
    which a running build (that writes as it goes) never is."""
    owned = _OWNED.match(entry.name)
    if owned and owned["host"] == _HOST:
        return not _running(int(owned["pid"]))
    if owned or _UNNAMED.match(entry.name):
        touched = [entry.stat(follow_symlinks=False).st_mtime]
        if entry.is_dir(follow_symlinks=False):
            touched += [child.stat(follow_symlinks=False).st_mtime for child in os.scandir(entry.path)]
        return now - max(touched) > STALE_SECONDS
    return False


def _running(pid: int) -> bool:
    """Whether process `pid` of this host exists (signal 0 asks without sending anything)."""
    if os.name == "nt":  # os.kill would stop it there: never judged gone
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _bytes(entry: os.DirEntry) -> int:
    if not entry.is_dir(follow_symlinks=False):
        return entry.stat(follow_symlinks=False).st_size
    return sum(f.stat().st_size for f in Path(entry.path).rglob("*") if f.is_file())


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
    """A short key of `parts` (content hashes, settings: anything JSON can write) and `version`."""
    text = json.dumps([version, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash of what decides a tokenizer's ids: its class and name, its whole definition (a fast
    tokenizer's JSON less the call-time truncation and padding; else its vocabulary) and the side it
    truncates (`truncation_side`: a setting of the Python tokenizer, which its calls pass on).
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
