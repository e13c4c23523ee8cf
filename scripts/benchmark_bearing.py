"""Bearing windows: memory and loader throughput of one-gather views vs a copy per window, and the leakage effect.

    python scripts/benchmark_bearing.py                       # every part, real CWRU if present
    python scripts/benchmark_bearing.py --part memory,loader --root ../shared/data/bearing
    python scripts/benchmark_bearing.py --part leakage --epochs 10
    python scripts/benchmark_bearing.py --part leakage --simulator --epochs 4 \
        --splits recording,time_block,random_window

Part ``memory``: the windowed datasets (50% overlap) over every recording, measured two ways:
what the datasets refer to (the one flat signal store and each split's index arrays) and what
``tracemalloc`` saw numpy allocate and keep during ``setup`` (after the raw ``.mat`` arrays were
released); against a baseline that materialises every window as its own array (what ``np.stack``
of windows holds).

Part ``loader``: loader windows/s over the train split (median of interleaved epochs, same batch
size, same process, 0 workers, one thread): the varlen loader (batched fetch: one gather of the
batch's windows from the flat store, then the collate names the fields), the same loader with the
core's generic ``Ragged.pad`` as the gather, and the baseline a user would write: every window
copied out into one array, a ``DataLoader`` with ``default_collate``.

Part ``leakage``: the same WDCNN trained on the same recordings with the leak-free time-block
split and with a random window split (overlapping windows of one recording on both sides);
window-level and recording-level macro-F1 on each split's test windows.

Prints markdown tables; ratios are against baselines measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from varlen.batching import VarLenLoader
from varlen.datamodules.bearing import BearingDataModule
from varlen.datasets.bearing import BearingWindows, WindowBatch

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "bearing"
PARTS = ("memory", "loader", "leakage")
EPOCHS = 31  # one train epoch is only ~12 batches, too short to time alone on a shared machine


class CopyPerWindow(Dataset):
    """The baseline: every window copied out into one ``[N, C, W]`` array (tails zero-padded)."""

    def __init__(self, windows: BearingWindows) -> None:
        n, width = len(windows), int(windows.lengths.max())
        channels = windows.buffers[0].shape[0]
        self.data = np.zeros((n, channels, width), dtype=np.float32)
        for i in range(n):
            sample = windows[i]
            self.data[i, :, : sample["signal"].shape[1]] = sample["signal"]
        self.lengths = windows.lengths.copy()
        self.labels = windows.labels.copy()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict:
        return {"signal": self.data[i], "length": self.lengths[i], "label": self.labels[i]}


class CorePadWindows(Dataset):
    """The same windows fetched with the core's generic ``Ragged.pad`` (an index grid, then one read)."""

    def __init__(self, windows: BearingWindows) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitems__(self, indices) -> WindowBatch:
        ds, indices = self.windows, np.asarray(indices, dtype=np.int64)
        padded = ds.signals.pad(indices, pad_to_multiple_of=ds.pad_to_multiple_of, axis=-1)
        return WindowBatch(
            index=torch.from_numpy(indices),
            signals=padded.values,
            lengths=padded.lengths[:, 0].contiguous(),
            mask=padded.mask[:, 0].contiguous(),
            labels=torch.from_numpy(ds.labels[indices]),
            recording_ids=torch.from_numpy(ds.recording[indices]),
            window_index=torch.from_numpy(ds.window_index[indices]),
            starts=torch.from_numpy(ds.starts[indices]),
        )


def make_datamodule(root: str | None, **overrides) -> BearingDataModule:
    args = {"root": root, "window_length": 2048, "stride": 1024, "batch_size": 64, **overrides}
    return BearingDataModule(**args)


def memory(root: str | None) -> None:
    gc.collect()
    tracemalloc.start()
    dm = make_datamodule(root)
    dm.setup()
    gc.collect()
    held_traced, peak_traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    raw = sum(r.signal.nbytes for r in dm.recordings)
    windows = [dm.dataset(s) for s in ("train", "val", "test")]
    store = windows[0].store
    assert all(ds.store is store for ds in windows)  # one store, shared by the splits
    index_bytes = sum(ds.index_nbytes() for ds in windows)
    held = store.values.nbytes + index_bytes
    count = sum(len(ds) for ds in windows)

    tracemalloc.start()
    copies = [CopyPerWindow(ds) for ds in windows]
    copy_traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    copy_bytes = sum(c.data.nbytes for c in copies)

    print(
        f"\n### Memory: {len(dm.recordings)} recordings, {count} windows of {dm.window} (stride {dm.hop}), "
        f"{dm.rate:g} Hz, source: {root or 'simulator'}\n"
    )
    print("| what | bytes | x raw signal (float32) |")
    print("|---|---:|---:|")
    rows = [
        (f"raw signal, float32 at {dm.rate:g} Hz (all recordings)", raw),
        ("raw signal as float64 (.mat dtype)", 2 * raw),
        (f"flat signal store (every recording once + {store.slack:,} slack values)", store.values.nbytes),
        (
            "index arrays of the three splits (per window: recording, start, length, label, row starts, ...)",
            index_bytes,
        ),
        ("windowed datasets, views (store + index arrays)", held),
        ("windowed datasets, tracemalloc kept after setup", held_traced),
        ("setup peak (tracemalloc; includes one .mat file being read)", peak_traced),
        ("baseline: a copy per window (array bytes)", copy_bytes),
        ("baseline: a copy per window (tracemalloc)", copy_traced),
    ]
    for what, n in rows:
        print(f"| {what} | {n:,} | {n / raw:.3f} |")
    batch = dm.collate_fn(windows[0].__getitems__(np.arange(dm.batch_size)))
    print(
        f"\nA batch of {dm.batch_size} costs its `signals` ({batch['signals'].nbytes:,} bytes), its mask "
        f"({batch['mask'].nbytes:,}) and 6 x {dm.batch_size} int64; nothing else is allocated per batch."
    )


def epoch_rate(loader) -> float:
    """Windows per second over one epoch of ``loader``."""
    t0 = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch["labels"] if "labels" in batch else batch["label"])
    return n / (time.perf_counter() - t0)


def loader(root: str | None) -> None:
    dm = make_datamodule(root)
    dm.setup()
    train = dm.dataset("train")
    varlen_loader = dm.train_dataloader()
    core_pad = VarLenLoader(
        CorePadWindows(train), batch_sampler=dm.batch_sampler("train", True), collate_fn=dm.collate_fn
    )
    baseline = DataLoader(CopyPerWindow(train), batch_size=dm.batch_size, shuffle=True)
    same = next(iter(core_pad)), dm.collate_fn(train.__getitems__(next(iter(core_pad.batch_sampler))))
    assert all(torch.equal(same[0][k], same[1][k]) for k in same[1])  # the two gathers agree
    loaders = {
        "varlen: views + one gather (`__getitems__`) + `BearingCollator` (StatefulDataLoader, bucketing sampler)": (
            varlen_loader
        ),
        "varlen: views + the core's generic `Ragged.pad` as the gather (same loader)": core_pad,
        "copy per window + `default_collate` (DataLoader, shuffle)": baseline,
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in loader workers; avoids intra-op thread contention in collates
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for epoch in range(EPOCHS + 1):  # interleaved, so that a busy moment of the machine hits every loader
        for name, it in loaders.items():
            rate = epoch_rate(it)
            if epoch:  # the first epoch warms up
                rates[name].append(rate)
    torch.set_num_threads(threads)
    median = {name: float(np.median(r)) for name, r in rates.items()}
    base = median["copy per window + `default_collate` (DataLoader, shuffle)"]
    print(
        f"\n### Loader throughput: train split, {len(train)} windows of {dm.window}, batch {dm.batch_size}, "
        f"0 workers, 1 thread, median of {EPOCHS} interleaved epochs, source: {root or 'simulator'}\n"
    )
    print("| loader | windows/s | x baseline |")
    print("|---|---:|---:|")
    for name, rate in median.items():
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")


def leakage(root: str | None, epochs: int, seed: int, splits: list[str]) -> None:
    import lightning.pytorch as pl

    from varlen.models.bearing import BearingClassifier

    rows = []
    for split in splits:
        pl.seed_everything(seed, verbose=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dm = make_datamodule(root, split=split, seed=seed)
            dm.setup()
        model = BearingClassifier(num_classes=dm.num_classes, in_channels=dm.in_channels, lr=3e-3)
        trainer = pl.Trainer(
            max_epochs=epochs,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
        )
        t0 = time.perf_counter()
        trainer.fit(model, datamodule=dm)
        fit_s = time.perf_counter() - t0
        result = trainer.test(model, datamodule=dm, verbose=False)[0]
        train_windows, test_windows = len(dm.dataset("train")), len(dm.dataset("test"))
        rows.append((split, train_windows, test_windows, result, fit_s))
    print(f"\n### Leakage: same WDCNN, {epochs} epochs, CPU, source: {root or 'simulator'}\n")
    print(
        "| split | train windows | test windows | window acc | window macro-F1 | recording acc | "
        "recording macro-F1 | fit s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for split, n_train, n_test, r, fit_s in rows:
        print(
            f"| {split} | {n_train} | {n_test} | {r['test/acc']:.3f} | {r['test/macro_f1']:.3f} | "
            f"{r['test/recording_acc']:.3f} | {r['test/recording_macro_f1']:.3f} | {fit_s:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        default=str(DEFAULT_ROOT) if DEFAULT_ROOT.is_dir() else None,
        help="CWRU folder (default: ../shared/data/bearing if present, else the simulator)",
    )
    parser.add_argument("--part", default="all", help=f"comma-separated parts among {', '.join(PARTS)}, or all")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--splits",
        default="time_block,random_window",
        help="comma-separated splits to compare (recording needs several recordings per class: --simulator)",
    )
    parser.add_argument("--simulator", action="store_true", help="use the built-in simulator even if --root exists")
    args = parser.parse_args()
    parts = PARTS if args.part == "all" else tuple(args.part.split(","))
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown --part {unknown}; choose among {PARTS} or all")
    if args.simulator:
        args.root = None
    if "memory" in parts:
        memory(args.root)
    if "loader" in parts:
        loader(args.root)
    if "leakage" in parts:
        leakage(args.root, args.epochs, args.seed, args.splits.split(","))


if __name__ == "__main__":
    main()
