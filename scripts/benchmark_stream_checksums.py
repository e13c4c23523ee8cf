"""What verifying a stream's checksums costs (`varlen.stream.integrity`), on LitData chunks on local disk.

    python scripts/benchmark_stream_checksums.py                      # ~300 MiB of chunks in a fresh folder
    python scripts/benchmark_stream_checksums.py --mib 300 --dir /tmp/s   # keeps (or reuses) them there

The chunks hold token sequences (uint16 ids, lognormal(7, 1) lengths in [1, 16384]: a few KiB a sample) written with
`litdata.optimize` (64 MB chunks, as `varlen optimize` writes them) and their size index with
`write_size_index`. A row, the median of `--repeats`: `write`, the checksums `write_size_index`
records (every chunk hashed once, the files just written so in the page cache); `epoch`, one pass over
every sample through a `StreamedDataset` (each chunk decoded once), with verification off (no checksum
recorded) and at a node's first open (this process's memo and the node's markers emptied first);
`hash`, the chunks' hashing alone; `marker`, the epoch of a later process of the node (the markers
there). `warm`: the files in the page cache; `cold`: their pages dropped first
(`posix_fadvise(DONTNEED)`), so the hash reads each chunk from the disk before LitData does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import varlen.storage.checksums as checksums
from varlen.stream import SizeIndex, write_size_index
from varlen.stream.dataset import StreamedDataset
from varlen.stream.integrity import chunk_checksums


def tokens(i: int) -> dict:
    rng = np.random.default_rng(i)
    length = int(np.clip(rng.lognormal(7, 1), 1, 16384))
    return {"index": i, "input_ids": rng.integers(0, 30000, length, dtype=np.uint16)}


def sizes_of(samples: list) -> np.ndarray:
    return np.array([[len(s["input_ids"])] for s in samples], dtype=np.int64)


def write(folder: Path, mib: int) -> Path:
    """About `mib` MiB of chunks (lengths average about 1,800 tokens, 2 bytes each) and their size index."""
    import litdata

    if not (folder / "index.json").is_file():
        count = int(mib * 2**20 / (2 * np.exp(7.5)))
        litdata.optimize(tokens, list(range(count)), str(folder), chunk_bytes="64MB", num_workers=2,
                         keep_data_ordered=True, start_method="fork", verbose=False)  # fmt: skip
        sizes = np.concatenate([sizes_of([tokens(i)]) for i in range(count)])
        write_size_index(folder, sizes, ["tokens"])
    return folder


def forget(paths: list[Path]) -> None:
    """This process's memo and the node's markers emptied: the next open verifies."""
    checksums._VERIFIED.clear()
    for path in paths:
        with contextlib.suppress(OSError):
            os.removexattr(path, checksums.MARKER)


def drop_pages(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def epoch(folder: Path, verify: bool) -> float:
    dataset = StreamedDataset(folder, sizes_of)
    if not verify:
        dataset.index.chunk_checksum = lambda chunk: None
    started = time.perf_counter()
    for chunk in range(dataset.index.num_chunks):
        dataset._decoded(chunk)
    return time.perf_counter() - started


def run(folder: Path, cold: bool) -> dict[str, float]:
    names = SizeIndex(folder).chunks.names
    paths = [folder / name for name in names]
    times = {}
    forget(paths)
    drop_pages(paths) if cold else None
    times["epoch, unverified"] = epoch(folder, verify=False)
    forget(paths)
    drop_pages(paths) if cold else None
    times["epoch, first open"] = epoch(folder, verify=True)
    drop_pages(paths) if cold else None
    started = time.perf_counter()
    chunk_checksums(folder, names)
    times["hash"] = time.perf_counter() - started
    checksums._VERIFIED.clear()  # another process of the node: the markers are there
    drop_pages(paths) if cold else None
    times["epoch, marker"] = epoch(folder, verify=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=None, help="where the chunks are (written when missing)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = write((args.dir or Path(scratch)) / "chunks", args.mib)
        names = SizeIndex(folder).chunks.names
        size = sum((folder / name).stat().st_size for name in names)
        started = time.perf_counter()
        chunk_checksums(folder, names)
        print(f"{len(names)} chunks, {size / 2**20:.0f} MiB; write: {time.perf_counter() - started:.3f} s of hashing")
        parts = ["epoch, unverified", "epoch, first open", "hash", "epoch, marker"]
        print("| page cache | " + " | ".join(f"{part} (s)" for part in parts) + " |")
        print("|---|" + "---|" * len(parts))
        for cold in (False, True):
            runs = [run(folder, cold) for _ in range(args.repeats)]
            cells = " | ".join(f"{statistics.median(r[part] for r in runs):.3f}" for part in parts)
            print(f"| {'cold' if cold else 'warm'} | {cells} |")


if __name__ == "__main__":
    main()
