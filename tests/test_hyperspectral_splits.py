"""The hyperspectral split policy on its own, without a DataModule (varlen.datasets.hyperspectral.splits)."""

import numpy as np
import pytest

from varlen.datasets.hyperspectral.source import Scene
from varlen.datasets.hyperspectral.splits import UNUSED_REASONS, PixelSplit
from varlen.datasets.hyperspectral.synthetic import generate_field_layout
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.prepare.splits import footprint_map


def scene(labels: np.ndarray, **maps) -> Scene:
    cube = np.zeros((*labels.shape, 3), np.float32)
    names = [f"c{i}" for i in range(1, int(labels.max()) + 1)]
    return Scene("field", cube, labels.astype(np.int32), np.array([400.0, 500.0, 600.0]), names, "field.npy", **maps)


def test_patches_of_two_splits_never_share_a_pixel_and_every_class_reaches_every_split() -> None:
    labels = generate_field_layout(145, 145, num_classes=16, seed=0)
    spec = PixelSplit(0.15, 0.35, block_size=12, patch_size=5, seed=0)
    report = DataReport()
    out = spec.centres(scene(labels), report)
    footprints = {k: footprint_map(mask, spec.radius) for k, (mask, _) in out.items()}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not (footprints[a] & footprints[b]).any(), (a, b)
    for mask, label_map in out.values():
        assert set(np.unique(label_map[mask])) == set(range(1, 17))  # the generated layout's promise
    centres = sum(int(mask.sum()) for mask, _ in out.values())
    unused = sum(n for k in out for n in report.split(k).unused.values())
    assert centres + unused == int((labels > 0).sum())  # every labelled pixel: a centre, or counted


def test_external_maps_keep_the_test_map_and_carve_validation_from_the_train_map() -> None:
    labels = np.broadcast_to((np.arange(60) // 15) % 4 + 1, (60, 60)).copy()  # four classes in stripes
    rows = np.arange(60)[:, None] < 30
    train_map, test_map = np.where(rows, labels, 0), np.where(~rows, labels, 0)
    spec = PixelSplit(0.2, 0.0, block_size=8, patch_size=3, seed=0)
    report = DataReport()
    out = spec.centres(scene(labels, train_labels=train_map, test_labels=test_map), report, train_map="TR.npy")
    assert not (out["train"][0] & ~(train_map > 0)).any() and not (out["val"][0] & ~(train_map > 0)).any()
    assert not (out["test"][0] & ~(test_map > 0)).any()
    near = footprint_map(out["train"][0], 2 * spec.radius)
    assert not (near & out["test"][0]).any()  # test centres whose patch touches a train patch are dropped
    assert report.split("test").unused[("labelled pixels", UNUSED_REASONS["near_train"])] > 0


def test_a_scene_without_a_training_centre_says_why() -> None:
    labels = np.zeros((20, 20), np.int32)
    labels[0, :] = 1  # only the border row: no 3x3 patch fits
    with pytest.raises(DataError, match=r"scene 'field' \(field.npy\): no training pixel is a patch centre"):
        PixelSplit(0.2, 0.2, block_size=8, patch_size=3).centres(scene(labels))


def test_a_split_that_lacks_a_class_is_warned_about() -> None:
    labels = np.ones((40, 40), np.int32)
    labels[2:6, 2:6] = 2  # class 2 in one block only
    with pytest.warns(UserWarning, match=r"class\(es\) absent from a split"):
        PixelSplit(0.2, 0.2, block_size=10, patch_size=1).centres(scene(labels))


def test_bad_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="patch_size must be odd"):
        PixelSplit(0.2, 0.2, block_size=12, patch_size=4)
    with pytest.raises(ValueError, match="buffer 0 < patch radius 1"):
        PixelSplit(0.2, 0.2, block_size=12, patch_size=3, buffer=0)
    with pytest.raises(ValueError, match="must exceed twice the buffer"):
        PixelSplit(0.2, 0.2, block_size=4, patch_size=5)
