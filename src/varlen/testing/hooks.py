"""The hooks a scenario fills in for the contract, with the fixtures every check shares."""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from varlen.datamodules.base import VarLenDataModule
from varlen.models.base import VarLenModule

__all__ = ["BAD_INPUT_CASES", "BadInput", "ContractHooks"]


BAD_INPUT_CASES = ("missing_source", "unreadable_file", "empty_source", "non_finite", "empty_sample", "unknown_label")


@dataclass(frozen=True)
class BadInput:
    """One case of the bad-input matrix, as DataModule arguments that produce it.

    Attributes:
        overrides: arguments for `make_datamodule` (besides `on_bad`).
        message: a regular expression the raised error's message must match (it should name
            the file, row or sample).
        skipped: a part of the reason `dm.report` counts under `on_bad="skip"`; None when
            the case cannot be skipped (nothing usable is left), so it raises under both policies.
    """

    overrides: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    skipped: str | None = None


class ContractHooks:
    """The hooks of `DataModuleContract` (listed there), their defaults, its fixtures."""

    config: str | None = None
    cli_overrides: Sequence[str] = ()
    invariance_atol: float = 1e-5
    #: start methods the worker test runs under (default: fork and spawn, where offered: forkserver's
    #: workers receive the dataset pickled as spawn's do); a variant whose dataset and collate another
    #: contract class already checks under spawn may skip it
    start_methods: Sequence[str] = tuple(m for m in multiprocessing.get_all_start_methods() if m != "forkserver")

    def make_datamodule(self, **overrides: Any) -> VarLenDataModule:
        raise NotImplementedError

    def make_model(self, datamodule: VarLenDataModule) -> VarLenModule:
        raise NotImplementedError

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        return None

    def real_output(self, output: Any, batch: Mapping[str, Any], i: int) -> torch.Tensor:
        return output[i]

    def collated_cost(self, datamodule: VarLenDataModule, batch: Mapping[str, Any]) -> np.ndarray:
        return np.array([batch[k].numel() for k in datamodule.mask_keys])

    def budget_overrides(self) -> dict[str, Any]:
        return {"max_tokens": 256}

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        return list(self.cli_overrides)

    @pytest.fixture(scope="class")
    def datamodule(self) -> VarLenDataModule:
        dm = self.make_datamodule()
        dm.setup("fit")
        return dm

    @pytest.fixture(scope="class")
    def model(self, datamodule: VarLenDataModule) -> VarLenModule:
        torch.manual_seed(0)
        return self.make_model(datamodule).eval()

    def dataset_indices(self, dataset) -> list[int]:
        """The `index` of every sample of `dataset` (read once, for the coverage tests)."""
        return [int(dataset[i]["index"]) for i in range(len(dataset))]

    @staticmethod
    def collate(datamodule: VarLenDataModule, split: str, indices: Sequence[int]) -> Any:
        """The batch of `indices` as the loader builds it: one batched fetch where the dataset
        offers `__getitems__` (else one `dataset[i]` per sample), then the collate."""
        return datamodule.collate_fn(datamodule.fetch_batch(split, list(indices)))
