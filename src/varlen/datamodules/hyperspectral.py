"""Hyperspectral pixel classification with random band subsets and spatially disjoint splits.

The sampler batches by *band count*: a training sample's length is the number of bands it will
carry. How random band subsets stay compatible with a fixed batch plan and exact resumption:

* each training pixel gets its band count `k_i` once, from the named stream
  `stream(seed, "band counts")`, so `lengths` is known up front and is the same every epoch
  (the sampler's plan, and `len(loader)`, never change);
* *which* `k_i` bands it gets is drawn from `(seed, epoch, i)`: the train batch sampler
  (`EpochBatchSampler`) hands each batch to the dataset as an
  `EpochIndices` list that carries its epoch, so every worker, every
  rank and a resumed run draw the same bands for the same (epoch, sample), and a new epoch draws
  new ones.

Evaluation uses a fixed, configurable band set (all usable bands, `k` evenly spaced ones, or an
explicit list), so validation numbers are comparable between epochs and runs. Files are opened
and checked in `varlen.datasets.hyperspectral`; this module wires scenes, splits, sampler
and collate.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from varlen.batching import BucketBatchSampler, EpochBatchSampler
from varlen.datamodules.arguments import keep
from varlen.datamodules.base import _OneSource
from varlen.datamodules.weighting import check_sample_weights
from varlen.datasets.hyperspectral.collate import HyperspectralCollator
from varlen.datasets.hyperspectral.dataset import HyperspectralPixels, band_statistics, random_band_counts, select_bands
from varlen.datasets.hyperspectral.source import Scene, SceneSource, open_scene, prepare_scene, scene_class_names
from varlen.datasets.hyperspectral.splits import PixelSplit
from varlen.errors import DataError

__all__ = ["HyperspectralDataModule"]


def _check_band_arguments(min_bands: int | None, max_bands: int | None, train_bands: list[int] | None) -> None:
    if min_bands is not None and min_bands < 1:
        raise ValueError(f"min_bands must be >= 1, got {min_bands}")
    if max_bands is not None and min_bands is None:
        raise ValueError("max_bands needs min_bands: random band subsets draw k in [min_bands, max_bands]")
    if min_bands is not None and max_bands is not None and max_bands < min_bands:
        raise ValueError(f"max_bands {max_bands} < min_bands {min_bands}")
    if train_bands is not None and min_bands is not None:
        raise ValueError("give random band counts (min_bands/max_bands) or a fixed train_bands list, not both")


class HyperspectralDataModule(_OneSource):
    """Pixels (spectra or `P x P` patches) of hyperspectral scenes, batched by band count.

    Batch:
        spectra: [B, K] float32, each pixel's K bands (train-standardized), zeros where padded; [B, K, P, P] for patches
        band_mask: [B, K] bool, True = a real band
        bands: [B, K] int64, each band's index in its scene's cube, -1 where padded
        wavelengths: [B, K] float32, each band's centre in nm, 0 where padded
        lengths: [B] int64, the number of real bands of each pixel
        labels: [B] int64, each pixel's class (0-based, over every scene's classes)
        scene: [B] int64, each pixel's scene (its position in scenes)
        coords: [B, 2] int64, each pixel's (row, column) in its scene
        index: [B] int64, each pixel's position in its split

    Args:
        scenes: scene names: `synthetic` (the embedded default: a synthetic AVIRIS-like cube over
            the Indian Pines label map when the shared data folder is present, a generated field
            layout otherwise), `synthetic_rosis` (103 ROSIS-like bands), `indian_pines`,
            `pavia_u`, `salinas`, `salinas_a`, or `custom` (the files below). Several
            scenes (even from different sensors) are combined: their classes are kept apart
            (`scene:class`). Default: `custom` when `cube_path` is set, else `synthetic`.
        root: folder of the public scenes' files (`root/<scene>/`).
        download: fetch missing public scenes from the EHU site (MD5-checked where known).
        cache_dir: where `.mat` cubes are converted to memory-mappable `.npy` and the synthetic
            cube is written (default `root/cache`).
        cube_path: a custom cube: `.mat` (v5/v7.3), `.npy` or ENVI `.hdr`, `[H, W, B]`.
        labels_path: its label map (`.mat`/`.npy`, 0 = unlabelled, 1..C classes).
        cube_key: `.mat` variable of the cube (default: the only 3-D one).
        labels_key: `.mat` variable of the labels (default: the only 2-D one).
        wavelengths: band centres in nm of the custom cube (default: the ENVI header's, else `sensor`'s).
        sensor: nominal grid for a custom cube without wavelengths: `aviris` or `rosis`.
        removed_bands: 0-based channels of the sensor's full grid missing from the custom cube.
        train_map: external train label map (e.g. `TRpaviaU.mat`) of the single scene.
        test_map: external test label map (e.g. `TSpaviaU.mat`); needs `train_map`.
        layout: label layout of the `synthetic` scene: `auto`, `generated` or a label-map file.
        patch_size: odd patch side P; 1 = spectra only.
        min_bands: smallest band count of a training sample (with `max_bands`: random subsets).
        max_bands: largest band count (default: all usable bands).
        train_bands: a fixed list of band indices for training instead of random subsets.
        eval_bands: bands for val/test/predict: None (all), a count (evenly spaced) or a list.
        block_size: side of the split blocks in pixels.
        buffer: pixels kept free at a block edge facing another split (default: the patch radius;
            must be at least that).
        val_fraction: share of labelled pixels for validation.
        test_fraction: share for testing (0: none carved, the validation split is the test split, said in the
            report; ignored with external maps).
        check_values: scan each cube once for bands holding NaN/inf (turn off for huge cubes you trust).
        sample_weights: `"balanced"`: the training sampler draws pixels by inverse class
            frequency of the training split (rare land covers served as often as common ones);
            None: every pixel once. There is no per-pixel weight column here. Validation and test
            serve every pixel once.

    The base's arguments are `VarLenDataModule`'s: `max_tokens` budgets
    `samples x max band count` per batch (neither it nor `batch_size` set: 64 pixels per batch); `on_bad`
    meets a band holding NaN/inf, or a label value that is no class of the scene: `raise` a
    `DataError` naming the file, band / value and pixel, or `skip` it (the band is
    dropped, the value's pixels are left unlabelled) and count it in `dm.report`. The scenes are one source,
    read whole: no `sources` or `stream`.

    Attributes:
        report: kept pixels per split; skipped bands and label values; labelled pixels that are no
            patch centre, per split and reason (image border, split buffer, overlap with another
            split's patches), in the unit `"labelled pixels"`.
        scenes: the opened scenes (after `setup`).
    """

    mask_keys = ("band_mask",)
    default_batching = (64, None)
    size_axes = ("bands",)

    def __init__(
        self,
        scenes: list[str] | None = None,
        root: str = "data_cache/hyperspectral",
        download: bool = False,
        cache_dir: str | None = None,
        cube_path: str | None = None,
        labels_path: str | None = None,
        cube_key: str | None = None,
        labels_key: str | None = None,
        wavelengths: list[float] | None = None,
        sensor: str | None = None,
        removed_bands: list[int] | None = None,
        train_map: str | None = None,
        test_map: str | None = None,
        layout: str = "auto",
        patch_size: int = 1,
        min_bands: int | None = None,
        max_bands: int | None = None,
        train_bands: list[int] | None = None,
        eval_bands: int | list[int] | None = None,
        block_size: int = 12,
        buffer: int | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.35,
        check_values: bool = True,
        sample_weights: Literal["balanced"] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sample_weights = check_sample_weights(sample_weights, type(self).__name__, self.shuffle, columns=False)
        self.pixel_split = PixelSplit(val_fraction, test_fraction, block_size, patch_size, buffer, self.seed)
        self.radius = self.pixel_split.radius
        _check_band_arguments(min_bands, max_bands, train_bands)
        self.sources = self._scene_sources(locals())
        keep(self, locals(), "patch_size min_bands max_bands train_bands eval_bands check_values")
        self.root = Path(root)
        self.collate_fn = HyperspectralCollator(self.pad_to_multiple_of)

    def _scene_sources(self, given: Mapping[str, Any]) -> list[SceneSource]:
        """Each scene's files, and the classes linked to the model at instantiation (from label maps / the
        scene table, never the cubes); `given`: `__init__`'s locals."""
        scenes, cube_path = given["scenes"], given["cube_path"]
        train_map, test_map = given["train_map"], given["test_map"]
        self.scene_names = list(scenes) if scenes else (["custom"] if cube_path else ["synthetic"])
        if (train_map or test_map) and len(self.scene_names) != 1:
            raise ValueError("external train/test maps apply to a single scene")
        if len(set(self.scene_names)) != len(self.scene_names):
            raise ValueError(f"a scene is listed twice: {self.scene_names}")
        files = {name: given[name] for name in ("cube_path", "labels_path", "cube_key", "labels_key")}
        wavelengths = None if given["wavelengths"] is None else tuple(given["wavelengths"])
        removed = tuple(given["removed_bands"] or ())
        grid = {"wavelengths": wavelengths, "sensor": given["sensor"], "removed_bands": removed}
        maps = {"layout": given["layout"], "train_map": train_map, "test_map": test_map}
        where = (given["root"], given["cache_dir"], given["download"])
        sources = [SceneSource(name, *where, **files, **grid, **maps) for name in self.scene_names]
        self.scenes: list[Scene] = []  # opened by setup
        self.band_stats: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        self.scene_classes = {source.name: scene_class_names(source) for source in sources}
        multi = len(sources) > 1
        self.class_names = [f"{n}:{c}" if multi else c for n, names in self.scene_classes.items() for c in names]
        self.num_classes = len(self.class_names)
        return sources

    def prepare_data(self) -> None:
        """Download (verified), convert `.mat` cubes and write the synthetic cube, once per node."""
        for source in self.sources:
            prepare_scene(source)

    # -- splits and datasets --------------------------------------------------------------

    def build(self, stage: str | None) -> dict[str, HyperspectralPixels]:
        """Open the scenes, split them spatially, compute train-only statistics, build the datasets."""
        self.scenes = [
            open_scene(source, self.report, self.check_values, self.scene_classes[source.name])
            for source in self.sources
        ]
        parts: dict[str, list[tuple[np.ndarray, ...]]] = {}
        mean, std, offset = [], [], 0
        for s, scene in enumerate(self.scenes):
            prefix = f"{scene.name}: " if len(self.scenes) > 1 else ""
            splits = self.pixel_split.centres(scene, self.report, prefix, self.sources[s].train_map)
            for split, (mask, labels) in splits.items():
                rows, cols = (a.astype(np.int32) for a in np.nonzero(mask))  # per-pixel tables in int32
                ids = np.full(rows.size, s, dtype=np.int32)
                parts.setdefault(split, []).append(
                    (ids, rows, cols, (labels[rows, cols] - 1 + offset).astype(np.int32))
                )
            m, sd = band_statistics(scene.cube, splits["train"][0])  # train centres only: no test leakage
            mean.append(m)
            std.append(sd)
            offset += scene.num_classes
        self.band_stats = (mean, std)
        eval_bands = [select_bands(sc, self.eval_bands, "eval_bands") for sc in self.scenes]
        datasets = {}
        for split, columns in parts.items():
            # one scene: its arrays as they are (a concatenate would copy them)
            scene_ids, rows, cols, labels = (
                np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*columns, strict=True)
            )
            if not len(labels):
                raise DataError(f"no {split} pixel survives the spatial split; use a smaller block_size or patch_size")
            kwargs = self._train_bands(scene_ids) if split == "train" else {"fixed_bands": eval_bands}
            datasets[split] = HyperspectralPixels(
                self.scenes,
                scene_ids,
                rows,
                cols,
                labels,
                self.radius,
                mean,
                std,
                seed=self.seed,
                pad_to_multiple_of=self.pad_to_multiple_of,
                **kwargs,
            )
        return datasets

    # -- what a checkpoint carries -----------------------------------------------------------

    state_must_match = ("class_names", "scenes")
    state_restored = ("band_mean", "band_std")

    def data_state(self) -> dict[str, object]:
        """Classes and scenes the model was trained on, and each scene's train band statistics."""
        mean, std = self.band_stats
        return {"class_names": self.class_names, "scenes": self.scene_names, "band_mean": mean, "band_std": std}

    def restore_data_state(self, state: Mapping[str, Any]) -> None:
        """Every split is normalized with the checkpoint's train band statistics."""
        stats = [[np.asarray(v, dtype=np.float64) for v in state[k]] for k in ("band_mean", "band_std")]
        if [len(m) for m in stats[0]] != [len(m) for m in self.band_stats[0]]:
            raise DataError(
                f"the checkpoint's band statistics have {[len(m) for m in stats[0]]} bands per scene, "
                f"these scenes {[len(m) for m in self.band_stats[0]]}"
            )
        self.band_stats = (stats[0], stats[1])
        for dataset in self.datasets.values():
            dataset.set_statistics(*stats)

    def _train_bands(self, scene_ids: np.ndarray) -> dict[str, object]:
        if self.min_bands is None:
            return {"fixed_bands": [select_bands(sc, self.train_bands, "train_bands") for sc in self.scenes]}
        usable = [sc.usable_bands.size for sc in self.scenes]
        return {"band_counts": random_band_counts(usable, scene_ids, self.min_bands, self.max_bands, self.seed)}

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """Training batches carry their epoch (for the band draws); evaluation uses the plain sampler."""
        return EpochBatchSampler if split == "train" else BucketBatchSampler
