"""Benchmarks of streamed data (issue 20), printed as markdown tables.

`--part plan`: the batch plan computed from a size index (`varlen.stream.layout`), on lognormal(5, 1)
token counts in [1, 8192] under a budget of 8192 padded tokens, chunks of 8192 samples:

* plan set-up per rank (seconds; RSS added, and the peak tracemalloc traces) and per-epoch planning, at
  10 M samples (real per-chunk arrays in memory), 100 M and 1 B (a simulated index: histograms only,
  a chunk's sizes drawn when read), against today's in-memory `BucketBatchSampler` where it fits;
* restore mid-epoch + the first batch (one window read);
* equal counts at W = 1, 2, 3, 8, 64, 512 on the 10 M index, every sample served once checked, and the
  batches added to equalise them;
* real / padded tokens against the global in-memory plan, random batches at varlen's mean batch size
  (LitData's batching) and lhotse's `DynamicBucketingSampler` at the same budget (on a subset: lhotse
  holds a Python object per sample).

`--part disk`: the same figures from real LitData chunks on local disk (`--disk-samples` token
sequences of lognormal(5, 1) lengths in [1, 8192], uint16 ids, written with `litdata.optimize` and
their size index with `write_size_index`; `--disk-dir` keeps them for a re-run). Each figure is
taken in a fresh process: a rank's `StreamBatchSampler` set-up from the folder (seconds, RSS added),
its per-epoch planning and a restore mid-epoch + first batch, against today's `BucketBatchSampler`
over the same sizes (read from the index, as a DataModule holds them).

`--part loader`: loader throughput over the same LitData chunks on local disk (`--loader-samples`
token sequences, lognormal(5, 1) lengths in [1, 1024], written with `litdata.optimize` and indexed
with `write_size_index`), 2 workers each, one epoch: varlen's `StreamBatchSampler` +
`StreamedDataset` in a `VarLenLoader` (budget `--loader-budget` padded tokens) against LitData's
`StreamingDataLoader(StreamingDataset(shuffle=True))` at varlen's mean batch size; both pad each
batch to its longest sequence. Samples/s, real tokens/s and real / padded tokens: the median of
`--repeats` epochs, each loader new and the two taken in turn (the machine's load moves between
runs). Both serve the same samples, so the loader alone gives the same ratio of samples/s and of
real tokens/s; the second table feeds each batch to a stand-in of a training step whose cost follows
the padded tokens (an embedding and a linear layer over the padded batch, `--step-widths` wide, one
thread), as a model's does: there the real tokens/s a step sees tell the padding apart.

`--part restore`: on the loader part's chunks, a loader's state half way through an epoch restored
into a new loader, to its first batch: varlen's (`StreamBatchSampler` state through the
`VarLenLoader`), LitData's `StreamingDataLoader` (its own state), and lhotse's
`DynamicBucketingSampler.load_state_dict` on the same lengths (the sampler alone: lhotse replays it).
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import warnings

import numpy as np
import psutil

from varlen.batching import BucketBatchSampler
from varlen.batching.plan import PlanSpec, build_plan
from varlen.stream.epochs import StreamBatchPlan
from varlen.stream.layout import layout, read_window
from varlen.stream.memory_index import ArraySizeIndex, SimulatedSizeIndex

BUDGET, CHUNK, TOP = 8192, 8192, 8192


def lognormal(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(5.0, 1.0, n)), 1, TOP).astype(np.int32)


def label(n: int) -> str:
    return f"{n / 1e9:g}B" if n >= 1e9 else f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def measured(make):
    """`make()`'s result, seconds, RSS added (MB) and its peak traced allocation (MB, a second run)."""
    gc.collect()
    before = rss_mb()
    start = time.perf_counter()
    out = make()
    seconds = time.perf_counter() - start
    added = rss_mb() - before
    tracemalloc.start()
    make()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, seconds, added, peak


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def setup_table(indexes: dict[str, object], sizes_10m: np.ndarray, world: int) -> None:
    print(f"\n### Plan set-up per rank (W = {world}, rank 0) and per-epoch planning\n")
    print(row("samples", "index", "set-up (s)", "RSS added (MB)", "peak traced (MB)", "per-epoch (s)",
              "windows", "batches per rank", "restore + first batch (s)"))  # fmt: skip
    print(row(*["---"] * 9))
    for name, index in indexes.items():
        plan, seconds, added, peak = measured(lambda: StreamBatchPlan(index, max_tokens=BUDGET, num_replicas=world))  # noqa: B023
        start = time.perf_counter()
        plan.epoch_batches(1)
        epoch = time.perf_counter() - start
        state = {**plan.state_dict(), "epoch": 1, "batches_served": plan.layout.batches_per_rank // 2}
        resumed = StreamBatchPlan(index, max_tokens=BUDGET, num_replicas=world)
        start = time.perf_counter()
        resumed.load_state_dict(state)
        next(iter(resumed))  # computes the descriptors, reads one window
        restore = time.perf_counter() - start
        kind = "real arrays" if isinstance(index, ArraySizeIndex) else "simulated"
        print(row(name, kind, f"{seconds:.2f}", f"{added:.0f}", f"{peak:.0f}", f"{epoch:.4f}", plan.layout.num_windows,
                  plan.layout.batches_per_rank, f"{restore:.2f}"))  # fmt: skip
        del plan, resumed
    sampler, seconds, added, peak = measured(
        lambda: BucketBatchSampler(sizes_10m, max_tokens=BUDGET, num_replicas=world)
    )
    start = time.perf_counter()
    sampler.global_plan(1)
    epoch = time.perf_counter() - start
    name = f"{label(len(sizes_10m))}, today's BucketBatchSampler"
    print(
        row(name, "all sizes", f"{seconds:.2f}", f"{added:.0f}", f"{peak:.0f}", f"{epoch:.2f}", "-", len(sampler), "-")
    )
    print(
        "\nToday's sampler is not run at 100 M and 1 B here (2 shared cores, 23 GB): it holds every size and "
        "a plan of every sample on every rank (issue 20 measured 30 M: 10.4 s set-up, 6.3 s per epoch, 2.0 GB)."
    )


def serve_all(index, plan, sizes: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """Every window's batches of epoch 0: how often each sample is served, real and padded tokens, batches."""
    seen = np.zeros(len(sizes), np.int32)
    real = padded = batches = 0
    for window in range(plan.num_windows):
        ids, bounds, _ = read_window(index, plan, window, 0, 0)
        starts = np.sort(bounds[:, 0])
        np.testing.assert_array_equal(np.sort(bounds[:, 1]), np.append(starts[1:], len(ids)))  # they tile
        np.add.at(seen, ids, 1)
        ordered = sizes[ids].astype(np.int64)
        real += int(ordered.sum())
        padded += int((np.diff(np.append(starts, len(ids))) * np.maximum.reduceat(ordered, starts)).sum())
        batches += len(bounds)
    return seen, real, padded, batches


def counts_table(index, sizes: np.ndarray, worlds: list[int]) -> dict[int, tuple[int, int, int]]:
    print(f"\n### Equal counts on every rank, {label(len(sizes))} samples (epoch 0, every window served)\n")
    print(row("W", "batches per rank", "batches", "added to equalise", "every sample once", "set-up (s)"))
    print(row(*["---"] * 6))
    results = {}
    spec = PlanSpec(max_tokens=(BUDGET,))
    for world in worlds:
        start = time.perf_counter()
        plan = layout(index, spec, seed=0, num_replicas=world)
        seconds = time.perf_counter() - start
        seen, real, padded, batches = serve_all(index, plan, sizes)
        assert batches == world * plan.batches_per_rank
        once = bool((seen == 1).all())
        share = plan.extra_batches / batches
        print(row(world, plan.batches_per_rank, batches, f"{plan.extra_batches} ({share:.4%})", once, f"{seconds:.2f}"))
        results[world] = (real, padded, batches)
    return results


def lhotse_batches(lengths: np.ndarray, budget: int) -> list[np.ndarray] | None:
    """lhotse's `DynamicBucketingSampler` (`max_duration` = budget, durations = token counts), as
    `scripts/benchmark_text.py` calls it; None without lhotse."""
    try:
        from lhotse import CutSet, MonoCut
        from lhotse.dataset import DynamicBucketingSampler
    except ImportError:
        return None
    cuts = CutSet.from_cuts(MonoCut(str(i), 0.0, float(n), 0) for i, n in enumerate(lengths.tolist()))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*eagerly read CutSet.*")
        sampler = DynamicBucketingSampler(cuts, max_duration=budget, shuffle=True, seed=0, world_size=1, rank=0)
        return [np.asarray([int(cut.id) for cut in batch]) for batch in sampler]


def efficiency(batches: list[np.ndarray], sizes: np.ndarray) -> tuple[float, int]:
    real = sum(int(sizes[b].sum()) for b in batches)
    return real / sum(len(b) * int(sizes[b].max()) for b in batches), len(batches)


def padding_table(index, sizes: np.ndarray, streamed: tuple[int, int, int], world: int, subset: int) -> None:
    print(f"\n### Real / padded tokens at a budget of {BUDGET} (epoch 0)\n")
    print(row("batching", "samples", "real / padded", "batches", "vs global plan"))
    print(row(*["---"] * 5))
    spec = PlanSpec(max_tokens=(BUDGET,))
    whole = build_plan(sizes[:, None], spec, shuffle=True, seed=0, epoch=0)
    lengths = np.diff(whole.bounds, axis=1)[:, 0]
    maxima = np.maximum.reduceat(sizes[whole.order].astype(np.int64), whole.bounds[:, 0])
    global_eff = int(sizes.sum(dtype=np.int64)) / int((lengths * maxima).sum())
    n = label(len(sizes))
    print(row("global in-memory plan (BucketBatchSampler)", n, f"{global_eff:.2%}", len(whole), "-"))
    real, padded, batches = streamed
    print(row(f"streamed, default window, W = {world}", n, f"{real / padded:.2%}", batches,
              f"{100 * (real / padded - global_eff):+.2f} pt, {batches / len(whole) - 1:+.2%} batches"))  # fmt: skip
    small = layout(index, spec, seed=0, num_replicas=world, window_batches=500)
    _, real, padded, batches = serve_all(index, small, sizes)
    print(row(f"streamed, 500-batch windows, W = {world}", n, f"{real / padded:.2%}", batches,
              f"{100 * (real / padded - global_eff):+.2f} pt, {batches / len(whole) - 1:+.2%} batches"))  # fmt: skip
    mean = max(1, round(len(sizes) / len(whole)))
    order = np.random.default_rng(0).permutation(len(sizes))
    eff, count = efficiency(np.array_split(order, -(-len(sizes) // mean)), sizes)
    print(row(f"random batches of {mean} (LitData's batching)", n, f"{eff:.2%}", count,
              f"{100 * (eff - global_eff):+.2f} pt"))  # fmt: skip
    part = sizes[:subset]
    whole = build_plan(part[:, None], spec, shuffle=True, seed=0, epoch=0)
    sub_eff, sub_count = efficiency([whole.order[a:b] for a, b in whole.bounds], part)
    print(row("global in-memory plan", label(subset), f"{sub_eff:.2%}", sub_count, "-"))
    theirs = lhotse_batches(part, BUDGET)
    if theirs is None:
        print("\nlhotse is not installed: left out")
        return
    eff, count = efficiency(theirs, part)
    print(row("lhotse DynamicBucketingSampler", label(subset), f"{eff:.2%}", count,
              f"{100 * (eff - sub_eff):+.2f} pt (vs the same {label(subset)})"))  # fmt: skip


def plan_part(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    sizes = lognormal(args.samples)
    real = ArraySizeIndex.from_sizes(np.split(sizes, np.arange(CHUNK, len(sizes), CHUNK)))
    print(f"{label(args.samples)} lognormal sizes as {real.num_chunks} chunks in {time.perf_counter() - start:.1f} s")
    indexes: dict[str, object] = {label(args.samples): real}
    for n in args.simulated:
        indexes[label(n)] = SimulatedSizeIndex(n, CHUNK, max_size=TOP)
    setup_table(indexes, sizes, args.world)
    del indexes
    streamed = counts_table(real, sizes, args.worlds)
    padding_table(real, sizes, streamed[args.world], args.world, args.lhotse_subset)


def token_item(i: int) -> dict:
    """Sample `i` of the loader benchmark (a module-level function: LitData's writers import it)."""
    length = int(LOADER_LENGTHS[i])
    return {"index": i, "input_ids": np.arange(length, dtype=np.int32) % 30000}


def token_sizes(samples) -> np.ndarray:
    return np.array([[len(s["input_ids"])] for s in samples])


def pad_batch(samples) -> tuple:
    """Both loaders' collate: the ids padded to the batch's longest, and the real token count."""
    import torch

    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["input_ids"])] = torch.as_tensor(s["input_ids"])
    return ids, sum(len(s["input_ids"]) for s in samples)


LOADER_LENGTHS = np.clip(np.random.default_rng(0).lognormal(5.0, 1.0, 2_000_000), 1, 1024).astype(np.int64)


def timed_epoch(loader, step=None) -> tuple[float, int, int, int]:
    """Seconds, samples, real and padded tokens of one pass over `loader` (each batch's ids given to
    `step`, if any)."""
    start, samples, real, padded = time.perf_counter(), 0, 0, 0
    for ids, tokens in loader:
        samples, real, padded = samples + ids.shape[0], real + tokens, padded + ids.numel()
        if step is not None:
            step(ids)
    return time.perf_counter() - start, samples, real, padded


def padded_step(width: int):
    """A stand-in for a model's training step: its cost follows the padded tokens (an embedding and a
    linear layer, `width` wide)."""
    import torch

    torch.manual_seed(0)
    embed, linear = torch.nn.Embedding(30000, width), torch.nn.Linear(width, width)

    def step(ids):
        with torch.no_grad():
            return linear(embed(ids)).relu_().sum()

    return step


def write_tokens(folder, n: int):
    """The loader benchmark's `n` token sequences as LitData chunks in `folder`, with their size index."""
    import litdata

    from varlen.stream import write_size_index

    litdata.optimize(fn=token_item, inputs=list(range(n)), output_dir=str(folder), chunk_bytes="16MB",
                     num_workers=2, keep_data_ordered=True, reorder_files=False, verbose=False,
                     start_method="fork")  # fmt: skip
    write_size_index(folder, LOADER_LENGTHS[:n], ("tokens",))
    return folder


def varlen_loader(folder, budget: int):
    """varlen's loader over `folder`: the streamed plan at `budget` padded tokens, 2 forked workers."""
    from varlen.batching.loader import VarLenLoader
    from varlen.stream.dataset import StreamedDataset
    from varlen.stream.sampler import StreamBatchSampler

    sampler = StreamBatchSampler(folder, max_tokens=budget, seed=0, lanes=2)  # a lane per worker
    return VarLenLoader(StreamedDataset(folder, token_sizes), batch_sampler=sampler, collate_fn=pad_batch,
                        num_workers=2, multiprocessing_context="fork")  # fmt: skip


def litdata_loader(folder, batch_size: int):
    """LitData's loader over `folder`: its shuffled order at a fixed batch size, 2 workers."""
    import litdata

    dataset = litdata.StreamingDataset(str(folder), shuffle=True, seed=0)
    return litdata.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=2, collate_fn=pad_batch)


def first_batch_after(make, state) -> float:
    """Seconds from a new loader (`make()`) through `load_state_dict(state)` to its first batch."""
    start = time.perf_counter()
    loader = make()
    loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - start


def state_at_half(loader, batches: int):
    """`loader`'s state after `batches` batches of an epoch."""
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    state = loader.state_dict()
    del iterator
    return state


def restore_part(args: argparse.Namespace) -> None:
    """Restore mid-epoch + the first batch: varlen, LitData and lhotse, on the loader part's data."""
    import tempfile
    from pathlib import Path

    n, budget = args.loader_samples, args.loader_budget
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_tokens(Path(tmp) / "tokens", n)

        def ours():
            return varlen_loader(folder, budget)

        loader = ours()
        half, mean_batch = len(loader) // 2, max(1, round(n / len(loader)))
        rows["varlen StreamBatchSampler + StreamedDataset (a new loader)"] = first_batch_after(
            ours, state_at_half(loader, half)
        )

        def theirs():
            return litdata_loader(folder, mean_batch)

        loader = theirs()
        rows[f"LitData StreamingDataLoader (batch {mean_batch}, a new loader)"] = first_batch_after(
            theirs, state_at_half(loader, len(loader) // 2)
        )
    try:
        from lhotse import CutSet, MonoCut
        from lhotse.dataset import DynamicBucketingSampler
    except ImportError:
        print("lhotse is not installed: left out")
    else:
        cuts = CutSet.from_cuts(MonoCut(str(i), 0.0, float(x), 0) for i, x in enumerate(LOADER_LENGTHS[:n].tolist()))

        def lhotse():
            return DynamicBucketingSampler(cuts, max_duration=budget, shuffle=True, seed=0, world_size=1, rank=0)

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*eagerly read CutSet.*")
            sampler = lhotse()
            state = state_at_half(sampler, sum(1 for _ in lhotse()) // 2)
            rows["lhotse DynamicBucketingSampler (sampler only, a new one)"] = first_batch_after(lhotse, state)
    print(f"\n| restore mid-epoch + first batch, {n:,} samples, 2 workers | seconds |")
    print("|---|---:|")
    for name, seconds in rows.items():
        print(row(name, f"{seconds:.2f}"))


def loader_part(args: argparse.Namespace) -> None:
    import tempfile
    from pathlib import Path

    import torch

    n, budget = args.loader_samples, args.loader_budget
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_tokens(Path(tmp) / "tokens", n)
        mean_batch = max(1, round(n / len(varlen_loader(folder, budget))))
        makers = {
            "varlen (StreamBatchSampler, budget)": lambda: varlen_loader(folder, budget),
            f"LitData StreamingDataLoader (shuffle, batch {mean_batch})": lambda: litdata_loader(folder, mean_batch),
        }
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the step's: the workers keep the other core
        tables = {}
        steps = [("the loader alone", None)]
        steps += [(f"each batch through a padded-cost step {w} wide", padded_step(w)) for w in args.step_widths]
        for title, step in steps:
            runs: dict[str, list] = {name: [] for name in makers}
            for _ in range(args.repeats):
                for name, make in makers.items():  # in turn: the machine's load falls on both
                    runs[name].append(timed_epoch(make(), step))
            tables[title] = {name: sorted(r, key=lambda x: x[0])[len(r) // 2] for name, r in runs.items()}
        torch.set_num_threads(threads)
    for title, results in tables.items():
        print(f"\n| loader, {n:,} samples, 2 workers, {title} (median of {args.repeats} epochs) | samples/s "
              "| real tokens/s | padded tokens/s | real / padded | samples |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|")
        rates = []
        for name, (seconds, samples, real, padded) in results.items():
            rates.append((samples / seconds, real / seconds))
            cells = (f"{samples / seconds:,.0f}", f"{real / seconds:,.0f}", f"{padded / seconds:,.0f}")
            print(row(name, *cells, f"{real / padded:.4f}", f"{samples:,}"))
        (ours_s, ours_t), (theirs_s, theirs_t) = rates
        print(f"varlen / LitData: {ours_s / theirs_s:.2f}x samples/s, {ours_t / theirs_t:.2f}x real tokens/s")


def disk_items(span: tuple[int, int]):
    """Samples `start..end` of the disk benchmark (module level: LitData's forked writers run it, with
    the lengths `write_disk` drew)."""
    for i in range(*span):
        yield {"index": i, "input_ids": np.zeros(int(DISK_LENGTHS[0][i]), np.uint16)}


DISK_LENGTHS: list[np.ndarray] = []


def write_disk(folder, n: int) -> None:
    """`n` samples as LitData chunks in `folder` with their size index (kept when already there)."""
    import litdata

    from varlen.stream import SizeIndex, write_size_index

    try:
        if SizeIndex(folder).samples_per_chunk.sum() == n:
            return
    except Exception:  # noqa: BLE001 - not written yet (or another n): write it
        pass
    start = time.perf_counter()
    DISK_LENGTHS[:] = [lognormal(n, seed=1)]
    spans = [(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]
    litdata.optimize(fn=disk_items, inputs=spans, output_dir=str(folder), chunk_bytes="64MB",
                     num_workers=2, keep_data_ordered=True, reorder_files=False, verbose=False,
                     start_method="fork", mode="overwrite")  # fmt: skip
    write_size_index(folder, DISK_LENGTHS[0], ("tokens",))
    print(f"wrote {n:,} samples in {time.perf_counter() - start:.0f} s")


def disk_measure(folder: str, what: str, world: int) -> dict:
    """One figure, in this (fresh) process: see `disk_part`."""
    from varlen.stream import SizeIndex
    from varlen.stream.sampler import StreamBatchSampler

    before, start = rss_mb(), time.perf_counter()
    if what == "in-memory":
        index = SizeIndex(folder)
        sizes = np.concatenate([index.sizes(c)[:, 0] for c in range(index.num_chunks)])
        before, start = rss_mb(), time.perf_counter()  # the sizes a DataModule holds anyway
        sampler = BucketBatchSampler(sizes, max_tokens=BUDGET, num_replicas=world, rank=0)
        len(sampler)
    else:
        sampler = StreamBatchSampler(folder, max_tokens=BUDGET, num_replicas=world, rank=0)
        len(sampler)
    out = {"setup": time.perf_counter() - start, "rss": rss_mb() - before, "batches": len(sampler)}
    start = time.perf_counter()
    sampler.set_epoch(1)
    next(iter(sampler))
    out["epoch"] = time.perf_counter() - start
    state = sampler.state_dict() | {"epoch": 1, "batches_served": len(sampler) // 2}
    if what != "in-memory":
        fresh = StreamBatchSampler(folder, max_tokens=BUDGET, num_replicas=world, rank=0)
        start = time.perf_counter()
        fresh.load_state_dict(state)
        next(iter(fresh))
        out["restore"] = time.perf_counter() - start
    out["rss_total"] = rss_mb() - before
    return out


def disk_part(args: argparse.Namespace) -> None:
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    n = args.disk_samples
    folder = Path(args.disk_dir or tempfile.mkdtemp(prefix="varlen-disk-")) / f"tokens-{n}"
    write_disk(folder, n)
    chunks = json.loads((folder / "index.json").read_text())["chunks"]
    gib = sum(c["chunk_bytes"] for c in chunks) / 2**30
    print(f"\n### From LitData chunks on local disk: {n:,} samples, {len(chunks)} chunks, {gib:.1f} GiB "
          f"(W = {args.world}, rank 0; a fresh process each)\n")  # fmt: skip
    print(row("sampler", "set-up (s)", "RSS added (MB)", "first batch of an epoch (s)", "restore + first batch (s)",
              "batches per rank"))  # fmt: skip
    print(row(*["---"] * 6))
    for what, name in (("stream", "StreamBatchSampler (size index)"), ("in-memory", "today's BucketBatchSampler")):
        code = (f"import json, benchmark_streaming as b; "
                f"print(json.dumps(b.disk_measure({str(folder)!r}, {what!r}, {args.world})))")  # fmt: skip
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).parent)  # fmt: skip
        out = json.loads(run.stdout.strip().splitlines()[-1])
        restore = f"{out['restore']:.2f}" if "restore" in out else "-"
        print(row(name, f"{out['setup']:.2f}", f"{out['rss_total']:.0f}", f"{out['epoch']:.3f}", restore,
                  out["batches"]))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", default="plan", help="comma-separated: plan, disk, loader, restore")
    parser.add_argument("--disk-samples", type=int, default=10_000_000, help="samples written for the disk part")
    parser.add_argument("--disk-dir", default=None, help="where the disk part's chunks are kept (default: a temp dir)")
    parser.add_argument("--loader-samples", type=int, default=200_000, help="samples written for the loader part")
    parser.add_argument("--loader-budget", type=int, default=8192, help="varlen's padded tokens per batch (loader)")
    parser.add_argument("--repeats", type=int, default=3, help="epochs of each loader (loader part): the median")
    parser.add_argument("--step-widths", default="32", help="loader part: stand-in step widths")
    parser.add_argument("--samples", type=int, default=10_000_000, help="samples of the real (in-memory) index")
    parser.add_argument("--simulated", default="100000000,1000000000", help="samples of the simulated indexes")
    parser.add_argument("--world", type=int, default=8, help="ranks of the set-up and padding tables")
    parser.add_argument("--worlds", default="1,2,3,8,64,512")
    parser.add_argument("--lhotse-subset", type=int, default=200_000, help="samples lhotse plans (an object each)")
    args = parser.parse_args()
    args.simulated = [int(n) for n in args.simulated.split(",") if n]
    args.step_widths = [int(w) for w in args.step_widths.split(",") if w]
    args.worlds = [int(w) for w in args.worlds.split(",")]
    if args.world not in args.worlds:
        args.worlds.append(args.world)
    for part in args.part.split(","):
        {"plan": plan_part, "disk": disk_part, "loader": loader_part, "restore": restore_part}[part](args)


if __name__ == "__main__":
    main()
