"""Hyperspectral scenes: readers, downloads, the synthetic default, spatial splits and pixel datasets.

A *scene* is a cube ``[H, W, B]`` (a :class:`MappedCube`: memory-mapped, never loaded whole, and
pickled to loader workers as its path only), a label map ``[H, W]`` (0 = unlabelled) and the
centre wavelength of every band in nm. A *sample* is one
labelled pixel: its spectrum, or the ``P x P`` patch around it, returned as a **view** into the
cube together with the band indices it will use; the collate copies only those bands.

Formats: MATLAB v5 ``.mat`` (scipy; converted once to a cached ``.npy`` that is memory-mapped, see
:func:`cache_path`),
MATLAB v7.3 ``.mat`` (h5py; copied band slab by band slab into the same kind of cache), ENVI
``.hdr`` + image (the ``spectral`` package, memory-mapped in place) and ``.npy``
(``np.load(mmap_mode="r")``). Downloads go through :func:`varlen.datasets.base.download_url`
(atomic, checksum-verified).

Why spatial blocks: a random pixel split puts neighbouring pixels, whose patches overlap, on both
sides, and published accuracies near 99% fall to about 80% on disjoint splits.
:func:`block_split` assigns whole blocks to splits and keeps a centre only when every pixel
within ``buffer >= patch radius`` of it belongs to its own split's blocks, so no train and test
patch footprint shares a pixel.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import ndimage
from torch.utils.data import Dataset

from varlen.batching import lengths_to_mask, pad_sequences, round_up
from varlen.datasets.base import DatasetNotFoundError, download_url

# -- sensors ------------------------------------------------------------------------------------

#: Nominal AVIRIS grid: 224 channels from 400 to 2500 nm (the four spectrometers overlap slightly;
#: nominal centres are what the public .mat scenes imply, since they ship no wavelength table).
AVIRIS_NUM_BANDS = 224
#: Indian Pines was distributed with 220 of those channels; "corrected" also drops the water
#: absorption bands 104-108, 150-163 and 220 (1-based, on the 220-band grid) -> 200 bands.
INDIAN_PINES_CHANNELS = 220
INDIAN_PINES_REMOVED = (*range(103, 108), *range(149, 163), 219)
#: Salinas / Salinas-A "corrected" drop 108-112, 154-167 and 224 (1-based, on the 224 grid) -> 204.
SALINAS_REMOVED = (*range(107, 112), *range(153, 167), 223)
#: ROSIS: 115 channels over 430-860 nm; the 103 bands of Pavia University after noisy-band removal
#: are spread over the same range (which 12 were removed is not published with the scene).
ROSIS_RANGE = (430.0, 860.0)


def aviris_wavelengths(removed: Sequence[int] = (), channels: int = AVIRIS_NUM_BANDS) -> np.ndarray:
    """Nominal AVIRIS centres in nm: ``channels`` over 400-2500 nm, ``removed`` (0-based) left out."""
    full = np.linspace(400.0, 2500.0, channels)
    return np.delete(full, np.asarray(removed, dtype=np.int64))


def rosis_wavelengths(num_bands: int = 103) -> np.ndarray:
    """Nominal ROSIS centre wavelengths in nm for ``num_bands`` bands."""
    return np.linspace(*ROSIS_RANGE, num_bands)


SENSORS = {"aviris": aviris_wavelengths, "rosis": rosis_wavelengths}


# -- the public scenes ----------------------------------------------------------------------------

EHU = "https://www.ehu.eus/ccwintco/uploads"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a public scene: its name, URL and (when known) checksum, ``"md5:<hex>"``."""

    filename: str
    url: str
    checksum: str | None = None


@dataclass(frozen=True)
class SceneInfo:
    """What is known about a public scene: files, .mat keys, sensor grid and classes.

    ``label_values`` lists the label-map values of the classes in order (Salinas-A keeps
    Salinas' class numbers 1, 10-14); class ``i`` of the scene is ``label_values[i]``.
    """

    cube: RemoteFile
    labels: RemoteFile
    cube_key: str
    labels_key: str
    wavelengths: tuple[float, ...]
    class_names: tuple[str, ...]
    label_values: tuple[int, ...]


def _scene(cube, labels, ckey, lkey, wl, names, values=None) -> SceneInfo:
    return SceneInfo(cube, labels, ckey, lkey, tuple(float(w) for w in wl), tuple(names), tuple(values or []))


INDIAN_PINES_CLASSES = (
    "Alfalfa", "Corn-notill", "Corn-mintill", "Corn", "Grass-pasture", "Grass-trees", "Grass-pasture-mowed",
    "Hay-windrowed", "Oats", "Soybean-notill", "Soybean-mintill", "Soybean-clean", "Wheat", "Woods",
    "Buildings-Grass-Trees-Drives", "Stone-Steel-Towers",
)  # fmt: skip
SALINAS_CLASSES = (
    "Brocoli_green_weeds_1", "Brocoli_green_weeds_2", "Fallow", "Fallow_rough_plow", "Fallow_smooth", "Stubble",
    "Celery", "Grapes_untrained", "Soil_vinyard_develop", "Corn_senesced_green_weeds", "Lettuce_romaine_4wk",
    "Lettuce_romaine_5wk", "Lettuce_romaine_6wk", "Lettuce_romaine_7wk", "Vinyard_untrained",
    "Vinyard_vertical_trellis",
)  # fmt: skip
PAVIA_U_CLASSES = (
    "Asphalt", "Meadows", "Gravel", "Trees", "Painted metal sheets", "Bare Soil", "Bitumen", "Self-Blocking Bricks",
    "Shadows",
)  # fmt: skip

#: The standard scenes of the EHU Grupo de Inteligencia Computacional site. Checksums: the
#: Indian Pines and Salinas-A label maps were computed on the files in ``shared/data/hyperspectral``;
#: the others are the MD5s two independent projects publish for the same files (not verified
#: here: no network). ``None`` = unknown: the download is kept, with a warning that it was not
#: verified.
SCENES: dict[str, SceneInfo] = {
    "indian_pines": _scene(
        RemoteFile("Indian_pines_corrected.mat", f"{EHU}/6/67/Indian_pines_corrected.mat",
                   "md5:66dbc9f4a9b7c9b1445f60a87b505101"),
        RemoteFile("Indian_pines_gt.mat", f"{EHU}/c/c4/Indian_pines_gt.mat", "md5:9414943dac1d80faaa9165c8b460510c"),
        "indian_pines_corrected", "indian_pines_gt",
        aviris_wavelengths(INDIAN_PINES_REMOVED, INDIAN_PINES_CHANNELS), INDIAN_PINES_CLASSES,
    ),
    "pavia_u": _scene(
        RemoteFile("PaviaU.mat", f"{EHU}/e/ee/PaviaU.mat", "md5:165a3c7488995f54a19add47c7eed4cd"),
        RemoteFile("PaviaU_gt.mat", f"{EHU}/5/50/PaviaU_gt.mat", "md5:b8c3ba44b077c26e24220463aa855bd3"),
        "paviaU", "paviaU_gt", rosis_wavelengths(103), PAVIA_U_CLASSES,
    ),
    "salinas": _scene(
        RemoteFile("Salinas_corrected.mat", f"{EHU}/a/a3/Salinas_corrected.mat",
                   "md5:485d8802f4a6b4ebc0767d48dd0da06b"),
        RemoteFile("Salinas_gt.mat", f"{EHU}/f/fa/Salinas_gt.mat", "md5:7b8da653a61bb0271b27b37fb926390f"),
        "salinas_corrected", "salinas_gt", aviris_wavelengths(SALINAS_REMOVED), SALINAS_CLASSES,
    ),
    "salinas_a": _scene(
        RemoteFile("SalinasA_corrected.mat", f"{EHU}/1/1a/SalinasA_corrected.mat"),
        RemoteFile("SalinasA_gt.mat", f"{EHU}/a/aa/SalinasA_gt.mat", "md5:d5c82204f36f9e10c9081e4e68ece1c3"),
        "salinasA_corrected", "salinasA_gt", aviris_wavelengths(SALINAS_REMOVED),
        [SALINAS_CLASSES[v - 1] for v in (1, 10, 11, 12, 13, 14)], (1, 10, 11, 12, 13, 14),
    ),
}  # fmt: skip


def fetch_scene_file(remote: RemoteFile, root: str | Path) -> Path:
    """``root/<filename>`` of a public scene, downloaded (and verified, when its checksum is known) if needed.

    A file already there is kept when it verifies, or when no checksum is known (it cannot be
    checked, and fetching it again would not make it any more trustworthy).
    """
    path = Path(root) / remote.filename
    if path.is_file() and remote.checksum is None:
        return path
    return download_url(remote.url, path, remote.checksum)


# -- readers ------------------------------------------------------------------------------------


def _atomic_npy(path: Path, shape: tuple[int, ...], dtype: np.dtype, fill) -> None:
    """Write an ``.npy`` through a temporary file: ``fill(memmap)`` writes it, then it is renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".npy", delete=False) as tmp:
        tmp_path = Path(tmp.name)
    try:
        out = np.lib.format.open_memmap(tmp_path, mode="w+", dtype=dtype, shape=shape)
        fill(out)
        out.flush()
        del out
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def _pick_key(keys: Sequence[str], key: str | None, ndim_of: dict[str, int], want: int, path: Path) -> str:
    if key is not None:
        if key not in keys:
            raise KeyError(f"{path}: no variable {key!r}; it holds {sorted(keys)}")
        return key
    matches = [k for k in keys if ndim_of.get(k) == want]
    if len(matches) != 1:
        raise KeyError(f"{path}: cannot tell which variable is the {want}-D array (found {sorted(keys)}); pass its key")
    return matches[0]


def _is_mat73(path: Path) -> bool:
    import h5py

    return h5py.is_hdf5(str(path))


def cache_path(path: Path, key: str, cache_dir: Path) -> Path:
    """Where a ``.mat`` cube is converted to ``.npy``: named after the file, its variable and a fingerprint.

    The fingerprint (absolute path, size, modification time) keeps two files of the same name in
    different folders, or a file that was replaced, from silently reusing a stale conversion.
    """
    stat = path.stat()
    tag = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    return cache_dir / f"{path.stem}.{key}.{tag}.npy"


def mappable_path(path: str | Path, key: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """The file a cube is memory-mapped from: ``.npy`` and ENVI ``.hdr`` as they are, ``.mat`` via a cached ``.npy``.

    Args:
        path: ``.npy``, ``.mat`` (v5 or v7.3) or ENVI ``.hdr``.
        key: the ``.mat`` variable; default: the only 3-D one.
        cache_dir: where ``.mat`` cubes are converted (default: beside the file). The conversion
            runs once; later calls (and every worker) only map the cache.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetNotFoundError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix in {".npy", ".hdr"}:
        return path
    if suffix == ".mat":
        return _convert_mat_cube(path, key, Path(cache_dir) if cache_dir else path.parent)
    raise ValueError(f"{path}: unknown format {suffix!r} (expected .mat, .npy or ENVI .hdr)")


def map_cube_file(path: Path) -> np.ndarray:
    """Memory-map a ``.npy`` or ENVI cube read-only as ``[H, W, B]``."""
    if path.suffix.lower() == ".hdr":
        return _read_envi(path)[0]
    return np.load(path, mmap_mode="r")


class MappedCube:
    """A read-only ``[H, W, B]`` cube memory-mapped from a file, that pickles as its path only.

    Why: a loader worker started by ``spawn`` / ``forkserver`` (the default outside Linux, and on
    Linux from Python 3.14) receives the dataset pickled, and a pickled ``np.memmap`` carries its
    whole data: a private copy of the cube per worker. This wrapper sends the path and maps the
    file again in the worker, so all processes read the same page-cache pages. Indexing returns
    views of the map (nothing is read until used).

    Args:
        path: a ``.npy`` or ENVI ``.hdr`` file (see :func:`mappable_path`).
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


def open_cube(path: str | Path, key: str | None = None, cache_dir: str | Path | None = None) -> MappedCube:
    """A cube file as a :class:`MappedCube` (``.mat`` converted once to a cached ``.npy``)."""
    cube = MappedCube(mappable_path(path, key, cache_dir))
    if cube.ndim != 3:
        raise ValueError(f"{path}: expected a 3-D cube [H, W, B], got shape {cube.shape}")
    return cube


def read_array(path: str | Path, key: str | None = None, ndim: int = 3, cache_dir: str | Path | None = None):
    """A cube (``ndim=3``, ``[H, W, B]``) or label map (``ndim=2``) from a file, memory-mapped where it can be.

    Args:
        path: ``.npy``, ``.mat`` (v5 or v7.3) or ENVI ``.hdr``.
        key: the ``.mat`` variable; default: the only ``ndim``-dimensional one.
        ndim: 3 for a cube, 2 for a label map.
        cache_dir: where ``.mat`` cubes are converted to ``.npy`` (default: beside the file).

    Returns:
        A read-only array (a memory map for cubes) in ``[H, W, B]`` / ``[H, W]`` order.
    """
    path = Path(path)
    if ndim == 3:
        arr = map_cube_file(mappable_path(path, key, cache_dir))
    elif not path.exists():
        raise DatasetNotFoundError(f"{path} does not exist")
    elif path.suffix.lower() == ".npy":
        arr = np.load(path, mmap_mode="r")
    elif path.suffix.lower() == ".mat":
        arr = _read_mat_labels(path, key)
    else:
        raise ValueError(f"{path}: unknown label-map format {path.suffix!r} (expected .mat or .npy)")
    if arr.ndim != ndim:
        raise ValueError(f"{path}: expected a {ndim}-D array, got shape {arr.shape}")
    return arr


def _read_mat_labels(path: Path, key: str | None) -> np.ndarray:
    if _is_mat73(path):
        import h5py

        with h5py.File(path, "r") as f:
            names = [k for k in f.keys() if not k.startswith("#")]
            key = _pick_key(names, key, {k: f[k].ndim for k in names if hasattr(f[k], "ndim")}, 2, path)
            return np.ascontiguousarray(f[key][()].T)  # MATLAB is column-major: HDF5 holds the transpose
    from scipy.io import loadmat, whosmat

    info = {name: len(shape) for name, shape, _ in whosmat(path)}
    key = _pick_key(list(info), key, info, 2, path)
    return np.asarray(loadmat(path, variable_names=[key])[key])


def _convert_mat_cube(path: Path, key: str | None, cache_dir: Path) -> Path:
    """Convert a ``.mat`` cube once into a memory-mappable ``.npy``; returns the cache's path."""
    if _is_mat73(path):
        import h5py

        with h5py.File(path, "r") as f:
            names = [k for k in f.keys() if not k.startswith("#")]
            key = _pick_key(names, key, {k: f[k].ndim for k in names if hasattr(f[k], "ndim")}, 3, path)
            cache = cache_path(path, key, cache_dir)
            if not cache.exists():
                ds = f[key]  # [B, W, H]

                def fill(out, ds=ds):
                    step = max(1, (64 << 20) // max(1, ds.shape[1] * ds.shape[2] * ds.dtype.itemsize))
                    for b0 in range(0, ds.shape[0], step):  # one band slab at a time, never the whole cube
                        out[:, :, b0 : b0 + step] = ds[b0 : b0 + step].transpose(2, 1, 0)

                _atomic_npy(cache, ds.shape[::-1], ds.dtype, fill)
        return cache
    from scipy.io import loadmat, whosmat

    info = {name: len(shape) for name, shape, _ in whosmat(path)}
    key = _pick_key(list(info), key, info, 3, path)
    cache = cache_path(path, key, cache_dir)
    if not cache.exists():  # v5 files cannot be mapped: read once here, then every worker maps the cache
        data = loadmat(path, variable_names=[key])[key]

        def fill(out, data=data):
            out[...] = data

        _atomic_npy(cache, data.shape, data.dtype, fill)
        del data
    return cache


def _read_envi(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """ENVI cube as an ``[H, W, B]`` memmap view and its wavelengths in nm (None when absent)."""
    from spectral.io import envi

    img = envi.open(str(path))
    cube = img.open_memmap(interleave="bip")
    centers = img.bands.centers
    if not centers:
        return cube, None
    wl = np.asarray(centers, dtype=np.float64)
    unit = str(img.metadata.get("wavelength units", "nm")).lower()
    if unit in {"micrometers", "micrometer", "um", "µm", "microns"}:
        wl = wl * 1000.0
    return cube, wl


def read_wavelengths(path: str | Path) -> np.ndarray | None:
    """Band centres (nm) stored with a cube: ENVI headers carry them; .mat/.npy cubes do not."""
    path = Path(path)
    return _read_envi(path)[1] if path.suffix.lower() == ".hdr" else None


# -- scenes ---------------------------------------------------------------------------------------


@dataclass
class Scene:
    """One cube, its label map and band wavelengths, validated.

    Attributes:
        name: short name (used in class names and messages).
        cube: ``[H, W, B]`` read-only, a :class:`MappedCube` (or any array, e.g. in memory).
        labels: ``[H, W]`` int32 class ids, 0 = unlabelled, 1..C the scene's classes.
        wavelengths: ``[B]`` centre wavelengths in nm, strictly increasing.
        class_names: C names.
        source: where the cube came from (for error messages).
        usable_bands: bands that passed validation (all, unless NaN bands were dropped).
        train_labels / test_labels: optional external maps (0 = not in that split).
        dropped_bands: bands left out because they hold NaN/inf values.
    """

    name: str
    cube: MappedCube | np.ndarray
    labels: np.ndarray
    wavelengths: np.ndarray
    class_names: list[str]
    source: str = "<memory>"
    usable_bands: np.ndarray | None = None
    train_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None
    dropped_bands: list[int] = field(default_factory=list)

    @property
    def num_bands(self) -> int:
        return int(self.cube.shape[-1])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def remap_labels(labels: np.ndarray, values: Sequence[int], source: str) -> np.ndarray:
    """Map label-map values to 1..C in the order of ``values`` (0 stays unlabelled)."""
    lut = np.zeros(int(max(values, default=0)) + 1, dtype=np.int32)
    lut[np.asarray(values, dtype=np.int64)] = np.arange(1, len(values) + 1)
    unknown = np.setdiff1d(np.unique(labels), [0, *values])
    if unknown.size:
        raise ValueError(f"{source}: label values {unknown.tolist()} are not among the known classes {list(values)}")
    return lut[labels]


def check_integer_labels(labels: np.ndarray, source: str) -> None:
    """Refuse NaN and fractional values in a label map stored as floats (MATLAB often does)."""
    if not np.issubdtype(labels.dtype, np.integer):
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(
                f"{source}: labels must be integers (0 = unlabelled), got {labels[r, c]} at row {r}, column {c}"
            )


def check_labels(labels: np.ndarray, num_classes: int | None, source: str) -> int:
    """Integer labels >= 0 with no empty class in 1..C; returns C."""
    check_integer_labels(labels, source)
    if labels.min(initial=0) < 0:
        raise ValueError(f"{source}: negative label {int(labels.min())} (0 = unlabelled, 1..C = classes)")
    top = int(labels.max(initial=0))
    num_classes = top if num_classes is None else num_classes
    if top > num_classes:
        raise ValueError(f"{source}: label {top} exceeds the {num_classes} classes")
    present = np.unique(labels)
    present = present[present > 0]
    num_empty = num_classes - present.size
    if num_empty:
        # the ten smallest empty classes, without enumerating 1..C (C may be a stray 2**32)
        empty = np.setdiff1d(np.arange(1, min(num_classes, present.size + 10) + 1), present)[:10].tolist()
        more = f" and {num_empty - len(empty)} more" if num_empty > len(empty) else ""
        raise ValueError(
            f"{source}: class(es) {empty}{more} have no labelled pixel; remap the labels to 1..C without gaps"
        )
    return num_classes


def validate_scene(scene: Scene, nan_bands: str = "raise") -> Scene:
    """Check shapes, wavelengths and non-finite bands; sets ``usable_bands``.

    Args:
        scene: the scene to check (modified in place and returned).
        nan_bands: ``"raise"`` (default) on a band holding NaN/inf, ``"drop"`` to exclude such bands
            (counted in ``dropped_bands`` and warned once), ``"ignore"`` to skip the scan (one pass
            over the cube; skip it for huge cubes you trust).
    """
    if scene.cube.ndim != 3:
        raise ValueError(f"{scene.source}: cube must be [H, W, B], got shape {scene.cube.shape}")
    if scene.labels.shape != scene.cube.shape[:2]:
        raise ValueError(
            f"{scene.source}: cube is {scene.cube.shape[0]}x{scene.cube.shape[1]} pixels but its label map is "
            f"{scene.labels.shape[0]}x{scene.labels.shape[1]}"
        )
    for name in ("train_labels", "test_labels"):
        other = getattr(scene, name)
        if other is not None and other.shape != scene.labels.shape:
            raise ValueError(f"{scene.source}: {name} map is {other.shape}, the scene is {scene.labels.shape}")
    wl = np.asarray(scene.wavelengths, dtype=np.float64)
    if wl.shape != (scene.num_bands,):
        raise ValueError(f"{scene.source}: {wl.size} wavelengths for a cube of {scene.num_bands} bands")
    if not np.all(np.isfinite(wl)) or np.any(np.diff(wl) <= 0):
        bad = int(np.flatnonzero(~(np.diff(wl) > 0))[0]) + 1 if wl.size > 1 else 0
        raise ValueError(
            f"{scene.source}: wavelengths must be finite and strictly increasing (nm); band {bad} is "
            f"{wl[bad]:g} after {wl[bad - 1]:g}"
        )
    scene.wavelengths = wl
    usable = np.arange(scene.num_bands)
    if nan_bands not in {"raise", "drop", "ignore"}:
        raise ValueError(f"nan_bands must be 'raise', 'drop' or 'ignore', got {nan_bands!r}")
    if nan_bands != "ignore" and np.issubdtype(scene.cube.dtype, np.floating):
        finite = np.ones(scene.num_bands, dtype=bool)
        step = max(1, (32 << 20) // max(1, scene.cube.shape[1] * scene.num_bands * scene.cube.dtype.itemsize))
        for r0 in range(0, scene.cube.shape[0], step):  # row slabs: bounded memory, one pass
            finite &= np.isfinite(scene.cube[r0 : r0 + step]).all(axis=(0, 1))
        bad = np.flatnonzero(~finite)
        if bad.size and nan_bands == "raise":
            raise ValueError(
                f"{scene.source}: band(s) {bad.tolist()[:10]} (at {np.round(wl[bad[:10]], 1).tolist()} nm) hold NaN or "
                "inf values; fix the file or pass nan_bands='drop'"
            )
        if bad.size:
            warnings.warn(
                f"{scene.source}: dropping {bad.size} band(s) with NaN/inf values: {bad.tolist()}", stacklevel=2
            )
            scene.dropped_bands = bad.tolist()
            usable = np.flatnonzero(finite)
    scene.usable_bands = usable
    return scene


# -- the synthetic default ------------------------------------------------------------------------


def shared_layout_path() -> Path:
    """Where the real Indian Pines label map lies when the shared data folder is present."""
    env = os.environ.get("VARLEN_SHARED_DATA")
    base = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"
    return base / "hyperspectral" / "Indian_pines_gt.mat"


def generate_field_layout(height: int = 145, width: int = 145, num_classes: int = 16, seed: int = 0) -> np.ndarray:
    """A field-like label map: rectangular parcels of random classes, roads unlabelled (0).

    Parcels are cut by recursive splits, so their sizes are long-tailed like real fields; every
    class gets at least one parcel.
    """
    rng = np.random.default_rng(seed)
    labels = np.zeros((height, width), dtype=np.int64)
    boxes, stack = [], [(0, 0, height, width)]
    while stack:
        r0, c0, r1, c1 = stack.pop()
        h, w = r1 - r0, c1 - c0
        if (h * w < 900 and rng.random() < 0.6) or min(h, w) < 12:
            boxes.append((r0, c0, r1, c1))
            continue
        if h >= w:
            cut = int(rng.integers(r0 + h // 4, r1 - h // 4))
            stack += [(r0, c0, cut, c1), (cut, c0, r1, c1)]
        else:
            cut = int(rng.integers(c0 + w // 4, c1 - w // 4))
            stack += [(r0, c0, r1, cut), (r0, cut, r1, c1)]
    classes = np.concatenate([np.arange(1, num_classes + 1), rng.integers(1, num_classes + 1, len(boxes))])
    classes = rng.permutation(classes[: max(len(boxes), num_classes)])
    for (r0, c0, r1, c1), cls in zip(boxes, classes, strict=False):
        if rng.random() < 0.15 and cls > num_classes // 2:
            continue  # some parcels stay unlabelled, as in real ground truth
        labels[r0 + 1 : r1 - 1, c0 + 1 : c1 - 1] = cls  # a 1-pixel unlabelled road around each parcel
    for cls in range(1, num_classes + 1):  # guarantee every class is present
        if not np.any(labels == cls):
            r0, c0, r1, c1 = boxes[cls % len(boxes)]
            labels[r0 + 1 : r1 - 1, c0 + 1 : c1 - 1] = cls
    return labels


def class_signatures(wavelengths: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """Smooth reflectance curves ``[C + 1, B]`` (row 0: background soil), vegetation-like for most classes.

    Classes come in families that share a base curve (like corn / soybean variants), so they are
    separable but not trivially: differences are a few percent of reflectance, in some bands only.
    """
    rng = np.random.default_rng(seed)
    x = (wavelengths - 400.0) / 2100.0
    red_edge = 1.0 / (1.0 + np.exp(-(wavelengths - 715.0) / 12.0))
    water = np.exp(-(((wavelengths - 1450.0) / 60.0) ** 2)) + np.exp(-(((wavelengths - 1940.0) / 70.0) ** 2))
    families = rng.integers(0, 4, num_classes + 1)
    family_base = [0.05 + 0.12 * x + 0.35 * red_edge * a - 0.15 * water * a for a in (0.2, 0.6, 0.9, 1.1)]
    curves = np.empty((num_classes + 1, wavelengths.size))
    for c in range(num_classes + 1):
        curve = family_base[families[c]].copy()
        for _ in range(3):
            centre = rng.uniform(wavelengths.min(), wavelengths.max())
            width = rng.uniform(40.0, 250.0)
            curve += rng.normal(0.0, 0.035) * np.exp(-(((wavelengths - centre) / width) ** 2))
        curve += rng.normal(0.0, 0.02) * x
        curves[c] = np.clip(curve, 0.01, None)
    curves[0] = 0.12 + 0.15 * x - 0.05 * water  # soil
    return curves


def synthesise_cube(labels: np.ndarray, wavelengths: np.ndarray, seed: int = 0) -> np.ndarray:
    """A cube ``[H, W, B]`` int16 (reflectance x 10000, like AVIRIS products) over a label map.

    Each pixel mixes its class curve with a spatially smooth share of a neighbour curve, under a
    smooth illumination field, plus band-correlated and white noise.
    """
    rng = np.random.default_rng(seed)
    num_classes = int(labels.max())
    curves = class_signatures(wavelengths, num_classes, seed + 1)
    h, w = labels.shape

    def smooth(sigma: float) -> np.ndarray:  # a unit-variance, spatially smooth random field
        f = ndimage.gaussian_filter(rng.normal(size=(h, w)), sigma)
        return f / max(float(f.std()), 1e-9)

    illum = 1.0 + 0.08 * smooth(6)
    mix = np.clip(0.15 + 0.1 * smooth(4), 0.0, 0.45)
    other = (labels + rng.integers(1, num_classes + 1, (h, w))) % (num_classes + 1)
    pure = curves[labels]  # [H, W, B]
    spectra = (1.0 - mix[..., None]) * pure + mix[..., None] * curves[other]
    spectra *= illum[..., None]
    basis = np.stack([np.sin(np.pi * k * (wavelengths - 400.0) / 2100.0) for k in range(1, 6)])
    spectra += 0.012 * rng.normal(size=(h, w, 5)) @ basis  # band-correlated noise
    spectra += 0.006 * rng.normal(size=spectra.shape)
    return np.clip(spectra * 10000.0, 0, 32767).astype(np.int16)


def synthetic_layout(layout: str = "auto", sensor: str = "aviris", num_classes: int = 16) -> tuple[np.ndarray, str]:
    """The label map of a synthetic scene and a short tag naming it (for the cube's cache file).

    Args:
        layout: ``"auto"`` (the real Indian Pines label map from the shared data folder when
            present, a generated field layout otherwise), ``"generated"``, or a label-map file.
        sensor: ``"aviris"`` (145 x 145 generated layout) or ``"rosis"`` (120 x 90).
        num_classes: classes of a generated layout.
    """
    if layout == "auto":
        layout = str(shared_layout_path()) if shared_layout_path().exists() else "generated"
    if layout == "generated":
        size = (145, 145) if sensor == "aviris" else (120, 90)
        labels = generate_field_layout(*size, num_classes=num_classes, seed=0)
        return labels, f"generated{size[0]}x{size[1]}c{num_classes}"
    labels = np.asarray(read_array(layout, ndim=2)).astype(np.int64)
    return labels, hashlib.md5(labels.tobytes()).hexdigest()[:8]


def synthetic_scene(
    root: str | Path, layout: str = "auto", sensor: str = "aviris", seed: int = 0, num_classes: int = 16
) -> tuple[Path, np.ndarray, np.ndarray]:
    """Write (once) and return the synthetic cube's cached ``.npy`` path, its labels and wavelengths.

    Args:
        root: folder for the cached cube.
        layout: see :func:`synthetic_layout`.
        sensor: ``"aviris"`` (200 bands, Indian Pines' grid) or ``"rosis"`` (103 bands, Pavia's).
        seed: generator seed.
        num_classes: classes of a generated layout.
    """
    if sensor == "aviris":
        wavelengths = aviris_wavelengths(INDIAN_PINES_REMOVED, INDIAN_PINES_CHANNELS)
    elif sensor == "rosis":
        wavelengths = rosis_wavelengths(103)
    else:
        raise ValueError(f"unknown synthetic sensor {sensor!r} (aviris or rosis)")
    labels, tag = synthetic_layout(layout, sensor, num_classes)
    path = Path(root) / f"synthetic_{sensor}_{tag}_s{seed}.npy"
    if not path.exists():
        cube = synthesise_cube(labels, wavelengths, seed)

        def fill(out, cube=cube):
            out[...] = cube

        _atomic_npy(path, cube.shape, cube.dtype, fill)
    return path, labels, wavelengths


# -- spatial splits -------------------------------------------------------------------------------


def patch_fits(shape: tuple[int, int], radius: int) -> np.ndarray:
    """Pixels whose ``(2r+1)^2`` patch lies inside the image (patches are views: no padding)."""
    h, w = shape
    ok = np.zeros(shape, dtype=bool)
    ok[radius : h - radius, radius : w - radius] = True
    return ok


def inside_territory(territory: np.ndarray, split: int, buffer: int) -> np.ndarray:
    """Pixels whose every neighbour within Chebyshev distance ``buffer`` belongs to ``split``."""
    own = territory == split
    if buffer == 0:
        return own
    return ndimage.minimum_filter(own.astype(np.uint8), size=2 * buffer + 1, mode="nearest").astype(bool)


def block_split(
    labels: np.ndarray,
    fractions: Sequence[float],
    block_size: int,
    buffer: int,
    radius: int,
    seed: int,
) -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """Spatially disjoint split of labelled pixels into blocks, stratified per class where blocks allow.

    Blocks of ``block_size`` pixels are visited in a seeded random order and each goes to the
    split whose per-class deficit (target share minus what it already holds) it reduces most. A
    pixel is kept as a centre of split ``s`` only when every pixel within ``buffer`` of it lies in
    ``s``'s blocks, and its patch fits in the image. With ``buffer >= radius`` the patch
    footprints of different splits are therefore disjoint.

    Args:
        labels: ``[H, W]`` 0 = unlabelled, 1..C.
        fractions: target share of labelled pixels per split (sums to 1).
        block_size: block side in pixels.
        buffer: margin kept free of centres at a block edge that borders another split.
        radius: patch radius (centres whose patch leaves the image are not used).
        seed: order of the blocks.

    Returns:
        (one boolean centre mask per split, territory map of split ids with -1 = no split, per
        split the labelled pixels of its blocks that are not centres, by reason: ``"border"``
        (the patch leaves the image) and ``"buffer"`` (within ``buffer`` of another split)).
    """
    if buffer < radius:
        raise ValueError(
            f"buffer {buffer} is smaller than the patch radius {radius}: train and test patches would overlap"
        )
    if block_size <= 2 * buffer:
        raise ValueError(f"block_size {block_size} must exceed twice the buffer ({buffer}), or no centre survives")
    h, w = labels.shape
    num_classes = int(labels.max())
    # int32 / int8 maps: a large scene's [H, W] temporaries stay small (they set setup's peak memory)
    nbx = -(-w // block_size)
    block = (np.arange(h, dtype=np.int32) // block_size)[:, None] * nbx + np.arange(w, dtype=np.int32) // block_size
    num_blocks = int(block[-1, -1]) + 1
    cell_dtype = np.int32 if num_blocks * (num_classes + 1) < 2**31 else np.int64
    cells = block.astype(cell_dtype, copy=False) * (num_classes + 1) + labels.astype(cell_dtype, copy=False)
    hist = np.bincount(cells.ravel(), minlength=num_blocks * (num_classes + 1)).reshape(num_blocks, -1)[:, 1:]
    del cells
    totals = hist.sum(0).astype(np.float64)
    targets = np.asarray(fractions, dtype=np.float64)[:, None] * totals[None, :]
    got = np.zeros_like(targets)
    owner = np.full(num_blocks, -1, dtype=np.int8)
    rng = np.random.default_rng(seed)
    # blocks holding a large share of a rare class go first, while every split still needs it; the
    # rest in random order. One step per block (hundreds to thousands), never per pixel.
    share = (hist / np.maximum(totals, 1.0)).max(1) + rng.uniform(0.0, 0.05, num_blocks)
    order = np.argsort(-share, kind="stable")
    for b in order[hist.sum(1)[order] > 0]:
        need = (targets - got) / np.maximum(totals, 1.0)
        s = int(np.argmax((need * hist[b]).sum(1)))
        owner[b] = s
        got[s] += hist[b]
    territory = owner[block]
    fits = patch_fits((h, w), radius)
    masks, skipped = [], []
    for s in range(len(fractions)):
        own = (territory == s) & (labels > 0)
        inside = inside_territory(territory, s, buffer)
        masks.append(own & inside & fits)
        skipped.append({"border": int((own & ~fits).sum()), "buffer": int((own & fits & ~inside).sum())})
    return masks, territory, skipped


def footprint_map(centres: np.ndarray, radius: int) -> np.ndarray:
    """Pixels covered by the ``(2r+1)^2`` patch of any centre."""
    if radius == 0:
        return centres.copy()
    return ndimage.maximum_filter(centres.astype(np.uint8), size=2 * radius + 1, mode="constant").astype(bool)


def band_statistics(cube: MappedCube | np.ndarray, centres: np.ndarray, rows_per_chunk: int | None = None):
    """Per-band mean and standard deviation ``[B]`` (float64) over the pixels where ``centres`` is True.

    Read in row slabs and merged with Chan's parallel update, so memory stays bounded (some tens of
    MB) however large the cube and the training split are. A band with zero spread gets std 1.
    """
    h, w = centres.shape
    bands = cube.shape[-1]
    step = rows_per_chunk or max(1, (8 << 20) // max(1, w * bands * 4))
    count, mean, m2 = 0, np.zeros(bands), np.zeros(bands)
    for r0 in range(0, h, step):
        rows, cols = np.nonzero(centres[r0 : r0 + step])
        if rows.size == 0:
            continue
        block = np.asarray(cube[r0 : r0 + step])[rows, cols].astype(np.float64)  # [n, B], the centres only
        n, block_mean = rows.size, block.mean(0)
        block -= block_mean
        block_m2 = np.einsum("nb,nb->b", block, block)
        delta = block_mean - mean
        total = count + n
        mean = mean + delta * n / total
        m2 = m2 + block_m2 + delta**2 * count * n / total
        count = total
    if count == 0:
        raise ValueError("no pixel to compute band statistics from")
    std = np.sqrt(m2 / count)
    return mean, np.where(std > 0, std, 1.0)


# -- the pixel dataset ----------------------------------------------------------------------------


class EpochIndices(list):
    """A batch of indices that also carries the epoch it was planned for.

    The loader hands this list to :meth:`HyperspectralPixels.__getitems__` in whichever process
    runs it (it pickles with its ``epoch``), so the band subsets of an epoch depend on
    ``(seed, epoch, index)`` only: workers need no shared state and resuming mid-epoch replays
    exactly the same bands.
    """

    def __init__(self, indices, epoch: int) -> None:
        super().__init__(indices)
        self.epoch = epoch


def evenly_spaced(usable: np.ndarray, count: int) -> np.ndarray:
    """``count`` bands spread evenly over the usable ones (all when ``count`` >= their number)."""
    if count >= usable.size:
        return usable
    return usable[np.unique(np.round(np.linspace(0, usable.size - 1, count)).astype(np.int64))]


class HyperspectralPixels(Dataset):
    """Labelled pixels of one or more scenes, each a spectrum or a patch view plus its band indices.

    The dataset keeps only what samples need: each scene's cube (a :class:`MappedCube`, which
    pickles as its path, so a worker never receives a copy of the cube), wavelengths, usable bands
    and statistics, and one row per sample. Label maps stay with the DataModule.

    Band sets:
        * ``band_counts`` given (training with random subsets): sample ``i`` always has
          ``band_counts[i]`` bands (so ``lengths`` is known up front and the sampler's plan keeps
          its size every epoch), and *which* bands is drawn from ``(seed, epoch, i)``: new bands
          every epoch, identical after a resume, identical in any worker.
        * otherwise: the fixed per-scene band list ``fixed_bands[scene]``.

    Args:
        scenes: validated scenes.
        scene_ids, rows, cols, labels: one entry per sample (labels 0-based, offset per scene).
        radius: patch radius (0 = spectra).
        mean, std: per-scene ``[B]`` normalisation statistics (from train pixels).
        band_counts: per-sample band counts for random subsets, or None.
        fixed_bands: per-scene band index arrays when ``band_counts`` is None.
        seed: base seed of the band draws.
    """

    def __init__(
        self,
        scenes: Sequence[Scene],
        scene_ids: np.ndarray,
        rows: np.ndarray,
        cols: np.ndarray,
        labels: np.ndarray,
        radius: int,
        mean: Sequence[np.ndarray],
        std: Sequence[np.ndarray],
        band_counts: np.ndarray | None = None,
        fixed_bands: Sequence[np.ndarray] | None = None,
        seed: int = 0,
    ) -> None:
        if band_counts is None and fixed_bands is None:
            raise ValueError("give band_counts (random subsets) or fixed_bands")
        self.cubes = [scene.cube for scene in scenes]
        self.usable_bands = [np.asarray(scene.usable_bands, dtype=np.int64) for scene in scenes]
        self.wavelengths = [np.asarray(scene.wavelengths, dtype=np.float32) for scene in scenes]
        # one row per sample, int32: the per-sample tables are the dataset's only memory that grows
        # with the scene (a 1.5 GiB cube has about a million training pixels)
        self.scene_ids = np.asarray(scene_ids, dtype=np.int32)
        self.rows = np.asarray(rows, dtype=np.int32)
        self.cols = np.asarray(cols, dtype=np.int32)
        self.labels = np.asarray(labels, dtype=np.int32)
        self.radius = int(radius)
        self.mean = [np.asarray(m, dtype=np.float32) for m in mean]
        self.std = [np.asarray(s, dtype=np.float32) for s in std]
        self.band_counts = None if band_counts is None else np.asarray(band_counts, dtype=np.int32)
        self.fixed_bands = None if fixed_bands is None else [np.asarray(b, dtype=np.int64) for b in fixed_bands]
        self.seed = int(seed)
        self.epoch = 0  # used by plain ``dataset[i]``; batches from the loader carry their own
        if self.band_counts is not None:
            self.lengths = self.band_counts  # read-only for everyone: no copy
        else:
            self.lengths = np.array([len(b) for b in self.fixed_bands], dtype=np.int32)[self.scene_ids]

    def __len__(self) -> int:
        return len(self.labels)

    def bands_of(self, i: int, epoch: int) -> np.ndarray:
        """Sorted band indices (into the cube) that sample ``i`` uses in ``epoch``."""
        s = self.scene_ids[i]
        if self.band_counts is None:
            return self.fixed_bands[s]
        usable = self.usable_bands[s]
        rng = np.random.default_rng((self.seed, epoch, int(i)))
        return np.sort(usable[rng.permutation(usable.size)[: self.band_counts[i]]])

    def sample(self, i: int, epoch: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} pixels")
        s = int(self.scene_ids[i])
        r, c, k = int(self.rows[i]), int(self.cols[i]), self.radius
        cube = self.cubes[s]
        patch = cube[r, c] if k == 0 else cube[r - k : r + k + 1, c - k : c + k + 1]  # a view, nothing copied
        bands = self.bands_of(i, epoch)
        return {
            "index": i,
            "patch": patch,
            "bands": bands,
            "wavelengths": self.wavelengths[s][bands],
            "mean": self.mean[s][bands],
            "std": self.std[s][bands],
            "label": int(self.labels[i]),
            "scene": s,
            "coords": (r, c),
        }

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.sample(i, self.epoch)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        epoch = getattr(indices, "epoch", self.epoch)
        return [self.sample(i, epoch) for i in indices]


def collate_hyperspectral(samples: Sequence[dict[str, Any]], pad_to_multiple_of: int | None = None) -> dict[str, Any]:
    """Pad a list of pixel samples to the batch's largest band count.

    Only the selected bands of each patch are copied (one gather per sample straight into the
    preallocated batch array) and normalised there in place: no batch-sized temporaries.

    Returns:
        ``spectra`` float32 ``[B, K, P, P]`` (``[B, K]`` for spectra, P = 1), zero where padded;
        ``wavelengths`` float32 ``[B, K]`` in nm (0 where padded); ``bands`` int64 ``[B, K]``
        (-1 where padded); ``band_mask`` bool ``[B, K]``, **True = real band** (keep convention;
        use :func:`varlen.batching.blocked_mask` for attention); ``labels`` int64 ``[B]``
        (0-based classes); ``scene``, ``index`` int64 ``[B]``; ``coords`` int64 ``[B, 2]``.
    """
    counts = np.array([len(s["bands"]) for s in samples], dtype=np.int64)
    width = round_up(int(counts.max()), pad_to_multiple_of)
    spatial = samples[0]["patch"].shape[:-1]
    per_band = (-1,) + (1,) * len(spatial)
    out = np.zeros((len(samples), width, *spatial), dtype=np.float32)
    for i, s in enumerate(samples):  # one gather per sample (its bands of its patch view), normalised in place
        row = out[i, : counts[i]]
        row[...] = np.moveaxis(np.take(s["patch"], s["bands"], axis=-1), -1, 0)
        row -= s["mean"].reshape(per_band)
        row /= s["std"].reshape(per_band)
    lengths = torch.from_numpy(counts)
    mask = lengths_to_mask(lengths, width)
    spectra = torch.from_numpy(out)
    return {
        "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
        "spectra": spectra,
        "wavelengths": pad_sequences(
            [s["wavelengths"] for s in samples], 0.0, pad_to_multiple_of, torch.float32
        ).values,
        "bands": pad_sequences([s["bands"] for s in samples], -1, pad_to_multiple_of, torch.long).values,
        "band_mask": mask,
        "lengths": lengths,
        "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
        "scene": torch.tensor([s["scene"] for s in samples], dtype=torch.long),
        "coords": torch.tensor([s["coords"] for s in samples], dtype=torch.long),
    }
