"""Per-video feature stores `[T, D]` keyed by video id: a folder of `.npy`, one `.npz`, one HDF5.

Shapes are read from headers alone (no frames loaded), so a dataset knows every video's size
without reading its features. Files are opened lazily, once per process: a forked loader worker
never shares a handle (and its file offset) with its parent.
"""

from __future__ import annotations

import functools
import os
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from varlen.errors import DataError, DatasetNotFoundError

__all__ = [
    "SHOWN_FRAMES",
    "FeatureStore",
    "HDF5Features",
    "NpyFolderFeatures",
    "NpzFeatures",
    "bad_frames",
    "frame_ranges",
    "open_features",
]

#: how many offending frames a message lists
SHOWN_FRAMES = 10
#: how to get features that are not where they were looked for
FETCH = (
    "extract them with your video encoder into a folder of <video_id>.npy, a .npz or an .h5 keyed by video id "
    "and pass features=PATH, or leave features unset for synthetic features"
)


class FeatureStore(Protocol):
    """Per-video features `[T, D]` at `fps` frames per second, keyed by video id.

    `dim` is the store's feature size `D`: the one most of its videos have (a store is
    judged by its majority, so one odd file is reported as bad instead of making every good
    video look wrong). `checks_finite`: whether `load` can return NaN / inf at all
    (False for generated features, which need no scan).
    """

    fps: float
    source: str
    checks_finite: bool

    @property
    def dim(self) -> int: ...

    def __contains__(self, video_id: str) -> bool: ...

    def shape(self, video_id: str) -> tuple[int, int]:
        """`(T, D)` without loading the frames; `DataError` when the header is unreadable."""
        ...

    def load(self, video_id: str) -> np.ndarray:
        """The `[T, D]` float32 frames."""
        ...


def frame_ranges(
    start: np.ndarray, end: np.ndarray, fps: float, num_frames: np.ndarray | int
) -> tuple[np.ndarray, np.ndarray]:
    """First and one-past-last frame of each `[start, end)` span in seconds; at least one frame."""
    first = np.clip(np.floor(np.asarray(start) * fps).astype(np.int64), 0, np.asarray(num_frames) - 1)
    last = np.clip(np.ceil(np.asarray(end) * fps).astype(np.int64), first + 1, num_frames)
    return first, last


def bad_frames(frames: np.ndarray) -> np.ndarray:
    """Indices of the frames (rows) holding NaN or inf."""
    return np.flatnonzero(~np.isfinite(frames).all(axis=-1)) if frames.size else np.zeros(0, np.int64)


def _majority_dim(shapes: Iterable[tuple[int, ...]], source: str) -> int:
    """The most common last axis of `shapes` (ties: the smallest), or an error when there is none."""
    counts = Counter(int(shape[-1]) for shape in shapes if len(shape) == 2)
    if not counts:
        raise DataError(f"{source}: holds no [T, D] features")
    return min(counts, key=lambda d: (-counts[d], d))


def _check_2d(shape: tuple[int, ...], where: Any) -> tuple[int, int]:
    if len(shape) != 2:
        raise DataError(f"{where}: features must be [T, D], got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _npy_member_shape(member) -> tuple[int, ...]:
    """Shape of a `.npy` stream from its header alone, with numpy's own header readers.

    Format 3.0 only changes the header's text encoding (UTF-8 instead of Latin-1, for
    non-Latin-1 field names), so its header reads like 2.0's.
    """
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, _ = np.lib.format.read_array_header_1_0(member)
    elif version in ((2, 0), (3, 0)):
        shape, _, _ = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return tuple(shape)


class NpyFolderFeatures:
    """A folder of `<video_id>.npy` arrays `[T, D]` (memory-mapped: shapes cost a header read)."""

    checks_finite = True

    def __init__(self, folder: str | os.PathLike, fps: float) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise DatasetNotFoundError("feature folder (<video_id>.npy files)", self.folder, FETCH)
        self.fps = float(fps)
        self.source = str(self.folder)

    def _path(self, video_id: str) -> Path:
        return self.folder / f"{video_id}.npy"

    def __contains__(self, video_id: str) -> bool:
        return self._path(video_id).is_file()

    def _header(self, path: Path) -> tuple[int, ...]:
        try:
            return tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)
        except (OSError, ValueError, EOFError) as err:
            raise DataError(f"{path}: not a readable .npy array ({type(err).__name__}: {err})") from err

    def shape(self, video_id: str) -> tuple[int, int]:
        return _check_2d(self._header(self._path(video_id)), self._path(video_id))

    @functools.cached_property
    def dim(self) -> int:
        """The majority feature size over every readable file's header."""
        shapes = []
        for path in sorted(self.folder.glob("*.npy")):
            try:
                shapes.append(self._header(path))
            except DataError:
                continue  # reported as a bad video when a split uses it
        return _majority_dim(shapes, f"{self.folder} (<video_id>.npy files)")

    def load(self, video_id: str) -> np.ndarray:
        try:
            return np.asarray(np.load(self._path(video_id), allow_pickle=False), dtype=np.float32)
        except (OSError, ValueError, EOFError) as err:
            raise DataError(f"{self._path(video_id)}: cannot be read ({type(err).__name__}: {err})") from err


class _ArchiveFeatures:
    """One file holding an array `[T, D]` per video id: shapes read once at open, the file
    opened again in each process (a forked worker must not share its parent's handle and offset).
    A subclass reads the headers (`_read_shapes`), opens the file (`_open`) and reads one video
    from the open file (`_read`)."""

    checks_finite = True
    #: what the file is, in the messages when it is missing and when it cannot be read
    missing = kind = ""
    #: the errors a read of it raises
    read_errors: tuple[type[Exception], ...] = (OSError, ValueError)

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DatasetNotFoundError(self.missing, self.path, FETCH)
        self.fps = float(fps)
        self.source = str(self.path)
        self._handle = None  # opened on first load, once per process (see load)
        self._pid: int | None = None
        try:
            self._shapes = self._read_shapes()  # the headers, not the data
        except self.read_errors as err:
            raise DataError(f"{self.path}: not a readable {self.kind} ({type(err).__name__}: {err})") from err
        self.dim = _majority_dim(self._shapes.values(), str(self.path))

    def __getstate__(self) -> dict[str, Any]:  # an open handle does not pickle (spawned workers)
        return {**self.__dict__, "_handle": None, "_pid": None}

    def __contains__(self, video_id: str) -> bool:
        return video_id in self._shapes

    def shape(self, video_id: str) -> tuple[int, int]:
        return _check_2d(self._shapes[video_id], f"{self.path}[{video_id}]")

    def load(self, video_id: str) -> np.ndarray:
        if self._handle is None or self._pid != os.getpid():
            self._handle, self._pid = self._open(), os.getpid()
        try:
            return np.asarray(self._read(self._handle, video_id), dtype=np.float32)
        except self.read_errors as err:
            raise DataError(f"{self.path}[{video_id}]: cannot be read ({type(err).__name__}: {err})") from err


class NpzFeatures(_ArchiveFeatures):
    """One `.npz` archive with an array `[T, D]` per video id (shapes read from member headers).

    A forked loader worker that inherited the parent's open archive would move the file offset
    every process shares: reads interleave and fail their CRC. Hence one archive per process.
    """

    missing, kind = "feature archive (.npz)", ".npz archive"
    read_errors = (zipfile.BadZipFile, OSError, ValueError, EOFError)

    def _read_shapes(self) -> dict[str, tuple[int, ...]]:
        with zipfile.ZipFile(self.path) as zf:
            shapes = {}
            for name in zf.namelist():
                with zf.open(name) as member:
                    shapes[name.removesuffix(".npy")] = _npy_member_shape(member)
            return shapes

    def _open(self) -> Any:
        return np.load(self.path, allow_pickle=False)

    def _read(self, handle: Any, video_id: str) -> Any:
        return handle[video_id]


class HDF5Features(_ArchiveFeatures):
    """One HDF5 file with a dataset `[T, D]` per video id; opened lazily in each worker."""

    missing, kind = "feature file (HDF5)", "HDF5 file"

    def _read_shapes(self) -> dict[str, tuple[int, ...]]:
        import h5py

        with h5py.File(self.path, "r") as f:
            return {k: tuple(f[k].shape) for k in f.keys()}

    def _open(self) -> Any:
        import h5py

        return h5py.File(self.path, "r")

    def _read(self, handle: Any, video_id: str) -> Any:
        return handle[video_id][()]


def open_features(path: str | os.PathLike, fps: float) -> FeatureStore:
    """A feature store by path: a folder of `.npy`, a `.npz`, or an `.h5` / `.hdf5` file."""
    path = Path(path)
    if path.is_dir():
        return NpyFolderFeatures(path, fps)
    if path.suffix == ".npz":
        return NpzFeatures(path, fps)
    if path.suffix in {".h5", ".hdf5"}:
        return HDF5Features(path, fps)
    if not path.exists():
        raise DatasetNotFoundError("video features (a folder of <video_id>.npy, a .npz or an .h5)", path, FETCH)
    raise DataError(f"{path}: unknown feature format (use a folder of .npy, a .npz or an .h5/.hdf5)")
