"""Memory of loader workers under every start method, and the cost of building data once per node.

Parts (`--parts`, comma-separated; default all):

`workers`
  Unique memory (USS: pages no other process shares) of each loader worker after `--batches`
  training batches, `--workers` workers, under `fork`, `spawn` and `forkserver`, for a
  small and a large corpus of each scenario: text (5,000 synthetic reviews against `--large-texts`,
  default 2 million, written once as Parquet; SST-2's 67k beside them when `$VARLEN_DATA` has
  it), molecules (ESOL's 1,128 against HIV's 41,127 when the shared data has `HIV.csv.gz`, else
  ESOL repeated) and bearing (the simulator at 4 against 40 recordings per class). Each case runs in
  a fresh process; the caches are built first (`prepare_data`), outside the measure. The large
  corpus should cost a worker no more than the small one: the data are mapped, not copied. USS
  also counts the pages of a mapped cache file that only this worker has read so far (clean page
  cache, shared with the next process that reads them, dropped under memory pressure): those are
  reported apart, and the comparison is made on the rest (the worker's heap and libraries).
`setup`
  `setup` of SST-2 train (67k) in a new process with the cache the first one built, against the
  first (tokenising) one.
`tokenise`
  The peak memory of tokenising the large synthetic corpus against the token ids it stores.

    python scripts/benchmark_memory.py                          # about 30 min on 2 cores
    python scripts/benchmark_memory.py --parts workers --large-texts 200000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from statistics import median

from varlen.storage.paths import data_root

SHARED = data_root()
METHODS = tuple(m for m in ("fork", "spawn", "forkserver") if m in multiprocessing.get_all_start_methods())
MIB = 2**20


# -- corpora ------------------------------------------------------------------------------------------


def synthetic_parquet(path: Path, rows: int, chunk: int = 100_000) -> Path:
    """`rows` synthetic reviews as a Parquet table written a chunk at a time (kept for later runs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from varlen.datasets.text.synthetic import synthetic_reviews

    if path.exists() and pq.ParquetFile(path).metadata.num_rows == rows:
        return path
    tmp = path.with_suffix(".part")
    with pq.ParquetWriter(tmp, pa.schema([("text", pa.string()), ("label", pa.int64())])) as writer:
        for seed, start in enumerate(range(0, rows, chunk)):
            part = synthetic_reviews(min(chunk, rows - start), seed=seed)
            writer.write_table(pa.table({"text": part["text"], "label": part["label"]}))
    tmp.replace(path)
    return path


def datamodule(case: str, work: Path, **loader):
    """The DataModule of `case`, its caches under `work / "cache"`."""
    cache = str(work / "cache")
    if case.startswith("text"):
        from varlen.datamodules import TextClassificationDataModule

        if case == "text-sst2":
            files = {
                "train_file": str(SHARED / "text" / "sst2_train.tsv"),
                "val_file": str(SHARED / "text" / "sst2_dev.tsv"),
            }
            return TextClassificationDataModule(**files, text_column="sentence", cache_dir=cache, **loader)
        rows = {"text-small": 5_000, "text-large": int(os.environ["LARGE_TEXTS"])}[case]
        train = synthetic_parquet(work / f"reviews_{rows}.parquet", rows)
        val = synthetic_parquet(work / "reviews_val_1000.parquet", 1_000)
        return TextClassificationDataModule(train_file=str(train), val_file=str(val), cache_dir=cache, **loader)
    if case.startswith("molecules"):
        from varlen.datamodules import MoleculeDataModule

        if case == "molecules-large":
            hiv = SHARED / "molecules" / "HIV.csv.gz"
            if hiv.exists():
                return MoleculeDataModule(dataset="hiv", path=str(hiv), on_bad="skip", cache_dir=cache, **loader)
            return MoleculeDataModule(path=str(repeated_esol(work, 40)), cache_dir=cache, **loader)
        return MoleculeDataModule(cache_dir=cache, **loader)
    from varlen.datamodules import BearingDataModule

    per_class = {"bearing-small": 4, "bearing-large": 40}[case]
    return BearingDataModule(simulated_per_class=per_class, cache_dir=cache, **loader)


def repeated_esol(work: Path, times: int) -> Path:
    """ESOL's table `times` over (a larger table of real molecules when HIV is not at hand)."""
    from varlen.datasets.molecules.readers import packaged_esol

    path = work / f"esol_x{times}.csv"
    if not path.exists():
        lines = packaged_esol().read_text().splitlines()
        path.write_text("\n".join([lines[0], *(lines[1:] * times)]) + "\n")
    return path


# -- one measure, in a fresh process --------------------------------------------------------------------


def measure_workers(case: str, method: str, work: Path, workers: int, batches: int) -> dict:
    """USS of each worker after `batches` training batches (the caches already built)."""
    import psutil

    dm = datamodule(case, work, num_workers=workers, multiprocessing_context=method, persistent_workers=True)
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    uss, mapped = zip(*sorted(unique_memory(w.pid, work / "cache") for w in iterator._workers), strict=True)
    main = psutil.Process().memory_full_info().uss
    loader.shutdown_workers()
    samples = len(dm.dataset("train"))
    return {"case": case, "method": method, "samples": samples, "worker_uss": uss, "mapped": mapped, "main_uss": main}


def unique_memory(pid: int, cache: Path) -> tuple[int, int]:
    """A process's USS, and the part of it that is pages of the cache files it maps and no other
    process has mapped yet (page cache: clean, shared by the next process that reads them, never a copy)."""
    import psutil

    process = psutil.Process(pid)
    mapped = sum(m.private_clean + m.private_dirty for m in process.memory_maps() if m.path.startswith(str(cache)))
    return process.memory_full_info().uss, mapped


def measure_setup(case: str, work: Path) -> dict:
    """Seconds of `prepare_data` + `setup` (whatever the cache holds), this process's peak RSS, and
    its peak anonymous memory (RSS less the pages of mapped files: what building holds of its own)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    dm = datamodule(case, work)
    if hasattr(dm, "tokenizer"):
        dm.tokenizer  # noqa: B018  (loaded before the clock: the tokenizer is not the data)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    anonymous = AnonymousPeak()
    start = time.perf_counter()
    with anonymous:
        dm.prepare_data()
        dm.setup("fit")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ids = sum(int(d.ids.values.nbytes) for d in {id(d): d for d in dm.datasets.values()}.values())
    return {
        "case": case, "seconds": seconds, "before": before, "tokenizer": loaded - before, "peak": peak, "ids": ids,
        "anonymous_start": anonymous.start, "anonymous_peak": anonymous.peak,
    }  # fmt: skip


class AnonymousPeak:
    """The largest `RssAnon` of this process while the block runs, sampled every 10 ms by a thread
    (the kernel keeps a peak of the whole RSS only, which counts mapped file pages too)."""

    def __enter__(self) -> AnonymousPeak:
        import threading

        self.start = self.peak = self.read()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self.read())

    @staticmethod
    def read() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        return 0


def run_child(*args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- parts ------------------------------------------------------------------------------------------------


def workers_part(args: argparse.Namespace, work: Path) -> None:
    pairs = [("text-small", "text-large"), ("molecules-small", "molecules-large"), ("bearing-small", "bearing-large")]
    cases = [c for pair in pairs for c in pair]
    if (SHARED / "text" / "sst2_train.tsv").exists():
        cases.insert(2, "text-sst2")
    results: dict[tuple[str, str], dict] = {}
    for case in cases:
        run_child("build", case, str(work))  # the caches, once, outside the measure
        for method in args.methods:
            results[case, method] = run_child("workers", case, str(work), method, str(args.workers), str(args.batches))
            found = results[case, method]
            print(f"  {case} {method}: USS {mib(found['worker_uss'])}, of which cache pages {mib(found['mapped'])} MiB")
    own = {key: median(u - m for u, m in zip(r["worker_uss"], r["mapped"], strict=True)) for key, r in results.items()}
    head = " | ".join(args.methods)
    what = f"median worker USS beyond the mapped cache pages, MiB; {args.workers} workers"
    print(f"\n| corpus (training samples) | {head} |  ({what})")
    print("|---|" + "---:|" * len(args.methods))
    for case in cases:
        cells = [f"{own[case, m] / MIB:.1f}" for m in args.methods]
        print(f"| {case} ({results[case, args.methods[0]]['samples']:,}) | " + " | ".join(cells) + " |")
    print(f"\n| large / small, per worker | {head} |")
    print("|---|" + "---:|" * len(args.methods))
    for small, large in pairs:
        print(
            f"| {large.split('-')[0]} | "
            + " | ".join(f"{own[large, m] / own[small, m]:.3f}x" for m in args.methods)
            + " |"
        )
    print(f"\n| cache pages only one worker has touched so far (page cache, shared; MiB) | {head} |")
    print("|---|" + "---:|" * len(args.methods))
    for case in cases:
        print(
            f"| {case} | " + " | ".join(f"{median(results[case, m]['mapped']) / MIB:.1f}" for m in args.methods) + " |"
        )


def mib(values) -> list[float]:
    return [round(v / MIB, 1) for v in values]


def setup_part(args: argparse.Namespace, work: Path) -> None:
    if not (SHARED / "text" / "sst2_train.tsv").exists():
        print(f"\nSST-2 is not in {SHARED} ($VARLEN_DATA): no setup measure")
        return
    fresh = Path(tempfile.mkdtemp(dir=work, prefix="sst2-"))
    first = run_child("setup", "text-sst2", str(fresh))
    second = median(run_child("setup", "text-sst2", str(fresh))["seconds"] for _ in range(3))
    print("\n| SST-2 train (67k) and dev, new process | seconds |")
    print("|---|---:|")
    print(f"| first setup (tokenises, writes the cache) | {first['seconds']:.2f} |")
    print(f"| second setup (maps the cache; median of 3) | {second:.2f} |")
    print(f"| second / first | {second / first['seconds']:.3f}x |")


def tokenise_part(args: argparse.Namespace, work: Path) -> None:
    fresh = Path(tempfile.mkdtemp(dir=work, prefix="large-"))
    (fresh / f"reviews_{args.large_texts}.parquet").symlink_to(
        synthetic_parquet(work / f"reviews_{args.large_texts}.parquet", args.large_texts)
    )
    (fresh / "reviews_val_1000.parquet").symlink_to(synthetic_parquet(work / "reviews_val_1000.parquet", 1_000))
    built = run_child("setup", "text-large", str(fresh))
    extra = built["peak"] - built["before"] - built["tokenizer"]
    print(f"\n| tokenising {args.large_texts:,} synthetic reviews | MiB |")
    print("|---|---:|")
    print(f"| token ids stored | {built['ids'] / MIB:,.1f} |")
    print(f"| tokenizer loaded | {built['tokenizer'] / MIB:,.1f} |")
    ratio = extra / built["ids"]
    print(f"| peak RSS of prepare_data + setup, beyond the tokenizer | {extra / MIB:,.1f} ({ratio:.2f}x the ids) |")
    own = built["anonymous_peak"] - built["anonymous_start"]
    print(f"| of which its own (anonymous) memory at most | {own / MIB:,.1f} ({own / built['ids']:.2f}x the ids) |")
    print(f"| seconds | {built['seconds']:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="workers,setup,tokenise")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--large-texts", type=int, default=2_000_000)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "varlen-benchmark-memory")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:  # the children read the parent's
        os.environ["LARGE_TEXTS"] = str(args.large_texts)
    warnings.filterwarnings("ignore")
    if args.child:
        kind, case, work, *rest = args.child
        work = Path(work)
        if kind == "build":
            dm = datamodule(case, work)
            dm.prepare_data()
            print(json.dumps({"case": case}))
        elif kind == "workers":
            print(json.dumps(measure_workers(case, rest[0], work, int(rest[1]), int(rest[2]))))
        else:
            print(json.dumps(measure_setup(case, work)))
        return
    args.methods = [m for m in args.methods.split(",") if m]
    args.work.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    if "workers" in parts:
        workers_part(args, args.work)
    if "setup" in parts:
        setup_part(args, args.work)
    if "tokenise" in parts:
        tokenise_part(args, args.work)


if __name__ == "__main__":
    main()
