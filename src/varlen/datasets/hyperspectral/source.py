"""Scenes: where their files are, how to get them, and opening them as one checked `Scene`.

`SceneSource` describes one scene (a public one, a synthetic one, or the user's own
files). `prepare_scene` does the slow one-off work (downloads, the `.mat` -> `.npy`
conversion, writing the synthetic cube): a DataModule's `prepare_data`. `open_scene`
maps and checks what it left (a DataModule's `build`), doing that work itself only when it was
not done (a user who calls `setup` alone).

Bad input: a missing file raises `DatasetNotFoundError` (what, where, how
to get it), a file that cannot be used `DataError` naming it; a band
holding NaN/inf and a label value that is no class go through `report.bad`: raised under
`on_bad="raise"`, dropped (the band) or left unlabelled (the value's pixels) and counted under
`"skip"`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from varlen.datasets.download import download_url
from varlen.datasets.hyperspectral.labels import check_classes_present, count_classes, known_labels
from varlen.datasets.hyperspectral.readers import MappedCube, open_cube, read_labels, read_wavelengths
from varlen.datasets.hyperspectral.scenes import SCENES, SENSORS, SYNTHETIC, RemoteFile
from varlen.datasets.hyperspectral.synthetic import synthetic_layout, synthetic_scene
from varlen.errors import DataError, DatasetNotFoundError
from varlen.prepare.report import DataReport

__all__ = [
    "KNOWN_SCENES",
    "Scene",
    "SceneSource",
    "check_bands",
    "fetch_scene_file",
    "open_scene",
    "prepare_scene",
    "scene_class_names",
    "scene_files",
    "validate_scene",
]

KNOWN_SCENES = (*SCENES, *SYNTHETIC, "custom")


@dataclass
class Scene:
    """One cube, its label map and band wavelengths, checked.

    Attributes:
        name: short name (used in class names and messages).
        cube: `[H, W, B]` read-only, a `MappedCube` (or any array, e.g. in memory).
        labels: `[H, W]` int32 class ids, 0 = unlabelled, 1..C the scene's classes.
        wavelengths: `[B]` centre wavelengths in nm, strictly increasing.
        class_names: C names.
        source: where the cube came from (for messages).
        usable_bands: bands that passed the value check (all, unless NaN/inf bands were dropped).
        train_labels / test_labels: optional external maps (0 = not in that split).
        dropped_bands: bands left out under `on_bad="skip"` because they hold NaN/inf values.
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


@dataclass(frozen=True)
class SceneSource:
    """Where one scene comes from (see `HyperspectralDataModule` for the arguments).

    Attributes:
        name: a public scene (`SCENES`), `synthetic`,
            `synthetic_rosis` or `custom` (the `cube_path` / `labels_path` files).
        root: folder of the public scenes' files (`root/<name>/`).
        cache_dir: where `.mat` cubes are converted and the synthetic cube is written
            (default `root/cache`).
        download: fetch a missing public scene from the EHU site.
        train_map, test_map: optional external train / test label maps.
    """

    name: str
    root: str | Path = "data_cache/hyperspectral"
    cache_dir: str | Path | None = None
    download: bool = False
    cube_path: str | None = None
    labels_path: str | None = None
    cube_key: str | None = None
    labels_key: str | None = None
    wavelengths: tuple[float, ...] | None = None
    sensor: str | None = None
    removed_bands: tuple[int, ...] = ()
    layout: str = "auto"
    train_map: str | None = None
    test_map: str | None = None

    def __post_init__(self) -> None:
        if self.name not in KNOWN_SCENES:
            raise ValueError(f"unknown scene {self.name!r}; known: {sorted(KNOWN_SCENES)}")
        if self.name == "custom" and (self.cube_path is None or self.labels_path is None):
            raise ValueError("the custom scene needs cube_path and labels_path")
        if self.test_map is not None and self.train_map is None:
            raise ValueError("test_map needs train_map")
        if self.sensor is not None and self.sensor not in SENSORS:
            raise ValueError(f"unknown sensor {self.sensor!r}; known: {sorted(SENSORS)}")

    @property
    def cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(self.root) / "cache"

    @property
    def synthetic(self) -> tuple[str, int, str] | None:
        """(sensor, classes of a generated layout, layout) of a synthetic scene, else None."""
        if self.name not in SYNTHETIC:
            return None
        sensor, num_classes = SYNTHETIC[self.name]
        return sensor, num_classes, self.layout if sensor == "aviris" else "generated"  # no real ROSIS layout


def scene_class_names(source: SceneSource) -> list[str]:
    """The scene's class names, from the scene table or its label map (never the cube)."""
    if source.name in SCENES:
        return list(SCENES[source.name].class_names)
    if source.synthetic:
        sensor, num_classes, layout = source.synthetic
        labels, label_file = synthetic_layout(layout, sensor, num_classes)[0], f"{source.name} layout"
    else:
        labels, label_file = read_labels(source.labels_path, source.labels_key, "label map"), source.labels_path
    return [f"class_{c}" for c in range(1, count_classes(labels, str(label_file)) + 1)]


def fetch_scene_file(remote: RemoteFile, folder: str | Path) -> Path:
    """`folder/<filename>` of a public scene, downloaded (and verified, when its checksum is known) if needed.

    A file already there is kept when it verifies, or when no checksum is known (it cannot be
    checked, and fetching it again would not make it any more trustworthy).

    Raises:
        DownloadError: offline, an HTTP error or a checksum mismatch, naming the URL and the file.
    """
    path = Path(folder) / remote.filename
    if path.is_file() and remote.checksum is None:
        return path
    return download_url(remote.url, path, remote.checksum)


def _how_to_get(source: SceneSource) -> str:
    """The `fetch` part of a not-found error: the download for a public scene, the argument for one's own."""
    if source.name in SCENES:
        info, folder = SCENES[source.name], Path(source.root) / source.name
        return f"pass download=True, or download {info.cube.url} and {info.labels.url} into {folder}/"
    return "check cube_path (a .mat, .npy or ENVI .hdr cube [H, W, B], read relative to the working directory)"


def scene_files(source: SceneSource, verify: bool = False) -> tuple[Path, Path]:
    """The cube and label files of a public or custom scene; a missing public one is downloaded with `download`.

    Args:
        source: the scene.
        verify: check files already there against their checksums (`prepare_data`) instead of
            only fetching missing ones.
    """
    if source.name not in SCENES:
        return Path(source.cube_path), Path(source.labels_path)
    info = SCENES[source.name]
    folder = Path(source.root) / source.name
    if source.download:
        for remote in (info.cube, info.labels):
            if verify or not (folder / remote.filename).is_file():
                fetch_scene_file(remote, folder)
    missing = [r.filename for r in (info.cube, info.labels) if not (folder / r.filename).is_file()]
    if missing:
        raise DatasetNotFoundError(
            f"scene {source.name!r} ({', '.join(missing)})",
            folder,
            _how_to_get(source),
        )
    return folder / info.cube.filename, folder / info.labels.filename


def prepare_scene(source: SceneSource) -> None:
    """The slow one-off work: downloads (verified), the `.mat` conversion, the synthetic cube."""
    if source.synthetic:
        sensor, num_classes, layout = source.synthetic
        synthetic_scene(source.cache, layout, sensor, seed=0, num_classes=num_classes)
        return
    cube_path, _ = scene_files(source, verify=True)
    key = SCENES[source.name].cube_key if source.name in SCENES else source.cube_key
    open_cube(cube_path, key, source.cache, _how_to_get(source))


def _custom_wavelengths(source: SceneSource, num_bands: int) -> np.ndarray:
    if source.wavelengths is not None:
        return np.asarray(source.wavelengths, dtype=np.float64)
    from_file = read_wavelengths(source.cube_path)
    if from_file is not None:
        return from_file
    if source.sensor is None:
        raise DataError(
            f"{source.cube_path}: no wavelengths: pass wavelengths=[...] (nm) or sensor='aviris'/'rosis' "
            "(with removed_bands if channels were removed)"
        )
    if source.sensor == "aviris":
        return SENSORS["aviris"](source.removed_bands)
    return SENSORS["rosis"](num_bands)


def _external_map(path: str, num_classes: int, shape: tuple[int, ...], report: DataReport) -> np.ndarray:
    labels = read_labels(path, None, "external label map")
    if labels.shape != tuple(shape):
        raise DataError(
            f"{path}: the map is {labels.shape[0]}x{labels.shape[1]} pixels, the cube {shape[0]}x{shape[1]}"
        )
    return known_labels(labels, range(1, num_classes + 1), path, report)


def open_scene(
    source: SceneSource,
    report: DataReport | None = None,
    check_values: bool = True,
    class_names: list[str] | None = None,
) -> Scene:
    """Map and check one scene (after `prepare_scene`; it does that work itself when it was not done).

    Args:
        source: the scene.
        report: where bad bands and label values go (default: a raising one).
        check_values: scan the cube for NaN/inf bands (one pass; skip it for huge cubes you trust).
        class_names: the scene's classes when already known (default: `scene_class_names`).
    """
    report = report if report is not None else DataReport()
    names = class_names if class_names is not None else scene_class_names(source)
    values: tuple[int, ...] = tuple(range(1, len(names) + 1))
    if source.synthetic:
        sensor, num_classes, layout = source.synthetic
        path, labels, wavelengths = synthetic_scene(source.cache, layout, sensor, seed=0, num_classes=num_classes)
        cube, cube_file, label_file = MappedCube(path), path, f"{source.name} layout"
    elif source.name in SCENES:
        info = SCENES[source.name]
        cube_file, label_file = scene_files(source)
        cube = open_cube(cube_file, info.cube_key, source.cache, _how_to_get(source))
        labels = read_labels(label_file, info.labels_key)
        values, wavelengths = info.label_values or values, np.asarray(info.wavelengths)
    else:
        cube_file, label_file = source.cube_path, source.labels_path
        cube = open_cube(cube_file, source.cube_key, source.cache, _how_to_get(source))
        labels = read_labels(label_file, source.labels_key)
        wavelengths = _custom_wavelengths(source, cube.shape[-1])
    labels = known_labels(labels, values, str(label_file), report)
    check_classes_present(labels, len(names), str(label_file))
    scene = Scene(source.name, cube, labels, wavelengths, names, source=str(cube_file))
    if source.train_map:
        scene.train_labels = _external_map(source.train_map, len(names), cube.shape[:2], report)
    if source.test_map:
        scene.test_labels = _external_map(source.test_map, len(names), cube.shape[:2], report)
    return validate_scene(scene, report, check_values)


def validate_scene(scene: Scene, report: DataReport | None = None, check_values: bool = True) -> Scene:
    """Check shapes, wavelengths and (with `check_values`) non-finite bands; sets `usable_bands`.

    Args:
        scene: the scene to check (modified in place and returned).
        report: where a NaN/inf band goes (default: a raising one).
        check_values: scan the cube for NaN/inf (one pass over it; skip it for huge cubes you trust).
    """
    report = report if report is not None else DataReport()
    if scene.cube.ndim != 3:
        raise DataError(f"{scene.source}: cube must be [H, W, B], got shape {scene.cube.shape}")
    if scene.labels.shape != scene.cube.shape[:2]:
        raise DataError(
            f"{scene.source}: cube is {scene.cube.shape[0]}x{scene.cube.shape[1]} pixels but its label map is "
            f"{scene.labels.shape[0]}x{scene.labels.shape[1]}"
        )
    for name in ("train_labels", "test_labels"):
        other = getattr(scene, name)
        if other is not None and other.shape != scene.labels.shape:
            raise DataError(f"{scene.source}: its {name} map is {other.shape}, the scene {scene.labels.shape}")
    wl = np.asarray(scene.wavelengths, dtype=np.float64)
    if wl.shape != (scene.num_bands,):
        raise DataError(f"{scene.source}: {wl.size} wavelengths for a cube of {scene.num_bands} bands")
    if not np.all(np.isfinite(wl)) or np.any(np.diff(wl) <= 0):
        bad = int(np.flatnonzero(~(np.diff(wl) > 0))[0]) + 1 if wl.size > 1 else 0
        raise DataError(
            f"{scene.source}: wavelengths must be finite and strictly increasing (nm); band {bad} is "
            f"{wl[bad]:g} after {wl[bad - 1]:g}"
        )
    scene.wavelengths = wl
    scene.usable_bands = check_bands(scene, report) if check_values else np.arange(scene.num_bands)
    return scene


def check_bands(scene: Scene, report: DataReport) -> np.ndarray:
    """The bands without NaN/inf values; each bad band goes through `report.bad(..., item="band")`.

    Under `on_bad="raise"` one error names every bad band and its wavelength; under `"skip"`
    each is dropped (listed in `scene.dropped_bands`) and counted. One pass over the cube in
    row slabs (bounded memory); integer cubes cannot hold NaN and are not read.
    """
    if not np.issubdtype(scene.cube.dtype, np.floating):
        return np.arange(scene.num_bands)
    finite = np.ones(scene.num_bands, dtype=bool)
    step = max(1, (32 << 20) // max(1, scene.cube.shape[1] * scene.num_bands * scene.cube.dtype.itemsize))
    for r0 in range(0, scene.cube.shape[0], step):
        finite &= np.isfinite(scene.cube[r0 : r0 + step]).all(axis=(0, 1))
    bad = np.flatnonzero(~finite)
    if bad.size and report.on_bad == "raise":  # one message with every bad band, not the first alone
        report.bad(
            scene.source,
            f"band(s) {bad.tolist()[:20]} (at {np.round(scene.wavelengths[bad[:20]], 1).tolist()} nm) hold NaN "
            "or inf values",
            item="band",
        )
    for b in bad:
        report.bad(f"{scene.source}: band {b} ({scene.wavelengths[b]:.1f} nm)", "holds NaN or inf values", item="band")
    scene.dropped_bands = bad.tolist()
    if bad.size == scene.num_bands:
        raise DataError(f"{scene.source}: every band holds NaN or inf values; nothing is left to read")
    return np.flatnonzero(finite)
