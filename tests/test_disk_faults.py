"""A cache folder that fills up, a cache file that cannot be replaced, a cache shared by a node's users
(issue 29, item 5): a DataError naming the folder (and the space a build needs), no scratch left
behind, files that follow the umask instead of tempfile's 0600."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from faults import FullDisk

import varlen.storage.cache as cache
from varlen.batching import Ragged
from varlen.cli import dispatch as cli
from varlen.datamodules.video_text import VideoTextDataModule
from varlen.errors import DataError
from varlen.storage.cache import atomic_write, cache_key
from varlen.storage.tables import TableBuilder, write_table

ROOT = Path(__file__).resolve().parents[1]
KEY = cache_key("inputs", version="t1")
SPACE = r"No space left on device; [\d,.]+ MiB free; the cache needs about [\d,.]+ MiB there"


def build(path: Path, count: int = 2000, **hint: int) -> Path:
    """A table of `count` rows of 50 int32 tokens (400 kB for 2,000), built 100 rows at a time; `hint`:
    TableBuilder's `rows`."""
    builder = TableBuilder(path, version="t1", key=KEY, ragged={"tokens": (np.int32, ())}, **hint)
    for start in range(0, count, 100):
        builder.append(tokens=[np.arange(50, dtype=np.int32)] * 100, label=np.arange(start, start + 100))
    return builder.finish()


@pytest.mark.parametrize("room", [100_000, 600_000], ids=["while-building", "writing-the-table"])
def test_a_disk_that_fills_up_is_a_data_error_naming_the_folder_and_the_space(tmp_path, monkeypatch, room) -> None:
    FullDisk(room).install(monkeypatch)
    with pytest.raises(DataError, match=rf"no space left in {re.escape(str(tmp_path))} \({SPACE}\): free some"):
        build(tmp_path / "t.arrow", 2000, rows=2000)  # rows: how many it will hold, for the estimate
    assert list(tmp_path.iterdir()) == []  # no table, no scratch


def test_a_table_written_whole_on_a_full_disk_says_its_size(tmp_path, monkeypatch) -> None:
    FullDisk(1000).install(monkeypatch)
    tokens = Ragged.from_arrays([np.arange(100)] * 1000)  # 800 kB of int64
    with pytest.raises(DataError, match=r"needs about 0\.8 MiB there"):
        write_table(tmp_path / "t.arrow", {"tokens": tokens}, version="t1", key=KEY)
    assert list(tmp_path.iterdir()) == []


def test_featurising_on_a_full_disk_exits_2_naming_the_folder_and_leaves_no_scratch(
    tmp_path, monkeypatch, capsys
) -> None:
    """The molecules' build left 2 MB of scratch and a raw OSError (exit 1) behind on a 2 MB tmpfs."""
    FullDisk(200_000).install(monkeypatch)
    folder = tmp_path / "cache" / "molecules"
    config = str(ROOT / "configs" / "molecules_esol.yaml")
    monkeypatch.setattr(
        sys, "argv", ["varlen", "inspect", "--config", config, f"--data.cache_dir={tmp_path / 'cache'}"]
    )
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err, err[-2000:]
    assert re.search(rf"no space left in {re.escape(str(folder))} \({SPACE}\)", err), err[-2000:]
    assert list(folder.iterdir()) == []  # nothing half-built, nothing hidden


def test_video_features_are_reserved_before_they_are_written_through_a_map(tmp_path, monkeypatch) -> None:
    """Writing a memory-mapped scratch file on a full disk is a SIGBUS (the process dies, no message):
    the file's space is allocated first, so a full disk is a DataError naming the folder."""

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    dm = VideoTextDataModule(synthetic_videos=20, cache_dir=str(tmp_path))
    folder = re.escape(str(tmp_path / "video-text"))
    with pytest.raises(DataError, match=rf"no space left in {folder} \(.*the cache needs about [\d,.]+ MiB there\)"):
        dm.prepare_data()
    assert list((tmp_path / "video-text").iterdir()) == []


def test_a_cache_file_that_cannot_be_replaced_is_a_data_error(tmp_path, monkeypatch) -> None:
    """An immutable file (chattr +i), or another user's in a shared folder with the sticky bit: the
    rename onto it is refused (EPERM), which was a raw PermissionError."""
    path = write_table(tmp_path / "t.arrow", {"x": np.arange(3)}, version="t1", key=KEY)
    replace = os.replace

    def refused(source, target):
        if Path(target) == path:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(target))
        replace(source, target)

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(DataError, match=rf"cannot replace {re.escape(str(path))} \(Operation not permitted\): it is"):
        write_table(path, {"x": np.arange(4)}, version="t1", key=KEY)
    assert [p.name for p in tmp_path.iterdir()] == ["t.arrow"]  # its scratch is gone


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077], ids=oct)
def test_cache_files_follow_the_umask(tmp_path, umask) -> None:
    """tempfile makes 0600 files, which shut one cache out to a node's other users."""
    previous = os.umask(umask)
    try:
        written = [
            write_table(tmp_path / "whole.arrow", {"x": np.arange(3)}, version="t1", key=KEY),
            build(tmp_path / "built.arrow", 100),
            atomic_write(tmp_path / "cube.npy", lambda tmp: np.save(tmp, np.zeros(3))),
        ]
    finally:
        os.umask(previous)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {oct(0o666 & ~umask)}


def test_the_umask_is_read_without_being_changed() -> None:
    previous = os.umask(0o027)
    try:
        assert cache._umask() == 0o027 and cache._umask() == 0o027
    finally:
        os.umask(previous)
