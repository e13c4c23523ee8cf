"""Serving the rest of an epoch resumed on another number of ranks, against a plain epoch, and the streamed
plan's set-up and split batches by world size.

`--part rest`: a streamed sampler (lognormal(5, 1) token sizes, budget 8192, chunks of 8192 samples: a size
index on disk, as `varlen optimize` writes it, under `--dir`) saved on `--saved` ranks after `--after`
batches and resumed on `--resumed` ranks: rank 0's rest served (batches/s, the process's RSS growth),
against rank 0 of a plain epoch on `--resumed` ranks; and the in-memory sampler's rest against its plain
epoch. With `--loader`, also the streamed loader itself (real LitData chunks of token ids, written once under
`--dir`, read by `StreamedDataset` in the main process): there the rest decodes chunks. One fresh process
per figure.

`--part pieces`: per world size, the streamed plan's set-up (rank 0) and the batches split to give every rank
the same count, with the pieces walked at real counts and cut at equal expected batches.

    python scripts/benchmark_elastic.py --part rest --samples 200000,2000000
    python scripts/benchmark_elastic.py --part pieces --samples 10000000 --worlds 8,64,512
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

BUDGET, CHUNK = 8192, 8192


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def sizes_in_chunks(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    sizes = np.clip(np.rint(rng.lognormal(5.0, 1.0, n)), 1, 8192).astype(np.int32)
    return np.split(sizes, np.arange(CHUNK, n, CHUNK))


def written_once(folder, write) -> str:
    """`folder`, its size index checked; `write(folder)` first when it holds none (or another)."""
    from varlen.stream import SizeIndex

    try:
        SizeIndex(folder).check()
    except Exception:  # noqa: BLE001 - not written yet
        folder.mkdir(parents=True, exist_ok=True)
        write(folder)
    return str(folder)


def size_index_folder(root: str, n: int) -> str:
    """A folder holding an `index.json` of `n` samples' chunks and their size index (the chunk files
    themselves are not needed to plan): written once."""
    from pathlib import Path

    from varlen.stream import write_size_index

    def write(folder: Path) -> None:
        chunks = sizes_in_chunks(n)
        listed = [{"filename": f"chunk-0-{k}.bin", "chunk_size": len(c), "chunk_bytes": 2 * int(c.sum())}
                  for k, c in enumerate(chunks)]  # fmt: skip
        (folder / "index.json").write_text(json.dumps({"chunks": listed, "config": {}}))
        write_size_index(folder, np.concatenate(chunks), ("tokens",))

    return written_once(Path(root) / f"sizes-{n}", write)


def load_streaming_benchmark():
    """scripts/benchmark_streaming.py as a module: its token chunks, sizes and collate."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "benchmark_streaming", Path(__file__).with_name("benchmark_streaming.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def token_chunks(root: str, n: int) -> str:
    """`n` token sequences as LitData chunks with their size index (benchmark_streaming's), written once."""
    from pathlib import Path

    return written_once(Path(root) / f"tokens-{n}", lambda folder: load_streaming_benchmark().write_tokens(folder, n))


def serve(what: str, n: int, saved: int, after: int, resumed: int, limit: float, root: str) -> dict:
    """One figure, in this process: batches/s of rank 0 and the RSS it added."""
    from varlen.batching.sampler import BucketBatchSampler
    from varlen.stream.sampler import StreamBatchSampler

    if what.startswith(("stream", "loader")):
        folder = size_index_folder(root, n) if what.startswith("stream") else token_chunks(root, n)

        def make(world: int, rank: int):
            return StreamBatchSampler(folder, max_tokens=BUDGET, num_replicas=world, rank=rank)
    else:
        sizes = np.concatenate(sizes_in_chunks(n))

        def make(world: int, rank: int):
            return BucketBatchSampler(sizes, max_tokens=BUDGET, num_replicas=world, rank=rank)

    plan = make(resumed, 0)
    if what.endswith("elastic"):
        first = make(saved, 0)
        iterator = iter(first)
        for _ in range(after):
            next(iterator)
        plan.load_state_dict(first.state_dict())
        del first, iterator
    if what.startswith("loader"):
        from varlen.batching.loader import VarLenLoader
        from varlen.stream.dataset import StreamedDataset

        streaming = load_streaming_benchmark()
        dataset = StreamedDataset(folder, streaming.token_sizes)
        plan = VarLenLoader(dataset, batch_sampler=plan, collate_fn=streaming.pad_batch, num_workers=0)
    before, start, served = rss_mb(), time.perf_counter(), 0
    for _ in plan:
        served += 1
        if time.perf_counter() - start > limit:
            break
    seconds = time.perf_counter() - start
    return {"batches": served, "per_s": served / seconds, "rss_added": rss_mb() - before, "len": len(plan)}


def rest_part(args) -> None:
    print(f"\n### The rest of an epoch saved on {args.saved} ranks after {args.after} batches, resumed on "
          f"{args.resumed} (rank 0), against a plain epoch on {args.resumed}\n")  # fmt: skip
    print(
        "| samples | plan | plain: batches/s | resumed rest: batches/s | rest / plain | RSS added, plain / rest (MB) |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for n in args.samples:
        for kind in ("stream", "memory") + (("loader",) if args.loader else ()):
            figures = {}
            for what in (kind, f"{kind}-elastic"):
                settings = ["--samples", n, "--saved", args.saved, "--after", args.after, "--resumed", args.resumed,
                            "--dir", args.dir]  # fmt: skip
                command = [sys.executable, __file__, "--one", what, *map(str, settings + ["--limit", args.limit])]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                figures[what] = json.loads(out.strip().splitlines()[-1])
            plain, rest = figures[kind], figures[f"{kind}-elastic"]
            name = {"stream": "streamed", "memory": "in memory", "loader": "streamed loader, 0 workers"}[kind]
            print(f"| {n:,} | {name} | {plain['per_s']:,.0f} | "
                  f"{rest['per_s']:,.0f} | {rest['per_s'] / plain['per_s']:.2f}x | "
                  f"{plain['rss_added']:.0f} / {rest['rss_added']:.0f} |")  # fmt: skip


def equal_expected_cuts():
    """The layout's piece boundaries replaced, for the comparison, by cuts at equal expected batches."""
    import contextlib

    import varlen.stream.piece_ends as pieces

    @contextlib.contextmanager
    def patched():
        walked = pieces.piece_bounds
        pieces.piece_bounds = lambda run, num_replicas: (
            run.equal_expected(num_replicas)[0] if num_replicas > 1 else walked(run, 1)
        )
        try:
            yield
        finally:
            pieces.piece_bounds = walked

    return patched()


def pieces_part(args) -> None:
    from varlen.batching.plan import PlanSpec
    from varlen.stream import layout as stream_plan
    from varlen.stream.memory_index import ArraySizeIndex

    print("\n### Streamed plan by world size: set-up (rank 0) and batches split to give every rank one count\n")
    print("| samples | W | batches per rank | pieces walked at real counts: set-up (s) | split batches | "
          "cut at equal expected batches: set-up (s) | split batches |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in args.samples:
        index = ArraySizeIndex.from_sizes(sizes_in_chunks(n))
        spec = PlanSpec(max_tokens=(BUDGET,))
        for world in args.worlds:
            figures = []
            for variant in ("walked", "expected"):
                start = time.perf_counter()
                if variant == "walked":
                    plan = stream_plan.layout(index, spec, seed=0, num_replicas=world)
                else:
                    with equal_expected_cuts():
                        plan = stream_plan.layout(index, spec, seed=0, num_replicas=world)
                seconds = time.perf_counter() - start
                total = world * plan.batches_per_rank
                figures.append((seconds, plan.extra_batches, total, plan.batches_per_rank))
            (walked, extra, total, per_rank), (plain, plain_extra, plain_total, _) = figures
            print(f"| {n:,} | {world} | {per_rank:,} | {walked:.2f} | {extra} ({extra / total:.3%}) | "
                  f"{plain:.2f} | {plain_extra} ({plain_extra / plain_total:.3%}) |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="rest", help="rest, pieces (comma-separated)")
    parser.add_argument("--samples", default="200000,2000000")
    parser.add_argument("--saved", type=int, default=3)
    parser.add_argument("--after", type=int, default=300)
    parser.add_argument("--resumed", type=int, default=5)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds a figure serves at most")
    parser.add_argument("--worlds", default="8,64,512")
    parser.add_argument("--loader", action="store_true", help="also the streamed loader over real chunks")
    parser.add_argument("--dir", default=None, help="where the size indexes are kept (default: a temp dir)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(serve(args.one, int(args.samples), args.saved, args.after, args.resumed, args.limit, args.dir))
        )
        return
    if args.dir is None:
        import tempfile

        args.dir = tempfile.mkdtemp(prefix="varlen-elastic-")
    args.samples = [int(s) for s in args.samples.split(",")]
    args.worlds = [int(w) for w in args.worlds.split(",")]
    for part in args.part.split(","):
        {"rest": rest_part, "pieces": pieces_part}[part](args)


if __name__ == "__main__":
    main()
