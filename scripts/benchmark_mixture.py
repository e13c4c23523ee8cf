"""Streamed mixtures side by side (issue 28), printed as markdown tables.

Three streamed sources of token sequences (lognormal(5, 1) lengths in [1, 1024]), of 1,000,000,
100,000 and 10,000 samples by default (`--scale` shrinks them), written as LitData chunks with
`litdata.optimize` and indexed with `write_size_index`; weights 0.6 / 0.3 / 0.1.

* varlen: the streamed mixture plan (`MixtureBatchPlan`) on `--world`
  simulated ranks under a budget of `--budget` padded tokens: each epoch's served share per source
  (every rank's batches), real / padded tokens, the set-up of rank 0 (seconds, RSS added, peak traced
  allocation) and a restore in the middle of epoch 2 with its first batch, checked against the
  uninterrupted run.
* LitData: `CombinedStreamingDataset(weights=...)` + `StreamingDataLoader` at varlen's mean batch
  size, one process (LitData splits by its own ranks; its shares do not depend on them): each epoch's
  served share per source and samples, real / padded tokens (each batch padded to its longest), and
  whether a loader restored half way through epoch 2 serves the uninterrupted run's samples.

    python scripts/benchmark_mixture.py                 # the issue's sizes (writes 1.11 M samples once)
    python scripts/benchmark_mixture.py --scale 0.05    # a quick look
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import psutil

NAMES = ("large", "medium", "small")
SIZES = (1_000_000, 100_000, 10_000)
WEIGHTS = (0.6, 0.3, 0.1)
TOP = 1024
LENGTHS = {
    name: np.clip(np.random.default_rng(seed).lognormal(5.0, 1.0, n), 1, TOP).astype(np.int64)
    for seed, (name, n) in enumerate(zip(NAMES, SIZES, strict=True))
}


def item(key: tuple[int, int]) -> dict:
    """Sample `i` of source `s` (module level: LitData's writer workers import it)."""
    source, i = key
    length = int(LENGTHS[NAMES[source]][i])
    return {"source": source, "index": i, "input_ids": np.arange(length, dtype=np.int32) % 30000}


def write_source(folder: Path, source: int, n: int) -> Path:
    """Source `source`'s first `n` samples as LitData chunks in `folder`, with their size index."""
    import litdata

    from varlen.stream import write_size_index

    if (folder / "varlen_sizes").is_dir():
        return folder
    litdata.optimize(fn=item, inputs=[(source, i) for i in range(n)], output_dir=str(folder), chunk_bytes="16MB",
                     num_workers=2, keep_data_ordered=True, reorder_files=False, verbose=False,
                     start_method="fork")  # fmt: skip
    write_size_index(folder, LENGTHS[NAMES[source]][:n], ("tokens",))
    return folder


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def binomial_band(share: float, n: int) -> float:
    """Half width of a 99% normal-approximation interval of a share over `n` draws."""
    return 2.576 * (share * (1 - share) / max(n, 1)) ** 0.5


# -- varlen ---------------------------------------------------------------------------------------


def varlen_plan(folders: list[Path], args, world: int | None = None):
    from varlen.stream.mixture_epochs import MixtureBatchPlan
    from varlen.stream.size_index import SizeIndex

    return MixtureBatchPlan(
        [SizeIndex(f) for f in folders], names=list(NAMES), source_weights=list(WEIGHTS), mix=args.mix,
        max_tokens=args.budget, seed=0, num_replicas=world or args.world, rank=0, lanes=1,
    )  # fmt: skip


def varlen_part(folders: list[Path], sizes: list[int], args) -> float:
    """Prints varlen's tables; returns its mean batch size (samples) for LitData's loader."""
    lengths = np.concatenate([LENGTHS[n][:k] for n, k in zip(NAMES, sizes, strict=True)])
    source_of = np.repeat(np.arange(len(sizes)), sizes)

    gc.collect()
    before, start = rss_mb(), time.perf_counter()
    plan = varlen_plan(folders, args)
    setup_s, setup_mb = time.perf_counter() - start, rss_mb() - before
    tracemalloc.start()
    varlen_plan(folders, args)
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    print(f"\n### varlen: streamed mixture, {args.world} ranks, budget {args.budget} padded tokens, mix={args.mix}\n")
    print(row("epoch", *[f"{n} share (asked {w})" for n, w in zip(NAMES, WEIGHTS, strict=True)], "samples",
              "batches per rank", "real / padded tokens", "within 99%"))  # fmt: skip
    print(row(*["---"] * (len(NAMES) + 5)))
    ranks = [plan] + [plan.on_rank(r) for r in range(1, args.world)]
    batches = 0
    samples_seen = 0
    for epoch in range(args.epochs):
        served = np.zeros(len(sizes), np.int64)
        real = padded = 0
        counts = set()
        for rank_plan in ranks:
            rank_plan.set_epoch(epoch)
            count = 0
            for batch in rank_plan:
                batch = np.asarray(batch)
                served += np.bincount(source_of[batch], minlength=len(sizes))
                real += int(lengths[batch].sum())
                padded += int(lengths[batch].max()) * len(batch)
                count += 1
            counts.add(count)
            batches += count
        total = int(served.sum())
        samples_seen += total
        shares = served / total
        inside = all(abs(s - w) <= binomial_band(w, total) for s, w in zip(shares, WEIGHTS, strict=True))
        print(row(epoch, *[f"{s:.4f}" for s in shares], f"{total:,}", "/".join(map(str, sorted(counts))),
                  f"{real / padded:.4f}", "yes" if inside else "no"))  # fmt: skip

    # restore half way through epoch 2 on rank 0, against the uninterrupted rank 0
    whole = varlen_plan(folders, args)
    whole.set_epoch(1)
    rest = [np.asarray(b) for b in whole]
    half = len(rest) // 2
    saved = varlen_plan(folders, args)
    saved.set_epoch(1)
    iterator = iter(saved)
    for _ in range(half):
        next(iterator)
    state = saved.state_dict()
    start = time.perf_counter()
    restored = varlen_plan(folders, args)
    restored.load_state_dict(state)
    resumed = iter(restored)
    first = next(resumed)
    restore_s = time.perf_counter() - start
    after = [np.asarray(first), *(np.asarray(b) for b in resumed)]
    exact = len(after) == len(rest) - half
    exact = exact and all(np.array_equal(a, b) for a, b in zip(after, rest[half:], strict=True))
    print(f"\nset-up on rank 0 of {args.world}: {setup_s:.2f} s, {setup_mb:.0f} MB RSS added, "
          f"{peak_mb:.0f} MB peak traced; restore mid-epoch 2 + first batch: {restore_s:.2f} s, "
          f"rest of the epoch equal to the uninterrupted run's: {'yes' if exact else 'NO'}")  # fmt: skip
    return samples_seen / max(batches, 1)


# -- LitData --------------------------------------------------------------------------------------


def pad_batch(samples) -> dict:
    """LitData's collate: the ids padded to the batch's longest, real tokens and each sample's key."""
    import torch

    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.int64)
    for r, s in enumerate(samples):
        ids[r, : len(s["input_ids"])] = torch.as_tensor(s["input_ids"])
    keys = torch.tensor([[int(s["source"]), int(s["index"])] for s in samples])
    return {"ids": ids, "real": sum(len(s["input_ids"]) for s in samples), "keys": keys}


def litdata_loader(folders: list[Path], batch_size: int, workers: int):
    import litdata

    datasets = [litdata.StreamingDataset(str(f), shuffle=True, seed=0) for f in folders]
    combined = litdata.CombinedStreamingDataset(datasets, seed=0, weights=list(WEIGHTS), iterate_over_all=False)
    return litdata.StreamingDataLoader(combined, batch_size=batch_size, num_workers=workers, collate_fn=pad_batch)


def litdata_part(folders: list[Path], sizes: list[int], batch_size: int, args) -> None:
    print(f"\n### LitData 0.2.76: CombinedStreamingDataset(weights={list(WEIGHTS)}) + StreamingDataLoader, "
          f"batch_size {batch_size} (varlen's mean), {args.workers} workers\n")  # fmt: skip
    print(row("epoch", *[f"{n} share (asked {w})" for n, w in zip(NAMES, WEIGHTS, strict=True)], "samples", "batches",
              "real / padded tokens", "within 99%"))  # fmt: skip
    print(row(*["---"] * (len(NAMES) + 5)))
    loader = litdata_loader(folders, batch_size, args.workers)
    served_keys: list[list[np.ndarray]] = []
    states: dict[int, dict] = {}
    for epoch in range(args.epochs):
        served = np.zeros(len(sizes), np.int64)
        real = padded = batches = 0
        keys = []
        for batch in loader:
            served += np.bincount(batch["keys"][:, 0].numpy(), minlength=len(sizes))
            real, padded, batches = real + batch["real"], padded + batch["ids"].numel(), batches + 1
            keys.append(batch["keys"].numpy())
            if batches == args.litdata_half:
                states[epoch] = loader.state_dict()
        served_keys.append(keys)
        total = int(served.sum())
        shares = served / total
        inside = all(abs(s - w) <= binomial_band(w, total) for s, w in zip(shares, WEIGHTS, strict=True))
        print(row(epoch, *[f"{s:.4f}" for s in shares], f"{total:,}", batches, f"{real / padded:.4f}",
                  "yes" if inside else "no"))  # fmt: skip
    print()
    for epoch, state in states.items():  # a new loader from the state, to the epoch's end
        restored = litdata_loader(folders, batch_size, args.workers)
        restored.load_state_dict(state)
        start = time.perf_counter()
        after = [batch["keys"].numpy() for batch in restored]
        seconds = time.perf_counter() - start
        rest = served_keys[epoch][args.litdata_half :]
        want = np.concatenate(rest) if rest else np.zeros((0, 2), np.int64)
        got = np.concatenate(after) if after else np.zeros((0, 2), np.int64)
        same = len(got) == len(want) and np.array_equal(got, want)
        same_set = sorted(map(tuple, got.tolist())) == sorted(map(tuple, want.tolist()))
        print(f"LitData restored after {args.litdata_half} batches of epoch {epoch + 1}: {len(got):,} samples "
              f"served against {len(want):,} in the uninterrupted run; the same samples in the same order: "
              f"{'yes' if same else 'no'}; the same samples: {'yes' if same_set else 'no'} "
              f"({seconds:.1f} s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="the sources' sizes times this")
    parser.add_argument("--dir", default=None, help="where the chunks are written and kept (default: a temp dir)")
    parser.add_argument("--world", type=int, default=8, help="simulated ranks of varlen's plan")
    parser.add_argument("--budget", type=int, default=8192, help="varlen's padded tokens per batch")
    parser.add_argument("--mix", default="within_batch", choices=["within_batch", "per_source"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="LitData's loader workers")
    parser.add_argument("--litdata-half", type=int, default=100, help="LitData: batches of epoch 2 before its state")
    parser.add_argument("--skip-litdata", action="store_true")
    parser.add_argument("--batch-size", type=int, default=None, help="LitData's batch size (default: varlen's mean)")
    parser.add_argument("--skip-varlen", action="store_true", help="LitData alone (give --batch-size)")
    args = parser.parse_args()
    sizes = [max(100, int(n * args.scale)) for n in SIZES]
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="varlen-mixture-"))
    start = time.perf_counter()
    folders = [write_source(root / f"{n}-{k}", s, k) for s, (n, k) in enumerate(zip(NAMES, sizes, strict=True))]
    print(f"sources {dict(zip(NAMES, sizes, strict=True))} in {root} ({time.perf_counter() - start:.0f} s to write)")
    mean_batch = args.batch_size or 32
    if not args.skip_varlen:
        mean_batch = args.batch_size or varlen_part(folders, sizes, args)
    if not args.skip_litdata:
        litdata_part(folders, sizes, max(1, round(mean_batch)), args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
