"""`varlen optimize` on a disk without room, interrupted, or pointed at a file: one DataError naming the folder
(its free space and the need), nothing running afterwards, nothing partial under the output's name, and the
same write run again works. Before: a raw RuntimeError around `OSError 28`, partial chunks in the output
(which the next run refused), and a writer's child blocked in a pipe read for good (or the whole command hung).

The disk here is a fake with `room` bytes (made in a test without root): LitData's chunk writes, in its
writer processes, fail with ENOSPC past it, and `shutil.disk_usage` says what is left; both count the bytes
really under the test's folder, so what a failed write removes is free again.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest

litdata = pytest.importorskip("litdata")

from toy import ToyDataModule, ToySequences  # noqa: E402

import varlen.stream.write as write  # noqa: E402
from varlen.cli import dispatch as cli  # noqa: E402
from varlen.errors import DataError  # noqa: E402
from varlen.stream.chunks import read_index_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MARK = "VARLEN_TEST_OPTIMIZE_MARK"
Usage = namedtuple("Usage", "total used free")


def used(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


class FakeDisk:
    """A disk of `room` bytes under `folder` (see the module docstring)."""

    def __init__(self, folder: Path, room: int) -> None:
        self.folder, self.room = folder, room

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from litdata.streaming.writer import BinaryWriter

        real_usage, real_write = shutil.disk_usage, BinaryWriter.write_chunk_to_file
        disk = self

        def usage(path):
            if Path(path).resolve().is_relative_to(disk.folder):
                return Usage(disk.room, used(disk.folder), max(0, disk.room - used(disk.folder)))
            return real_usage(path)

        def write_chunk_to_file(self, raw_data: bytes, filename: str, compress=None) -> None:
            left = disk.room - used(disk.folder)
            if len(raw_data) > left:
                Path(self._cache_dir, filename).write_bytes(raw_data[: max(left, 0)])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_write(self, raw_data, filename, compress)

        monkeypatch.setattr(shutil, "disk_usage", usage)
        monkeypatch.setattr(BinaryWriter, "write_chunk_to_file", write_chunk_to_file)


def toy(samples: int = 400, **kwargs) -> ToyDataModule:
    dm = ToyDataModule(num_samples=samples, batch_size=16, **kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def marked_processes() -> list[int]:
    """Processes besides this one that carry this test's mark in their environment (its writers), zombies aside."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if MARK.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def hung(signum, frame) -> None:
    raise TimeoutError("the write hung")


@pytest.fixture
def marked(monkeypatch):
    """Every process the test starts carries a mark, so that any left running is found (Linux)."""
    if not Path("/proc/self/environ").is_file():
        pytest.skip("needs /proc to find the writers left running")
    monkeypatch.setenv(MARK, "1")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)  # a hung write (LitData waiting for a writer's blocked child) fails the test, not the run
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_disk_without_room_is_refused_before_writing(tmp_path, monkeypatch, marked) -> None:
    dm = toy()
    need = write.estimate_bytes(dm.dataset("train"))
    FakeDisk(tmp_path, need // 2).install(monkeypatch)
    with pytest.raises(DataError) as caught:
        write.write_split(dm, tmp_path / "out", chunk_bytes=4000, num_workers=2)
    free, wanted = f"{need // 2 / 2**20:.1f} MiB free", f"the chunks need about {need / 2**20:.1f} MiB there"
    assert str(caught.value) == (
        f"no space left in {tmp_path} (No space left on device; {free}; {wanted}): free some, or give --output a "
        f"folder on a disk with room ({tmp_path / 'out'})"
    )
    assert list(tmp_path.iterdir()) == [] and marked_processes() == []


@pytest.mark.parametrize(("workers", "chunk_bytes"), [(2, 4000), (1, 10**6)], ids=["mid-write", "last-chunk"])
def test_a_disk_that_fills_up_while_writing_is_a_data_error_and_leaves_nothing(
    tmp_path, monkeypatch, marked, workers, chunk_bytes
) -> None:
    """The estimate said it fits (made to here), the chunks did not: a writer fails mid-way (two writers of
    several chunks) or at its last chunk (one writer, one chunk: LitData then loses the error and waited for good
    on the writer's remover)."""
    dm = toy()
    need = write.estimate_bytes(dm.dataset("train"))
    monkeypatch.setattr(write, "estimate_bytes", lambda dataset: 100)
    FakeDisk(tmp_path, need // 3).install(monkeypatch)
    started = time.monotonic()
    with pytest.raises(DataError, match=rf"^no space left in {tmp_path} \(No space left on device; [\d.]+ MiB free"):
        write.write_split(dm, tmp_path / "out", chunk_bytes=chunk_bytes, num_workers=workers)
    assert time.monotonic() - started < 60
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))  # no output, no scratch
    assert marked_processes() == []


class SlowSequences(ToySequences):
    """Toy sequences read slowly in LitData's writers (not here, where the split is set up and estimated); the
    writer that reads sample `interrupt_at` sends this process SIGINT, as a Ctrl-C mid-write would."""

    def __init__(self, n: int, seed: int, parent: int, interrupt_at: int) -> None:
        super().__init__(n, seed)
        self.parent, self.interrupt_at = parent, interrupt_at

    def __getitem__(self, i: int) -> dict:
        if os.getpid() != self.parent:
            time.sleep(0.02)
            if i == self.interrupt_at:
                os.kill(self.parent, signal.SIGINT)
        return super().__getitem__(i)


class SlowToy(ToyDataModule):
    def build(self, stage: str | None) -> dict:
        return {**super().build(stage), "train": SlowSequences(self.num_samples, 1, os.getpid(), interrupt_at=40)}


def test_an_interrupted_write_leaves_nothing_and_runs_again(tmp_path, marked) -> None:
    """Ctrl-C during the write: LitData's own handler ended the command with status 0, its writers left behind
    and partial chunks in the output, which the next run refused."""
    dm = SlowToy(num_samples=300, batch_size=16)
    dm.prepare_data()
    dm.setup("fit")
    # Python's own handler, as a terminal's Ctrl-C meets it (a shell's background job inherits SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write.write_split(dm, tmp_path / "out", chunk_bytes=4000, num_workers=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert list(tmp_path.iterdir()) == [] and marked_processes() == []
    with pytest.raises(DataError, match="an interrupted or failed varlen optimize leaves no folder half-written"):
        read_index_json(tmp_path / "out")  # what a fit reading it says
    written = write.write_split(toy(), tmp_path / "out", chunk_bytes=4000, num_workers=1)
    assert written.samples == len(toy().dataset("train")) and (tmp_path / "out" / "index.json").is_file()


def test_a_write_interrupted_after_litdata_wrote_runs_again(tmp_path, monkeypatch) -> None:
    """Ctrl-C once LitData has written its index.json, while the size index is written: the folder held a
    LitData dataset without varlen's index, which the same command then refused ("already holds")."""
    size_index = write.write_sidecars

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(write, "write_sidecars", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write.write_split(toy(), tmp_path / "out", chunk_bytes=4000, num_workers=1)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(write, "write_sidecars", size_index)
    written = write.write_split(toy(), tmp_path / "out", chunk_bytes=4000, num_workers=1)
    assert (tmp_path / "out" / "varlen_sizes").is_dir() and written.samples == len(toy().dataset("train"))


def test_the_pieces_an_interrupted_write_left_are_replaced(tmp_path, recwarn) -> None:
    """An output that a LitData write of two writers left before merging its writers' indexes (chunks and
    `0.index.json`, `1.index.json`, no `index.json`) is written again whole by one writer: not refused,
    and not merged with the stale second writer's chunks (which made a dataset of more samples than the split);
    a folder of other files is still refused."""
    out = tmp_path / "out"
    write.write_split(toy(), out, chunk_bytes=4000, num_workers=2)
    index = json.loads((out / "index.json").read_text())
    for writer in ("0", "1"):
        part = [c for c in index["chunks"] if c["filename"].startswith(f"chunk-{writer}-")]
        (out / f"{writer}.index.json").write_text(json.dumps({**index, "chunks": part}))
    (out / "index.json").unlink()
    shutil.rmtree(out / "varlen_sizes")
    written = write.write_split(toy(), out, chunk_bytes=4000, num_workers=1)
    chunks = json.loads((out / "index.json").read_text())["chunks"]
    assert written.samples == len(toy().dataset("train")) == sum(c["chunk_size"] for c in chunks)
    assert {c["filename"].split("-")[1] for c in chunks} == {"0"}
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("chunk-0-")) == ["index.json", "varlen_sizes"]
    assert any("pieces an interrupted write left; writing it again" in str(w.message) for w in recwarn)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=rf"^{other} holds other files \(notes.txt, ...\), no LitData dataset"):
        write.write_split(toy(), other, num_workers=1)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_an_output_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "taken").write_text("a file")
    config = str(ROOT / "configs" / "sequence.yaml")
    args = ["optimize", "--config", config, "--data.init_args.synthetic=60", "--output", str(tmp_path / "taken")]
    monkeypatch.setattr(sys, "argv", ["varlen", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.strip().splitlines()[-1] == (
        f"varlen: error: --output {tmp_path / 'taken'} is a file, not a folder: give a new folder"
    ), err
    assert "Traceback" not in err
