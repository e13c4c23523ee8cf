"""The dataset contract, checked: every way a DataModule's datasets can miss it ends in an error that names what
is missing and how to give it; a dataset of plain samples works with the base's default collate; repr(dm)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, default_collate

from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.errors import DataError

RNG_LENGTHS = np.random.default_rng(0).integers(1, 9, 24)


class Samples(Dataset):
    """Dict samples of random-length `x` (only `__getitem__`), a label, and optionally no `index`."""

    def __init__(self, lengths=RNG_LENGTHS, index: bool = True, sizes=None) -> None:
        self.sizes, self.index = np.asarray(lengths), index
        if sizes is not None:
            self.lengths = sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> dict:
        sample = {"x": np.arange(self.sizes[i], dtype=np.float32) + 1, "label": i % 2, "name": f"s{i}"}
        return {"index": i, **sample} if self.index else sample


class Custom(VarLenDataModule):
    """A user's DataModule: `build` returns what `custom` gives it, and no collate is set."""

    built = None

    def __init__(self, batch_size: int | None = 4, max_tokens: int | None = None) -> None:
        super().__init__(**base_args(locals()))

    def build(self, stage):
        return self.built


def custom(built, **batching) -> Custom:
    dm = Custom(**batching)
    dm.built = built
    return dm


def first_batch(dm: VarLenDataModule) -> dict:
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def test_a_dataset_without_lengths_says_how_to_give_them() -> None:
    with pytest.raises(DataError, match=r"split 'train' \(Samples\) has no `lengths`.*self\.lengths = "):
        custom({"train": Samples()}).setup("fit")


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (RNG_LENGTHS[:-1], r"lengths have shape \(23,\), the dataset holds 24 samples"),
        (np.stack([RNG_LENGTHS, RNG_LENGTHS], axis=1), r"shape \(24, 2\).*1 size axes \['size'\]"),
        (RNG_LENGTHS - 5, r"lengths of sample \d+ is negative.*whole numbers >= 0"),
        (RNG_LENGTHS + 0.5, r"lengths of sample 0 is not a whole number"),
        (np.array([f"{n}" for n in RNG_LENGTHS]), r"lengths are of dtype <U1: give whole numbers"),
    ],
    ids=["count", "axes", "negative", "fraction", "text"],
)
def test_lengths_of_the_wrong_shape_or_values_are_refused_naming_the_split(sizes, message) -> None:
    with pytest.raises(DataError, match=r"Custom: split 'val' \(Samples\).*" + message):
        custom({"train": Samples(sizes=RNG_LENGTHS), "val": Samples(sizes=sizes)}).setup("fit")


def test_build_must_return_map_style_datasets_by_split() -> None:
    with pytest.raises(TypeError, match=r"Custom.build\(\) must return datasets by split, got list"):
        custom([Samples(sizes=RNG_LENGTHS)]).setup("fit")
    with pytest.raises(TypeError, match=r"split 'train' \(generator\): build\(\) must return map-style datasets"):
        custom({"train": (i for i in range(3))}).setup("fit")


def test_samples_without_index_are_refused_at_the_first_batch() -> None:
    dm = custom({"train": Samples(index=False, sizes=RNG_LENGTHS)})
    with pytest.raises(DataError, match=r"split 'train': the collated batch has no 'index' \(\['label', 'name', 'x'"):
        first_batch(dm)


def test_a_collate_that_stacks_unequal_tensors_names_the_field() -> None:
    dm = custom({"train": Samples(sizes=RNG_LENGTHS)}, batch_size=None, max_tokens=64)
    dm.collate_fn = default_collate  # torch's: stacks every field
    with pytest.raises(
        DataError, match=r"stacked tensors of unequal sizes: field 'x' has shape.*Leave collate_fn None"
    ):
        first_batch(dm)


def test_a_collate_that_returns_unequal_tensors_names_the_field() -> None:
    dm = custom({"train": Samples(sizes=RNG_LENGTHS)}, batch_size=None, max_tokens=64)
    dm.collate_fn = lambda samples: {
        "index": torch.tensor([s["index"] for s in samples]),
        "x": [s["x"] for s in samples],
    }
    with pytest.raises(DataError, match=r"the collate returned 'x' as a list of \d+ arrays of unequal sizes"):
        first_batch(dm)


def test_plain_samples_are_padded_by_the_default_collate() -> None:
    """Only `__getitem__`, no collate: `x` padded with its mask and lengths, numbers and text collated."""
    dm = custom({"train": Samples(sizes=RNG_LENGTHS)}, batch_size=None, max_tokens=64)
    seen = []
    dm.setup("fit")
    for batch in dm.train_dataloader():
        lengths = torch.as_tensor(RNG_LENGTHS)[batch["index"]]
        assert torch.equal(batch["x_lengths"], lengths) and torch.equal(batch["x_mask"].sum(1), lengths)
        assert torch.equal(batch["x"][batch["x_mask"]], torch.cat([torch.arange(n) + 1.0 for n in lengths]))
        assert not batch["x"][~batch["x_mask"]].any()
        assert batch["label"].dtype == torch.int64 and batch["name"] == [f"s{i}" for i in batch["index"].tolist()]
        stats = dm.batch_stats(batch)  # no mask_keys: the default collate's masks
        assert (stats.real, stats.padded) == (int(lengths.sum()), batch["x_mask"].numel())
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(24))


def test_the_default_collate_pads_declared_keys_always_and_names_what_cannot_be_joined() -> None:
    from varlen.batching.pad_collate import PadCollate

    equal = [{"index": i, "x": np.ones(3)} for i in range(2)]
    assert "x_mask" not in PadCollate()(equal) and PadCollate(ragged=("x",))(equal)["x_mask"].all()
    with pytest.raises(DataError, match=r"'x' has shape \(2, 4\) in sample 1 and \(3, 2\) in sample 0"):
        PadCollate()([{"index": 0, "x": np.ones((3, 2))}, {"index": 1, "x": np.ones((2, 4))}])
    with pytest.raises(DataError, match=r"sample 1 has keys \['index'\].*\(missing \['x'\]"):
        PadCollate()([{"index": 0, "x": np.ones(2)}, {"index": 1}])


def test_repr_shows_the_splits_once_set_up_and_the_batching() -> None:
    dm = custom({"train": Samples(sizes=RNG_LENGTHS), "val": Samples(RNG_LENGTHS[:5], sizes=RNG_LENGTHS[:5])})
    assert repr(dm) == "Custom(not set up | max_tokens=None, batch_size=4, shuffle=True)"
    dm.setup("fit")
    assert repr(dm) == "Custom(train=24 val=5 test=val | max_tokens=None, batch_size=4, shuffle=True)"  # stands in
    big = custom({"train": Samples(np.ones(1200, int), sizes=np.ones(1200, int))}, batch_size=None, max_tokens=2048)
    big.setup("fit")
    assert repr(big) == "Custom(train=1,200 | max_tokens=2048, batch_size=None, shuffle=True)"
    assert str(big) == repr(big), "print(dm) shows the same line (not Lightning's, which builds every loader)"
