"""The contract-test base class run on the toy scenario: proves the base classes themselves."""

from toy import ToyDataModule, ToyModel

from varlen.testing import DataModuleContract


class TestToyContract(DataModuleContract):
    def make_datamodule(self, **overrides):
        return ToyDataModule(**overrides)

    def make_model(self, datamodule):
        return ToyModel(num_classes=datamodule.num_classes)
