# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Hyperspectral scenes: readers, downloads, the synthetic default, the pixel dataset and its collate.

A *scene* is a cube `[H, W, B]` (a `MappedCube`: memory-mapped, never loaded
whole, and pickled to loader workers as its path only), a label map `[H, W]` (0 = unlabelled)
and the centre wavelength of every band in nm. A *sample* is one labelled pixel: its spectrum, or
the `P x P` patch around it, with the band indices it will use. A batch is gathered at once: its
band lists as `Ragged` rows (`.bands`: fixed per scene, or drawn per (seed, epoch, index)
without a loop), then one read of the memory-mapped cube per scene present for every patch x its
bands (`.gather`); the `HyperspectralCollator` names the fields.

Public entry points (what a DataModule of one's own is built from): `SCENES` (the public
scenes), `SceneSource`, `prepare_scene` (files, downloads, caches: once per node) and
`open_scene` (-> a checked `Scene`); the readers `open_cube` and
`read_labels` of one's own files; `synthetic_scene` (the embedded default);
`PixelSplit` (spatially disjoint patch centres); `band_statistics` (train-pixel
normalization); `HyperspectralPixels` and `HyperspectralCollator`.

Modules (helpers stay in them): `.scenes` (sensors, wavelengths, the public `SCENES`),
`.readers` (`.mat` v5 / v7.3, ENVI, `.npy`; the `.mat` -> `.npy` cache), `.labels`
(label-map checks), `.source` (`SceneSource`, `prepare_scene`, `open_scene`:
files, downloads, checks), `.splits` (`PixelSplit`), `.synthetic` (the embedded
default), `.dataset` (`HyperspectralPixels`, band sets and statistics), `.bands`
(a batch's band lists), `.gather` (one read of the cube per batch,
`PixelBatch`), `.collate`.

Spatial splits come from `varlen.prepare.splits.spatial_block_split`: a random pixel split puts
neighbouring pixels, whose patches overlap, on both sides, and published accuracies near 99%
fall to about 80% on disjoint splits.
"""

from varlen._extras import require

require("hyperspectral")  # first: names the extra when its packages are missing

from varlen.datasets.hyperspectral.collate import HyperspectralCollator
from varlen.datasets.hyperspectral.dataset import HyperspectralPixels, band_statistics
from varlen.datasets.hyperspectral.readers import open_cube, read_labels
from varlen.datasets.hyperspectral.scenes import SCENES
from varlen.datasets.hyperspectral.source import Scene, SceneSource, open_scene, prepare_scene
from varlen.datasets.hyperspectral.splits import PixelSplit
from varlen.datasets.hyperspectral.synthetic import synthetic_scene

__all__ = [
    "SCENES",
    "HyperspectralCollator",
    "HyperspectralPixels",
    "PixelSplit",
    "Scene",
    "SceneSource",
    "band_statistics",
    "open_cube",
    "open_scene",
    "prepare_scene",
    "read_labels",
    "synthetic_scene",
]
