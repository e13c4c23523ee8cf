"""The contract's checks on what a checkpoint carries and on bad input (the report, the matrix)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from varlen.datamodules.base import VarLenDataModule
from varlen.errors import DataError, DatasetNotFoundError
from varlen.testing.hooks import BAD_INPUT_CASES, BadInput, ContractHooks

__all__ = ["BadInputChecks", "CheckpointChecks"]


def _flat(value: Any) -> np.ndarray:
    """Nested lists of numbers as one flat float array."""
    if isinstance(value, list):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.asarray([value], dtype=np.float64)


class CheckpointChecks(ContractHooks):
    """The data state a checkpoint carries: it round-trips, refuses changed classes, restores statistics."""

    @staticmethod
    def _changed(value: Any) -> Any:
        """Another value of the same kind: lists reversed (or extended), numbers moved, strings suffixed."""
        if isinstance(value, list):
            if len(value) > 1 and value != value[::-1]:
                return value[::-1]
            return [*value, value[-1] if value else "other"]
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value * 2 + 1
        return f"{value}-other"

    def test_checkpoint_data_state_round_trips(self, datamodule: VarLenDataModule, tmp_path: Path) -> None:
        """The state survives `torch.load(weights_only=True)` and loads silently into the same setup."""
        state = datamodule.state_dict()
        assert state["data_state"], "data_state() is empty: nothing the model learnt from the data travels"
        torch.save(state, tmp_path / "state.pt")
        loaded = torch.load(tmp_path / "state.pt", weights_only=True)
        assert loaded == state
        fresh = self.make_datamodule()
        fresh.setup("fit")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fresh.load_state_dict(loaded)
        assert fresh.state_dict() == state

    def test_checkpoint_refuses_changed_classes_and_restores_statistics(self, datamodule: VarLenDataModule) -> None:
        state = datamodule.state_dict()["data_state"]
        for key in datamodule.state_must_match:
            if key in state:
                fresh = self.make_datamodule()
                fresh.setup("fit")
                with pytest.raises(DataError, match=key):
                    fresh.load_state_dict({"data_state": {**state, key: self._changed(state[key])}})
        moved = {k: np.asarray(state[k], dtype=object) for k in datamodule.state_restored if k in state}
        if not moved:
            return
        target = {**state, **{k: self._shifted(state[k]) for k in moved}}
        for before_setup in (False, True):
            fresh = self.make_datamodule()
            if before_setup:
                fresh.load_state_dict({"data_state": target})  # applied when setup has built the data
            fresh.setup("fit")
            if not before_setup:
                fresh.load_state_dict({"data_state": target})
            now = fresh.state_dict()["data_state"]
            for key in moved:
                np.testing.assert_allclose(_flat(now[key]), _flat(target[key]), rtol=1e-5, err_msg=key)

    @staticmethod
    def _shifted(value: Any) -> Any:
        """Statistics moved: every number x becomes 1.5 x + 0.25 (a std stays positive)."""
        if isinstance(value, list):
            return [CheckpointChecks._shifted(v) for v in value]
        return float(value) * 1.5 + 0.25


class BadInputChecks(ContractHooks):
    """The report counts every split; each case of the bad-input matrix raises clearly or is skipped and counted."""

    def test_report_counts_every_split(self, datamodule: VarLenDataModule) -> None:
        for split, dataset in datamodule.datasets.items():
            assert datamodule.report.split(split).kept == len(dataset) > 0
        table = str(datamodule.report)
        assert all(split in table for split in datamodule.datasets)

    def _bad_case(self, case: str, tmp_path: Path) -> BadInput:
        bad = self.bad_input(case, tmp_path)
        if bad is None:
            pytest.skip(f"the bad-input case {case!r} does not apply to {type(self).__name__}")
        return bad

    def _build(self, bad: BadInput, on_bad: str) -> VarLenDataModule:
        dm = self.make_datamodule(**{**bad.overrides, "on_bad": on_bad})
        dm.prepare_data()
        dm.setup("fit")
        return dm

    def test_missing_source_says_what_to_fetch(self, tmp_path: Path) -> None:
        bad = self._bad_case("missing_source", tmp_path)
        with pytest.raises(DatasetNotFoundError, match=bad.message) as info:
            self._build(bad, "raise")
        assert "To get it:" in str(info.value)

    @pytest.mark.parametrize("case", BAD_INPUT_CASES)
    def test_bad_input_raises_a_clear_error(self, case: str, tmp_path: Path) -> None:
        bad = self._bad_case(case, tmp_path)
        with pytest.raises(DataError, match=bad.message):
            self._build(bad, "raise")

    @pytest.mark.parametrize("case", BAD_INPUT_CASES)
    def test_bad_input_is_skipped_and_counted(self, case: str, tmp_path: Path) -> None:
        bad = self._bad_case(case, tmp_path)
        if bad.skipped is None:
            with pytest.raises(DataError, match=bad.message):
                self._build(bad, "skip")
            return
        with pytest.warns(UserWarning, match="dm.report"):
            dm = self._build(bad, "skip")
        assert dm.report.skipped(bad.skipped) >= 1, str(dm.report)
