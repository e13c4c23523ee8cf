"""Spatially disjoint splits of a scene's labelled pixels into patch centres: the hyperspectral split policy.

Neighbouring pixels are nearly the same spectrum, so a random pixel split leaks: test patches
overlap train patches. `PixelSplit` (a frozen, checked spec) deals blocks of the scene to
the splits (`varlen.prepare.splits.spatial_block_split`), keeps a buffer at block edges so patches
of two splits share no pixel, or, with a scene's external train / test maps, carves validation
blocks out of the train map and drops the centres whose patches would touch another split's.
Every labelled pixel that is no centre is counted by reason, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from varlen import notices
from varlen.datasets.hyperspectral.source import Scene
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.prepare.splits import footprint_map, fractions_of, patch_fits, spatial_block_split

__all__ = ["UNUSED_REASONS", "UNUSED_UNIT", "PixelSplit", "SceneSplit"]

#: why labelled pixels are no patch centre (the report's unused reasons, unit `UNUSED_UNIT`)
UNUSED_REASONS = {
    "border": "border: the patch would leave the image",
    "buffer": "buffer: within `buffer` pixels of another split's blocks",
    "near_train": "patch overlapping train patches",
    "near_test": "patch overlapping test patches",
}
UNUSED_UNIT = "labelled pixels"

#: per split: a centre mask `[H, W]` and the label map its centres read their class from
SceneSplit = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PixelSplit:
    """How a scene's pixels become train / val / test patch centres.

    Attributes:
        val_fraction: share of labelled pixels for validation.
        test_fraction: share for testing (0: none carved; unused with an external test map).
        block_size: side of the split blocks in pixels.
        patch_size: odd patch side P (radius `P // 2`).
        buffer: pixels kept free at a block edge facing another split (None: the patch radius).
        seed: seed of the block order.
    """

    val_fraction: float
    test_fraction: float
    block_size: int
    patch_size: int = 1
    buffer: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.patch_size < 1 or self.patch_size % 2 == 0:
            raise ValueError(f"patch_size must be odd and >= 1, got {self.patch_size}")
        if self.buffer is None:
            object.__setattr__(self, "buffer", self.radius)
        if self.buffer < self.radius:
            raise ValueError(
                f"buffer {self.buffer} < patch radius {self.radius}: train and test patches would share pixels"
            )
        if self.block_size <= 2 * self.buffer:
            raise ValueError(
                f"block_size {self.block_size} must exceed twice the buffer ({self.buffer}), or no centre survives"
            )
        fractions_of(self.val_fraction, self.test_fraction)  # refuse bad shares now

    @property
    def radius(self) -> int:
        return self.patch_size // 2

    def centres(
        self, scene: Scene, report: DataReport | None = None, prefix: str = "", train_map: str | None = None
    ) -> SceneSplit:
        """The scene's centre mask and label map per split (external maps when the scene has them,
        read from `train_map`, which messages name).

        Labelled pixels that are no centre go to `report` per split and reason (reasons start
        with `prefix`, e.g. the scene's name when several are combined); a split that lacks a
        class is warned about.

        Raises:
            DataError: no training pixel is a centre (naming why the labelled pixels are not).
        """
        if scene.train_labels is None:
            split = spatial_block_split(
                scene.labels,
                fractions_of(self.val_fraction, self.test_fraction),
                self.block_size,
                self.buffer,
                self.radius,
                self.seed,
            )
            out, unused = {k: (m, scene.labels) for k, m in split.masks.items()}, split.unused
        else:
            out, unused = self._external(scene, train_map or scene.source)
        if not out["train"][0].any():
            held = {k: {UNUSED_REASONS[why]: n for why, n in v.items() if n} for k, v in unused.items()}
            raise DataError(
                f"scene {scene.name!r} ({scene.source}): no training pixel is a patch centre; of "
                f"{int((scene.labels > 0).sum())} labelled pixels, these are not: {held}. Use a smaller "
                "block_size or patch_size"
            )
        if report is not None:
            for split_name, reasons in unused.items():
                for why, n in reasons.items():
                    report.leave_unused(split_name, f"{prefix}{UNUSED_REASONS[why]}", n, UNUSED_UNIT)
        warn_missing_classes(scene, out)
        return out

    def _external(self, scene: Scene, train_map: str) -> tuple[SceneSplit, dict[str, dict[str, int]]]:
        """Validation blocks carved from the external train map; test (when given) is the test map.

        Footprints of centres <= 2r apart share pixels. Test centres near train centres are
        dropped, then validation centres near the remaining test ones: validation is carved out
        here, while the published test map is kept as whole as possible.
        """
        r, train_labels = self.radius, scene.train_labels
        fits = patch_fits(scene.labels.shape, r)
        labelled = train_labels > 0
        if not (labelled & fits).any():
            raise DataError(
                f"{train_map}: no labelled pixel of scene {scene.name!r} whose {self.patch_size}x"
                f"{self.patch_size} patch fits in the image"
            )
        split = spatial_block_split(
            np.where(fits, train_labels, 0), fractions_of(self.val_fraction), self.block_size, self.buffer, r, self.seed
        )
        unused = {k: dict(v) for k, v in split.unused.items()}
        unused["train"]["border"] = int((labelled & ~fits).sum())  # masked out before the split: counted here
        train, val = split.masks["train"], split.masks["val"]
        out = {"train": (train, train_labels), "val": (val, train_labels)}
        if scene.test_labels is not None:
            test = (scene.test_labels > 0) & fits
            near_train = test & footprint_map(train, 2 * r)
            test &= ~near_train
            near_test = val & footprint_map(test, 2 * r)
            out["val"] = (val & ~near_test, train_labels)
            out["test"] = (test, scene.test_labels)
            unused["val"]["near_test"] = int(near_test.sum())
            unused["test"] = {
                "border": int(((scene.test_labels > 0) & ~fits).sum()),
                "near_train": int(near_train.sum()),
            }
        return out, unused


def warn_missing_classes(scene: Scene, splits: SceneSplit) -> dict[str, list[int]]:
    """The classes (1..C) each split lacks, warned about once when any does."""
    missing = {
        k: np.setdiff1d(np.arange(1, scene.num_classes + 1), np.unique(labels[mask])).tolist()
        for k, (mask, labels) in splits.items()
    }
    missing = {k: v for k, v in missing.items() if v}
    if missing:
        notices.warn(f"scene {scene.name!r}: class(es) absent from a split (blocks too coarse for them): {missing}")
    return missing
