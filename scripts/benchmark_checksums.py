"""What verifying a cache table's checksum costs a process that maps it first (`varlen.storage.checksums`).

    python scripts/benchmark_checksums.py                          # builds both caches in a fresh folder
    python scripts/benchmark_checksums.py --cache-dir /tmp/bench   # reuses (or builds) the caches there

Two real tables: SST-2's training token table (`$VARLEN_DATA/text/sst2_train.tsv`, the MiniLM
tokenizer, `max_length` 128) and HIV's graph table (`$VARLEN_DATA/molecules/HIV.csv.gz`, 41,127
molecules; building it featurises them all, about two minutes on one core). A row times the parts of
one first map in a process, the median of `--repeats`: `map`, the file opened and made into what
the scenario's `setup` and workers serve from it (`TokenizedTexts.mapped`, `GraphStore`);
`verify`, the checksum hashed and compared (this process's memo and the node's marker emptied
first); `check`, the values check `open_table` runs in `setup` (token ids inside the vocabulary;
bonds inside their molecule); `marker`, the verification of a process that finds the marker another
one of the node left (what ranks and spawned workers pay). `warm`: the file in the page cache (it
is, right after a build); `cold`: its pages dropped first (`posix_fadvise(DONTNEED)`), so the
hash reads the whole file from disk where a map reads only what it serves.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import varlen.storage.checksums as checksums  # noqa: E402
from varlen.storage.paths import data_root  # noqa: E402
from varlen.storage.tables import MappedTable  # noqa: E402

SHARED = data_root()
SST2, HIV = SHARED / "text" / "sst2_train.tsv", SHARED / "molecules" / "HIV.csv.gz"


def build(cache: Path) -> dict[str, tuple[Path, Callable[[MappedTable], object], Callable[[MappedTable], object]]]:
    """The two tables (built into `cache` when missing), each with what its scenario makes of it
    and the values check its `open_table` runs."""
    from varlen.datamodules.molecules import MoleculeDataModule
    from varlen.datamodules.text import TextClassificationDataModule
    from varlen.datasets.molecules.graphs import GraphStore, edge_problem
    from varlen.datasets.text.dataset import TokenizedTexts
    from varlen.datasets.text.store import _ids_problem

    text = TextClassificationDataModule(
        train_file=str(SST2), val_file=str(SST2.with_name("sst2_dev.tsv")), text_column="sentence",
        label_column="label", max_length=128, cache_dir=str(cache),
    )  # fmt: skip
    text.prepare_data()
    MoleculeDataModule(dataset="hiv", path=str(HIV), on_bad="skip", cache_dir=str(cache)).prepare_data()
    tokens = next(p for p in (cache / "text").glob("sst2_train.tsv-*.arrow") if p.name.count(".") == 2)
    graphs = next(p for p in (cache / "molecules").glob("HIV.csv-*.arrow") if "-targets-" not in p.name)
    vocabulary = len(text.tokenizer)
    return {
        "SST-2 tokens": (tokens, TokenizedTexts.mapped, lambda t: _ids_problem(t, vocabulary)),
        "HIV graphs": (graphs, GraphStore, edge_problem),
    }


def forget(path: Path) -> None:
    """This process's memo and the node's marker emptied: the next map verifies."""
    checksums._VERIFIED.clear()
    with contextlib.suppress(OSError):
        os.removexattr(path, checksums.MARKER)


def drop_pages(path: Path) -> None:
    """The file's pages out of the page cache: the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def first_map(path: Path, serve: Callable, check: Callable, cold: bool) -> dict[str, float]:
    """Seconds of each part of one first map of `path` in this process (see the module docstring)."""
    forget(path)
    if cold:
        drop_pages(path)
    times, started = {}, time.perf_counter()
    table = MappedTable(path, verify=False)
    serve(table)
    times["map"], started = time.perf_counter() - started, time.perf_counter()
    table.verify()  # hashes, compares, leaves the marker
    times["verify"], started = time.perf_counter() - started, time.perf_counter()
    check(table)
    times["check"] = time.perf_counter() - started
    checksums._VERIFIED.clear()  # another process of the node: the marker is there
    if cold:
        drop_pages(path)
    started = time.perf_counter()
    MappedTable(path, verify=False).verify()
    times["marker"] = time.perf_counter() - started
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the caches are (built when missing)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    if not (SST2.is_file() and HIV.is_file()):
        sys.exit(f"needs {SST2} and {HIV}")
    with tempfile.TemporaryDirectory() as scratch:
        tables = build(args.cache_dir or Path(scratch))
        parts = ["map", "verify", "check", "marker"]
        print("| table | size | page cache | " + " | ".join(f"{part} (ms)" for part in parts) + " |")
        print("|---|---|---|" + "---|" * len(parts))
        for name, (path, serve, check) in tables.items():
            size = path.stat().st_size
            for cold in (False, True):
                runs = [first_map(path, serve, check, cold) for _ in range(args.repeats)]
                cells = " | ".join(f"{1e3 * statistics.median(r[part] for r in runs):.2f}" for part in parts)
                print(f"| {name} | {size / 2**20:.1f} MiB | {'cold' if cold else 'warm'} | {cells} |")


if __name__ == "__main__":
    main()
