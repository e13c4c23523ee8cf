"""The bearing split policy on its own, without a DataModule (varlen.datasets.bearing.splits)."""

import numpy as np
import pytest

from varlen.datasets.bearing.splits import GAP, TAIL, UNIT, WindowSplit, check_split_arguments, window_geometry
from varlen.errors import DataError
from varlen.prepare.report import DataReport

CLASSES = ["a", "b"]


def covered(table, lengths) -> list[np.ndarray]:
    """Per recording, a boolean mask of the samples the table's windows cover."""
    masks = [np.zeros(n, bool) for n in lengths]
    for r, start, length in zip(table.recording, table.start, table.length, strict=True):
        masks[r][start : start + length] = True
    return masks


def test_time_blocks_never_share_a_sample_and_keep_the_gap() -> None:
    lengths = np.array([10_000, 7_000])
    spec = WindowSplit("time_block", 0.1, 0.2, window=512, hop=256, gap=512)
    report = DataReport()
    tables, bounds = spec.windows(lengths, np.array([0, 1]), ["0", "0"], report, CLASSES)
    masks = {name: covered(table, lengths) for name, table in tables.items()}
    for r in range(2):
        owner = np.stack([masks[s][r] for s in ("train", "val", "test")])
        assert owner.sum(0).max() == 1  # no sample in two splits
        spans = [np.flatnonzero(owner[k]) for k in range(3)]
        assert spans[1].min() - spans[0].max() > 512 and spans[2].min() - spans[1].max() > 512  # the gaps
    for name, table in tables.items():  # each window moves within its own block
        assert np.all(bounds[name][:, 0] <= table.start) and np.all(table.start + table.length <= bounds[name][:, 1])
    gaps = sum(report.split(s).unused[(UNIT, GAP)] for s in ("train", "val", "test"))
    assert gaps >= 2 * 2 * 512


def test_whole_recordings_and_conditions() -> None:
    lengths = np.full(8, 4_000)
    labels = np.array([0, 1] * 4)
    spec = WindowSplit("recording", 0.25, 0.25, window=512, hop=512, gap=0, seed=3)
    tables, _ = spec.windows(lengths, labels, ["0"] * 8, DataReport(), CLASSES)
    owners = {name: set(table.recording.tolist()) for name, table in tables.items()}
    assert set().union(*owners.values()) == set(range(8))
    assert not (owners["train"] & owners["test"]) and not (owners["val"] & owners["test"])
    by_load = WindowSplit("condition", 0.2, 0.2, window=512, hop=512, gap=512, test_conditions=("3",))
    conditions = ["0", "0", "1", "1", "3", "3", "0", "3"]
    segments = by_load.segments(lengths, labels, conditions, CLASSES)
    assert sorted(segments["test"].recording.tolist()) == [4, 5, 7]
    assert set(segments["val"].recording.tolist()) == set(segments["train"].recording.tolist()) == {0, 1, 2, 3, 6}
    assert np.all(segments["val"].start > segments["train"].end)  # val: the last block of each train recording


def test_recording_split_without_enough_recordings_is_a_data_error() -> None:
    spec = WindowSplit("recording", 0.1, 0.1, window=64, hop=64, gap=0)
    with pytest.raises(DataError, match="leaves no recording"):
        spec.segments(np.full(2, 1000), np.array([0, 1]), ["0", "0"], CLASSES)


def test_random_windows_warn_and_count_the_tail() -> None:
    spec = WindowSplit("random_window", 0.2, 0.2, window=100, hop=100, gap=0, drop_tail=True)
    report = DataReport()
    with pytest.warns(UserWarning, match="leakage"):
        tables, _ = spec.windows(np.array([1_050, 520]), np.array([0, 1]), ["0", "0"], report, CLASSES)
    assert sum(len(t.recording) for t in tables.values()) == 10 + 5
    assert report.split("source").unused[(UNIT, TAIL)] == 50 + 20


def test_unusable_recordings_say_why() -> None:
    spec = WindowSplit("time_block", 0.1, 0.2, window=512, hop=256, gap=512)
    assert spec.unusable(400, "0") == "shorter than one window (512 samples)"
    assert "too short for a time_block split" in spec.unusable(spec.needed_length() - 1, "0")
    assert spec.unusable(spec.needed_length(), "0") is None
    by_load = WindowSplit("condition", 0.2, 0.2, window=512, hop=512, gap=512, test_conditions=("3",))
    assert by_load.unusable(600, "3") is None  # test recordings stay whole: one window is enough
    assert by_load.unusable(600, "0") is not None  # a train recording also gives a validation block


def test_geometry_and_arguments() -> None:
    assert window_geometry(12_000, 2048, None, None, None, None) == (2048, 1024, 2048)
    assert window_geometry(12_000, 2048, None, 0.1, 0.05, 10) == (1200, 600, 10)
    with pytest.raises(ValueError, match="must be >= 1 sample"):
        window_geometry(100, 2048, None, 0.001, None, None)
    with pytest.raises(ValueError, match="needs test_conditions"):
        check_split_arguments("condition", "shuffle", 0.2, None, None, None)
    with pytest.raises(ValueError, match=r"conditions \['3'\] are in both val_conditions and test_conditions"):
        check_split_arguments("condition", "shuffle", 0.2, None, ["3"], ["3"])
    with pytest.raises(ValueError, match="gap must be >= 0"):
        WindowSplit("time_block", 0.1, 0.2, window=8, hop=8, gap=-1)
