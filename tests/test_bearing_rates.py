"""Bearing input that used to become a wrong result without a word (issue 29, item 3): a sampling rate
typed in kHz, a recording resampled far more than the others, a label column of mixed spellings."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from varlen.datamodules.bearing import BearingDataModule
from varlen.datasets.bearing.formats import parse_cwru_name
from varlen.datasets.bearing.rates import RATE_RANGE, rate_problem, resampling_outliers
from varlen.datasets.bearing.synthetic import simulate_recordings
from varlen.errors import DataError

DATA = Path(__file__).parent / "data" / "bearing"


def folder(tmp_path: Path, edit: tuple[str, str] | None = None, extra: str = "") -> dict:
    """DataModule arguments over a copy of the generic folder (a.npy 8 kHz, b.npy 16 kHz, c.csv 8 kHz)."""
    root = tmp_path / "folder"
    shutil.copytree(DATA / "folder", root)
    text = (root / "metadata.csv").read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    (root / "metadata.csv").write_text(text + extra)
    tiny = {"window_length": 128, "stride": 64, "batch_size": 8, "cache_dir": str(tmp_path / "cache")}
    return {"root": str(root), "metadata": "metadata.csv", **tiny}


def test_a_rate_typed_in_khz_is_refused_naming_the_file_or_counted(tmp_path: Path) -> None:
    """Before: b.npy at "16" Hz was resampled 750x to 12 kHz and supplied most of the windows."""
    args = folder(tmp_path, ("b.npy,faulty,16000", "b.npy,faulty,16"))
    message = r"b\.npy \(sampling rate 16 Hz\): sampling rate outside 1,000\.\.1,000,000 Hz \(a rate in kHz\?"
    with pytest.raises(DataError, match=message):
        BearingDataModule(**args).setup()
    dm = BearingDataModule(**args, on_bad="skip")
    with pytest.warns(UserWarning, match="sampling rate outside"):
        dm.setup()
    assert sorted(dm.recording_names) == ["rec_a", "rec_c"] and dm.report.skipped("sampling rate outside") == 1
    assert sum(r.signal.shape[1] for r in dm.recordings) == 1800 + 1950  # 1200 and 1300 samples at 8 kHz -> 12 kHz


def test_a_common_rate_in_khz_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sampling_rate=12: sampling rate outside 1,000\.\.1,000,000 Hz"):
        BearingDataModule(sampling_rate=12)


def test_a_recording_resampled_far_more_than_the_others_is_warned_about(tmp_path: Path) -> None:
    args = folder(tmp_path, extra="d.npy,healthy,1000,rec_d,low\n")
    np.save(Path(args["root"]) / "d.npy", np.random.default_rng(0).normal(0, 1, (600, 2)).astype(np.float32))
    dm = BearingDataModule(**args)
    with pytest.warns(UserWarning, match=r"1 recording\(s\) are resampled to 12,000 Hz .*rec_d \(1,000 Hz: x12\)"):
        dm.setup()
    assert sorted(dm.recording_names) == ["rec_a", "rec_b", "rec_c", "rec_d"]  # kept: a warning, not a refusal


def test_the_real_and_simulated_rates_lie_in_the_range_and_resample_unwarned(shared_data: Path) -> None:
    rates = [parse_cwru_name(p.name)["sampling_rate"] for p in sorted((shared_data / "bearing").glob("*.mat"))]
    assert set(rates) == {12000, 48000} and all(rate_problem(r) is None for r in rates)
    simulated = [r.sampling_rate for r in simulate_recordings(per_class=2, seed=0, seconds=(1.0, 2.0))]
    assert set(simulated) <= {12000.0, 48000.0} and all(rate_problem(r) is None for r in simulated)
    assert len(resampling_outliers(rates + simulated, 12000.0)[0]) == 0
    assert rate_problem(RATE_RANGE[0]) is None and rate_problem(64000) is None and rate_problem(48) is not None


def test_a_metadata_label_column_of_mixed_spellings_is_refused(tmp_path: Path) -> None:
    args = folder(tmp_path, ("b.npy,faulty", "b.npy,1.0"))
    text = (Path(args["root"]) / "metadata.csv").read_text().replace("a.npy,healthy", "a.npy,1")
    (Path(args["root"]) / "metadata.csv").write_text(text)
    message = r"metadata\.csv: the label column 'label' mixes numbers \('1' \(line 2\), '1\.0' \(line 3\)\) with words"
    with pytest.raises(DataError, match=message + r" \('faulty' \(line 4\)\).*give class_names"):
        BearingDataModule(**args)
    BearingDataModule(**args, class_names=["1", "faulty"])  # named classes: no guess to refuse
