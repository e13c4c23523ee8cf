"""The embedded default: a synthetic cube over a real (or generated) label map, written once and memory-mapped.

Classes are smooth reflectance curves in families that share a base curve (like corn / soybean
variants), mixed with neighbours under a smooth illumination field plus band-correlated noise:
separable, but not trivially. The cube is int16 (reflectance x 10000, like AVIRIS products) and
is cached as an `.npy` named by `varlen.storage.cache.cache_key` of the layout, sensor, seed and
`SYNTHETIC_VERSION`; an unreadable cache is rebuilt with a warning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import ndimage

from varlen.datasets.hyperspectral.readers import complete_npy, read_labels, write_npy
from varlen.datasets.hyperspectral.scenes import INDIAN_PINES_CHANNELS, INDIAN_PINES_REMOVED, SENSORS
from varlen.storage.cache import array_hash, cache_key
from varlen.storage.paths import data_root

__all__ = [
    "SYNTHETIC_VERSION",
    "class_signatures",
    "generate_field_layout",
    "shared_layout_path",
    "synthesise_cube",
    "synthetic_layout",
    "synthetic_scene",
    "synthetic_wavelengths",
]

#: format version of the synthetic cube (part of its cache key): bump it when the generator changes
SYNTHETIC_VERSION = "hyperspectral-synthetic-1"


def shared_layout_path() -> Path:
    """Where the real Indian Pines label map lies when the data folder (`$VARLEN_DATA`) has it."""
    return data_root() / "hyperspectral" / "Indian_pines_gt.mat"


#: parcels every class gets in a generated layout: one for each split at least
PARCELS_PER_CLASS = 3


def generate_field_layout(height: int = 145, width: int = 145, num_classes: int = 16, seed: int = 0) -> np.ndarray:
    """A field-like label map: rectangular parcels of random classes, roads unlabelled (0).

    Parcels are cut by recursive splits, so their sizes are long-tailed like real fields; every
    class gets at least `PARCELS_PER_CLASS` parcels (as the parcels allow), so that a
    spatial split can give each of train, validation and test a field of every class.
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
    guaranteed = np.tile(np.arange(1, num_classes + 1), PARCELS_PER_CLASS)
    classes = np.concatenate([guaranteed, rng.integers(1, num_classes + 1, len(boxes))])[: max(len(boxes), num_classes)]
    kept = np.arange(len(classes)) < len(guaranteed)  # the guaranteed parcels are never left unlabelled
    order = rng.permutation(len(classes))
    for (r0, c0, r1, c1), cls, keep in zip(boxes, classes[order], kept[order], strict=False):
        if not keep and rng.random() < 0.15 and cls > num_classes // 2:
            continue  # some parcels stay unlabelled, as in real ground truth
        labels[r0 + 1 : r1 - 1, c0 + 1 : c1 - 1] = cls  # a 1-pixel unlabelled road around each parcel
    for cls in range(1, num_classes + 1):  # guarantee every class is present
        if not np.any(labels == cls):
            r0, c0, r1, c1 = boxes[cls % len(boxes)]
            labels[r0 + 1 : r1 - 1, c0 + 1 : c1 - 1] = cls
    return labels


def class_signatures(wavelengths: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """Smooth reflectance curves `[C + 1, B]` (row 0: background soil), vegetation-like for most classes."""
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
    """A cube `[H, W, B]` int16 (reflectance x 10000) over a label map.

    Each pixel mixes its class curve with a spatially smooth share of a neighbour curve, under a
    smooth illumination field, plus band-correlated and white noise.
    """
    rng = np.random.default_rng(seed)
    num_classes = int(labels.max())
    curves = class_signatures(wavelengths, num_classes, seed + 1)  # the generator's own seeds, kept for its figures
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


def synthetic_wavelengths(sensor: str) -> np.ndarray:
    """200 bands on Indian Pines' AVIRIS grid, or 103 on Pavia's ROSIS grid."""
    if sensor == "aviris":
        return SENSORS["aviris"](INDIAN_PINES_REMOVED, INDIAN_PINES_CHANNELS)
    if sensor == "rosis":
        return SENSORS["rosis"](103)
    raise ValueError(f"unknown synthetic sensor {sensor!r} (aviris or rosis)")


def synthetic_layout(layout: str = "auto", sensor: str = "aviris", num_classes: int = 16) -> tuple[np.ndarray, str]:
    """The label map of a synthetic scene and a short tag naming it (for the cube's cache key).

    Args:
        layout: `"auto"` (the real Indian Pines label map from the shared data folder when
            present, a generated field layout otherwise), `"generated"`, or a label-map file.
        sensor: `"aviris"` (145 x 145 generated layout) or `"rosis"` (120 x 90).
        num_classes: classes of a generated layout.
    """
    if layout == "auto":
        layout = str(shared_layout_path()) if shared_layout_path().exists() else "generated"
    if layout == "generated":
        size = (145, 145) if sensor == "aviris" else (120, 90)
        labels = generate_field_layout(*size, num_classes=num_classes, seed=0)
        return labels, f"generated-{array_hash(labels)}"
    labels = np.asarray(read_labels(layout, what="synthetic layout")).astype(np.int64)
    return labels, array_hash(labels)


def synthetic_scene(
    cache_dir: str | Path, layout: str = "auto", sensor: str = "aviris", seed: int = 0, num_classes: int = 16
) -> tuple[Path, np.ndarray, np.ndarray]:
    """Write (once) and return the synthetic cube's cached `.npy` path, its labels and wavelengths.

    Args:
        cache_dir: folder for the cached cube.
        layout: see `synthetic_layout`.
        sensor: `"aviris"` (200 bands, Indian Pines' grid) or `"rosis"` (103 bands, Pavia's).
        seed: generator seed.
        num_classes: classes of a generated layout.
    """
    wavelengths = synthetic_wavelengths(sensor)
    labels, tag = synthetic_layout(layout, sensor, num_classes)
    key = cache_key(sensor, tag, seed, version=SYNTHETIC_VERSION)
    path = Path(cache_dir) / f"synthetic_{sensor}_{key}.npy"
    if not complete_npy(path, (*labels.shape, wavelengths.size)):
        cube = synthesise_cube(labels, wavelengths, seed)

        def fill(out: np.ndarray) -> None:
            out[...] = cube

        write_npy(path, cube.shape, cube.dtype, fill)
    return path, labels, wavelengths
