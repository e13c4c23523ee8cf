"""Bearing windows: memory and loader throughput of views vs a copy per window, and the leakage effect.

    python scripts/benchmark_bearing.py                       # both parts, real CWRU if present
    python scripts/benchmark_bearing.py --part memory --root ../shared/data/bearing
    python scripts/benchmark_bearing.py --part leakage --epochs 10
    python scripts/benchmark_bearing.py --part leakage --simulator --epochs 4 \
        --splits recording,time_block,random_window

Part ``memory``: the windowed datasets (50% overlap) over every recording, measured two ways:
what the datasets refer to (:meth:`BearingWindows.nbytes`) and what ``tracemalloc`` saw numpy
allocate and keep during ``setup`` (after the raw ``.mat`` arrays were released); against a
baseline that materialises every window as its own array (what ``np.stack`` of windows holds).
Then loader windows/s (median over several epochs, same batch size, same process) for the views
with the scenario's collate, the views with the core ``pad_sequences`` (windows transposed in and
out, since they are ragged on their last axis), and the copy-per-window baseline.

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

from varlen.batching import pad_sequences
from varlen.datamodules.bearing import BearingDataModule
from varlen.datasets.bearing import BearingCollator

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "bearing"


class CopyPerWindow(Dataset):
    """The baseline: every window copied out into one ``[N, C, W]`` array (tails zero-padded)."""

    def __init__(self, windows) -> None:
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


EPOCHS = 9


class TransposedPadCollate(BearingCollator):
    """The alternative to :class:`BearingCollator`: the core ``pad_sequences`` on ``[W, C]`` views.

    ``pad_sequences`` pads the leading axis, so windows go in transposed and the batch is
    transposed back to ``[B, C, W]`` (one extra strided copy of the batch).
    """

    def __call__(self, samples):
        padded = pad_sequences([s["signal"].T for s in samples], pad_to_multiple_of=self.pad_to_multiple_of)
        return {
            "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
            "signals": padded.values.permute(0, 2, 1).contiguous(),
            "lengths": padded.lengths,
            "mask": padded.mask,
            "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
            "recording_ids": torch.tensor([s["recording_id"] for s in samples], dtype=torch.long),
            "window_index": torch.tensor([s["window_index"] for s in samples], dtype=torch.long),
            "starts": torch.tensor([s["start"] for s in samples], dtype=torch.long),
        }


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
    raw_f64 = raw * 2
    windows = {s: dm.dataset(s) for s in ("train", "val", "test")}
    referenced: dict[int, int] = {}  # id -> bytes of the buffers the splits share
    for ds in windows.values():
        for r in np.unique(ds.recording).tolist():
            referenced[id(ds.buffers[r])] = ds.buffers[r].nbytes
    index_bytes = sum(
        ds.nbytes() - sum(ds.buffers[r].nbytes for r in np.unique(ds.recording)) for ds in windows.values()
    )
    held = sum(referenced.values()) + index_bytes
    count = sum(len(ds) for ds in windows.values())

    t0 = time.perf_counter()
    tracemalloc.start()
    copies = {s: CopyPerWindow(ds) for s, ds in windows.items()}
    copy_traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    build_copy = time.perf_counter() - t0
    copy_bytes = sum(c.data.nbytes for c in copies.values())

    print(
        f"\n### Memory: {len(dm.recordings)} recordings, {count} windows of {dm.window} (stride {dm.hop}), "
        f"{dm.rate:g} Hz, source: {root or 'simulator'}\n"
    )
    print("| what | bytes | x raw signal (float32) |")
    print("|---|---:|---:|")
    print(f"| raw signal, float32 at {dm.rate:g} Hz (all recordings) | {raw:,} | 1.00 |")
    print(f"| raw signal as float64 (.mat dtype) | {raw_f64:,} | {raw_f64 / raw:.2f} |")
    print(f"| windowed datasets, views (buffers + index arrays) | {held:,} | {held / raw:.3f} |")
    print(f"| windowed datasets, tracemalloc kept after setup | {held_traced:,} | {held_traced / raw:.3f} |")
    print(
        f"| setup peak (tracemalloc; includes one .mat file being read) | {peak_traced:,} | {peak_traced / raw:.2f} |"
    )
    print(f"| baseline: a copy per window (array bytes) | {copy_bytes:,} | {copy_bytes / raw:.3f} |")
    print(f"| baseline: a copy per window (tracemalloc) | {copy_traced:,} | {copy_traced / raw:.3f} |")

    # loader throughput over the train windows: median of EPOCHS timed epochs after one warm-up
    # (one epoch is only ~12 batches, too short to time alone on a shared machine)
    loader = dm.train_dataloader()
    transposed = dm.train_dataloader()
    transposed.collate_fn = TransposedPadCollate()
    baseline = DataLoader(copies["train"], batch_size=dm.batch_size, shuffle=True)
    rates = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in loader workers; avoids intra-op thread contention in collates
    for name, it in (
        ("views + BearingCollator (StatefulDataLoader, bucketing sampler)", loader),
        ("views + core pad_sequences on transposed windows (same loader)", transposed),
        ("copy per window + default collate (DataLoader)", baseline),
    ):
        epoch_rates = []
        for epoch in range(EPOCHS + 1):
            t0 = time.perf_counter()
            n = 0
            for batch in it:
                n += len(batch["labels"] if "labels" in batch else batch["label"])
            if epoch:  # the first epoch warms up
                epoch_rates.append(n / (time.perf_counter() - t0))
        rates[name] = float(np.median(epoch_rates))
    torch.set_num_threads(threads)
    base = rates["copy per window + default collate (DataLoader)"]
    print(
        f"\n### Loader throughput: train split, {len(windows['train'])} windows, batch {dm.batch_size}, 0 workers, "
        f"median of {EPOCHS} epochs\n"
    )
    print("| loader | windows/s | x baseline |")
    print("|---|---:|---:|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")
    print(f"\n(building the copy-per-window baseline took {build_copy:.2f} s)")


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
    parser.add_argument("--part", choices=("memory", "leakage", "all"), default="all")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--splits",
        default="time_block,random_window",
        help="comma-separated splits to compare (recording needs several recordings per class: --simulator)",
    )
    parser.add_argument("--simulator", action="store_true", help="use the built-in simulator even if --root exists")
    args = parser.parse_args()
    if args.simulator:
        args.root = None
    if args.part in ("memory", "all"):
        memory(args.root)
    if args.part in ("leakage", "all"):
        leakage(args.root, args.epochs, args.seed, args.splits.split(","))


if __name__ == "__main__":
    main()
