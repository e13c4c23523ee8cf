"""A transform's output is data too (issue 40, item 4): what a per-sample `transform` returns is checked as what
is read, and a wrong sample is a `DataError` naming the split, the sample, the field and the transform, never a
raw shape error at the model or a `nan` trained on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from varlen.datamodules.sequence import SequenceDataModule
from varlen.errors import DataError


def columns(rows: int = 24, regression: bool = False) -> dict:
    """`signal` float32 `[T, 3]`, `half` float16 `[T]`, a fixed `xyz` `[3]`, three classes (or targets)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 12, rows)
    label = rng.normal(size=rows).tolist() if regression else [int(k) for k in rng.integers(0, 3, rows)]
    return {
        "signal": [rng.normal(size=(n, 3)).astype(np.float32) for n in lengths],
        "half": [rng.normal(size=n).astype(np.float16) for n in lengths],
        "xyz": rng.normal(size=(rows, 3)).astype(np.float32),
        "label": label,
    }


def first_batch(transform, **kwargs) -> dict:
    dm = SequenceDataModule(train=kwargs.pop("train", None) or columns(), transform=transform, batch_size=4, **kwargs)
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def wrong_trailing(sample):
    sample["signal"] = sample["signal"][:, :2]
    return sample


def dropped_axis(sample):
    sample["signal"] = sample["signal"][:, 0]
    return sample


def label_99(sample):
    sample["label"] = 99
    return sample


def crop_to_nothing(sample):
    sample["signal"] = sample["signal"][:0]
    return sample


def nan_noise(sample, rng):
    sample["signal"] = sample["signal"] + np.where(rng.random(sample["signal"].shape) < 2, np.nan, 0)
    return sample


def dropped_label(sample):
    return {k: v for k, v in sample.items() if k != "label"}


def dropped_field(sample):
    return {k: v for k, v in sample.items() if k != "half"}


def half_overflow(sample):
    sample["half"] = sample["half"].astype(np.float32) * 1e6  # float16 holds 65504 at most
    return sample


def fixed_reshaped(sample):
    sample["xyz"] = sample["xyz"][:2]
    return sample


def text_field(sample):
    sample["half"] = np.array(["a"] * len(sample["half"]))
    return sample


BAD = [
    (wrong_trailing, r"field 'signal' has shape \[\d+, 2\] where \[length, 3\] is served"),
    (dropped_axis, r"field 'signal' has shape \[\d+\] where \[length, 3\] is served"),
    (label_99, r"label 99 is no class id \(0\.\.2: the 3 classes"),
    (crop_to_nothing, r"size field 'signal' has length 0 where it was planned at \d+.*nor empty it"),
    (nan_noise, r"field 'signal' holds a non-finite value \(first at element 0\) where the sample read was finite"),
    (dropped_label, r"returned no 'label': return the sample's label too"),
    (dropped_field, r"returned no field 'half'"),
    (half_overflow, r"field 'half' holds .*, which its served dtype float16 cannot hold \(-65504\.\.65504\)"),
    (fixed_reshaped, r"field 'xyz' has shape \[2\] where \[3\] is served"),
    (text_field, r"field 'half' holds <U1 values where float16 numbers are served"),
]


@pytest.mark.parametrize(("transform", "told"), BAD, ids=[fn.__name__ for fn, _ in BAD])
@pytest.mark.parametrize("on_bad", ["raise", "skip"])
def test_a_bad_transform_output_is_named_whatever_on_bad_says(transform, told: str, on_bad: str) -> None:
    """Before: each was served (a raw shape error later, label 99 or nan trained on, an empty sample), or a
    raw error of the collate."""
    where = rf"split 'train' \(in-memory columns\): transform {__name__}\.{transform.__name__} of sample \d+: "
    with pytest.raises(DataError, match=where + told):
        first_batch(transform, on_bad=on_bad)


def regression_nan(sample):
    sample["label"] = float("nan")
    return sample


def half_a_class(sample):
    sample["label"] = np.float64([0.5, np.nan, 1.0, np.inf][sample["index"] % 4])
    return sample


def test_a_label_must_stay_a_class_id_or_a_finite_target() -> None:
    with pytest.raises(DataError, match=r"regression_nan of sample \d+: label nan is not a finite float32"):
        first_batch(regression_nan, train=columns(regression=True))
    with pytest.raises(DataError, match=r"half_a_class of sample \d+: label (0\.5|nan|inf) is no class id \(0\.\.2"):
        first_batch(half_a_class)


def jitter_and_crop(sample, rng):
    """A good transform: float64 noise (cast back), a crop, tensors returned, the label kept."""
    keep = int(rng.integers(1, len(sample["signal"]) + 1))
    sample["signal"] = torch.from_numpy(sample["signal"][:keep] + rng.normal(0, 0.1, (keep, 3)))
    sample["half"] = sample["half"] * 2.0
    sample["label"] = torch.tensor(sample["label"])
    return sample


def test_a_good_transform_is_served_cast_back_to_the_served_dtypes() -> None:
    batch = first_batch(jitter_and_crop)
    assert batch["signal"].dtype == torch.float32 and batch["half"].dtype == torch.float16
    assert batch["labels"].dtype == torch.int64 and batch["xyz"].shape[1:] == (3,)
    assert torch.isfinite(batch["signal"]).all() and int(batch["signal_lengths"].min()) >= 1


#: what `scaled_crop` does, set by each example (one DataModule serves them all: loaders without workers)
SCALED_CROP = {"keep": 1, "scale": 1.0, "label": 0}


def scaled_crop(sample):
    sample["signal"] = sample["signal"][: SCALED_CROP["keep"]] * np.float32(SCALED_CROP["scale"])
    sample["half"] = sample["half"].astype(np.float64) * SCALED_CROP["scale"]
    sample["label"] = SCALED_CROP["label"]
    return sample


@pytest.fixture(scope="module")
def scaled() -> tuple[SequenceDataModule, dict]:
    data = columns(8)
    dm = SequenceDataModule(train=data, transform=scaled_crop, batch_size=8, val_fraction=0.25)
    dm.setup("fit")
    return dm, data


@settings(max_examples=25, deadline=None)
@given(keep=st.integers(0, 14), scale=st.floats(-1e6, 1e6) | st.just(float("nan")), label=st.integers(-2, 4))
def test_a_transform_output_is_served_exactly_when_it_fits_the_fields(scaled, keep: int, scale: float, label: int):
    """Crops of any length, values of any scale, any label: served when every check passes, else refused."""
    dm, data = scaled
    SCALED_CROP.update(keep=keep, scale=scale, label=label)
    rows = dm.dataset("train").positions
    half = np.abs(np.concatenate([data["half"][r] for r in rows]).astype(np.float64) * scale)
    fits = keep >= 1 and np.isfinite(scale) and float(np.max(half)) <= 65504 and 0 <= label < 3
    if not fits:
        with pytest.raises(DataError, match="transform .*scaled_crop of sample"):
            list(dm.train_dataloader())
        return
    served = {}
    for batch in dm.train_dataloader():
        served |= dict(zip(batch["index"].tolist(), batch["signal_lengths"].tolist(), strict=True))
        assert torch.equal(batch["labels"], torch.full_like(batch["labels"], label))
    assert served == {i: min(keep, len(data["signal"][int(r)])) for i, r in enumerate(rows)}
