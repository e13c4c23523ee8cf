"""Hyperspectral scenario: contract, band sampling, spatial splits, readers, caches, downloads, bad input."""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.io import savemat

import varlen.datasets.hyperspectral as hs
import varlen.datasets.hyperspectral.readers as readers
from varlen.batching import EpochIndices
from varlen.batching.ragged import Ragged
from varlen.datamodules.hyperspectral import HyperspectralDataModule
from varlen.datasets.hyperspectral.bands import random_band_rows
from varlen.datasets.hyperspectral.gather import flat_view
from varlen.datasets.hyperspectral.labels import check_classes_present, known_labels
from varlen.datasets.hyperspectral.scenes import (
    EHU,
    INDIAN_PINES_CHANNELS,
    INDIAN_PINES_REMOVED,
    SALINAS_REMOVED,
    aviris_wavelengths,
)
from varlen.datasets.hyperspectral.splits import UNUSED_REASONS
from varlen.datasets.hyperspectral.synthetic import shared_layout_path
from varlen.errors import DataError, DatasetNotFoundError, DownloadError
from varlen.models.hyperspectral import AverageAccuracy, SpectralTransformer
from varlen.prepare.report import DataReport
from varlen.prepare.splits import footprint_map, patch_fits, stream
from varlen.storage.cache import cache_key, file_hash
from varlen.testing import BadInput, DataModuleContract

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "hyperspectral"
CONFIG = str(ROOT / "configs" / "hyperspectral.yaml")
WAVELENGTHS = np.linspace(450.0, 2400.0, 12)
# one cache of the synthetic cubes for the whole module (written once, then memory-mapped)
SCENE_ROOT = Path(tempfile.mkdtemp(prefix="varlen_hs_"))
atexit.register(shutil.rmtree, SCENE_ROOT, ignore_errors=True)
CLI_OVERRIDES = [
    f"--data.init_args.root={SCENE_ROOT}",
    "--data.init_args.layout=generated",
    "--trainer.enable_progress_bar=false",
]


def tiny_args(tmp_path: Path, **kwargs) -> dict:
    """The 16 x 14 x 12 test cube (MATLAB v5) as a custom scene, spectra, all bands."""
    return {
        "scenes": ["custom"],
        "root": str(tmp_path),
        "cube_path": str(DATA / "tiny_v5.mat"),
        "labels_path": str(DATA / "tiny_v5_gt.mat"),
        "wavelengths": WAVELENGTHS.tolist(),
        "patch_size": 1,
        "min_bands": None,
        "max_bands": None,
        "block_size": 4,
        "val_fraction": 0.2,
        "test_fraction": 0.3,
        "batch_size": 8,
        **kwargs,
    }


def tiny_dm(tmp_path: Path, **kwargs) -> HyperspectralDataModule:
    return HyperspectralDataModule(**tiny_args(tmp_path, **kwargs))


def nan_cube(tmp_path: Path, band: int = 5) -> Path:
    cube = np.load(DATA / "tiny.npy").astype(np.float32)
    cube[2, 3, band] = np.nan
    np.save(tmp_path / "nan.npy", cube)
    return tmp_path / "nan.npy"


class TestHyperspectralContract(DataModuleContract):
    """Two sensors in one DataModule (200 AVIRIS-like and 103 ROSIS-like bands), random subsets, 3x3 patches."""

    config = CONFIG
    cli_overrides = CLI_OVERRIDES

    def make_datamodule(self, **overrides):
        args = {
            "scenes": ["synthetic", "synthetic_rosis"],
            "root": str(SCENE_ROOT),
            "layout": "generated",
            "patch_size": 3,
            "min_bands": 10,
            "max_bands": 150,
            "batch_size": 64,
            **overrides,
        }
        return HyperspectralDataModule(**args)

    def make_model(self, datamodule):
        return SpectralTransformer(num_classes=datamodule.num_classes, d_model=32, nhead=4, num_layers=2)

    def budget_overrides(self):
        return {"max_tokens": 4096}

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        """The tiny v5 .mat cube, converted from an empty cache under tmp_path; a few batches per rank."""
        return [
            f"--data.init_args.root={tmp_path / 'scenes'}",
            "--data.init_args.scenes=[custom]",
            f"--data.init_args.cube_path={DATA / 'tiny_v5.mat'}",
            f"--data.init_args.labels_path={DATA / 'tiny_v5_gt.mat'}",
            "--data.init_args.sensor=rosis",
            "--data.init_args.patch_size=1",
            "--data.init_args.min_bands=4",
            "--data.init_args.max_bands=12",
            "--data.init_args.block_size=4",
            "--data.init_args.val_fraction=0.2",
            "--data.init_args.test_fraction=0.3",
            "--data.init_args.max_tokens=null",
            "--data.init_args.batch_size=8",
            "--trainer.enable_progress_bar=false",
        ]

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        if case == "missing_source":  # a custom cube path that does not exist
            args = tiny_args(tmp_path, cube_path=str(tmp_path / "absent.mat"))
            return BadInput(args, r"cube file absent\.mat not found \(looked in: .*absent\.mat\)\. To get it: check")
        if case == "unreadable_file":  # a corrupt .mat: nothing of the cube is usable, under both policies
            (tmp_path / "corrupt.mat").write_bytes(b"MATLAB 5.0 MAT-file" + bytes(range(256)) * 2)
            args = tiny_args(tmp_path, cube_path=str(tmp_path / "corrupt.mat"))
            return BadInput(args, r"corrupt\.mat: cannot read it as a MATLAB \.mat file \(ValueError: ")
        if case == "empty_source":  # a label map with no labelled pixel: no class, no sample
            np.save(tmp_path / "blank.npy", np.zeros((16, 14), dtype=np.uint8))
            args = tiny_args(tmp_path, labels_path=str(tmp_path / "blank.npy"))
            return BadInput(args, r"blank\.npy: no labelled pixel")
        if case == "non_finite":  # a band holding NaN: named with its wavelength; dropped and counted under skip
            args = tiny_args(tmp_path, cube_path=str(nan_cube(tmp_path)))
            return BadInput(args, r"nan\.npy: band\(s\) \[5\] \(at \[1336\.4\] nm\) hold NaN or inf", "NaN or inf")
        if case == "empty_sample":
            # A sample of 0 bands: eval_bands=[] would give every evaluation pixel none, so nothing is
            # left to skip; it raises under both policies (a label map whose every labelled pixel lies
            # on the border leaves no sample either: test_border_only_labels_leave_no_patch_centre).
            return BadInput(tiny_args(tmp_path, eval_bands=[]), r"eval_bands: the band list is empty")
        if case == "unknown_label":  # an external train map with a label outside 0..C
            train = hs.read_labels(DATA / "tiny_TR.mat")
            train[train == 2] = 7
            np.save(tmp_path / "TR7.npy", train)
            args = tiny_args(tmp_path, train_map=str(tmp_path / "TR7.npy"))
            message = r"TR7\.npy: label 7 at 15 pixel\(s\), first at row 1, column 8: not one of the scene's classes"
            return BadInput(args, message, "not one of the scene's classes")
        raise AssertionError(case)

    def test_band_padding_does_not_change_outputs(self, datamodule, model):
        """Training samples carry 10..150 random bands: pad short ones into a batch with long ones."""
        dataset = datamodule.dataset("train")
        order = np.argsort(dataset.lengths)
        picks = [int(order[0]), int(order[-1]), int(order[len(order) // 2])]
        samples = [dataset[i] for i in picks]
        assert len({len(s["bands"]) for s in samples}) == 3
        batch = datamodule.collate_fn(samples)
        assert batch["band_mask"].sum(1).tolist() == [len(s["bands"]) for s in samples]
        wide = hs.HyperspectralCollator(pad_to_multiple_of=8)(samples)  # extra padding beyond the batch max
        assert wide["band_mask"].shape[1] % 8 == 0 and wide["band_mask"].shape[1] > batch["band_mask"].shape[1] - 8
        with torch.no_grad():
            together = model(batch)
            torch.testing.assert_close(model(wide), together, atol=1e-5, rtol=1e-4)
            for i, sample in enumerate(samples):
                torch.testing.assert_close(together[i], model(datamodule.collate_fn([sample]))[0], atol=1e-5, rtol=1e-4)

    def test_report_names_unused_pixels_per_scene(self, datamodule) -> None:
        """Two scenes: each split's buffer pixels are counted per scene, in labelled pixels."""
        table = datamodule.report.to_dict()
        for split in ("train", "val", "test"):
            unused = table[split]["unused"]
            for scene in ("synthetic", "synthetic_rosis"):
                assert unused.get(f"labelled pixels: {scene}: {UNUSED_REASONS['buffer']}", 0) > 0, unused


# -- band sampling ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_dm() -> HyperspectralDataModule:
    dm = HyperspectralDataModule(
        root=str(SCENE_ROOT), layout="generated", patch_size=3, min_bands=20, max_bands=60, batch_size=32
    )
    dm.setup("fit")
    return dm


def test_band_subsets_are_sorted_sized_by_lengths_and_change_per_epoch(synthetic_dm) -> None:
    ds = synthetic_dm.dataset("train")
    assert ds.lengths.min() >= 20 and ds.lengths.max() <= 60 and len(np.unique(ds.lengths)) > 10
    for i in (0, 7, len(ds) - 1):
        b0, b1 = ds.bands_of(i, 0), ds.bands_of(i, 1)
        assert len(b0) == len(b1) == ds.lengths[i]
        assert np.all(np.diff(b0) > 0) and not np.array_equal(b0, b1)
        assert np.array_equal(b0, ds.bands_of(i, 0))  # deterministic per (seed, epoch, index)
        sample = ds[i]
        assert np.all(np.diff(sample["wavelengths"]) > 0)  # kept in wavelength order


def test_band_counts_come_from_their_named_stream(synthetic_dm) -> None:
    ds = synthetic_dm.dataset("train")
    expected = stream(synthetic_dm.seed, "band counts").integers(20, 61, len(ds))
    np.testing.assert_array_equal(ds.lengths, expected)
    other = HyperspectralDataModule(
        root=str(SCENE_ROOT), layout="generated", patch_size=3, min_bands=20, max_bands=60, seed=1
    )
    other.setup("fit")
    assert not np.array_equal(other.dataset("train").lengths[:50], ds.lengths[:50])


def test_loader_batches_use_their_epoch_bands_and_resume_exactly(synthetic_dm) -> None:
    def run(loader, epoch, cut=None):
        loader.batch_sampler.set_epoch(epoch)
        out, it = [], iter(loader)
        for n, batch in enumerate(it):
            out.append((batch["index"].clone(), batch["bands"].clone()))
            if cut is not None and n + 1 == cut:
                return out, loader.state_dict()
        return out, None

    full, _ = run(synthetic_dm.train_dataloader(), 1)
    ds = synthetic_dm.dataset("train")
    index, bands = full[0]
    for row, i in enumerate(index.tolist()):
        k = int(ds.lengths[i])
        assert bands[row, :k].tolist() == ds.bands_of(i, 1).tolist()  # epoch 1's draw, not epoch 0's
        assert np.all(bands[row, k:].numpy() == -1)
    head, state = run(synthetic_dm.train_dataloader(), 1, cut=3)
    resumed = synthetic_dm.train_dataloader()
    resumed.load_state_dict(state)
    tail = [(b["index"], b["bands"]) for b in resumed]
    assert len(head) + len(tail) == len(full)
    for (i0, b0), (i1, b1) in zip(full, head + tail, strict=True):
        assert torch.equal(i0, i1) and torch.equal(b0, b1)


def test_workers_draw_the_same_bands(synthetic_dm) -> None:
    dm = HyperspectralDataModule(
        root=str(SCENE_ROOT), layout="generated", patch_size=3, min_bands=20, max_bands=60, batch_size=32,
        num_workers=2,
    )  # fmt: skip
    dm.setup("fit")
    loader = dm.train_dataloader()
    loader.batch_sampler.set_epoch(2)
    ref = synthetic_dm.train_dataloader()
    ref.batch_sampler.set_epoch(2)
    for a, b in zip(loader, ref, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["spectra"], b["spectra"])


def test_collate_copies_selected_bands_normalized(synthetic_dm) -> None:
    ds = synthetic_dm.dataset("train")
    samples = [ds[3], ds[10]]
    assert np.shares_memory(samples[0]["patch"], ds.cubes[0].array)  # a view into the memmap
    assert isinstance(synthetic_dm.collate_fn, hs.HyperspectralCollator)
    batch = synthetic_dm.collate_fn(samples)
    s = samples[1]
    k = len(s["bands"])
    raw = np.asarray(s["patch"])[..., s["bands"]].transpose(2, 0, 1).astype(np.float32)
    expect = (raw - s["mean"][:, None, None]) / s["std"][:, None, None]
    np.testing.assert_allclose(batch["spectra"][1, :k].numpy(), expect, rtol=1e-5, atol=1e-5)
    assert batch["spectra"].shape[2:] == (3, 3)
    assert torch.all(batch["spectra"][1, k:] == 0) and torch.all(batch["wavelengths"][1, k:] == 0)


def test_dataset_pickles_without_the_cube(synthetic_dm) -> None:
    """What a spawn/forkserver worker receives: the cube's path, never its pixels."""
    ds = synthetic_dm.dataset("train")
    cube = ds.cubes[0]
    _ = cube.array  # mapped in this process; the map must still not travel
    blob = pickle.dumps(ds)
    per_sample = sum(a.nbytes for a in (ds.scene_ids, ds.rows, ds.cols, ds.labels, ds.band_counts, ds.lengths))
    assert len(blob) < per_sample + 200_000 < cube.array.nbytes
    clone = pickle.loads(blob)
    assert clone.cubes[0]._array is None and clone.cubes[0].path == cube.path
    a, b = clone.__getitems__(EpochIndices([0, 5], 3)), ds.__getitems__(EpochIndices([0, 5], 3))
    for field in dataclasses.fields(a):
        assert torch.equal(getattr(a, field.name), getattr(b, field.name)), field.name
    assert isinstance(clone.cubes[0].array, np.memmap)


def test_eval_band_counts() -> None:
    for count, expect in ((25, 25), (None, 200), ([0, 5, 199], 3)):
        dm = HyperspectralDataModule(root=str(SCENE_ROOT), layout="generated", eval_bands=count, batch_size=16)
        dm.setup("fit")
        ds = dm.dataset("test")
        assert set(ds.lengths.tolist()) == {expect}
        assert np.all(np.diff(ds[0]["wavelengths"]) > 0)


# -- the batched gather -------------------------------------------------------------------------


def todays_collate(samples: list[dict], pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
    """The collate before the batched gather (one patch copied per sample, normalized in place): the reference."""
    from varlen.batching import lengths_to_mask, pad_sequences, round_up

    counts = np.array([len(s["bands"]) for s in samples], dtype=np.int64)
    width = round_up(int(counts.max()), pad_to_multiple_of)
    spatial = samples[0]["patch"].shape[:-1]
    per_band = (-1,) + (1,) * len(spatial)
    out = np.zeros((len(samples), width, *spatial), dtype=np.float32)
    for i, s in enumerate(samples):
        row = out[i, : counts[i]]
        row[...] = np.moveaxis(np.take(s["patch"], s["bands"], axis=-1), -1, 0)
        row -= s["mean"].reshape(per_band)
        row /= s["std"].reshape(per_band)
    lengths = torch.from_numpy(counts)
    wavelengths = pad_sequences([s["wavelengths"] for s in samples], 0.0, pad_to_multiple_of, torch.float32)
    return {
        "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
        "spectra": torch.from_numpy(out),
        "wavelengths": wavelengths.values,
        "bands": pad_sequences([s["bands"] for s in samples], -1, pad_to_multiple_of, torch.long).values,
        "band_mask": lengths_to_mask(lengths, width),
        "lengths": lengths,
        "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
        "scene": torch.tensor([s["scene"] for s in samples], dtype=torch.long),
        "coords": torch.tensor([s["coords"] for s in samples], dtype=torch.long),
    }


def assert_same_batch(batch: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert list(batch) == list(expected)
    for key, value in expected.items():
        assert batch[key].dtype == value.dtype and batch[key].shape == value.shape, key
        assert torch.equal(batch[key], value), key


@pytest.fixture(scope="module")
def two_scene_dm() -> HyperspectralDataModule:
    """200 AVIRIS-like and 103 ROSIS-like bands in one DataModule, 3x3 patches, random training subsets."""
    dm = HyperspectralDataModule(
        scenes=["synthetic", "synthetic_rosis"], root=str(SCENE_ROOT), layout="generated", patch_size=3,
        min_bands=10, max_bands=150, batch_size=64,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classes absent from a split: not what this checks
        dm.setup("fit")
    return dm


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize("multiple", [None, 8])
def test_gathered_batches_equal_todays_value_for_value(two_scene_dm, split: str, multiple: int | None) -> None:
    """Both scenes in one batch, random (train, epoch 2) or all bands (val): the batched fetch, the
    collate of `dataset[i]` dicts and the old per-sample collate give the same tensors."""
    ds = two_scene_dm.dataset(split)
    first, second = np.flatnonzero(ds.scene_ids == 0), np.flatnonzero(ds.scene_ids == 1)
    picks = [int(i) for pair in zip(first[[3, 50, 7]], second[[0, 20, 9]], strict=True) for i in pair]
    samples = [ds.sample(i, 2) for i in picks]
    expected = todays_collate(samples, multiple)
    collate = hs.HyperspectralCollator(multiple)
    assert_same_batch(collate(ds.gather(picks, 2, multiple)), expected)
    assert_same_batch(collate(samples), expected)
    if multiple is None:  # as the contract builds it: the DataModule's fetch (in the dataset's epoch), its collate
        loaded = DataModuleContract.collate(two_scene_dm, split, picks)
        assert_same_batch(loaded, todays_collate([ds[i] for i in picks]))
    assert expected["spectra"].shape[2:] == (3, 3) and set(expected["scene"].tolist()) == {0, 1}


@pytest.mark.parametrize(("cube", "patch_size"), [("tiny_envi.hdr", 3), ("tiny_v5.mat", 1), ("tiny.npy", 3)])
def test_gather_equals_todays_on_every_cube_format(tmp_path, cube: str, patch_size: int) -> None:
    """An ENVI BSQ file (mapped as a strided BIP view), a converted .mat and a .npy; patches and spectra."""
    dm = tiny_dm(tmp_path, cube_path=str(DATA / cube), labels_path=str(DATA / "tiny_gt.npy"), patch_size=patch_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dm.setup("fit")
    ds = dm.dataset("val")
    picks = list(range(len(ds)))[::-1]
    assert_same_batch(dm.collate_fn(ds.__getitems__(picks)), todays_collate([ds[i] for i in picks]))


@pytest.mark.parametrize("layout", ["bip", "bsq", "flipped"])
def test_gather_reads_any_cube_layout(layout: str) -> None:
    cube = np.random.default_rng(0).normal(size=(9, 8, 6)).astype(np.float32)
    stored = {
        "bip": cube,
        "bsq": np.ascontiguousarray(cube.transpose(2, 0, 1)).transpose(1, 2, 0),
        "flipped": np.ascontiguousarray(cube[::-1])[::-1],  # negative strides: the cube is indexed directly
    }[layout]
    assert np.array_equal(stored, cube) and (flat_view(stored) is None) == (layout == "flipped")
    scene = hs.Scene("x", stored, np.ones((9, 8), np.int32), np.linspace(400, 900, 6), ["a"], usable_bands=np.arange(6))
    rows, cols = np.array([1, 4, 7]), np.array([1, 6, 3])
    ds = hs.HyperspectralPixels(
        [scene], np.zeros(3), rows, cols, np.zeros(3), 1, [np.zeros(6)], [np.ones(6)], band_counts=np.array([2, 6, 4])
    )
    batch = ds.gather([0, 1, 2], epoch=1)
    for b in range(3):
        bands = ds.bands_of(b, 1)
        expect = cube[rows[b] - 1 : rows[b] + 2, cols[b] - 1 : cols[b] + 2][..., bands].transpose(2, 0, 1)
        np.testing.assert_array_equal(batch.spectra[b, : len(bands)].numpy(), expect)


def test_band_draws_are_uniform_sorted_and_independent_of_the_batch() -> None:
    usable = Ragged.from_arrays([np.arange(0, 40, 2), np.arange(7)])  # scene 0: 20 even bands, scene 1: 7
    n = 4000
    scene_ids = np.repeat(np.array([0, 1], np.int32), n // 2)
    counts = np.where(scene_ids == 0, 5, 3)
    rows = random_band_rows(usable, scene_ids, counts, np.arange(n), seed=0, epoch=0)
    drawn = [rows.values[s : s + k] for s, k in zip(rows.starts, rows.lengths, strict=True)]
    assert rows.lengths.tolist() == counts.tolist()
    assert all(np.all(np.diff(b) > 0) and np.isin(b, usable.values[: 20 if i < n // 2 else None]).all()
               for i, b in enumerate(drawn))  # fmt: skip
    assert all(b.max() < 7 for b in drawn[n // 2 :])
    frequency = np.bincount(np.concatenate(drawn[: n // 2]), minlength=40)[::2]  # expected 2000 * 5 / 20 = 500
    assert np.all(np.abs(frequency - 500) < 100), frequency  # about 5 standard deviations
    picks = np.array([17, 3000, 5, 17])
    again = random_band_rows(usable, scene_ids, counts, picks, seed=0, epoch=0)
    for k, i in enumerate(picks):
        assert np.array_equal(again.values[again.starts[k] : again.starts[k] + again.lengths[k]], drawn[i])
    for other in ({"seed": 0, "epoch": 1}, {"seed": 1, "epoch": 0}):
        moved = random_band_rows(usable, scene_ids, counts, np.arange(n), **other)
        assert np.mean(moved.values != rows.values) > 0.5


# -- spatial split ------------------------------------------------------------------------------


@pytest.mark.parametrize("patch_size", [1, 5])
def test_train_and_test_footprints_share_no_pixel(patch_size) -> None:
    dm = HyperspectralDataModule(root=str(SCENE_ROOT), layout="generated", patch_size=patch_size, block_size=12)
    dm.setup("fit")
    r = patch_size // 2
    shape = dm.scenes[0].labels.shape
    prints = {}
    for split in ("train", "val", "test"):
        ds = dm.dataset(split)
        centres = np.zeros(shape, dtype=bool)
        centres[ds.rows, ds.cols] = True
        prints[split] = footprint_map(centres, r)
        assert len(ds) > 100
    assert not np.any(prints["train"] & prints["test"])
    assert not np.any(prints["train"] & prints["val"])
    assert not np.any(prints["val"] & prints["test"])
    if r == 0:
        return
    # and it is not vacuous: a random pixel split would overlap
    rng = np.random.default_rng(0)
    labelled = np.argwhere(dm.scenes[0].labels > 0)
    pick = rng.random(len(labelled)) < 0.5
    a, b = np.zeros(shape, bool), np.zeros(shape, bool)
    a[tuple(labelled[pick].T)] = True
    b[tuple(labelled[~pick].T)] = True
    assert np.any(footprint_map(a, r) & footprint_map(b, r))


def test_unused_pixels_are_counted_in_the_report_not_warned(tmp_path) -> None:
    labels = np.load(DATA / "tiny_gt.npy")
    labels[0, 1:6] = 1  # a parcel touching the image edge: its 3x3 patches would leave the image
    np.save(tmp_path / "edge.npy", labels)
    dm = tiny_dm(tmp_path, labels_path=str(tmp_path / "edge.npy"), patch_size=3, block_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    assert not [w for w in caught if "centre" in str(w.message) or "dm.report" in str(w.message)]
    assert not hasattr(dm, "skipped") and not hasattr(dm, "num_skipped")
    labels = dm.scenes[0].labels
    used = sum(len(dm.dataset(split)) for split in ("train", "val", "test"))
    assert used + dm.report.unused() == int((labels > 0).sum())  # every labelled pixel is used or counted
    assert dm.report.unused("border") == int(((labels > 0) & ~patch_fits(labels.shape, 1)).sum()) > 0
    assert dm.report.unused("buffer") > 0
    assert "labelled pixels (border: the patch would leave the image)" in str(dm.report)
    assert dm.report.num_skipped == 0


def test_buffer_smaller_than_radius_is_refused() -> None:
    with pytest.raises(ValueError, match="buffer 1 < patch radius 2"):
        HyperspectralDataModule(root=str(SCENE_ROOT), layout="generated", patch_size=5, buffer=1)


def test_border_only_labels_leave_no_patch_centre(tmp_path) -> None:
    """Every labelled pixel on the image border: no 3x3 patch fits, so no sample at all (raised, and says why)."""
    labels = np.zeros((16, 14), dtype=np.uint8)
    labels[0, :6], labels[0, 7:], labels[-1, :] = 1, 2, 3
    np.save(tmp_path / "rim.npy", labels)
    dm = tiny_dm(tmp_path, labels_path=str(tmp_path / "rim.npy"), patch_size=3, on_bad="skip")
    with pytest.raises(DataError, match=r"no training pixel is a patch centre; of 27 labelled pixels.*border"):
        dm.setup("fit")


def test_normalization_uses_train_pixels_only(synthetic_dm) -> None:
    ds = synthetic_dm.dataset("train")
    cube = synthetic_dm.scenes[0].cube
    train = cube[ds.rows, ds.cols].astype(np.float64)
    np.testing.assert_allclose(ds.mean[0], train.mean(0), rtol=1e-5)
    np.testing.assert_allclose(ds.std[0], train.std(0), rtol=1e-4)
    test = synthetic_dm.dataset("test")
    np.testing.assert_array_equal(test.mean[0], ds.mean[0])
    everything = cube[test.rows, test.cols].astype(np.float64)
    assert not np.allclose(everything.mean(0), ds.mean[0], rtol=1e-5)  # the test pixels would move it


def test_band_statistics_in_chunks_match_direct() -> None:
    cube = np.load(DATA / "tiny.npy")
    centres = np.load(DATA / "tiny_gt.npy") == 1
    mean, std = hs.band_statistics(cube, centres, rows_per_chunk=3)
    direct = cube[centres].astype(np.float64)
    np.testing.assert_allclose(mean, direct.mean(0), rtol=1e-10)
    np.testing.assert_allclose(std, direct.std(0), rtol=1e-8)


# -- readers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cube,labels",
    [
        ("tiny_v5.mat", "tiny_v5_gt.mat"),
        ("tiny_v73.mat", "tiny_v73_gt.mat"),
        ("tiny.npy", "tiny_gt.npy"),
        ("tiny_envi.hdr", "tiny_gt.npy"),
    ],
)
def test_readers_agree_and_memory_map(cube, labels, tmp_path) -> None:
    ref = np.load(DATA / "tiny.npy")
    arr = readers.read_array(DATA / cube, ndim=3, cache_dir=tmp_path)
    assert isinstance(arr, np.memmap) or isinstance(getattr(arr, "base", None), np.memmap)
    np.testing.assert_array_equal(np.asarray(arr), ref)
    np.testing.assert_array_equal(readers.read_array(DATA / labels, ndim=2), np.load(DATA / "tiny_gt.npy"))


def test_envi_wavelengths_are_converted_to_nm(tmp_path) -> None:
    wl = readers.read_wavelengths(DATA / "tiny_envi.hdr")
    np.testing.assert_allclose(wl, WAVELENGTHS, atol=0.1)
    dm = tiny_dm(
        tmp_path, cube_path=str(DATA / "tiny_envi.hdr"), labels_path=str(DATA / "tiny_gt.npy"), wavelengths=None
    )
    dm.setup("fit")
    np.testing.assert_allclose(dm.scenes[0].wavelengths, wl)


def test_sensor_wavelengths_account_for_removed_bands() -> None:
    assert aviris_wavelengths(INDIAN_PINES_REMOVED, INDIAN_PINES_CHANNELS).size == 200
    assert aviris_wavelengths(SALINAS_REMOVED).size == 204
    assert len(hs.SCENES["pavia_u"].wavelengths) == 103
    wl = aviris_wavelengths(INDIAN_PINES_REMOVED, INDIAN_PINES_CHANNELS)
    assert not np.any((wl > 1380) & (wl < 1430)) and not np.any((wl > 1830) & (wl < 1950))  # water bands gone


def test_tiny_custom_scene_end_to_end(tmp_path) -> None:
    dm = tiny_dm(tmp_path)
    assert dm.num_classes == 3
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["spectra"].shape[1] == 12 and batch["spectra"].dim() == 2
    model = SpectralTransformer(num_classes=3, d_model=16, nhead=2, num_layers=1)
    assert model(batch).shape == (len(batch["index"]), 3)
    assert sum(dm.report.split(s).kept for s in ("train", "val", "test")) + dm.report.unused() == 120


@pytest.mark.parametrize("mat", ["tiny_v5", "tiny_v73"])
def test_missing_mat_variable_names_the_file_and_variable(tmp_path, mat) -> None:
    with pytest.raises(DataError, match=rf"{mat}\.mat: no variable 'cube'; it holds \['tiny_cube'\]"):
        tiny_dm(tmp_path, cube_path=str(DATA / f"{mat}.mat"), cube_key="cube").prepare_data()
    with pytest.raises(DataError, match=rf"{mat}_gt\.mat: no variable 'gt'; it holds \['tiny_gt'\]"):
        tiny_dm(tmp_path, labels_path=str(DATA / f"{mat}_gt.mat"), labels_key="gt")


def test_unreadable_files_name_the_file_and_cause(tmp_path) -> None:
    (tmp_path / "cut.mat").write_bytes((DATA / "tiny_v5.mat").read_bytes()[:300])
    with pytest.raises(DataError, match=r"cut\.mat: cannot read it as a MATLAB \.mat file \("):
        tiny_dm(tmp_path, cube_path=str(tmp_path / "cut.mat")).prepare_data()
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(DataError, match=r"junk\.npy: cannot read it as a \.npy array \("):
        tiny_dm(tmp_path, labels_path=str(tmp_path / "junk.npy"))
    with pytest.raises(DataError, match=r"tiny_gt\.npy: expected a 3-D cube \[H, W, B\], got shape \(16, 14\)"):
        tiny_dm(tmp_path, cube_path=str(DATA / "tiny_gt.npy")).setup("fit")
    with pytest.raises(DataError, match=r"tiny_envi\.img: unknown cube format '\.img'"):
        tiny_dm(tmp_path, cube_path=str(DATA / "tiny_envi.img")).setup("fit")


def assert_footprints_disjoint(dm: HyperspectralDataModule, radius: int) -> None:
    shape = dm.scenes[0].labels.shape
    prints = {}
    for split in ("train", "val", "test"):
        c = np.zeros(shape, bool)
        c[dm.dataset(split).rows, dm.dataset(split).cols] = True
        prints[split] = footprint_map(c, radius)
        assert len(dm.dataset(split)) > 0, split
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not np.any(prints[a] & prints[b]), (a, b, int((prints[a] & prints[b]).sum()))


def test_external_maps_drop_centres_whose_patches_touch_another_split(tmp_path) -> None:
    dm = tiny_dm(
        tmp_path, train_map=str(DATA / "tiny_TR.mat"), test_map=str(DATA / "tiny_TS.mat"), patch_size=3,
        block_size=3, buffer=1, val_fraction=0.3,
    )  # fmt: skip
    dm.setup("fit")
    assert dm.report.split("test").unused[("labelled pixels", "patch overlapping train patches")] > 0
    assert_footprints_disjoint(dm, 1)


def test_real_pavia_maps_give_disjoint_train_val_test_patches(shared_data, tmp_path) -> None:
    """The published TRpaviaU / TSpaviaU maps lie side by side: val (carved from TR) must not
    touch test patches either."""
    folder = shared_data / "hyperspectral"
    train_map = hs.read_labels(folder / "TRpaviaU.mat")
    test_map = hs.read_labels(folder / "TSpaviaU.mat")
    np.save(tmp_path / "gt.npy", np.where(train_map > 0, train_map, test_map).astype(np.uint8))
    np.save(tmp_path / "cube.npy", np.random.default_rng(0).random((*train_map.shape, 4), dtype=np.float32))
    dm = HyperspectralDataModule(
        scenes=["custom"], root=str(tmp_path), cube_path=str(tmp_path / "cube.npy"),
        labels_path=str(tmp_path / "gt.npy"), sensor="rosis", patch_size=5, val_fraction=0.2,
        train_map=str(folder / "TRpaviaU.mat"), test_map=str(folder / "TSpaviaU.mat"),
    )  # fmt: skip
    dm.setup("fit")
    assert dm.report.unused("patch overlapping test patches") > 0
    assert_footprints_disjoint(dm, 2)


def test_external_maps_must_hold_usable_integer_labels(tmp_path) -> None:
    train = hs.read_labels(DATA / "tiny_TR.mat").astype(np.float64)
    fractional = train.copy()
    r, c = np.argwhere(train > 0)[0]
    fractional[r, c] = 1.5
    np.save(tmp_path / "frac.npy", fractional)
    with pytest.raises(DataError, match=r"frac.npy: labels must be integers .*got 1.5 at row 1, column 1"):
        tiny_dm(tmp_path, train_map=str(tmp_path / "frac.npy")).setup("fit")
    np.save(tmp_path / "empty.npy", np.zeros_like(train))
    with pytest.raises(DataError, match=r"empty.npy: no labelled pixel of scene 'custom' whose 1x1 patch fits"):
        tiny_dm(tmp_path, train_map=str(tmp_path / "empty.npy")).setup("fit")
    np.save(tmp_path / "small.npy", train[:-1])
    with pytest.raises(DataError, match=r"small.npy: the map is 15x14 pixels, the cube 16x14"):
        tiny_dm(tmp_path, train_map=str(tmp_path / "small.npy")).setup("fit")


def test_unknown_label_values_are_left_unlabelled_under_skip(tmp_path) -> None:
    train = hs.read_labels(DATA / "tiny_TR.mat")
    train[train == 2] = 7
    np.save(tmp_path / "TR7.npy", train)
    with pytest.warns(UserWarning, match="dm.report"):
        dm = tiny_dm(tmp_path, train_map=str(tmp_path / "TR7.npy"), on_bad="skip")
        dm.setup("fit")
    assert dm.report.skipped("not one of the scene's classes") == 1  # one value (its 15 pixels named)
    assert "label 7 at 15 pixel(s)" in str(dm.report)
    assert not np.any(dm.scenes[0].train_labels == 7) and int((dm.scenes[0].train_labels > 0).sum()) == 35
    assert 1 not in set(dm.dataset("train").labels.tolist())  # class 2 (0-based 1) has no training pixel left


def test_scene_label_values_a_scene_does_not_know() -> None:
    """Salinas-A numbers its classes 1, 10-14: a 7 is no class of it."""
    raw = np.array([[0, 1, 10], [14, 7, 7]], dtype=np.uint8)
    values = hs.SCENES["salinas_a"].label_values
    with pytest.raises(DataError, match=r"gt\.mat: label 7 at 2 pixel\(s\), first at row 1, column 1: .*1, 10, 11"):
        known_labels(raw, values, "gt.mat")
    report = DataReport("skip")
    np.testing.assert_array_equal(known_labels(raw, values, "gt.mat", report), [[0, 1, 2], [6, 0, 0]])
    assert report.skipped("not one of the scene's classes") == 1


@pytest.mark.parametrize("name", ["TRpaviaU", "TSpaviaU"])
def test_real_pavia_maps_read(shared_data, name) -> None:
    labels = hs.read_labels(shared_data / "hyperspectral" / f"{name}.mat")
    assert labels.shape == (610, 340) and set(np.unique(labels).tolist()) == set(range(10))


def test_salinas_a_labels_remap(shared_data) -> None:
    raw = hs.read_labels(shared_data / "hyperspectral" / "SalinasA_gt.mat")
    labels = known_labels(raw, hs.SCENES["salinas_a"].label_values, "SalinasA_gt.mat")
    assert labels.max() == 6 and set(np.unique(labels).tolist()) == set(range(7))
    check_classes_present(labels, 6, "x")


def test_synthetic_uses_real_indian_pines_layout(shared_data, tmp_path) -> None:
    dm = HyperspectralDataModule(root=str(tmp_path), layout="auto")
    real = hs.read_labels(shared_data / "hyperspectral" / "Indian_pines_gt.mat")
    assert shared_layout_path().is_file()
    dm.setup("fit")
    np.testing.assert_array_equal(dm.scenes[0].labels, real)
    assert dm.num_classes == 16


# -- caches -------------------------------------------------------------------------------------


def test_mat_cache_is_built_in_prepare_data_and_only_mapped_in_build(tmp_path, monkeypatch) -> None:
    dm = tiny_dm(tmp_path)
    dm.prepare_data()
    key = cache_key(file_hash(DATA / "tiny_v5.mat"), "tiny_cube", version=readers.MAT_CACHE_VERSION)
    cache = tmp_path / "cache" / f"tiny_v5.tiny_cube.{key}.npy"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [cache.name]

    def no_write(*args, **kwargs):
        raise AssertionError("build converted the cube again")

    monkeypatch.setattr(readers, "write_npy", no_write)
    dm.setup("fit")
    assert dm.scenes[0].cube.path == cache and dm.scenes[0].source == str(DATA / "tiny_v5.mat")


def test_mat_cache_key_follows_content_not_path_or_mtime(tmp_path) -> None:
    """Two cubes called data.mat must not share a conversion; touching a file does not rebuild it."""
    paths = []
    for n in (1, 2):
        (tmp_path / f"d{n}").mkdir()
        savemat(tmp_path / f"d{n}" / "data.mat", {"cube": np.full((4, 5, 3), n, dtype=np.int16)})
        paths.append(tmp_path / f"d{n}" / "data.mat")
    cache = tmp_path / "cache"
    first, second = (hs.open_cube(p, cache_dir=cache) for p in paths)
    assert first.path != second.path
    assert np.all(np.asarray(first) == 1) and np.all(np.asarray(second) == 2)
    written = first.path.stat().st_mtime_ns
    os.utime(paths[0], ns=(written + 10**9, written + 10**9))
    assert hs.open_cube(paths[0], cache_dir=cache).path == first.path
    assert first.path.stat().st_mtime_ns == written  # not converted again
    savemat(paths[0], {"cube": np.full((4, 5, 3), 9, dtype=np.int16)})  # same name, new content
    again = hs.open_cube(paths[0], cache_dir=cache)
    assert again.path != first.path and np.all(np.asarray(again) == 9)


@pytest.mark.parametrize("keep", [0, 100, 200])
def test_truncated_cache_is_rebuilt_with_a_warning(tmp_path, keep) -> None:
    dm = tiny_dm(tmp_path)
    dm.prepare_data()
    (cache,) = (tmp_path / "cache").iterdir()
    with open(cache, "r+b") as f:
        f.truncate(keep)
    dm = tiny_dm(tmp_path)
    with pytest.warns(UserWarning, match=rf"cache .*{cache.name} is unreadable .*building it again"):
        dm.prepare_data()
    dm.setup("fit")
    np.testing.assert_array_equal(np.asarray(dm.scenes[0].cube), np.load(DATA / "tiny.npy"))


def test_truncated_synthetic_cube_is_rebuilt(tmp_path) -> None:
    dm = HyperspectralDataModule(root=str(tmp_path), layout="generated", scenes=["synthetic_rosis"])
    dm.prepare_data()
    (cache,) = (tmp_path / "cache").iterdir()
    reference = np.load(cache)
    with open(cache, "r+b") as f:
        f.truncate(cache.stat().st_size // 2)
    with pytest.warns(UserWarning, match="building it again"):
        dm.setup("fit")
    np.testing.assert_array_equal(np.asarray(dm.scenes[0].cube), reference)


# -- downloads ----------------------------------------------------------------------------------


def test_download_is_patched_to_a_copy_and_checksummed(shared_data, tmp_path, monkeypatch) -> None:
    """Indian Pines: the real label map (known MD5) plus a fake cube (wrong MD5, then accepted)."""
    source = tmp_path / "remote"
    source.mkdir()
    shutil.copy(shared_data / "hyperspectral" / "Indian_pines_gt.mat", source / "Indian_pines_gt.mat")
    rng = np.random.default_rng(0)
    savemat(
        source / "Indian_pines_corrected.mat",
        {"indian_pines_corrected": rng.integers(1000, 5000, (145, 145, 200)).astype(np.int16)},
    )
    fetched = []

    def fake_urlopen(url: str, timeout: float = 0):  # the network, as a local copy
        fetched.append(url)
        return open(source / url.rsplit("/", 1)[-1], "rb")

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    root = tmp_path / "root"
    with pytest.raises(DownloadError, match="Indian_pines_corrected.mat.*expected 66dbc9f4a9b7c9b1445f60a87b505101"):
        HyperspectralDataModule(scenes=["indian_pines"], root=str(root), download=True).prepare_data()
    assert not (root / "indian_pines" / "Indian_pines_corrected.mat").exists()  # nothing half-verified kept
    info = hs.SCENES["indian_pines"]
    fake_md5 = "md5:" + file_hash(source / "Indian_pines_corrected.mat", "md5")
    patched = dataclasses.replace(info, cube=dataclasses.replace(info.cube, checksum=fake_md5))
    monkeypatch.setitem(hs.SCENES, "indian_pines", patched)
    dm = HyperspectralDataModule(scenes=["indian_pines"], root=str(root), download=True, patch_size=3)
    dm.prepare_data()
    dm.setup("fit")
    assert {u.rsplit("/", 1)[-1] for u in fetched} == {"Indian_pines_corrected.mat", "Indian_pines_gt.mat"}
    assert all(u.startswith("https://www.ehu.eus/ccwintco/uploads/") for u in fetched)
    cube = dm.scenes[0].cube
    assert cube.shape == (145, 145, 200) and isinstance(cube.array, np.memmap)
    assert cube.path.parent == root / "cache" and cube.path.name.startswith("Indian_pines_corrected.")
    before = len(fetched)
    HyperspectralDataModule(scenes=["indian_pines"], root=str(root), download=True).prepare_data()
    assert len(fetched) == before  # verified files are kept, not fetched again


def offline(url, timeout: float = 0):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_offline_download_says_which_url_and_where_to_put_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    dm = HyperspectralDataModule(scenes=["pavia_u"], root=str(tmp_path), download=True)
    with pytest.raises(DownloadError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert f"downloading {EHU}/e/ee/PaviaU.mat to {tmp_path / 'pavia_u' / 'PaviaU.mat'} failed" in message
    assert "URLError" in message and f"put it at {tmp_path / 'pavia_u' / 'PaviaU.mat'}" in message
    assert not list((tmp_path / "pavia_u").iterdir())  # no partial file


def test_pavia_config_offline_ends_in_a_download_error(tmp_path, monkeypatch) -> None:
    """What `varlen fit --config configs/hyperspectral_pavia_u.yaml` meets offline: a DataError (the CLI
    prints it without a traceback and exits 2), not urllib's URLError."""
    from varlen.cli.dispatch import main

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.chdir(ROOT)
    args = ["fit", "--config", "configs/hyperspectral_pavia_u.yaml", f"--data.init_args.root={tmp_path}"]
    with pytest.raises(DownloadError, match=r"PaviaU\.mat.*Fetch it by hand"):
        main([*args, "--trainer.accelerator=cpu", f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false"])


def test_real_layout_config_instantiates() -> None:
    from varlen.cli.dispatch import main

    cli = main(["--config", str(ROOT / "configs" / "hyperspectral_pavia_u.yaml")], run=False)
    assert cli.datamodule.num_classes == cli.model.hparams.num_classes == 9
    assert cli.datamodule.scene_names == ["pavia_u"] and cli.datamodule.on_bad == "raise"


def test_missing_scene_says_what_to_fetch(tmp_path) -> None:
    dm = HyperspectralDataModule(scenes=["pavia_u"], root=str(tmp_path))
    message = (
        r"scene 'pavia_u' \(PaviaU\.mat, PaviaU_gt\.mat\) not found \(looked in: .*pavia_u\)\. To get it: pass "
        r"download=True, or download https://www\.ehu\.eus/ccwintco/uploads/e/ee/PaviaU\.mat and .*PaviaU_gt\.mat"
    )
    for step in (dm.prepare_data, lambda: dm.setup("fit")):
        with pytest.raises(DatasetNotFoundError, match=message):
            step()


# -- bad input ----------------------------------------------------------------------------------


def test_cube_and_label_shapes_differ(tmp_path) -> None:
    np.save(tmp_path / "gt.npy", np.ones((15, 14), dtype=np.uint8))
    dm = tiny_dm(tmp_path, labels_path=str(tmp_path / "gt.npy"))
    with pytest.raises(DataError, match=r"tiny_v5.mat: cube is 16x14 pixels but its label map is 15x14"):
        dm.setup("fit")


@pytest.mark.parametrize("arg", ["eval_bands", "train_bands"])
def test_band_index_out_of_range(tmp_path, arg) -> None:
    dm = tiny_dm(tmp_path, **{arg: [0, 3, 12]})
    with pytest.raises(DataError, match=f"{arg}: band index 12 out of range for scene 'custom' with 12 bands"):
        dm.setup("fit")


@pytest.mark.parametrize("arg", ["eval_bands", "train_bands"])
def test_empty_band_list(tmp_path, arg) -> None:
    with pytest.raises(DataError, match=f"{arg}: the band list is empty, so every pixel would have 0 bands"):
        tiny_dm(tmp_path, **{arg: []}).setup("fit")
    with pytest.raises(DataError, match=r"eval_bands: band count must be >= 1 \(a sample of 0 bands\), got 0"):
        tiny_dm(tmp_path, eval_bands=0).setup("fit")


def test_band_count_arguments_are_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_bands needs min_bands"):
        tiny_dm(tmp_path, max_bands=5)
    with pytest.raises(ValueError, match="max_bands 3 < min_bands 5"):
        tiny_dm(tmp_path, min_bands=5, max_bands=3)


def test_nan_bands_raise_are_dropped_under_skip_or_are_not_scanned(tmp_path) -> None:
    path = nan_cube(tmp_path)
    with pytest.raises(DataError, match=r"nan.npy: band\(s\) \[5\] \(at \[1336.4\] nm\) hold NaN or inf values"):
        tiny_dm(tmp_path, cube_path=str(path)).setup("fit")
    dm = tiny_dm(tmp_path, cube_path=str(path), on_bad="skip", min_bands=4)
    with pytest.warns(UserWarning, match=r"skipped 1 bad item.*nan.npy: band 5 \(1336.4 nm\): holds NaN or inf"):
        dm.setup("fit")
    assert dm.report.skipped("NaN") == 1 and dm.scenes[0].dropped_bands == [5]
    ds = dm.dataset("train")
    assert all(5 not in ds.bands_of(i, e) for i in range(len(ds)) for e in (0, 1))
    assert 5 not in dm.dataset("test")[0]["bands"] and len(dm.dataset("test")[0]["bands"]) == 11
    with pytest.raises(DataError, match=r"eval_bands: band\(s\) \[5\] of scene 'custom' were dropped"):
        tiny_dm(tmp_path, cube_path=str(path), on_bad="skip", eval_bands=[4, 5]).setup("fit")
    trusted = tiny_dm(tmp_path, cube_path=str(path), check_values=False)  # no scan: the band stays
    trusted.setup("fit")
    assert trusted.scenes[0].usable_bands.tolist() == list(range(12)) and trusted.report.num_skipped == 0


def test_several_nan_bands_are_named_in_one_error(tmp_path) -> None:
    cube = np.load(DATA / "tiny.npy").astype(np.float32)
    cube[0, 0, [1, 8]] = [np.inf, np.nan]
    np.save(tmp_path / "bad.npy", cube)
    with pytest.raises(DataError, match=r"bad.npy: band\(s\) \[1, 8\] \(at \[627.3, 1868.2\] nm\)"):
        tiny_dm(tmp_path, cube_path=str(tmp_path / "bad.npy")).setup("fit")
    cube[..., :] = np.nan
    np.save(tmp_path / "all.npy", cube)
    with pytest.raises(DataError, match="all.npy: every band holds NaN or inf values"):
        tiny_dm(tmp_path, cube_path=str(tmp_path / "all.npy"), on_bad="skip").setup("fit")


def test_wavelengths_not_increasing(tmp_path) -> None:
    wl = WAVELENGTHS.copy()
    wl[6] = wl[4]
    with pytest.raises(DataError, match="strictly increasing.*band 6"):
        tiny_dm(tmp_path, wavelengths=wl.tolist()).setup("fit")
    with pytest.raises(DataError, match="11 wavelengths for a cube of 12 bands"):
        tiny_dm(tmp_path, wavelengths=wl[:11].tolist()).setup("fit")


def test_empty_class(tmp_path) -> None:
    labels = np.load(DATA / "tiny_gt.npy")
    labels[labels == 2] = 4  # class 2 now has no pixel
    np.save(tmp_path / "gap.npy", labels)
    with pytest.raises(DataError, match=r"gap.npy: class\(es\) \[2\] have no labelled pixel"):
        tiny_dm(tmp_path, labels_path=str(tmp_path / "gap.npy"))


def test_label_values_out_of_range_are_refused_before_any_cast(tmp_path) -> None:
    """A stray int64 label of 2**32 + 3 is neither wrapped to class 3 in the int32 tables nor
    taken as 2**32 classes to count; a negative one is no class."""
    labels = np.load(DATA / "tiny_gt.npy").astype(np.int64)
    labels[0, 0] = 2**32 + 3
    np.save(tmp_path / "wide.npy", labels)
    with pytest.raises(DataError, match=r"wide.npy: class\(es\) \[4, 5, .*, 13\] and 4294967285 more have no"):
        tiny_dm(tmp_path, labels_path=str(tmp_path / "wide.npy"))
    labels[0, 0] = -1
    np.save(tmp_path / "negative.npy", labels)
    dm = tiny_dm(tmp_path, labels_path=str(tmp_path / "negative.npy"))
    with pytest.raises(DataError, match=r"negative.npy: label -1 at 1 pixel\(s\), first at row 0, column 0: not one"):
        dm.setup("fit")


def test_no_wavelengths_for_a_custom_cube(tmp_path) -> None:
    with pytest.raises(DataError, match="tiny_v5.mat: no wavelengths: pass wavelengths"):
        tiny_dm(tmp_path, wavelengths=None).setup("fit")


# -- metrics ------------------------------------------------------------------------------------


def test_oa_aa_kappa_match_their_definitions() -> None:
    """Class 2 is absent from the targets but predicted: AA averages the present classes only."""
    target = torch.tensor([0, 0, 0, 1, 1, 1, 1, 3, 3, 3])
    pred = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 0])
    confusion = np.zeros((4, 4))
    np.add.at(confusion, (target.numpy(), pred.numpy()), 1)
    n = confusion.sum()
    oa = np.trace(confusion) / n
    present = confusion.sum(1) > 0
    aa = np.mean(np.diag(confusion)[present] / confusion.sum(1)[present])  # classes 0, 1, 3: (2/3 + 2/4 + 2/3) / 3
    expected = (confusion.sum(0) * confusion.sum(1)).sum() / n**2
    kappa = (oa - expected) / (1 - expected)
    model = SpectralTransformer(num_classes=4, d_model=16, nhead=2, num_layers=1)
    logits = torch.nn.functional.one_hot(pred, 4).float()
    got = model.test_metrics(logits, target)
    assert got["test/oa"].item() == pytest.approx(oa)
    assert got["test/aa"].item() == pytest.approx(aa) == pytest.approx((2 / 3 + 2 / 4 + 2 / 3) / 3)
    assert got["test/kappa"].item() == pytest.approx(kappa)
    metric = AverageAccuracy(4)  # accumulates over batches like any torchmetrics metric
    metric.update(logits[:4], target[:4])
    metric.update(logits[4:], target[4:])
    assert metric.compute().item() == pytest.approx(aa)


def test_checkpoint_band_statistics_normalize_every_split(synthetic_dm) -> None:
    """A checkpoint's train band statistics replace the rebuilt ones in every split's normalization."""
    state = synthetic_dm.state_dict()["data_state"]
    moved = {**state, "band_mean": [[v + 1.0 for v in m] for m in state["band_mean"]]}
    dm = HyperspectralDataModule(
        root=str(SCENE_ROOT), layout="generated", patch_size=3, min_bands=20, max_bands=60, batch_size=32
    )
    dm.setup("fit")
    before = dm.collate_fn(dm.dataset("val").__getitems__([0, 1]))
    dm.load_state_dict({"data_state": moved})
    after = dm.collate_fn(dm.dataset("val").__getitems__([0, 1]))
    for split in dm.datasets.values():
        np.testing.assert_allclose(split.table_mean, np.concatenate(moved["band_mean"]), rtol=1e-6)
    mask = before["band_mask"]
    assert not torch.allclose(before["spectra"][mask], after["spectra"][mask])
