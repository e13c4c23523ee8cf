"""Hyperspectral benchmarks and acceptance figures; prints markdown tables.

Parts (`--parts`, default all but `accuracy`):

* `memory`: resident memory of a 2-worker loader over a memory-mapped cube vs the cube's size on
  disk, at two sizes: a small cube (500 x 400 x 224 float32, 171 MiB), also against the same
  loader when every worker loads the cube itself (the mistake to avoid), and realistically large
  ones (`--large-gib`, default 1.5 and 3 GiB, written once to a temporary folder). Resident
  memory is the proportional set size (PSS) summed over the main process and its workers, minus
  the main process before the loader existed: pages shared by several processes (the page-cache
  pages of the mapped cube) count once. It is split into the PSS of the cube file's mappings and
  the rest (interpreter, torch and numpy state, the per-sample tables, batches in flight), which
  grows with the number of labelled pixels, not with the cube's bands. One full garbage collection
  runs in each worker as it starts and in the main process after 20 batches, as the allocations
  of a long training run trigger them; the second row shows what the loader's GC freeze
  (`varlen.batching.loader.VarLenLoader`) saves then. The large cube reads the first
  `--large-batches` (400) batches of the epoch: the train-only statistics of `setup` have
  mapped the training pixels' spectra by then, and the rest stops growing after a few batches.
  Summed RSS, which counts a shared page once per process, is shown too, as is the size of the
  dataset pickled to a worker (the cube travels as its path). About 6 minutes on 2 cores.
* `throughput`: patches/s of the loader (0 and 2 workers), and, in the same run on the same
  batches, the batched gather (one `Ragged` band draw and one read of the cube per batch)
  against the per-sample path it replaced (a `Generator` per sample for its bands, one patch
  copied per sample in the collate), for training (random bands) and evaluation (all bands).
* `padding`: padding efficiency (real / padded band slots) of band-count batching against
  random batching, same batch size and same token budget.
* `accuracy`: trains the SpectralTransformer on the embedded default (spatially disjoint split)
  with random band subsets and reports test OA / AA / kappa evaluated with 25, 50, 100 and all
  bands; `--compare-fixed` also trains on all bands only, as the baseline.

    python scripts/benchmark_hyperspectral.py                       # memory, throughput, padding
    python scripts/benchmark_hyperspectral.py --parts accuracy --compare-fixed
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch

from varlen.batching import BucketBatchSampler
from varlen.batching.loader import VarLenLoader
from varlen.datamodules.hyperspectral import HyperspectralDataModule
from varlen.datasets.hyperspectral.synthetic import generate_field_layout, shared_layout_path


def smaps(pid: int, mapped: Path) -> dict[str, int]:
    """`Pss`, `Pss_Anon` (rollup) and the PSS of the mappings of file `mapped`, in bytes."""
    out = {"Pss": 0, "Pss_Anon": 0, "Pss_mapped": 0}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in {"Pss", "Pss_Anon"}:
                out[key] = int(rest.split()[0]) * 1024
    target, current = str(mapped), False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's header: address range ... path
                current = len(head) == 6 and head[5].strip() == target
            elif current and head[0] == "Pss:":
                out["Pss_mapped"] += int(head[1]) * 1024
    return out


def tree_memory(mapped: Path) -> np.ndarray:
    """Over this process and its children (the workers): [PSS, PSS of the cube file, PSS anonymous,
    unique set size (pages no other process shares) of the workers, summed RSS]."""
    me = psutil.Process(os.getpid())
    total = np.zeros(5)
    for p in [me, *me.children(recursive=True)]:
        m = smaps(p.pid, mapped)
        worker_uss = p.memory_full_info().uss if p.pid != me.pid else 0
        total += [m["Pss"], m["Pss_mapped"], m["Pss_Anon"], worker_uss, p.memory_info().rss]
    return total


def write_big_cube(folder: Path, height: int, width: int, bands: int) -> tuple[Path, Path]:
    """A float32 cube written slab by slab (never whole in memory) and a field label map."""
    cube_path, labels_path = folder / f"cube_{height}x{width}x{bands}.npy", folder / f"gt_{height}x{width}.npy"
    if cube_path.exists():
        return cube_path, labels_path
    rng = np.random.default_rng(0)
    out = np.lib.format.open_memmap(cube_path, mode="w+", dtype=np.float32, shape=(height, width, bands))
    for r0 in range(0, height, 50):
        out[r0 : r0 + 50] = rng.random((min(50, height - r0), width, bands), dtype=np.float32)
    out.flush()
    del out
    np.save(labels_path, generate_field_layout(height, width, 16, seed=0).astype(np.uint8))
    return cube_path, labels_path


class WholeCubePerWorker(torch.utils.data.Dataset):
    """The mistake: each worker reads the whole cube into its own memory (np.load without mmap)."""

    def __init__(self, inner, cube_path: Path) -> None:
        self.inner, self.cube_path, self.lengths = inner, cube_path, inner.lengths
        self.loaded = False

    def __len__(self) -> int:
        return len(self.inner)

    def __getitems__(self, indices):
        if not self.loaded:
            self.inner.cubes[0] = np.load(self.cube_path)  # a private copy in this worker
            self.loaded = True
        return self.inner.__getitems__(indices)


def big_dm(
    cube_path: Path, labels_path: Path, workers: int, root: Path, holdout: float = 0.15
) -> HyperspectralDataModule:
    return HyperspectralDataModule(
        scenes=["custom"], root=str(root), cube_path=str(cube_path), labels_path=str(labels_path), sensor="aviris",
        patch_size=5, min_bands=25, max_bands=200, block_size=16, val_fraction=holdout, test_fraction=holdout,
        batch_size=256, num_workers=workers, persistent_workers=workers > 0, check_values=False,
    )  # fmt: skip


def full_collection(worker_id: int) -> None:
    gc.collect()


def epoch_memory(loader, mapped: Path, max_batches: int | None = None) -> tuple[int, np.ndarray]:
    """Iterate one epoch (or its first `max_batches`); return (patches, peak of each `tree_memory`
    figure, sampled about once a second)."""
    peak, patches, last = np.zeros(5), 0, 0.0
    for n, batch in enumerate(loader):
        if n == max_batches:
            break
        if n == 20:
            gc.collect()  # the full collections a long training run's allocations trigger, once here
        patches += len(batch["index"])
        if time.perf_counter() - last > 1.0:
            peak = np.maximum(peak, tree_memory(mapped))
            last = time.perf_counter()
    return patches, np.maximum(peak, tree_memory(mapped))


def bench_memory(
    folder: Path, height: int, width: int, baseline: bool, max_batches: int | None = None
) -> tuple[float, dict[str, float]]:
    """One table for one cube size: the varlen loader (and, if asked, the whole-cube-per-worker mistake).

    The split holds out only 5% + 5% of the labelled pixels, so the training centres cover most
    of the cube: the train-only band statistics of `setup` read (map) all of their spectra, and
    the workers then read patches around them (the worst case for resident memory). The NaN scan
    is off so that the figure is the loader's alone. `max_batches` stops the epoch early (the
    large cube: a full epoch of ~1.4 M patches takes long on 2 cores, and neither the cube pages,
    mapped by the statistics already, nor the rest grow after the first batches).
    """
    start = time.perf_counter()
    cube_path, labels_path = write_big_cube(folder, height, width, 224)
    disk = cube_path.stat().st_size
    written = time.perf_counter() - start
    rows = []
    labels = ["memory-mapped (varlen)", "memory-mapped, GC not frozen (freeze_gc=False)"]
    labels += ["whole cube per worker (baseline)"] if baseline else []
    for label in labels:
        gc.collect()
        base = tree_memory(cube_path)  # before setup: no page of the cube is mapped yet
        start = time.perf_counter()
        dm = big_dm(cube_path, labels_path, 2, folder, holdout=0.05)
        dm.setup("fit")  # maps the cube and reads the train centres (statistics): part of the cost
        if label.startswith("whole"):
            dm.datasets["train"] = WholeCubePerWorker(dm.datasets["train"], cube_path)
        shipped = len(pickle.dumps(dm.dataset("train")))  # what a spawn/forkserver worker would receive
        loader = dm.train_dataloader()
        loader.worker_init_fn = full_collection  # what a long run's allocations trigger in each worker
        VarLenLoader.freeze_gc = "not frozen" not in label
        patches, peak = epoch_memory(loader, cube_path, max_batches)
        VarLenLoader.freeze_gc = True
        elapsed = time.perf_counter() - start
        del loader, dm
        gc.collect()
        rows.append((label, patches, shipped, (peak - base), elapsed))
    span = "one training epoch" if max_batches is None else f"the first {max_batches} batches of a training epoch"
    print(
        f"\n### Resident memory of a 2-worker loader, cube {height}x{width}x224 float32 = {disk / 2**20:,.0f} MiB "
        f"on disk (peak over {span}, added to the process tree; cube written in {written:.0f} s)\n"
    )
    print(
        "| loader | patches | s | PSS total / cube | cube-file PSS / cube | rest (MiB) | worker USS, each (MiB) "
        "| dataset pickled to a worker (MiB) | summed RSS / cube |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, patches, shipped, d, elapsed in rows:
        print(
            f"| {label} | {patches:,} | {elapsed:.0f} | {d[0] / disk:.3f}x | {d[1] / disk:.3f}x | "
            f"{(d[0] - d[1]) / 2**20:,.0f} | {d[3] / 2 / 2**20:,.0f} | {shipped / 2**20:.1f} | {d[4] / disk:.2f}x |",
            flush=True,
        )
    return disk / 2**20, {label: d[0] / disk for label, _, _, d, _ in rows}


def plot_memory(results: list[tuple[float, dict[str, float]]], out: Path) -> Path:
    """Resident memory of the process tree over the cube's size, per loader, against cube size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    labels = dict.fromkeys(label for _, row in results for label in row)
    for label, marker in zip(labels, "osD", strict=False):
        points = [(mib, row[label]) for mib, row in results if label in row]
        ax.plot(*zip(*points, strict=True), marker=marker, label=label.replace(" (freeze_gc=False)", ""))
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="cube size on disk (MiB)", ylabel="PSS of 2-worker loader / cube", ylim=(0.8, None))
    sizes = [mib for mib, _ in results]
    ax.set_xticks(sizes, [f"{mib:,.0f}" for mib in sizes])
    ax.minorticks_off()
    ax.set_title("hyperspectral loader memory against cube size", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "hyperspectral_memory.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"\nplot: {path}")
    return path


def todays_sample(ds, i: int, epoch: int) -> dict:
    """A sample as the dataset served it before the batched gather: its bands drawn by their own Generator."""
    s, r, c, k = int(ds.scene_ids[i]), int(ds.rows[i]), int(ds.cols[i]), ds.radius
    if ds.band_counts is None:
        bands = ds.fixed_bands[s]
    else:
        usable = ds.usable_bands[s]
        rng = np.random.default_rng((ds.seed, epoch, int(i)))
        bands = np.sort(usable[rng.permutation(usable.size)[: ds.band_counts[i]]])
    patch = ds.cubes[s][r, c] if k == 0 else ds.cubes[s][r - k : r + k + 1, c - k : c + k + 1]
    return {
        "index": int(i), "patch": patch, "bands": bands, "wavelengths": ds.wavelengths[s][bands],
        "mean": ds.mean[s][bands], "std": ds.std[s][bands], "label": int(ds.labels[i]), "scene": s, "coords": (r, c),
    }  # fmt: skip


def todays_collate(samples: list[dict]) -> dict[str, torch.Tensor]:
    """The collate before the batched gather: one patch copied per sample into the batch, normalized there."""
    from varlen.batching import lengths_to_mask, pad_sequences

    counts = np.array([len(s["bands"]) for s in samples], dtype=np.int64)
    spatial = samples[0]["patch"].shape[:-1]
    per_band = (-1,) + (1,) * len(spatial)
    out = np.zeros((len(samples), int(counts.max()), *spatial), dtype=np.float32)
    for i, s in enumerate(samples):
        row = out[i, : counts[i]]
        row[...] = np.moveaxis(np.take(s["patch"], s["bands"], axis=-1), -1, 0)
        row -= s["mean"].reshape(per_band)
        row /= s["std"].reshape(per_band)
    lengths = torch.from_numpy(counts)
    return {
        "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
        "spectra": torch.from_numpy(out),
        "wavelengths": pad_sequences([s["wavelengths"] for s in samples], 0.0, None, torch.float32).values,
        "bands": pad_sequences([s["bands"] for s in samples], -1, None, torch.long).values,
        "band_mask": lengths_to_mask(lengths, out.shape[1]),
        "lengths": lengths,
        "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
        "scene": torch.tensor([s["scene"] for s in samples], dtype=torch.long),
        "coords": torch.tensor([s["coords"] for s in samples], dtype=torch.long),
    }


def patches_per_second(make_batch, batches, repeats: int = 3) -> float:
    """Patches/s of `make_batch(b)` over `batches`: the best of `repeats` passes (a pass is only
    ever slowed down by other processes; every path gets the same rule)."""
    best = min(_timed(make_batch, batches) for _ in range(repeats))
    return sum(len(b) for b in batches) / best


def _timed(make_batch, batches) -> float:
    start = time.perf_counter()
    for b in batches:
        make_batch(b)
    return time.perf_counter() - start


def bench_gather(dm: HyperspectralDataModule, batches: int = 40) -> None:
    """The batched gather against the per-sample path, same batches, same run (no loader, one process)."""
    from varlen.batching import EpochIndices

    print("\n### Batch assembly, same batches (5x5 patches, batch 256, no loader): batched gather vs per sample\n")
    print("| split (bands) | per-sample draw + collate, patches/s | batched gather, patches/s | speed-up |")
    print("|---|---:|---:|---:|")
    collate = dm.collate_fn
    for split, bands in (("train", "25-200 random of 224"), ("val", "all 224")):
        ds = dm.dataset(split)
        sampler = dm.train_dataloader().batch_sampler if split == "train" else dm.val_dataloader().batch_sampler
        sampler.set_epoch(1)
        chosen = [EpochIndices(list(b), 1) for _, b in zip(range(batches), sampler, strict=False)]

        def per_sample(b, ds=ds):
            return todays_collate([todays_sample(ds, i, b.epoch) for i in b])

        def batched(b, ds=ds):
            return collate(ds.__getitems__(b))

        old, new = patches_per_second(per_sample, chosen), patches_per_second(batched, chosen)
        print(f"| {split} ({bands}) | {old:,.0f} | {new:,.0f} | {new / old:.2f}x |", flush=True)


def bench_throughput(folder: Path, height: int, width: int) -> None:
    cube_path, labels_path = write_big_cube(folder, height, width, 224)
    print("\n### Loader throughput (5x5 patches, 25-200 random bands of 224, batch 256)\n")
    print("| workers | patches/s | real band values/s |")
    print("|---:|---:|---:|")
    for workers in (0, 2):
        dm = big_dm(cube_path, labels_path, workers, folder)
        dm.setup("fit")
        loader = dm.train_dataloader()
        it = iter(loader)
        next(it)  # start-up (worker fork) excluded
        start, patches, values = time.perf_counter(), 0, 0
        for n, batch in enumerate(it):
            patches += len(batch["index"])
            values += int(batch["band_mask"].sum()) * 25
            if n == 40:
                break
        elapsed = time.perf_counter() - start
        print(f"| {workers} | {patches / elapsed:,.0f} | {values / elapsed:,.0f} |")
        del it, loader
    bench_gather(dm)


def padding_efficiency(lengths: np.ndarray, batches) -> float:
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    return real / padded


def bench_padding(root: Path) -> None:
    dm = HyperspectralDataModule(root=str(root), patch_size=3, min_bands=25, max_bands=200, batch_size=64)
    dm.setup("fit")
    lengths = dm.dataset("train").lengths
    rng = np.random.default_rng(0)
    print(f"\n### Padding efficiency, embedded default train split ({len(lengths)} pixels, 25-200 random bands)\n")
    print("| batching | batch size 64 | max_tokens 8192 | batches (tokens) |")
    print("|---|---:|---:|---:|")
    by_count = list(BucketBatchSampler(lengths, batch_size=64, seed=0))
    by_count_tok = list(BucketBatchSampler(lengths, max_tokens=8192, seed=0))
    perm = rng.permutation(len(lengths))
    random_fixed = [perm[i : i + 64] for i in range(0, len(perm), 64)]
    random_tok, current = [], []
    for i in perm:  # random order, cut greedily under the same padded-token budget
        if current and (len(current) + 1) * max(lengths[current + [i]]) > 8192:
            random_tok.append(current)
            current = []
        current.append(int(i))
    random_tok.append(current)
    eff = padding_efficiency
    print(
        f"| band-count buckets (BucketBatchSampler) | {eff(lengths, by_count):.3f} | "
        f"{eff(lengths, by_count_tok):.3f} | {len(by_count_tok)} |"
    )
    print(f"| random | {eff(lengths, random_fixed):.3f} | {eff(lengths, random_tok):.3f} | {len(random_tok)} |")


def bench_accuracy(root: Path, epochs: int, compare_fixed: bool) -> None:
    import lightning.pytorch as pl

    from varlen.models.hyperspectral import SpectralTransformer

    counts = [25, 50, 100, None]
    runs = [("random subsets (25-200 bands)", 25)] + ([("all bands (baseline)", None)] if compare_fixed else [])
    layout = "Indian Pines label map" if shared_layout_path().exists() else "generated field layout"
    for label, min_bands in runs:
        pl.seed_everything(0)
        dm = HyperspectralDataModule(root=str(root), patch_size=3, min_bands=min_bands, max_tokens=8192)
        model = SpectralTransformer(num_classes=dm.num_classes, d_model=32, dim_feedforward=64, lr=2e-3)
        trainer = pl.Trainer(
            max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, num_sanity_val_steps=0, limit_val_batches=0,
        )  # fmt: skip
        start = time.perf_counter()
        trainer.fit(model, datamodule=dm)
        train_s = time.perf_counter() - start
        rows = []
        for count in counts:
            eval_dm = HyperspectralDataModule(root=str(root), patch_size=3, eval_bands=count, max_tokens=8192)
            (metrics,) = trainer.test(model, datamodule=eval_dm, verbose=False)
            rows.append((count, metrics["test/oa"], metrics["test/aa"], metrics["test/kappa"]))
        table = dm.report.to_dict()
        pixels = {split: counts["kept"] for split, counts in table.items()}
        unused = {split: counts["unused"] for split, counts in table.items() if counts["unused"]}
        print(f"\n### Embedded default ({layout}), spatially disjoint blocks, 3x3 patches: trained on {label}\n")
        print(f"{epochs} epochs on CPU in {train_s:.0f} s. Pixels per split: {pixels}; ", end="")
        print(f"labelled pixels not used as centres: {unused}\n")
        print("| eval bands | test OA | test AA | test kappa |")
        print("|---:|---:|---:|---:|")
        for count, oa, aa, kappa in rows:
            print(f"| {count or 'all (200)'} | {oa:.3f} | {aa:.3f} | {kappa:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="memory,throughput,padding", help="comma list; add 'accuracy'")
    parser.add_argument("--size", type=int, nargs=2, default=(500, 400), help="small memory-test cube height width")
    parser.add_argument(
        "--large-gib", type=float, nargs="*", default=[1.5, 3.0], help="sizes of the large memory-test cubes in GiB"
    )
    parser.add_argument("--large-batches", type=int, default=400, help="batches read on the large cube (0: all)")
    parser.add_argument("--baseline-large", action="store_true", help="also run the whole-cube baseline on it")
    parser.add_argument("--epochs", type=int, default=6, help="training epochs for 'accuracy'")
    parser.add_argument("--compare-fixed", action="store_true", help="also train on all bands (baseline)")
    parser.add_argument("--root", default=None, help="folder for the synthetic scene (default: a temp folder)")
    parser.add_argument("--out", default=None, help="folder for the memory plot (PNG)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="varlen_hs_bench_") as tmp:
        folder = Path(tmp)
        root = Path(args.root) if args.root else folder
        if "memory" in parts:
            results = [bench_memory(folder, *args.size, baseline=True)]
            for gib in args.large_gib:
                side = int(np.sqrt(gib * 2**30 / (224 * 4)))
                batches = args.large_batches or None
                results.append(bench_memory(folder, side, side, baseline=args.baseline_large, max_batches=batches))
            if args.out:
                plot_memory(results, Path(args.out))
        if "throughput" in parts:
            bench_throughput(folder, *args.size)
        if "padding" in parts:
            bench_padding(root)
        if "accuracy" in parts:
            bench_accuracy(root, args.epochs, args.compare_fixed)


if __name__ == "__main__":
    main()
