"""The contract-test base class run on the toy scenario: proves the base classes themselves."""

import multiprocessing

import pytest
from toy import ToyDataModule, ToyModel

from varlen.testing import DataModuleContract


class TestToyContract(DataModuleContract):
    start_methods = tuple(multiprocessing.get_all_start_methods())  # forkserver too, once, on the base's path

    def make_datamodule(self, **overrides):
        return ToyDataModule(**overrides)

    def make_model(self, datamodule):
        return ToyModel(num_classes=datamodule.num_classes)


def test_predict_runs_on_the_named_split() -> None:
    """`predict_split` names the split trainer.predict reads (no silent fall back), in order."""
    dm = ToyDataModule(num_samples=50, predict_split="train")
    dm.setup("predict")
    loader = dm.predict_dataloader()
    assert loader.dataset is dm.dataset("train")
    assert sorted(i for b in loader.batch_sampler for i in b) == list(range(50))
    assert ToyDataModule().predict_split == "test"
    with pytest.raises(ValueError, match="predict_split must be train, val or test"):
        ToyDataModule(predict_split="predict")
