"""Sensors, their nominal band wavelengths, and the public scenes (files, URLs, checksums, classes).

The public `.mat` scenes ship no wavelength table: the centres here are the nominal grids of
their sensors with the published band removals applied, which is what the scenes imply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AVIRIS_NUM_BANDS",
    "EHU",
    "INDIAN_PINES_CHANNELS",
    "INDIAN_PINES_CLASSES",
    "INDIAN_PINES_REMOVED",
    "PAVIA_U_CLASSES",
    "ROSIS_RANGE",
    "SALINAS_CLASSES",
    "SALINAS_REMOVED",
    "SCENES",
    "SENSORS",
    "SYNTHETIC",
    "RemoteFile",
    "SceneInfo",
    "aviris_wavelengths",
    "rosis_wavelengths",
]

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
    """Nominal AVIRIS centres in nm: `channels` over 400-2500 nm, `removed` (0-based) left out."""
    full = np.linspace(400.0, 2500.0, channels)
    return np.delete(full, np.asarray(removed, dtype=np.int64))


def rosis_wavelengths(num_bands: int = 103) -> np.ndarray:
    """Nominal ROSIS centre wavelengths in nm for `num_bands` bands."""
    return np.linspace(*ROSIS_RANGE, num_bands)


SENSORS = {"aviris": aviris_wavelengths, "rosis": rosis_wavelengths}

#: the synthetic scenes: name -> (sensor, number of classes of a generated layout)
SYNTHETIC = {"synthetic": ("aviris", 16), "synthetic_rosis": ("rosis", 9)}


# -- the public scenes ----------------------------------------------------------------------------

EHU = "https://www.ehu.eus/ccwintco/uploads"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a public scene: its name, URL and (when known) checksum, `"md5:<hex>"`."""

    filename: str
    url: str
    checksum: str | None = None


@dataclass(frozen=True)
class SceneInfo:
    """What is known about a public scene: files, .mat variables, sensor grid and classes.

    `label_values` lists the label-map values of the classes in order (Salinas-A keeps
    Salinas' class numbers 1, 10-14); class `i` of the scene is `label_values[i]`. Empty:
    the values are 1..C.
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
#: Indian Pines and Salinas-A label maps were computed on the files in `shared/data/hyperspectral`;
#: the others are the MD5s two independent projects publish for the same files (not verified
#: here: no network). `None` = unknown: the download is kept, with a warning that it was not
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
