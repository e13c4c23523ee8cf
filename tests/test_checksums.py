"""A table's data checked against the checksum recorded when it was built (issue 29, item 2): flipped
bytes are found and the table rebuilt with a warning, never served; a process hashes a file once, and a
node once where the file takes a marker; what a bad value would break is refused by name."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from faults import flip_bytes

from varlen.batching import Ragged
from varlen.errors import DataError
from varlen.storage.cache import cache_key
from varlen.storage.tables import MappedTable, open_table, to_arrow, write_table

KEY = cache_key("inputs", version="t1")


def columns(n: int = 400, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tokens = Ragged.from_arrays([rng.integers(0, 1000, rng.integers(1, 30)).astype(np.int32) for _ in range(n)])
    return {
        "tokens": tokens,
        "length": tokens.lengths,
        "features": rng.normal(size=(n, 4)).astype(np.float32),
        "name": np.array([f"s{i}" for i in range(n)]),
    }


def read(path: Path) -> pa.Table:
    """The table in `path` as it is now (a copy, not a map)."""
    return pa.ipc.open_stream(path.read_bytes()).read_all()


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files whose data this process hashes to verify them."""
    import varlen.storage.checksums as checksums

    made: list[str] = []
    real = checksums.table_checksum

    def counted(batch: pa.RecordBatch) -> str:
        made.append("hash")
        return real(batch)

    monkeypatch.setattr(checksums, "table_checksum", counted)
    return made


def test_flipped_bytes_are_found_and_the_table_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    clean = path.read_bytes()
    assert open_table(path, version="t1", key=KEY) is not None
    flip_bytes(path)  # the middle of the file: token ids
    assert not read(path).equals(pa.ipc.open_stream(clean).read_all())  # what would be served
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(path))} is corrupt: its data's checksum .*; building"):
        assert open_table(path, version="t1", key=KEY) is None
    with pytest.raises(DataError, match=rf"cache {re.escape(str(path))} is corrupt") as raised:
        MappedTable(path)  # what a worker mapping it would see
    assert str(pickle.loads(pickle.dumps(raised.value))) == str(raised.value)


def test_a_table_without_a_checksum_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    """A table of an older varlen (version and key in its metadata, no checksum) is not trusted."""
    batch = pa.record_batch({"x": to_arrow(np.arange(10))})
    batch = batch.replace_schema_metadata({b"varlen.version": b"t1", b"varlen.key": KEY.encode()})
    path = tmp_path / "old.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.warns(UserWarning, match="is without a checksum of its data .*; building it again"):
        assert open_table(path, version="t1", key=KEY) is None


def test_the_checksum_is_of_the_content_not_of_its_layout() -> None:
    from varlen.storage.checksums import table_checksum

    data = columns(50)
    whole = pa.record_batch({name: to_arrow(c) for name, c in data.items()})
    part = {name: (c.take(np.arange(10, 20)) if isinstance(c, Ragged) else c[10:20]) for name, c in data.items()}
    compact = pa.record_batch({name: to_arrow(c) for name, c in part.items()})
    assert table_checksum(whole.slice(10, 10)) == table_checksum(compact)  # a slice: offsets not from 0
    changed = dict(part, features=part["features"] + np.float32(1))
    assert table_checksum(pa.record_batch({n: to_arrow(c) for n, c in changed.items()})) != table_checksum(compact)


def _marks_files(folder: Path) -> bool:
    probe = folder / "probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.varlen.probe", b"1")
    except (AttributeError, OSError):
        return False
    return True


def test_a_file_is_hashed_once_per_process_and_once_per_node(tmp_path: Path, hashes: list[str]) -> None:
    path = write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    assert open_table(path, version="t1", key=KEY) is not None and len(hashes) == 1
    table = open_table(path, version="t1", key=KEY)
    pickle.loads(pickle.dumps(table))  # what a loader worker does with it: maps the file again
    MappedTable(path)
    assert len(hashes) == 1
    if not _marks_files(tmp_path):
        pytest.skip(f"{tmp_path}'s file system keeps no extended attributes: every process hashes")
    code = (
        "import varlen.storage.checksums as c; from varlen.storage.tables import MappedTable; real = c.table_checksum; "
        "c.table_checksum = lambda b: print('hashed') or real(b); "
        f"MappedTable({str(path)!r}).ragged('tokens'); print('mapped')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["mapped"]  # another process of the node: the marker says it was verified
    flip_bytes(path)  # a write since: another modification time, so the marker no longer holds
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.split() == ["hashed"]  # ... and the worker is refused (a DataError), not served
    with pytest.warns(UserWarning, match="is corrupt"):
        assert open_table(path, version="t1", key=KEY) is None


def test_a_length_column_that_disagrees_with_its_rows_is_a_data_error(tmp_path: Path) -> None:
    data = columns(50)
    data["length"] = data["length"].copy()
    data["length"][7] += 1  # would read the next row's first token
    table = MappedTable(write_table(tmp_path / "t.arrow", data, version="t1", key=KEY))
    with pytest.raises(DataError, match=rf"{re.escape(str(table.path))}: row 7 of column 'tokens' holds \d+ elements"):
        table.ragged("tokens", lengths=table.numpy("length"))
    assert table.ragged("tokens").lengths[7] == data["length"][7] - 1  # its own offsets are served


def test_ids_outside_a_vocabulary_are_found_with_their_row() -> None:
    from varlen.storage.tables import ids_outside

    ids = Ragged.from_arrays([np.array([1, 2]), np.array([3, 30522, 4]), np.array([-1013])])
    assert ids_outside(ids, 30522) == (1, 30522)
    assert ids_outside(ids.take([0, 2]), 30522) == (1, -1013)
    assert ids_outside(ids.take([0]), 30522) is None


def test_varlen_verify_always_finds_a_flip_under_the_same_mtime(tmp_path: Path, monkeypatch, hashes) -> None:
    """Once verified, a table is not hashed again in the process (nor on the node, where it takes the marker):
    bytes a failing disk flips under the same inode, size and mtime are served. `VARLEN_VERIFY=always` hashes
    it at every open, in this process and in every process it starts."""
    path = write_table(tmp_path / "t.arrow", columns(), version="t1", key=KEY)
    assert open_table(path, version="t1", key=KEY) is not None and len(hashes) == 1
    before = path.stat()
    flip_bytes(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert open_table(path, version="t1", key=KEY) is not None and len(hashes) == 1  # the blind spot
    monkeypatch.setenv("VARLEN_VERIFY", "always")
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(path))} is corrupt: its data's checksum"):
        assert open_table(path, version="t1", key=KEY) is None
    with pytest.raises(DataError, match=rf"cache {re.escape(str(path))} is corrupt"):
        MappedTable(path)
    code = f"from varlen.storage.tables import MappedTable; MappedTable({str(path)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1 and "is corrupt: its data's checksum" in done.stderr
    monkeypatch.setenv("VARLEN_VERIFY", "sometimes")
    with pytest.raises(ValueError, match=r"VARLEN_VERIFY='sometimes': give 'always' .* or 'once'"):
        MappedTable(path)
