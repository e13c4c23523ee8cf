"""Bearing data built once per node and mapped everywhere (issue 18): who builds, what the key
covers, bad caches, racing builders, an unwritable folder, bad recordings replayed from the cache."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from faults import flip_bytes
from test_bearing import DATA, ROOT, SMALL, assert_same_batch, folder_args

import varlen.datamodules.bearing as bearing_module
from varlen.datamodules.bearing import BearingDataModule
from varlen.errors import DataError
from varlen.prepare.report import SOURCE

SIM = {**SMALL, "batch_size": 16}


def simulated(cache: Path, **extra) -> BearingDataModule:
    return BearingDataModule(**{**SIM, "cache_dir": str(cache), **extra})


def tables(cache: Path, kind: str = "recordings") -> list[Path]:
    return sorted((cache / "bearing").glob(f"{kind}-*.arrow"))


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """Every build of a recordings table in this process (its path), the build itself unchanged."""
    made: list[str] = []
    real = bearing_module.build_recordings

    def counted(path, *args, **kwargs):
        made.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(bearing_module, "build_recordings", counted)
    return made


def first_batches(dm: BearingDataModule) -> dict[str, dict]:
    """The first batch of every split, in plan order."""
    return {split: next(iter(dm.loader(split))) for split in ("train", "val", "test")}


def same_batches(a: dict[str, dict], b: dict[str, dict]) -> None:
    assert list(a) == list(b)
    for split in a:
        assert_same_batch(b[split], a[split])


def test_prepare_data_builds_once_and_setup_only_maps(tmp_path, builds):
    dm = simulated(tmp_path)
    dm.prepare_data()
    assert len(builds) == 1 and tables(tmp_path) == [Path(builds[0])]
    dm.setup()
    again = simulated(tmp_path)  # a second DataModule (another rank, another run) with the same inputs
    again.prepare_data()
    again.setup()
    assert len(builds) == 1
    same_batches(first_batches(dm), first_batches(again))
    alone = simulated(tmp_path / "other")  # setup without prepare_data builds it itself, once
    alone.setup()
    assert len(builds) == 2 and len(tables(tmp_path / "other")) == 1
    same_batches(first_batches(dm), first_batches(alone))


def test_a_fresh_process_maps_the_cache_and_builds_nothing(tmp_path):
    dm = simulated(tmp_path)
    dm.prepare_data()
    dm.setup()
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "bearing").iterdir()}
    assert len(tables(tmp_path)) == 1 and len(tables(tmp_path, "windows")) == 3 and len(files) == 5
    script = """
import json, sys
import varlen.datamodules.bearing as module
def refuse(*args, **kwargs):
    raise AssertionError("built again")
module.build_recordings = refuse
dm = module.BearingDataModule(**json.loads(sys.argv[1]))
dm.prepare_data()
dm.setup()
batch = next(iter(dm.loader("train")))
print(json.dumps({"index": batch["index"].tolist(), "sum": float(batch["signals"].double().sum())}))
"""
    args = {**SIM, "simulated_seconds": list(SIM["simulated_seconds"]), "cache_dir": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    batch = next(iter(dm.loader("train")))
    assert got == {"index": batch["index"].tolist(), "sum": float(batch["signals"].double().sum())}
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "bearing").iterdir()} == files  # nothing rewritten


def test_the_key_covers_the_files_and_the_settings_that_change_the_signal(tmp_path, builds):
    root = tmp_path / "folder"
    shutil.copytree(DATA / "folder", root)
    cache = tmp_path / "cache"

    def setup(**extra) -> BearingDataModule:
        dm = BearingDataModule(**{**folder_args(root), "cache_dir": str(cache), **extra})
        dm.setup()
        return dm

    first = setup()
    setup(batch_size=4, seed=3, stride=32)  # the split, batches and windows: not the stored signal
    assert len(builds) == 1
    setup(sampling_rate=16000)
    setup(channels=["1"])
    setup(class_names=["healthy", "faulty"])
    signal = np.load(root / "a.npy")
    signal[3, 0] += 1.0
    np.save(root / "a.npy", signal)  # same name and size, other content
    edited = setup()
    assert len(builds) == len(set(builds)) == 5 and len(tables(cache)) == 5
    names = [r.name for r in first.recordings]
    a = names.index("rec_a")
    assert not np.array_equal(edited.recordings[a].signal, first.recordings[a].signal)
    simulated(cache).setup()
    simulated(cache, seed=1).setup()
    simulated(cache, simulated_loads=[0, 1]).setup()
    assert len(builds) == 8


def test_a_cut_short_or_foreign_cache_is_rebuilt_with_a_warning(tmp_path, builds):
    dm = simulated(tmp_path)
    dm.setup()
    expected = first_batches(dm)
    (path,) = tables(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    again = simulated(tmp_path)
    with pytest.warns(UserWarning, match=rf"cache {path} is unreadable .*; building it again"):
        again.setup()
    same_batches(expected, first_batches(again))
    other = simulated(tmp_path / "other", seed=1)
    other.setup()
    shutil.copyfile(tables(tmp_path / "other")[0], path)  # a valid table of other inputs, under this key
    with pytest.warns(UserWarning, match=rf"cache {path} is built from other inputs .*; building it again"):
        simulated(tmp_path).setup()
    for windows in tables(tmp_path, "windows"):  # the windows tables are checked the same way
        windows.write_bytes(windows.read_bytes()[:100])
    third = simulated(tmp_path)
    with pytest.warns(UserWarning, match=r"cache .*windows-.* is unreadable"):
        third.setup()
    same_batches(expected, first_batches(third))
    assert len(builds) == 4  # the first, after the cut, after the foreign file, and seed 1's


def test_flipped_bytes_in_the_recordings_table_are_found_and_it_is_rebuilt(tmp_path, builds):
    """Bytes flipped in the middle of the built signal were served as vibration values: its data no
    longer match the checksum recorded when it was built, so it is rebuilt with a warning."""
    dm = simulated(tmp_path)
    dm.setup()
    expected = first_batches(dm)
    (path,) = tables(tmp_path)
    content = path.read_bytes()
    path.unlink()  # a new file (the live DataModule keeps its clean pages), its middle flipped
    path.write_bytes(content)
    flip_bytes(path)
    again = simulated(tmp_path)
    with pytest.warns(UserWarning, match=rf"cache {path} is corrupt: its data's checksum .*; building it again"):
        again.setup()
    assert len(builds) == 2
    same_batches(expected, first_batches(again))


def _prepare(cache: str, barrier) -> None:  # a racing builder (module level: it is pickled by name)
    dm = BearingDataModule(**{**SIM, "cache_dir": cache})
    barrier.wait()
    dm.prepare_data()


def test_two_processes_building_at_once_leave_one_valid_file(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    racers = [context.Process(target=_prepare, args=(str(tmp_path), barrier)) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=300)
    assert [racer.exitcode for racer in racers] == [0, 0]
    assert [p.name for p in (tmp_path / "bearing").iterdir()] == [tables(tmp_path)[0].name]  # no scratch left
    raced = simulated(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raced.setup()  # the file is valid: read without a warning
    alone = simulated(tmp_path / "alone")
    alone.setup()
    same_batches(first_batches(alone), first_batches(raced))


def test_a_cache_dir_that_cannot_be_written_is_a_data_error_naming_it(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    dm = simulated(blocker)
    with pytest.raises(DataError, match=rf"cannot write in {blocker / 'bearing'} .*cache_dir="):
        dm.prepare_data()
    with pytest.raises(DataError, match=rf"cannot write in {blocker / 'bearing'}"):
        simulated(blocker).setup()


def test_bad_recordings_are_replayed_from_the_cache_on_every_setup(tmp_path, builds):
    root = tmp_path / "folder"
    shutil.copytree(DATA / "folder", root)
    signal = np.load(root / "a.npy")
    signal[5, 1] = np.nan
    np.save(root / "a.npy", signal)
    args = {**folder_args(root), "cache_dir": str(tmp_path / "cache"), "on_bad": "skip"}
    reports = []
    for _ in range(2):
        dm = BearingDataModule(**args)
        with pytest.warns(UserWarning, match=r"skipped 1 bad item\(s\) .*a\.npy \(channel 1, sample 5\): non-finite"):
            dm.prepare_data()
            dm.setup()
        reports.append(dm.report.to_dict())
        assert sorted(dm.recording_names) == ["rec_b", "rec_c"]
    assert len(builds) == 1 and reports[0] == reports[1]
    assert reports[1][SOURCE]["skipped"] == {"recording: non-finite value nan": 1}
    strict = BearingDataModule(**{**args, "on_bad": "raise"})
    with pytest.raises(DataError, match=r"a\.npy \(channel 1, sample 5\): non-finite value nan \(pass on_bad='skip'"):
        strict.setup()
    assert len(builds) == 1  # judged from the cache, under this DataModule's on_bad


def test_the_recordings_table_opens_in_pyarrow(tmp_path):
    root = tmp_path / "folder"
    shutil.copytree(DATA / "folder", root)
    (root / "metadata.csv").write_text((root / "metadata.csv").read_text().replace("b.npy,faulty", "b.npy,cracked"))
    args = {**folder_args(root), "class_names": ["healthy", "faulty"], "on_bad": "skip"}
    dm = BearingDataModule(**{**args, "cache_dir": str(tmp_path / "cache")})
    with pytest.warns(UserWarning, match="skipped 1"):
        dm.setup()
    read = pa.ipc.open_stream(str(tables(tmp_path / "cache")[0])).read_all()
    assert read.column("signal").type == pa.large_list(pa.float32())
    rows = read.to_pylist()
    assert [r["name"] for r in rows[:2]] == [r.name for r in dm.recordings] and rows[2]["signal"] == []
    assert rows[2]["problem"].startswith("unknown label 'cracked'") and rows[2]["where"] == str(root / "b.npy")
    for row, rec in zip(rows, dm.recordings, strict=False):  # [C, T] channel after channel
        signal = np.asarray(row["signal"], np.float32).reshape(row["channels"], row["length"])
        np.testing.assert_array_equal(signal, rec.signal)
        assert row["sampling_rate"] == dm.rate and row["label"] == rec.label
