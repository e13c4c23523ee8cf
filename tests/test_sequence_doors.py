"""The "bring your own data" door (issue 37): your arrays in one call, each field in its dtype; CSV and JSON Lines
tables in; a per-sample transform that replays on resume; the budget's cost as an argument."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

import varlen
from varlen.datamodules.sequence import SequenceDataModule
from varlen.errors import DataError


def arrays(rows: int = 40, seed: int = 0) -> dict:
    """One of each kind: float32 ``[T, 3]``, float16 ``[T, 2]``, int64 ``[T]``, float32 ``[T]``, int labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, rows)
    return {
        "signal": [rng.normal(size=(n, 3)).astype(np.float32) for n in lengths],
        "half": [rng.normal(size=(n, 2)).astype(np.float16) for n in lengths],
        "ids": [rng.integers(0, 50, n).astype(np.int64) for n in lengths],
        "level": [rng.normal(size=n).astype(np.float32) for n in lengths],
        "label": [int(k) for k in rng.integers(0, 3, rows)],
    }


def fitted(dm: SequenceDataModule) -> SequenceDataModule:
    dm.prepare_data()
    dm.setup("fit")
    return dm


# -- 1. your arrays in one call ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_write_arrays_round_trips_every_fields_dtype_and_values(suffix: str, tmp_path: Path) -> None:
    columns = arrays()
    path = varlen.write_arrays(tmp_path / "deep" / f"train{suffix}", columns)
    assert path.is_file()
    dm = fitted(SequenceDataModule(train=str(path), val_fraction=0.2, cache_dir=str(tmp_path / "cache")))
    for split in ("train", "val"):
        dataset = dm.dataset(split)
        for i in range(len(dataset)):
            sample, row = dataset[i], int(dataset.positions[i])
            for name in ("signal", "half", "ids", "level"):
                assert sample[name].dtype == columns[name][row].dtype, (name, sample[name].dtype)
                np.testing.assert_array_equal(sample[name], columns[name][row])
            assert dm.class_names[sample["label"]] == str(columns["label"][row])
    batch = next(iter(dm.train_dataloader()))
    dtypes = {name: batch[name].dtype for name in ("signal", "half", "ids", "level")}
    assert dtypes == {"signal": torch.float32, "half": torch.float16, "ids": torch.int64, "level": torch.float32}
    assert batch["signal"].shape[-1] == 3 and batch["half"].shape[-1] == 2


def test_write_arrays_refuses_other_suffixes_and_names_a_bad_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Parquet \(\.parquet, \.pq\) or Arrow IPC"):
        varlen.write_arrays(tmp_path / "x.csv", {"x": [np.zeros(2)]})
    bad = [np.zeros((3, 2), np.float32), np.zeros((2, 4), np.float32)]
    with pytest.raises(DataError, match=r"row 1: column 'x' holds an array of shape \(2, 4\)"):
        varlen.write_arrays(tmp_path / "x.parquet", {"x": bad})
    assert not (tmp_path / "x.parquet").exists()


def test_dtypes_casts_a_field_as_batches_are_made() -> None:
    rng = np.random.default_rng(1)
    wide = [rng.normal(size=(n, 2)) for n in rng.integers(2, 20, 30)]  # float64, as .tolist() or a CSV gives
    dm = fitted(
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"signal": "float32"}, batch_size=8)
    )
    batch = next(iter(dm.train_dataloader()))
    assert batch["signal"].dtype == torch.float32
    rows = dm.dataset("train").positions[batch["index"].numpy()]
    for k, row in enumerate(rows.tolist()):
        n = int(batch["signal_lengths"][k])
        np.testing.assert_array_equal(batch["signal"][k, :n].numpy(), wide[row].astype(np.float32))
    assert dm.dataset("train")[0]["signal"].dtype == np.float32
    with pytest.raises(ValueError, match=r"dtypes name \['sginal'\], which are no served field"):
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"sginal": "float32"})
    with pytest.raises(ValueError, match=r"give a dtype of numbers"):
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"signal": "U8"})


class CastingMean(pl.LightningModule):
    """A float32 model that casts what it gets (so the fit runs whatever the notice said)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 2)

    def training_step(self, batch, batch_idx):
        keep = batch["signal_mask"].unsqueeze(-1)
        pooled = (batch["signal"].float() * keep).sum(1) / keep.sum(1)
        return torch.nn.functional.cross_entropy(self.head(pooled), batch["labels"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_caught(dm: SequenceDataModule, root: Path) -> list[str]:
    trainer = pl.Trainer(
        max_epochs=2, limit_val_batches=0, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(CastingMean(), datamodule=dm)
    return [str(w.message) for w in caught if "float64" in str(w.message)]


def test_a_float64_field_meeting_a_float32_model_is_said_once_with_the_cast(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    wide = [rng.normal(size=(n, 2)) for n in rng.integers(2, 20, 40)]
    columns = {"signal": wide, "label": [0, 1] * 20}
    told = fit_caught(SequenceDataModule(train=columns, batch_size=4), tmp_path)
    assert len(told) == 1, told
    assert "field(s) ['signal'] are served as float64" in told[0] and "dtypes={'signal': 'float32'}" in told[0]
    assert fit_caught(SequenceDataModule(train=columns, batch_size=4, dtypes={"signal": "float32"}), tmp_path) == []
