"""Hyperspectral pixel classification with random band subsets and spatially disjoint splits.

The sampler batches by *band count*: a training sample's length is the number of bands it will
carry. How random band subsets stay compatible with a fixed batch plan and exact resumption:

* each training pixel gets its band count ``k_i`` once, from ``(seed, i)``, so ``lengths`` is
  known up front and is the same every epoch (the sampler's plan, and ``len(loader)``, never
  change);
* *which* ``k_i`` bands it gets is drawn from ``(seed, epoch, i)``: the train batch sampler hands
  each batch to the dataset as an :class:`~varlen.datasets.hyperspectral.EpochIndices` list that
  carries its epoch, so every worker, every rank and a resumed run draw the same bands for the
  same (epoch, sample), and a new epoch draws new ones.

Evaluation uses a fixed, configurable band set (all usable bands, ``k`` evenly spaced ones, or an
explicit list), so validation numbers are comparable between epochs and runs.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from varlen.batching import BucketBatchSampler
from varlen.datamodules.base import VarLenDataModule
from varlen.datasets.base import DatasetNotFoundError
from varlen.datasets.hyperspectral import (
    SCENES,
    SENSORS,
    EpochIndices,
    HyperspectralPixels,
    Scene,
    band_statistics,
    block_split,
    check_integer_labels,
    check_labels,
    collate_hyperspectral,
    evenly_spaced,
    fetch_scene_file,
    footprint_map,
    open_cube,
    patch_fits,
    read_array,
    read_wavelengths,
    remap_labels,
    synthetic_layout,
    synthetic_scene,
    validate_scene,
)

log = logging.getLogger(__name__)

SYNTHETIC = {"synthetic": ("aviris", 16), "synthetic_rosis": ("rosis", 9)}


class BandSubsetBatchSampler(BucketBatchSampler):
    """The bucketing sampler whose batches carry their epoch (see the module docstring).

    Same arguments as :class:`~varlen.batching.BucketBatchSampler`; it only wraps each yielded
    batch in :class:`~varlen.datasets.hyperspectral.EpochIndices`, which is still a list of ints.
    """

    def _batches(self) -> Iterator[list[int]]:
        epoch = self.epoch
        for batch in super()._batches():
            yield EpochIndices(batch, epoch)


class HyperspectralDataModule(VarLenDataModule):
    """Pixels (spectra or ``P x P`` patches) of hyperspectral scenes, batched by band count.

    Args:
        scenes: scene names: ``synthetic`` (the embedded default: a synthetic AVIRIS-like cube over
            the Indian Pines label map when the shared data folder is present, a generated field
            layout otherwise), ``synthetic_rosis`` (103 ROSIS-like bands), ``indian_pines``,
            ``pavia_u``, ``salinas``, ``salinas_a``, or ``custom`` (the files below). Several
            scenes (even from different sensors) are combined: their classes are kept apart
            (``scene:class``). Default: ``custom`` when ``cube_path`` is set, else ``synthetic``.
        root: folder of the scenes' files (``root/<scene>/``) and of the synthetic cube.
        download: fetch missing public scenes from the EHU site (MD5-checked where known).
        cache_dir: where ``.mat`` cubes are converted to memory-mappable ``.npy`` (default ``root/cache``).
        cube_path: a custom cube: ``.mat`` (v5/v7.3), ``.npy`` or ENVI ``.hdr``, ``[H, W, B]``.
        labels_path: its label map (``.mat``/``.npy``, 0 = unlabelled).
        cube_key: ``.mat`` variable of the cube (default: the only 3-D one).
        labels_key: ``.mat`` variable of the labels (default: the only 2-D one).
        wavelengths: band centres in nm of the custom cube (default: the ENVI header's, else ``sensor``'s).
        sensor: nominal grid for a custom cube without wavelengths: ``aviris`` or ``rosis``.
        removed_bands: 0-based channels of the sensor's full grid missing from the custom cube.
        train_map: external train label map (e.g. ``TRpaviaU.mat``) of the single scene.
        test_map: external test label map (e.g. ``TSpaviaU.mat``); needs ``train_map``.
        layout: label layout of the ``synthetic`` scene: ``auto``, ``generated`` or a label-map file.
        patch_size: odd patch side P; 1 = spectra only.
        min_bands: smallest band count of a training sample (with ``max_bands``: random subsets).
        max_bands: largest band count (default: all usable bands).
        train_bands: a fixed list of band indices for training instead of random subsets.
        eval_bands: bands for val/test/predict: None (all), a count (evenly spaced) or a list.
        block_size: side of the split blocks in pixels.
        buffer: pixels kept free at a block edge facing another split (default: the patch radius;
            must be at least that).
        val_fraction: share of labelled pixels for validation.
        test_fraction: share for testing (ignored with external maps).
        nan_bands: ``raise`` on bands holding NaN/inf, ``drop`` them, or ``ignore`` (no scan).
        batch_size, max_tokens, shuffle, seed, num_buckets, pad_to_multiple_of, num_workers,
            pin_memory, persistent_workers, prefetch_factor: see :class:`VarLenDataModule`.
            ``max_tokens`` budgets ``samples x max band count`` per batch.
    """

    mask_keys = ("band_mask",)

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
        nan_bands: str = "raise",
        batch_size: int | None = 64,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            max_tokens=max_tokens,
            shuffle=shuffle,
            seed=seed,
            num_buckets=num_buckets,
            pad_to_multiple_of=pad_to_multiple_of,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        if patch_size < 1 or patch_size % 2 == 0:
            raise ValueError(f"patch_size must be odd and >= 1, got {patch_size}")
        self.radius = patch_size // 2
        buffer = self.radius if buffer is None else buffer
        if buffer < self.radius:
            raise ValueError(f"buffer {buffer} < patch radius {self.radius}: train and test patches would share pixels")
        if min_bands is not None and min_bands < 1:
            raise ValueError(f"min_bands must be >= 1, got {min_bands}")
        if max_bands is not None and min_bands is None:
            raise ValueError("max_bands needs min_bands: random band subsets draw k in [min_bands, max_bands]")
        if min_bands is not None and max_bands is not None and max_bands < min_bands:
            raise ValueError(f"max_bands {max_bands} < min_bands {min_bands}")
        if train_bands is not None and min_bands is not None:
            raise ValueError("give random band counts (min_bands/max_bands) or a fixed train_bands list, not both")
        if test_map is not None and train_map is None:
            raise ValueError("test_map needs train_map")
        self.scene_names = list(scenes) if scenes else (["custom"] if cube_path else ["synthetic"])
        if (train_map or test_map) and len(self.scene_names) != 1:
            raise ValueError("external train/test maps apply to a single scene")
        if len(set(self.scene_names)) != len(self.scene_names):
            raise ValueError(f"a scene is listed twice: {self.scene_names}")
        unknown = [s for s in self.scene_names if s not in {*SCENES, *SYNTHETIC, "custom"}]
        if unknown:
            raise ValueError(f"unknown scene(s) {unknown}; known: {sorted({*SCENES, *SYNTHETIC, 'custom'})}")
        if "custom" in self.scene_names and (cube_path is None or labels_path is None):
            raise ValueError("the custom scene needs cube_path and labels_path")
        self.root = Path(root)
        self.download = download
        self.cache_dir = Path(cache_dir) if cache_dir else self.root / "cache"
        self.cube_path, self.labels_path = cube_path, labels_path
        self.cube_key, self.labels_key = cube_key, labels_key
        self.custom_wavelengths = wavelengths
        self.sensor = sensor
        self.removed_bands = removed_bands or []
        self.train_map, self.test_map = train_map, test_map
        self.layout = layout
        self.patch_size = patch_size
        self.min_bands, self.max_bands = min_bands, max_bands
        self.train_bands, self.eval_bands = train_bands, eval_bands
        self.block_size, self.buffer = block_size, buffer
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.nan_bands = nan_bands
        self.collate_fn = partial(collate_hyperspectral, pad_to_multiple_of=pad_to_multiple_of)
        self.scenes: list[Scene] = []
        self.report: dict[str, Any] = {}
        #: labelled pixels not used as patch centres, per scene, split and reason (filled by setup)
        self.skipped: dict[str, dict[str, dict[str, int]]] = {}
        # linked to the model at instantiation: from label maps / the scene table, never the cubes
        self.scene_classes = {name: self._class_names(name) for name in self.scene_names}
        per_scene = list(self.scene_classes.values())
        multi = len(per_scene) > 1
        self.class_names = [
            f"{n}:{c}" if multi else c for n, names in zip(self.scene_names, per_scene, strict=True) for c in names
        ]
        self.num_classes = len(self.class_names)

    # -- scenes ---------------------------------------------------------------------------

    def _layout(self, sensor: str) -> str:
        return self.layout if sensor == "aviris" else "generated"  # no real ROSIS layout is shipped

    def _class_names(self, name: str) -> list[str]:
        if name in SCENES:
            return list(SCENES[name].class_names)
        if name in SYNTHETIC:
            sensor, num_classes = SYNTHETIC[name]
            labels, _ = synthetic_layout(self._layout(sensor), sensor, num_classes)
        else:
            labels = np.asarray(read_array(self.labels_path, self.labels_key, ndim=2))
        num_classes = check_labels(labels, None, self.labels_path if name == "custom" else f"{name} layout")
        return [f"class_{c}" for c in range(1, num_classes + 1)]

    def _scene_files(self, name: str) -> tuple[Path, Path]:
        info = SCENES[name]
        folder = self.root / name
        if self.download:
            fetch_scene_file(info.cube, folder)
            fetch_scene_file(info.labels, folder)
        cube, labels = folder / info.cube.filename, folder / info.labels.filename
        missing = [p for p in (cube, labels) if not p.exists()]
        if missing:
            raise DatasetNotFoundError(
                f"scene {name!r}: {', '.join(map(str, missing))} not found. Pass download=True, or fetch "
                f"{info.cube.url} and {info.labels.url} into {folder}/"
            )
        return cube, labels

    def _open_scene(self, name: str) -> Scene:
        """Fetch / convert / write the scene's files as needed and map them, without validating."""
        if name in SYNTHETIC:
            sensor, num_classes = SYNTHETIC[name]
            path, labels, wl = synthetic_scene(self.root, self._layout(sensor), sensor, seed=0, num_classes=num_classes)
            cube, source = open_cube(path), str(path)
        elif name in SCENES:
            info = SCENES[name]
            cube_file, labels_file = self._scene_files(name)
            cube = open_cube(cube_file, info.cube_key, self.cache_dir)
            labels = np.asarray(read_array(labels_file, info.labels_key, 2))
            if info.label_values:
                labels = remap_labels(labels, info.label_values, str(labels_file))
            wl, source = np.asarray(info.wavelengths), str(cube_file)
        else:
            cube = open_cube(self.cube_path, self.cube_key, self.cache_dir)
            labels = np.asarray(read_array(self.labels_path, self.labels_key, 2))
            wl, source = self._custom_wavelengths(cube.shape[-1]), str(self.cube_path)
        return Scene(name, cube, np.asarray(labels), wl, self.scene_classes[name], source=source)

    def load_scene(self, name: str) -> Scene:
        """Open (memory-map) and validate one scene; cheap after the first call (caches exist)."""
        scene = self._open_scene(name)
        check_labels(scene.labels, scene.num_classes, scene.source if name != "custom" else str(self.labels_path))
        scene.labels = scene.labels.astype(np.int32, copy=False)
        if self.train_map:
            scene.train_labels = self._external_map(self.train_map, scene.num_classes)
            scene.test_labels = self._external_map(self.test_map, scene.num_classes) if self.test_map else None
        return validate_scene(scene, self.nan_bands)

    def _external_map(self, path: str, num_classes: int) -> np.ndarray:
        labels = np.asarray(read_array(path, None, 2))
        check_integer_labels(labels, path)
        if labels.max(initial=0) > num_classes or labels.min(initial=0) < 0:
            raise ValueError(f"{path}: labels outside 0..{num_classes}")
        return labels.astype(np.int32)

    def _custom_wavelengths(self, num_bands: int) -> np.ndarray:
        if self.custom_wavelengths is not None:
            return np.asarray(self.custom_wavelengths, dtype=np.float64)
        from_file = read_wavelengths(self.cube_path)
        if from_file is not None:
            return from_file
        if self.sensor is None:
            raise ValueError(
                f"{self.cube_path}: no wavelengths: pass wavelengths=[...] (nm) or sensor='aviris'/'rosis' "
                "(with removed_bands if channels were removed)"
            )
        if self.sensor not in SENSORS:
            raise ValueError(f"unknown sensor {self.sensor!r}; known: {sorted(SENSORS)}")
        if self.sensor == "aviris":
            return SENSORS["aviris"](self.removed_bands)
        return SENSORS["rosis"](num_bands)

    def prepare_data(self) -> None:
        """Download, convert ``.mat`` cubes and write the synthetic cube once (rank 0); validation is in setup."""
        for name in self.scene_names:
            self._open_scene(name)

    # -- splits and datasets --------------------------------------------------------------

    def _split_scene(self, scene: Scene) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, dict[str, int]]]:
        """Centre masks and their label maps per split, and the labelled pixels skipped per split and reason."""
        r = self.radius
        if scene.train_labels is None:
            fractions = (1.0 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)
            if min(fractions) <= 0:
                raise ValueError(f"val_fraction + test_fraction must be < 1 and both > 0, got {fractions[1:]}")
            masks, _, skipped = block_split(scene.labels, fractions, self.block_size, self.buffer, r, self.seed)
            names = ("train", "val", "test")
            out = {s: (m, scene.labels) for s, m in zip(names, masks, strict=True)}
            return out, dict(zip(names, skipped, strict=True))
        fits = patch_fits(scene.labels.shape, r)
        train_all = (scene.train_labels > 0) & fits
        if not train_all.any():
            raise ValueError(
                f"{self.train_map}: no labelled pixel of scene {scene.name!r} whose {self.patch_size}x"
                f"{self.patch_size} patch fits in the image"
            )
        masks, _, (train_skip, val_skip) = block_split(
            scene.train_labels * train_all, (1.0 - self.val_fraction, self.val_fraction), self.block_size,
            self.buffer, r, self.seed,
        )  # fmt: skip
        # the border pixels were masked out before block_split: count them on the train side
        train_skip["border"] = int(((scene.train_labels > 0) & ~fits).sum())
        out = {"train": (masks[0], scene.train_labels), "val": (masks[1], scene.train_labels)}
        skipped = {"train": train_skip, "val": val_skip}
        if scene.test_labels is not None:
            # Footprints of centres <= 2r apart share pixels (so: within the radius-2r footprint
            # of the other split's centres). Test centres near train centres are dropped, then val
            # centres near the remaining test ones: val is carved out here, while the published
            # test map is kept as whole as possible.
            test = (scene.test_labels > 0) & fits
            test_touching = test & footprint_map(masks[0], 2 * r)
            test &= ~test_touching
            val_touching = masks[1] & footprint_map(test, 2 * r)
            out["val"] = (masks[1] & ~val_touching, scene.train_labels)
            val_skip["patch overlapping test patches"] = int(val_touching.sum())
            skipped["test"] = {
                "border": int(((scene.test_labels > 0) & ~fits).sum()),
                "patch overlapping train patches": int(test_touching.sum()),
            }
            out["test"] = (test, scene.test_labels)
        return out, skipped

    def _fixed_bands(self, scene: Scene, spec: int | Sequence[int] | None, what: str) -> np.ndarray:
        usable = scene.usable_bands
        if spec is None:
            return usable
        if isinstance(spec, (int, np.integer)):
            if spec < 1:
                raise ValueError(f"{what}: band count must be >= 1, got {spec}")
            return evenly_spaced(usable, int(spec))
        bands = np.asarray(spec, dtype=np.int64)
        if bands.size == 0:
            raise ValueError(f"{what}: the band list is empty; give at least one band index")
        bad = bands[(bands < 0) | (bands >= scene.num_bands)]
        if bad.size:
            raise ValueError(
                f"{what}: band index {int(bad[0])} out of range for scene {scene.name!r} with {scene.num_bands} bands"
            )
        dropped = np.setdiff1d(bands, usable)
        if dropped.size:
            raise ValueError(f"{what}: band(s) {dropped.tolist()} of scene {scene.name!r} were dropped (NaN values)")
        return np.unique(bands)

    def setup(self, stage: str | None = None) -> None:
        """Open the scenes, split them spatially, compute train-only statistics, build the datasets."""
        if self.datasets:
            return
        self.scenes = [self.load_scene(name) for name in self.scene_names]
        parts: dict[str, list[tuple[np.ndarray, ...]]] = {"train": [], "val": [], "test": []}
        offset = 0
        mean, std = [], []
        for s, scene in enumerate(self.scenes):
            splits, skipped = self._split_scene(scene)
            for split, (mask, labels) in splits.items():
                rows, cols = (a.astype(np.int32) for a in np.nonzero(mask))  # per-pixel tables in int32
                ids = np.full(rows.size, s, dtype=np.int32)
                parts[split].append((ids, rows, cols, (labels[rows, cols] - 1 + offset).astype(np.int32)))
            if not splits["train"][0].any():
                raise ValueError(f"scene {scene.name!r}: no training pixel survives the split; use smaller blocks")
            m, sd = band_statistics(scene.cube, splits["train"][0])  # train centres only: no test leakage
            mean.append(m)
            std.append(sd)
            missing = {
                k: (np.setdiff1d(np.arange(1, scene.num_classes + 1), np.unique(v[1][v[0]])).tolist())
                for k, v in splits.items()
            }
            missing = {k: v for k, v in missing.items() if v}
            if missing:
                warnings.warn(
                    f"scene {scene.name!r}: class(es) absent from a split (blocks too coarse for them): {missing}",
                    stacklevel=2,
                )
            self.skipped[scene.name] = {k: {why: n for why, n in v.items() if n} for k, v in skipped.items()}
            self.report[scene.name] = {
                "pixels": {k: int(v[0].sum()) for k, v in splits.items()},
                "skipped": self.skipped[scene.name],
                "classes_missing": missing,
                "dropped_bands": scene.dropped_bands,
            }
            log.info("scene %r split: %s", scene.name, self.report[scene.name])
            offset += scene.num_classes
        self._warn_skipped()
        # one scene: its arrays as they are (a concatenate would copy them)
        joined = {
            k: [np.concatenate(col) if len(col) > 1 else col[0] for col in zip(*v, strict=True)]
            for k, v in parts.items()
            if v
        }
        eval_bands = [self._fixed_bands(sc, self.eval_bands, "eval_bands") for sc in self.scenes]
        for split, (scene_ids, rows, cols, labels) in joined.items():
            kwargs: dict[str, Any] = {"fixed_bands": eval_bands}
            if split == "train":
                kwargs = self._train_band_kwargs(scene_ids)
            self.datasets[split] = HyperspectralPixels(
                self.scenes, scene_ids, rows, cols, labels, self.radius, mean, std, seed=self.seed, **kwargs
            )
        if "test" in self.datasets:
            self.datasets["predict"] = self.datasets["test"]

    @property
    def num_skipped(self) -> int:
        """Labelled pixels that are in no split's centres (image border, split buffers, overlaps)."""
        return sum(n for splits in self.skipped.values() for reasons in splits.values() for n in reasons.values())

    def _warn_skipped(self) -> None:
        """One warning for all scenes: how many labelled pixels are not used, where and why."""
        if not self.num_skipped:
            return
        detail = "; ".join(
            f"{scene} {split}: " + ", ".join(f"{n} {why}" for why, n in reasons.items())
            for scene, splits in self.skipped.items()
            for split, reasons in splits.items()
            if reasons
        )
        warnings.warn(
            f"{self.num_skipped} labelled pixels are not used as patch centres ({detail}). 'border': the "
            f"{self.patch_size}x{self.patch_size} patch would leave the image; 'buffer': within {self.buffer} "
            "pixels of another split's blocks (kept free so that no two splits' patches share a pixel). "
            "Counts are in .skipped",
            stacklevel=3,
        )

    def _train_band_kwargs(self, scene_ids: np.ndarray) -> dict[str, Any]:
        if self.min_bands is None:
            return {"fixed_bands": [self._fixed_bands(sc, self.train_bands, "train_bands") for sc in self.scenes]}
        usable = np.array([sc.usable_bands.size for sc in self.scenes], dtype=np.int32)
        high = np.minimum(usable, self.max_bands if self.max_bands is not None else usable)
        low = np.minimum(self.min_bands, high)
        rng = np.random.default_rng((self.seed, 1))  # fixed per (seed, sample): lengths never change
        return {"band_counts": rng.integers(low[scene_ids], high[scene_ids] + 1).astype(np.int32)}

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """Training batches carry their epoch (for the band draws); evaluation uses the plain sampler."""
        return BandSubsetBatchSampler if split == "train" else BucketBatchSampler
