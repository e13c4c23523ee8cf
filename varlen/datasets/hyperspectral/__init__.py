# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Hyperspectral scenes: readers, downloads, the synthetic default, the pixel dataset and its collate.

A *scene* is a cube ``[H, W, B]`` (a :class:`MappedCube`: memory-mapped, never loaded whole, and
pickled to loader workers as its path only), a label map ``[H, W]`` (0 = unlabelled) and the
centre wavelength of every band in nm. A *sample* is one labelled pixel: its spectrum, or the
``P x P`` patch around it, with the band indices it will use. A batch is gathered at once: its
band lists as ``Ragged`` rows (:mod:`.bands`: fixed per scene, or drawn per (seed, epoch, index)
without a loop), then one read of the memory-mapped cube per scene present for every patch x its
bands (:mod:`.gather`); the :class:`HyperspectralCollator` names the fields.

Modules: :mod:`.scenes` (sensors, wavelengths, the public :data:`SCENES`), :mod:`.readers`
(``.mat`` v5 / v7.3, ENVI, ``.npy``; the ``.mat`` -> ``.npy`` cache), :mod:`.labels` (label-map
checks), :mod:`.source` (:class:`SceneSource`, :func:`prepare_scene`, :func:`open_scene`:
files, downloads, checks), :mod:`.synthetic` (the embedded default), :mod:`.dataset`
(:class:`HyperspectralPixels`, band sets and statistics), :mod:`.bands` (a batch's band lists),
:mod:`.gather` (one read of the cube per batch, :class:`PixelBatch`), :mod:`.collate`.

Spatial splits come from :func:`varlen.splits.spatial_block_split`: a random pixel split puts
neighbouring pixels, whose patches overlap, on both sides, and published accuracies near 99%
fall to about 80% on disjoint splits.
"""

from varlen._extras import require

require("hyperspectral")  # first: names the extra when its packages are missing

from varlen.datasets.hyperspectral.collate import HyperspectralCollator
from varlen.datasets.hyperspectral.dataset import (
    EpochIndices,
    HyperspectralPixels,
    band_statistics,
    random_band_counts,
    select_bands,
)
from varlen.datasets.hyperspectral.gather import PixelBatch
from varlen.datasets.hyperspectral.labels import known_labels
from varlen.datasets.hyperspectral.readers import (
    MAT_CACHE_VERSION,
    MappedCube,
    open_cube,
    read_array,
    read_labels,
    read_wavelengths,
)
from varlen.datasets.hyperspectral.scenes import (
    EHU,
    SCENES,
    SENSORS,
    RemoteFile,
    SceneInfo,
    aviris_wavelengths,
    rosis_wavelengths,
)
from varlen.datasets.hyperspectral.source import (
    Scene,
    SceneSource,
    open_scene,
    prepare_scene,
    scene_class_names,
    validate_scene,
)
from varlen.datasets.hyperspectral.synthetic import generate_field_layout, shared_layout_path, synthetic_scene

__all__ = [
    "EHU",
    "MAT_CACHE_VERSION",
    "SCENES",
    "SENSORS",
    "EpochIndices",
    "HyperspectralCollator",
    "HyperspectralPixels",
    "MappedCube",
    "PixelBatch",
    "RemoteFile",
    "Scene",
    "SceneInfo",
    "SceneSource",
    "aviris_wavelengths",
    "band_statistics",
    "generate_field_layout",
    "known_labels",
    "open_cube",
    "open_scene",
    "prepare_scene",
    "random_band_counts",
    "read_array",
    "read_labels",
    "read_wavelengths",
    "rosis_wavelengths",
    "scene_class_names",
    "select_bands",
    "shared_layout_path",
    "synthetic_scene",
    "validate_scene",
]
