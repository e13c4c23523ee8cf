"""`varlen optimize`'s progress: the chunks LitData's writers have put in the output, not samples handed to them.

LitData's own bar counts the samples its writers have serialised into a chunk still in memory (sent about once
a second), under a line saying it moves only when a writer finishes, among a dozen lines of its own (an
account advert, its scratch folder, each writer's inferred format, start and end). What is done is what is
on disk: a writer writes a chunk file each time it fills one (`chunk_bytes`) and its last when it finishes.
So LitData writes quietly, and this process, which waits for LitData's loop looking every 0.1 s
(`varlen.stream.writer_group`), shows one bar: the bytes of the chunk files written so far against the
estimate of the whole (`varlen.stream.write.estimate_bytes`; without one for compressed chunks, whose size is
not known ahead), and how many chunks. A split smaller than a chunk a writer moves only when its writers
finish, and the bar, counting chunks, says just that. Off a terminal there is no bar (tqdm's `disable=None`):
the lines `varlen optimize` prints at the end say what was written.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

__all__ = ["CHUNK_FILE", "ChunkProgress", "make_bar", "written_chunks"]

#: a chunk file as LitData's writers name it (`chunk-<writer>-<n>.bin`, `.zstd.bin` compressed whole)
CHUNK_FILE = re.compile(r"chunk-\d+-\d+(\.[a-z0-9]+)?\.bin")


def written_chunks(folder: str | Path) -> tuple[int, int]:
    """The chunk files in `folder` and their bytes so far (a file that goes while it is read is left out)."""
    chunks = nbytes = 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0, 0
    for name in names:
        if CHUNK_FILE.fullmatch(name):
            try:
                nbytes += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
            chunks += 1
    return chunks, nbytes


def make_bar(total_bytes: int | None, writers: int) -> Any:
    """The bar on the terminal: bytes of chunks written, against the estimate where there is one."""
    return tqdm(
        total=total_bytes,
        desc=f"varlen optimize, {writers} writer{'s' if writers != 1 else ''}",
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=None,
        mininterval=0.5,
    )


class ChunkProgress:
    """The chunks in `folder` shown on a bar each time `poll` is called (and once more at `close`).

    Args:
        folder: where LitData's writers put their chunk files (the build folder).
        total_bytes: about the bytes all chunks take (None: not known); raised to what is written when a
            write passes it, since it is an estimate.
        writers: LitData's writer processes, said on the bar.
    """

    def __init__(self, folder: str | Path, total_bytes: int | None, writers: int) -> None:
        self.folder = Path(folder)
        self.chunks = self.nbytes = 0
        self.bar = make_bar(total_bytes, writers)
        self._looked = -math.inf  # when the folder was last listed

    def poll(self, force: bool = False) -> None:
        """A look at the folder: at most as often as the bar redraws, never where no bar shows (off a terminal)."""
        now = time.monotonic()
        if self.bar.disable or not (force or now - self._looked >= self.bar.mininterval):
            return
        self._looked = now
        chunks, nbytes = written_chunks(self.folder)
        if (chunks, nbytes) == (self.chunks, self.nbytes):
            return
        if self.bar.total is not None and nbytes > self.bar.total:
            self.bar.total = nbytes
        self.bar.set_postfix_str(f"{chunks} chunk{'s' if chunks != 1 else ''} written", refresh=False)
        self.bar.update(nbytes - self.nbytes)
        self.chunks, self.nbytes = chunks, nbytes

    def close(self, done: bool = False) -> None:
        """The last look; `done`: the write succeeded, so what is written is the whole (the bar ends full)."""
        self.poll(force=True)
        if done and self.bar.total != self.nbytes:
            self.bar.total = self.nbytes
            self.bar.refresh()
        self.bar.close()

    def __enter__(self) -> ChunkProgress:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        self.close(done=kind is None)
