"""`varlen optimize`'s progress counts what is done, the chunk files on disk, in one bar of its own: LitData's
bar counted samples still in memory under a line saying it moves only when a writer finishes, among a dozen
lines of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("litdata")

from toy import ToyDataModule  # noqa: E402

import varlen.stream.write as write  # noqa: E402
import varlen.stream.write_progress as progress  # noqa: E402
from varlen.stream.write_progress import ChunkProgress, written_chunks  # noqa: E402


class Bar:
    """What a tqdm bar is told: its total, each position it is moved to, its postfix, whether it closed."""

    #: a bar on a terminal (`disable`: off one) that would redraw at every look
    disable, mininterval = False, 0.0

    def __init__(self, total: int | None, writers: int) -> None:
        self.total, self.writers, self.n, self.seen, self.postfix, self.closed = total, writers, 0, [], "", False

    def update(self, n: int) -> None:
        self.n += n
        self.seen.append(self.n)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch) -> list[Bar]:
    made: list[Bar] = []

    def make_bar(total, writers):
        made.append(Bar(total, writers))
        return made[-1]

    monkeypatch.setattr(progress, "make_bar", make_bar)
    return made


def test_only_chunk_files_count_and_the_bar_moves_by_what_they_hold(tmp_path: Path, bars) -> None:
    (tmp_path / "index.json").write_text("{}")
    (tmp_path / "0.index.json").write_text("{}")
    (tmp_path / "chunk-0-0.bin").write_bytes(b"x" * 300)
    (tmp_path / "chunk-1-0.zstd.bin").write_bytes(b"x" * 50)
    assert written_chunks(tmp_path) == (2, 350) and written_chunks(tmp_path / "absent") == (0, 0)
    with ChunkProgress(tmp_path, 1000, 2) as shown:
        shown.poll()
        shown.poll()  # nothing new: no move
        (tmp_path / "chunk-0-1.bin").write_bytes(b"x" * 900)  # past the estimate: it is raised
        shown.poll()
    (bar,) = bars
    assert bar.seen == [350, 1250] and bar.postfix == "3 chunks written" and bar.writers == 2
    assert bar.total == 1250 and bar.closed  # a write that ended well ends full


def test_the_folder_is_looked_at_as_often_as_the_bar_redraws_and_never_off_a_terminal(tmp_path: Path, bars) -> None:
    (tmp_path / "chunk-0-0.bin").write_bytes(b"x" * 300)
    with ChunkProgress(tmp_path, 1000, 1) as shown:
        shown.bar.mininterval = 60.0
        shown.poll()
        (tmp_path / "chunk-0-1.bin").write_bytes(b"x" * 200)
        shown.poll()  # within the bar's redraw interval: not listed again
        assert shown.bar.seen == [300]
    assert shown.bar.seen == [300, 500]  # the last look, at close, is always taken
    with ChunkProgress(tmp_path, 1000, 1) as hidden:
        hidden.bar.disable = True
        hidden.poll()
    assert hidden.bar.seen == [] and hidden.bar.closed


def test_a_write_shows_its_chunks_on_disk_and_litdata_stays_quiet_on_a_terminal(
    tmp_path: Path, bars, monkeypatch, capfd
) -> None:
    dm = ToyDataModule(num_samples=400, batch_size=16)
    dm.prepare_data()
    dm.setup("fit")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # where LitData printed its lines and its bar
    written = write.write_split(dm, tmp_path / "out", chunk_bytes=4000, num_workers=2)
    (bar,) = bars
    assert bar.writers == 2 and bar.total == written.nbytes and bar.n == written.nbytes and bar.closed
    assert bar.postfix == f"{written.chunks} chunks written" and written.chunks > 2
    assert bar.seen == sorted(bar.seen)  # it only moves forward
    out, err = capfd.readouterr()
    said = out + err
    assert "Worker" not in said and "Progress" not in said and "progress bar" not in said, said
