"""How a worker's batch reaches the main process: one shared buffer a batch (`VarLenLoader`, packed by
`varlen.batching.transfer`) against PyTorch's hand-over of one shared-memory file a tensor (the same
loader with `VarLenLoader.pack_batches = False`: what every `DataLoader` does), in the same run.

    python scripts/benchmark_transfer.py                     # every scenario's shipped config
    python scripts/benchmark_transfer.py --scenarios text --batches 400 --repeats 5

Each scenario's DataModule comes from its shipped YAML (the batches `varlen fit` trains on), with
`num_workers` forked workers; a row times `--batches` training batches after the first (the
workers' start left out), the median of `--repeats` runs, each loader new and the two hand-overs
taken in turn. The in-process loader (no workers) is the floor: what the batches cost to fetch and
collate without any hand-over.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from benchmark_steps import SCENARIOS  # noqa: E402  (the shipped configs)

from varlen.batching.loader import VarLenLoader  # noqa: E402


def tensors_in(batch) -> int:
    if isinstance(batch, torch.Tensor):
        return 1
    if isinstance(batch, dict):
        return sum(tensors_in(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(tensors_in(v) for v in batch)
    stores = getattr(batch, "stores", None)  # PyG's Batch
    return sum(tensors_in(dict(store)) for store in stores) if stores is not None else 0


def datamodule(name: str, workers: int, workdir: Path):
    from varlen.cli.dispatch import main

    config = SCENARIOS[name][0]
    args = ["--config", str(ROOT / config), f"--trainer.default_root_dir={workdir}",
            f"--data.init_args.num_workers={workers}"]  # fmt: skip
    if workers:
        args.append("--data.init_args.multiprocessing_context=fork")
    dm = main(args, run=False).datamodule
    dm.prepare_data()
    dm.setup("fit")
    return dm


def ms_per_batch(dm, batches: int) -> tuple[float, int]:
    """Milliseconds a training batch after the first, and the tensors in a batch."""
    loader = dm.train_dataloader()
    loader.batch_sampler.set_epoch(0)
    iterator = iter(loader)
    first = next(iterator)
    start, count = time.perf_counter(), 0
    for _ in islice(iterator, batches):
        count += 1
    seconds = time.perf_counter() - start
    if hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    return 1000 * seconds / max(count, 1), tensors_in(first)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--batches", type=int, default=300, help="timed batches a run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each hand-over: the median")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios.split(","):
            here, tensors = ms_per_batch(datamodule(name, 0, Path(tmp)), args.batches)
            dm = datamodule(name, args.workers, Path(tmp))
            runs: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.repeats):
                for packed in (True, False):  # in turn: the machine's load falls on both
                    VarLenLoader.pack_batches = packed
                    runs[packed].append(ms_per_batch(dm, args.batches)[0])
            VarLenLoader.pack_batches = True
            rows.append((name, tensors, here, statistics.median(runs[True]), statistics.median(runs[False])))
    columns = ("tensors a batch", "in process, ms a batch", "packed (one buffer), ms a batch",
               "PyTorch's hand-over (a file a tensor), ms a batch", "speed-up")  # fmt: skip
    print(f"\n| scenario (shipped config, {args.workers} forked workers) | " + " | ".join(columns) + " |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, tensors, here, packed, plain in rows:
        print(f"| {name} | {tensors} | {here:.3f} | {packed:.3f} | {plain:.3f} | {plain / packed:.2f}x |")


if __name__ == "__main__":
    main()
