"""Arrow IPC tables built once and mapped everywhere (varlen.storage.tables), and the cache's fault handling."""

import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from varlen.batching import Ragged
from varlen.errors import DataError
from varlen.storage.cache import atomic_write, cache_key
from varlen.storage.tables import MappedTable, TableBuilder, open_table, write_table

KEY = cache_key("inputs", version="t1")


def columns(n: int = 50, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tokens = Ragged.from_arrays([rng.integers(0, 1000, rng.integers(1, 30)).astype(np.int32) for _ in range(n)])
    frames = Ragged.from_arrays([rng.normal(size=(rng.integers(1, 6), 3)).astype(np.float32) for _ in range(n)])
    segments = rng.integers(0, 4, n)
    captions = Ragged.from_offsets(
        rng.integers(0, 9, 500).astype(np.int16),
        np.concatenate([[0], np.sort(rng.integers(0, 500, int(segments.sum()) - 1)), [500]]),
        np.concatenate([[0], np.cumsum(segments)]),
    )
    return {
        "tokens": tokens,
        "frames": frames,
        "captions": captions,
        "label": rng.integers(0, 3, n),
        "features": rng.normal(size=(n, 2, 4)).astype(np.float32),
        "name": np.array([f"s{i}" for i in range(n)]),
    }


def same_ragged(a: Ragged, b: Ragged) -> None:
    assert len(a) == len(b) and a.levels == b.levels
    for i in range(len(a)):
        np.testing.assert_array_equal(a.take([i]).values, b.take([i]).values)
        np.testing.assert_array_equal(a.take([i]).lengths, b.take([i]).lengths)


def test_columns_round_trip_as_views_of_the_file(tmp_path: Path) -> None:
    data = columns()
    table = open_table(write_table(tmp_path / "t.arrow", data, version="t1", key=KEY), version="t1", key=KEY)
    assert len(table) == 50 and table.columns == list(data)
    for name in ("tokens", "frames", "captions"):
        same_ragged(table.ragged(name), data[name])
    tokens = table.ragged("tokens")
    assert not tokens.values.flags.writeable  # read-only: a view of the mapped file, not a copy
    np.testing.assert_array_equal(table.numpy("label"), data["label"])
    np.testing.assert_array_equal(table.numpy("features"), data["features"])
    assert table.numpy("name").tolist() == data["name"].tolist()
    stored = np.asarray(tokens.lengths)  # a length column given by the caller is used as it is
    assert table.ragged("tokens", lengths=stored).lengths is stored


def test_the_files_open_in_pyarrow_as_plain_list_columns(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    read = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
    assert read.column("tokens").type == pa.large_list(pa.int32())
    assert read.column("captions").type == pa.large_list(pa.large_list(pa.int16()))
    assert read.column("tokens")[3].as_py() == columns()["tokens"].take([3]).values.tolist()


def test_a_table_built_a_few_rows_at_a_time_equals_one_written_whole(tmp_path: Path) -> None:
    data = columns(200)
    whole = open_table(write_table(tmp_path / "w.arrow", data, version="t1", key=KEY), version="t1", key=KEY)
    builder = TableBuilder(
        tmp_path / "b.arrow", version="t1", key=KEY, ragged={"tokens": (np.int32, ()), "frames": (np.float32, (3,))}
    )
    for start in range(0, 200, 37):
        rows = range(start, min(start + 37, 200))
        builder.append(
            tokens=[data["tokens"].take([i]).values for i in rows],
            frames=[data["frames"].take([i]).values for i in rows],
            label=data["label"][list(rows)],
        )
    built = open_table(builder.finish(), version="t1", key=KEY)
    same_ragged(built.ragged("tokens"), whole.ragged("tokens"))
    same_ragged(built.ragged("frames"), whole.ragged("frames"))
    np.testing.assert_array_equal(built.numpy("label"), whole.numpy("label"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.arrow", "w.arrow"]  # no scratch file left
    abandoned = TableBuilder(tmp_path / "c.arrow", version="t1", key=KEY, ragged={"tokens": (np.int32, ())})
    abandoned.append(tokens=[np.arange(3)], label=[0])
    with pytest.raises(ValueError, match="every append needs"):
        abandoned.append(label=[1])
    abandoned.abandon()  # a build that failed half-way leaves nothing behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.arrow", "w.arrow"]


def test_a_mapped_table_pickles_as_its_path(tmp_path: Path) -> None:
    table = MappedTable(write_table(tmp_path / "t.arrow", columns(2000), version="t1", key=KEY))
    payload = pickle.dumps(table)
    assert len(payload) < 300  # the path, not the arrays
    again = pickle.loads(payload)
    same_ragged(again.ragged("tokens"), table.ragged("tokens"))


@pytest.mark.parametrize("fault", ["cut short", "other version", "other inputs", "not arrow"])
def test_a_bad_cache_is_rebuilt_with_a_warning_never_used(tmp_path: Path, fault: str) -> None:
    path = write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    version, key = "t1", KEY
    if fault == "cut short":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif fault == "other version":
        version = "t2"
    elif fault == "other inputs":
        key = cache_key("other inputs", version="t1")
    else:
        path.write_bytes(b"PAR1 not an arrow file")
    with pytest.warns(UserWarning, match=f"cache {path} is .*building it again"):
        assert open_table(path, version=version, key=key) is None
    assert open_table(tmp_path / "absent.arrow", version="t1", key=KEY) is None  # no file: no warning


def _build(path: str, worker: int) -> None:
    write_table(path, columns(3000, seed=0), version="t1", key=KEY)


def test_two_processes_building_the_same_cache_leave_one_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.arrow"
    context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    workers = [context.Process(target=_build, args=(str(path), s)) for s in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    table = open_table(path, version="t1", key=KEY)
    same_ragged(table.ragged("tokens"), columns(3000)["tokens"])
    assert [p.name for p in tmp_path.iterdir()] == ["shared.arrow"]  # no temporary file left


def _killed_mid_build(folder: str) -> None:
    """A job pre-empted by SIGKILL while building: a table's scratch folder and a file's .part left behind."""
    builder = TableBuilder(Path(folder) / "t.arrow", version="t1", key=KEY, ragged={"tokens": (np.int32, ())})
    builder.append(tokens=[np.arange(1 << 18)], label=[0])
    atomic_write(Path(folder) / "other.arrow", lambda tmp: os.kill(os.getpid(), signal.SIGKILL))


def kill_a_build(folder: Path) -> None:
    context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    build = context.Process(target=_killed_mid_build, args=(str(folder),))
    build.start()
    build.join(120)
    assert build.exitcode == -signal.SIGKILL


def hidden(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.startswith(".")}


def test_scratch_of_a_killed_build_is_swept_by_the_next_build_or_open(tmp_path: Path) -> None:
    """What a killed build left (its process is gone) is removed, and said, by the next build in the
    folder or the next open of a table there; scratch of a live build is kept, as is another host's
    (whose processes cannot be asked) until it is a day old, and one named before scratch named its owner."""
    live = TableBuilder(tmp_path / "live.arrow", version="t1", key=KEY, ragged={"tokens": (np.int32, ())})
    kill_a_build(tmp_path)
    assert len(hidden(tmp_path)) == 3
    fresh, old = tmp_path / ".t.arrow.4242@elsewhere.abcd1234.part", tmp_path / ".t.arrow.4242@elsewhere.efgh5678.part"
    unnamed = tmp_path / ".t.arrow.ijkl9012.build"  # as builds named scratch before
    unnamed.mkdir()
    for path in (fresh, old, unnamed / "tokens.bin"):
        path.write_bytes(b"x" * 1000)
    two_days_ago = time.time() - 2 * 86400
    for path in (old, unnamed / "tokens.bin", unnamed):
        os.utime(path, (two_days_ago, two_days_ago))
    with pytest.warns(UserWarning, match=rf"removed 4 scratch entries \(1\.0 MiB\) in {tmp_path}, left by builds"):
        write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    assert hidden(tmp_path) == {live._scratch.name, fresh.name}
    kill_a_build(tmp_path)
    with pytest.warns(UserWarning, match="removed 2 scratch entries"):
        assert open_table(tmp_path / "t.arrow", version="t1", key=KEY) is not None
    assert hidden(tmp_path) == {live._scratch.name, fresh.name}
    live.abandon()


def test_a_cache_folder_that_cannot_be_written_is_a_data_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=f"cannot write in {blocker / 'cache'}"):
        write_table(blocker / "cache" / "t.arrow", columns(), version="t1", key=KEY)
    with pytest.raises(DataError, match="cannot write in"):
        TableBuilder(blocker / "t.arrow", version="t1", key=KEY, ragged={})


def test_the_files_open_in_hugging_face_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    data = columns()
    path = write_table(tmp_path / "t.arrow", data, version="t1", key=KEY)
    dataset = datasets.Dataset.from_file(str(path))
    assert len(dataset) == 50 and dataset[7]["tokens"] == data["tokens"].take([7]).values.tolist()
    assert dataset[7]["label"] == int(data["label"][7])


def test_mapping_a_table_imports_no_pandas(tmp_path: Path) -> None:
    """What a new worker does with a table (open it, read its columns) costs no pandas import
    (pyarrow's `to_numpy` imports it for a list's offsets: a second and ~30 MiB per worker)."""
    path = write_table(tmp_path / "t.arrow", columns(50), version="t1", key=KEY)
    code = (
        "import sys; from varlen.storage.tables import MappedTable; "
        f"t = MappedTable({str(path)!r}); t.ragged('tokens'); t.ragged('frames'); t.numpy('label'); "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
