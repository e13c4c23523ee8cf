"""Cube and label-map files in their real formats, opened and checked; `.mat` cubes converted once.

Formats: MATLAB v5 `.mat` (scipy), MATLAB v7.3 `.mat` (h5py), ENVI `.hdr` + image (the
`spectral` package, memory-mapped in place) and `.npy` (`np.load(mmap_mode="r")`).

Why a conversion: a v5 `.mat` cannot be memory-mapped and a v7.3 one is stored transposed, so a
`.mat` cube is converted once into an `.npy` in the cache folder (`convert_mat_cube`).
Its name carries `varlen.storage.cache.cache_key` of the file's content hash, the variable and
`MAT_CACHE_VERSION` (an edited file or a new format never reads a stale conversion); it is
written with `varlen.storage.cache.atomic_write` and rebuilt, with a warning, when it cannot be
read. Every later open (each loader worker, each DDP rank) only maps it.

Every failure raises `DataError` naming the file (and the variable), or
`DatasetNotFoundError` for a file that is not there: never a library's
own `KeyError` or traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from varlen import notices
from varlen.errors import DataError, DatasetNotFoundError
from varlen.storage.cache import atomic_write, cache_key, file_hash

__all__ = [
    "MAT_CACHE_VERSION",
    "MappedCube",
    "complete_npy",
    "convert_mat_cube",
    "cube_file",
    "is_mat73",
    "map_cube_file",
    "mat_cache_path",
    "mat_variables",
    "open_cube",
    "read_array",
    "read_envi",
    "read_labels",
    "read_wavelengths",
    "reading",
    "require_file",
    "write_npy",
]

#: format version of the `.mat` -> `.npy` conversion (part of the cache key)
MAT_CACHE_VERSION = "hyperspectral-mat-npy-2"
#: what to do about a user's file that is not there
CHECK_PATH = "check the path (it is read as given, relative to the working directory)"


@contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Re-raise any library error inside the block as a `DataError` naming `path` and the cause."""
    try:
        yield
    except DataError:
        raise
    except Exception as error:  # scipy, h5py, spectral and numpy raise many types: the user needs the file
        raise DataError(f"{path}: cannot read it as {what} ({type(error).__name__}: {error})") from error


def require_file(path: str | Path, what: str, fetch: str = CHECK_PATH) -> Path:
    """`path` as a Path, or `DatasetNotFoundError` saying `what` is missing and how to get it."""
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(what, path, fetch)
    return path


def write_npy(path: str | Path, shape: tuple[int, ...], dtype: Any, fill: Callable[[np.ndarray], None]) -> Path:
    """Write an `.npy` atomically: `fill(memmap)` writes the values into the (temporary) file."""

    def write(tmp: Path) -> None:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        fill(out)
        out.flush()
        del out

    return atomic_write(path, write)


def complete_npy(path: Path, shape: tuple[int, ...]) -> bool:
    """Whether a cached `.npy` is there, readable and of `shape`; a file that is not is warned about."""
    if not path.is_file():
        return False
    try:
        found = np.load(path, mmap_mode="r").shape
        if found == tuple(shape):
            return True
        reason = f"of shape {found}, expected {tuple(shape)}"
    except (OSError, ValueError, EOFError) as error:  # truncated, not an .npy, holding pickles
        reason = f"unreadable ({type(error).__name__}: {error})"
    notices.warn(f"cache {path} is {reason}; building it again")
    return False


# -- MATLAB files -------------------------------------------------------------------------------


def is_mat73(path: Path) -> bool:
    """MATLAB v7.3 files are HDF5 files (with a 512-byte MATLAB header)."""
    import h5py

    return h5py.is_hdf5(str(path))


def mat_variables(path: Path) -> dict[str, tuple[int, ...]]:
    """Variable name -> shape in MATLAB's order, without reading the data."""
    if is_mat73(path):
        import h5py

        with reading(path, "a MATLAB v7.3 .mat file"), h5py.File(path, "r") as f:
            names = [k for k in f.keys() if not k.startswith("#") and isinstance(f[k], h5py.Dataset)]
            return {k: tuple(f[k].shape[::-1]) for k in names}  # HDF5 holds MATLAB's column-major transpose
    from scipy.io import whosmat

    with reading(path, "a MATLAB .mat file"):
        return {name: tuple(shape) for name, shape, _ in whosmat(path)}


def pick_variable(path: Path, variables: dict[str, tuple[int, ...]], key: str | None, ndim: int) -> str:
    """The variable to read: `key`, else the only `ndim`-dimensional one."""
    what = "cube [H, W, B]" if ndim == 3 else "label map [H, W]"
    if key is not None:
        if key not in variables:
            raise DataError(f"{path}: no variable {key!r}; it holds {sorted(variables)}")
        if len(variables[key]) != ndim:
            raise DataError(f"{path}: variable {key!r} has shape {variables[key]}, expected a {what}")
        return key
    matches = [k for k, shape in variables.items() if len(shape) == ndim]
    if len(matches) != 1:
        raise DataError(
            f"{path}: cannot tell which variable is the {what} (variables: {variables}); name it "
            f"({'cube_key' if ndim == 3 else 'labels_key'}=...)"
        )
    return matches[0]


def mat_cache_path(path: Path, key: str, cache_dir: Path) -> Path:
    """Where a `.mat` cube's variable `key` is converted, named by the file's content, the variable, the format."""
    digest = cache_key(file_hash(path), key, version=MAT_CACHE_VERSION)
    return Path(cache_dir) / f"{path.stem}.{key}.{digest}.npy"


def _numeric(path: Path, key: str, dtype: np.dtype) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise DataError(f"{path}: variable {key!r} holds {np.dtype(dtype)} values, not numbers")


def _copy(data: np.ndarray, out: np.ndarray) -> None:
    out[...] = data


def _read_mat5(path: Path, key: str) -> np.ndarray:
    from scipy.io import loadmat

    with reading(path, "a MATLAB .mat file"):
        data = loadmat(path, variable_names=[key])[key]
    _numeric(path, key, data.dtype)
    return data


def _fill_from_mat73(path: Path, key: str, out: np.ndarray) -> None:
    import h5py

    with reading(path, "a MATLAB v7.3 .mat file"), h5py.File(path, "r") as f:
        ds = f[key]  # [B, W, H]
        step = max(1, (64 << 20) // max(1, ds.shape[1] * ds.shape[2] * ds.dtype.itemsize))
        for b0 in range(0, ds.shape[0], step):  # one band slab at a time, never the whole cube
            out[:, :, b0 : b0 + step] = ds[b0 : b0 + step].transpose(2, 1, 0)


def convert_mat_cube(path: str | Path, key: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """The memory-mappable `.npy` of a `.mat` cube, converted now unless a complete one is cached.

    Args:
        path: a MATLAB v5 or v7.3 file.
        key: the variable; default: the only 3-D one.
        cache_dir: where conversions live (default: beside the file).
    """
    path = Path(path)
    variables = mat_variables(path)
    key = pick_variable(path, variables, key, 3)
    cache = mat_cache_path(path, key, Path(cache_dir) if cache_dir else path.parent)
    if complete_npy(cache, variables[key]):
        return cache
    if is_mat73(path):
        import h5py

        with reading(path, "a MATLAB v7.3 .mat file"), h5py.File(path, "r") as f:
            dtype = f[key].dtype
        _numeric(path, key, dtype)
        return write_npy(cache, variables[key], dtype, partial(_fill_from_mat73, path, key))
    data = _read_mat5(path, key)  # v5 files cannot be mapped: read once here, then everyone maps the cache
    return write_npy(cache, data.shape, data.dtype, partial(_copy, data))


def _read_mat_labels(path: Path, key: str | None) -> np.ndarray:
    key = pick_variable(path, mat_variables(path), key, 2)
    if is_mat73(path):
        import h5py

        with reading(path, "a MATLAB v7.3 .mat file"), h5py.File(path, "r") as f:
            return np.ascontiguousarray(f[key][()].T)
    return np.asarray(_read_mat5(path, key))


# -- ENVI and .npy ------------------------------------------------------------------------------


def read_envi(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """ENVI cube as an `[H, W, B]` memmap view and its wavelengths in nm (None when absent)."""
    from spectral.io import envi

    with reading(path, "an ENVI header with its image file"):
        img = envi.open(str(path))
        cube = img.open_memmap(interleave="bip")
        centers = img.bands.centers
        unit = str(img.metadata.get("wavelength units", "nm")).lower()
    if not centers:
        return cube, None
    wl = np.asarray(centers, dtype=np.float64)
    if unit in {"micrometers", "micrometer", "um", "µm", "microns"}:
        wl = wl * 1000.0
    return cube, wl


def read_wavelengths(path: str | Path) -> np.ndarray | None:
    """Band centres (nm) stored with a cube: ENVI headers carry them; .mat/.npy cubes do not."""
    path = Path(path)
    return read_envi(path)[1] if path.suffix.lower() == ".hdr" else None


def map_cube_file(path: Path) -> np.ndarray:
    """Memory-map a `.npy` or ENVI cube read-only as `[H, W, B]`."""
    path = Path(path)
    if path.suffix.lower() == ".hdr":
        return read_envi(path)[0]
    with reading(path, "a .npy array"):
        return np.load(path, mmap_mode="r")


def cube_file(
    path: str | Path, key: str | None = None, cache_dir: str | Path | None = None, fetch: str = CHECK_PATH
) -> Path:
    """The file a cube is memory-mapped from: `.npy` and ENVI `.hdr` as they are, `.mat` via its cached `.npy`.

    Args:
        path: `.npy`, `.mat` (v5 or v7.3) or ENVI `.hdr`.
        key: the `.mat` variable; default: the only 3-D one.
        cache_dir: where `.mat` cubes are converted (default: beside the file).
        fetch: how to get the file when it is missing (for the error).
    """
    path = require_file(path, f"cube file {Path(path).name}", fetch)
    suffix = path.suffix.lower()
    if suffix in {".npy", ".hdr"}:
        return path
    if suffix == ".mat":
        return convert_mat_cube(path, key, cache_dir)
    raise DataError(f"{path}: unknown cube format {suffix!r} (expected .mat, .npy or ENVI .hdr)")


class MappedCube:
    """A read-only `[H, W, B]` cube memory-mapped from a file, that pickles as its path only.

    Why: a loader worker started by `spawn` / `forkserver` (the default outside Linux, and on
    Linux from Python 3.14) receives the dataset pickled, and a pickled `np.memmap` carries its
    whole data: a private copy of the cube per worker. This wrapper sends the path and maps the
    file again in the worker, so all processes read the same page-cache pages. Indexing returns
    views of the map (nothing is read until used).

    Args:
        path: a `.npy` or ENVI `.hdr` file (see `cube_file`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._array: np.ndarray | None = None

    @property
    def array(self) -> np.ndarray:
        """The memory map (opened on first use in each process)."""
        if self._array is None:
            self._array = map_cube_file(self.path)
        return self._array

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self._array = state["path"], None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def ndim(self) -> int:
        return self.array.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def __getitem__(self, key: Any) -> np.ndarray:
        return self.array[key]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.array, dtype=dtype)

    def __repr__(self) -> str:
        return f"MappedCube({str(self.path)!r})"


def open_cube(
    path: str | Path, key: str | None = None, cache_dir: str | Path | None = None, fetch: str = CHECK_PATH
) -> MappedCube:
    """A cube file as a `MappedCube` (`.mat` converted once to a cached `.npy`), checked to be 3-D."""
    cube = MappedCube(cube_file(path, key, cache_dir, fetch))
    if cube.ndim != 3:
        raise DataError(f"{path}: expected a 3-D cube [H, W, B], got shape {cube.shape}")
    return cube


def read_labels(path: str | Path, key: str | None = None, what: str = "label map", fetch: str = CHECK_PATH):
    """A label map `[H, W]` (0 = unlabelled) from a `.mat` (v5 or v7.3) or `.npy` file, in memory."""
    path = require_file(path, f"{what} {Path(path).name}", fetch)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        with reading(path, "a .npy array"):
            labels = np.load(path)
    elif suffix == ".mat":
        labels = _read_mat_labels(path, key)
    else:
        raise DataError(f"{path}: unknown label-map format {suffix!r} (expected .mat or .npy)")
    if labels.ndim != 2:
        raise DataError(f"{path}: a label map is [H, W], got shape {labels.shape}")
    if labels.dtype.kind not in "biuf":
        raise DataError(f"{path}: a label map holds numbers, got {labels.dtype} values")
    return labels


def read_array(path: str | Path, key: str | None = None, ndim: int = 3, cache_dir: str | Path | None = None):
    """A cube (`ndim=3`, memory-mapped `[H, W, B]`) or a label map (`ndim=2`) from a file."""
    if ndim == 2:
        return read_labels(path, key)
    return open_cube(path, key, cache_dir).array
