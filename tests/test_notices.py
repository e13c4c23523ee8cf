"""Notices are said once per job (rank zero) and point at the line a user can act on."""

import logging
import subprocess
import sys
import warnings

import lightning.pytorch as pl
import pytest
from lightning.fabric.utilities.rank_zero import rank_zero_only
from toy import ToyDataModule, ToyModel

from varlen import notices
from varlen.datamodules.bearing import BearingDataModule
from varlen.models.bearing import BearingClassifier


class WarningToy(ToyDataModule):
    def build(self, stage):
        notices.warn("toy: something the user should know")
        return super().build(stage)


def _trainer(tmp_path) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=1, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip


def _line(warning) -> str:
    return open(warning.filename).read().splitlines()[warning.lineno - 1]


def test_a_warning_of_a_users_datamodule_names_its_line(tmp_path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tmp_path).fit(ToyModel(), datamodule=WarningToy(num_samples=40))
    (warning,) = [w for w in caught if "toy: something" in str(w.message)]
    assert warning.filename == __file__ and "notices.warn" in _line(warning)


def test_a_warning_of_varlen_in_a_lightning_hook_names_the_users_line(tmp_path) -> None:
    """Not Lightning's `trainer/call.py`: the user's `trainer.validate` line."""
    small = {"simulated_per_class": 1, "simulated_seconds": (1.0, 2.0), "window_length": 256}
    dm = BearingDataModule(**small, split="random_window")
    model = BearingClassifier(num_classes=dm.num_classes, in_channels=dm.in_channels)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tmp_path).validate(model, datamodule=dm)  # the user's line
    (warning,) = [w for w in caught if "random_window" in str(w.message)]
    assert warning.filename == __file__ and "the user's line" in _line(warning)


def test_only_rank_zero_speaks(monkeypatch, caplog) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        notices.warn("never said on rank 1")
    with caplog.at_level(logging.INFO, logger="varlen"):
        notices.info(logging.getLogger("varlen"), "never said on rank 1")
    assert "never said" not in caplog.text
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    with pytest.warns(UserWarning, match="said on rank 0"):
        notices.warn("said on rank 0")


def test_the_rank_comes_from_the_environment_where_lightning_has_not_set_it(monkeypatch) -> None:
    monkeypatch.delattr(rank_zero_only, "rank", raising=False)
    monkeypatch.setenv("RANK", "1")
    assert not notices.is_rank_zero()
    monkeypatch.setenv("RANK", "0")
    assert notices.is_rank_zero()


def test_the_datasets_import_without_lightning() -> None:
    """A spawned loader worker imports the modules of its dataset and collate, not Lightning (whose
    import costs seconds in every worker)."""
    scenarios = ("text", "bearing", "video_text", "molecules", "hyperspectral")
    code = "; ".join(
        [*(f"import varlen.datasets.{s}" for s in scenarios), "import varlen.batching.loader, sys"]
        + ["print(sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning'}))"]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
