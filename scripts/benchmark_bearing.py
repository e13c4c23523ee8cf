"""Bearing windows: memory and loader throughput of one-gather views vs a copy per window, the leakage
effect, and accuracy across operating conditions.

    python scripts/benchmark_bearing.py                       # every part, real CWRU if present
    python scripts/benchmark_bearing.py --part memory,loader --root $VARLEN_DATA/bearing
    python scripts/benchmark_bearing.py --part leakage --epochs 10
    python scripts/benchmark_bearing.py --part leakage --simulator --epochs 4 \
        --splits recording,time_block,random_window
    python scripts/benchmark_bearing.py --part cross-condition --out plots   # simulator, loads 0-3

Part `memory`: the windowed datasets (50% overlap) over every recording, measured two ways:
what the datasets refer to (the one flat signal store and each split's index arrays) and what
`tracemalloc` saw numpy allocate and keep during `setup` (after the raw `.mat` arrays were
released); against a baseline that materialises every window as its own array (what `np.stack`
of windows holds).

Part `loader`: loader windows/s over the train split (median of interleaved epochs, same batch
size, same process, 0 workers, one thread): the varlen loader (batched fetch: one gather of the
batch's windows from the flat store, then the collate names the fields), the same loader with the
core's generic `Ragged.pad` as the gather, and the baseline a user would write: every window
copied out into one array, a `DataLoader` with `default_collate`.

Part `leakage`: the same WDCNN trained on the same recordings with the leak-free time-block
split and with a random window split (overlapping windows of one recording on both sides);
window-level and recording-level macro-F1 on each split's test windows.

Part `cross-condition`: for every train -> test pair of operating conditions (the simulator's
motor loads 0-3, or the loads present under `--root`), the reference WDCNN trained on the train
condition (validation carved from it by time blocks) and tested on the other, whole: window and
recording accuracy and macro-F1 without adaptation and with AdaBN (batch-norm statistics of the
unlabelled test windows). One training per train condition serves all its test conditions. With
`--out`, a heat map of window accuracy per pair (diagonal: validation on the train condition).

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
from varlen.datasets.bearing import BearingWindows
from varlen.datasets.bearing.dataset import WindowBatch
from varlen.storage.paths import data_root

DEFAULT_ROOT = data_root() / "bearing"
PARTS = ("memory", "loader", "leakage", "cross-condition")
EPOCHS = 31  # one train epoch is only ~12 batches, too short to time alone on a shared machine


class CopyPerWindow(Dataset):
    """The baseline: every window copied out into one `[N, C, W]` array (tails zero-padded)."""

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
    """The same windows fetched with the core's generic `Ragged.pad` (an index grid, then one read)."""

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
    """Windows per second over one epoch of `loader`."""
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


def leakage(root: str | None, epochs: int, seed: int, splits: list[str], with_recipe: bool = False) -> None:
    """With `with_recipe`: the models train with the cross-condition recipe (augmentation, AdaBN
    before the test, the config's learning rate), to check that it keeps the time-block scores."""
    import lightning.pytorch as pl

    from varlen.models.bearing import BearingClassifier

    data, model_args = {}, {"lr": 3e-3}
    if with_recipe:
        recipe, model_args, _ = cross_recipe()
        data = {k: v for k, v in recipe.items() if k.startswith("augment")}
        model_args = {**model_args, "adabn": True}
    rows = []
    for split in splits:
        pl.seed_everything(seed, verbose=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dm = make_datamodule(root, split=split, seed=seed, **data)
            dm.setup()
        model = BearingClassifier(num_classes=dm.num_classes, in_channels=dm.in_channels, **model_args)
        trainer = quiet_trainer(epochs)
        t0 = time.perf_counter()
        trainer.fit(model, datamodule=dm)
        fit_s = time.perf_counter() - t0
        result = trainer.test(model, datamodule=dm, verbose=False)[0]
        train_windows, test_windows = len(dm.dataset("train")), len(dm.dataset("test"))
        rows.append((split, train_windows, test_windows, result, fit_s))
    recipe = f"the {CROSS_CONFIG.name} recipe (augmentation, AdaBN)" if with_recipe else "lr 0.003"
    print(f"\n### Leakage: same WDCNN, {epochs} epochs, {recipe}, CPU, source: {root or 'simulator'}\n")
    print(
        "| split | train windows | test windows | window acc | window macro-F1 | recording acc | "
        "recording macro-F1 | fit s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for split, n_train, n_test, r, fit_s in rows:
        print(
            f"| {split} | {n_train} | {n_test} | {r['test/accuracy']:.3f} | {r['test/macro_f1']:.3f} | "
            f"{r['test/recording_accuracy']:.3f} | {r['test/recording_macro_f1']:.3f} | {fit_s:.0f} |"
        )


# -- across operating conditions -------------------------------------------------------------------

CROSS_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "bearing_cross_load.yaml"
#: what the pairs set themselves (conditions) or the command line overrides (the simulator's size)
PAIR_ARGS = ("root", "train_conditions", "test_conditions", "val_conditions", "simulated_loads")
METRICS = (("accuracy", "window acc"), ("macro_f1", "window macro-F1"), ("recording_accuracy", "rec. acc"))
METRICS += (("recording_macro_f1", "rec. macro-F1"),)


def cross_recipe() -> tuple[dict, dict, int]:
    """The reference recipe across conditions, read from configs/bearing_cross_load.yaml: the data and
    model arguments and the epochs (so that the table measures what the config trains)."""
    import yaml

    config = yaml.safe_load(CROSS_CONFIG.read_text())
    data = {k: v for k, v in config["data"]["init_args"].items() if k not in PAIR_ARGS}
    model = {k: v for k, v in config["model"]["init_args"].items() if k != "adabn"}  # both ways, per pair
    return data, model, int(config["trainer"]["max_epochs"])


def conditions_under(root: str | None, simulated: list[str]) -> list[str]:
    """The conditions of the recordings under `root` (read once), or the simulated loads."""
    if root is None:
        return simulated
    return sorted({r.condition for r in make_datamodule(root).load()})


def quiet_trainer(epochs: int = 1, limit_val_batches: float | None = 0):
    """A CPU trainer without logs, checkpoints or progress bars (no validation during fit by default)."""
    import lightning.pytorch as pl

    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=limit_val_batches,
    )


def train_on(root, condition: str, tests: list[str], args) -> dict:
    """One model trained on `condition`, tested on each of `tests` with and without AdaBN."""
    import lightning.pytorch as pl

    from varlen.models.bearing import BearingClassifier

    pl.seed_everything(args.seed, verbose=False)
    recipe, model_args, _ = cross_recipe()
    data = {**recipe, "seed": args.seed, "train_conditions": [condition]}
    data["augment"] = data.get("augment", False) and not args.no_augment
    if root is None:
        data["simulated_loads"] = [int(c) for c in args.conditions.split(",")]
        data["simulated_per_class"] = args.per_class or data.get("simulated_per_class", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classes missing under some conditions are warned about per split
        dms = {b: make_datamodule(root, test_conditions=[b], **data) for b in tests}
        for dm in dms.values():
            dm.setup()
    first = dms[tests[0]]
    model = BearingClassifier(num_classes=first.num_classes, in_channels=first.in_channels, **model_args)
    t0 = time.perf_counter()
    quiet_trainer(args.epochs).fit(model, datamodule=first)
    out = {"fit_s": time.perf_counter() - t0, "windows": len(first.dataset("train"))}
    trainer = quiet_trainer(limit_val_batches=None)
    out["val"] = trainer.validate(model, datamodule=first, verbose=False)[0]
    for b, dm in dms.items():
        for adabn in (False, True):
            model.adabn = adabn
            out[b, adabn] = trainer.test(model, datamodule=dm, verbose=False)[0]
    return out


def cross_condition(root: str | None, args) -> None:
    conditions = conditions_under(root, args.conditions.split(","))
    per_class = args.per_class or cross_recipe()[0].get("simulated_per_class", 4)
    source = root or f"simulator ({per_class} recordings per class and load)"
    if len(conditions) < 2:
        print(
            f"\n### Across conditions, source: {source}\n\nOnly condition(s) {conditions} present: a train -> test "
            "pair needs recordings of two conditions (e.g. CWRU files of loads 0 and 1 in one folder)."
        )
        return
    runs = {a: train_on(root, a, [b for b in conditions if b != a], args) for a in conditions}
    recipe = "no augmentation" if args.no_augment else "augmented (shifts, speed, amplitude scaling, noise)"
    print(f"\n### Across conditions: WDCNN, {args.epochs} epochs, {recipe}, CPU, source: {source}\n")
    print(f"Recipe: {CROSS_CONFIG.name} (data and model arguments), seed {args.seed}.")
    print("Validation: time blocks of the train condition. Test: the other condition's recordings, whole.\n")
    head = " | ".join(f"{name}{tag}" for tag in ("", " AdaBN") for _, name in METRICS)
    print(f"| train -> test | train windows | val window acc | {head} | fit s |")
    print("|---|---:|---:|" + "---:|" * (2 * len(METRICS)) + "---:|")
    rows = []
    for a, run in runs.items():
        for b in conditions:
            if b == a:
                continue
            values = [run[b, adabn][f"test/{key}"] for adabn in (False, True) for key, _ in METRICS]
            rows.append(values)
            cells = " | ".join(f"{v:.3f}" for v in values)
            print(
                f"| {a} -> {b} | {run['windows']} | {run['val']['val/accuracy']:.3f} | {cells} | {run['fit_s']:.0f} |"
            )
    mean = np.mean(rows, axis=0)
    print(f"| mean over {len(rows)} pairs | | | " + " | ".join(f"{v:.3f}" for v in mean) + " | |")
    print(f"\nWorst pair, window accuracy with AdaBN: {np.min(np.array(rows)[:, len(METRICS)]):.3f}.")
    if args.out:
        name = "bearing_cross_condition.png" if root is None else "bearing_cross_condition_real.png"
        heat_map(runs, conditions, Path(args.out) / name, source)


def heat_map(runs: dict, conditions: list[str], path: Path, source: str) -> None:
    """Window accuracy per train -> test pair, without adaptation and with AdaBN (diagonal: validation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(conditions)
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 4.5), dpi=80, constrained_layout=True)
    for ax, adabn in zip(axes, (False, True), strict=True):
        grid = np.array(
            [
                [runs[a]["val"]["val/accuracy"] if a == b else runs[a][b, adabn]["test/accuracy"] for b in conditions]
                for a in conditions
            ]
        )
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for i in range(n):
            for j in range(n):
                text = f"{grid[i, j]:.2f}" + ("\nval" if i == j else "")
                ax.text(j, i, text, ha="center", va="center", color="white" if grid[i, j] < 0.6 else "black")
        ax.set(xticks=range(n), yticks=range(n), xticklabels=conditions, yticklabels=conditions)
        ax.set(xlabel="test condition", ylabel="train condition", title="AdaBN" if adabn else "no adaptation")
    fig.colorbar(image, ax=axes, shrink=0.8, label="window accuracy")
    fig.suptitle(f"Bearing faults across conditions: {source}", fontsize=9)
    fig.savefig(path)
    plt.close(fig)
    print(f"\nHeat map: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        default=str(DEFAULT_ROOT) if DEFAULT_ROOT.is_dir() else None,
        help="CWRU folder (default: $VARLEN_DATA/bearing if present, else the simulator)",
    )
    parser.add_argument("--part", default="all", help=f"comma-separated parts among {', '.join(PARTS)}, or all")
    parser.add_argument(
        "--epochs", type=int, default=None, help="training epochs (default: 8; cross-condition: the config's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--splits",
        default="time_block,random_window",
        help="comma-separated splits to compare (recording needs several recordings per class: --simulator)",
    )
    parser.add_argument("--simulator", action="store_true", help="use the built-in simulator even if --root exists")
    parser.add_argument("--conditions", default="0,1,2,3", help="simulated loads for cross-condition")
    parser.add_argument(
        "--per-class", type=int, default=None, help="simulated recordings per class and load (default: the config's)"
    )
    parser.add_argument(
        "--cross-recipe", action="store_true", help="leakage: train with the cross-condition recipe (augment, AdaBN)"
    )
    parser.add_argument("--no-augment", action="store_true", help="cross-condition without training augmentation")
    parser.add_argument("--out", default=None, help="folder for the cross-condition heat map (PNG)")
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
        leakage(args.root, args.epochs or 8, args.seed, args.splits.split(","), args.cross_recipe)
    if "cross-condition" in parts:
        cross_args = argparse.Namespace(**{**vars(args), "epochs": args.epochs or cross_recipe()[2]})
        if args.root is not None:
            cross_condition(args.root, cross_args)
        cross_condition(None, cross_args)


if __name__ == "__main__":
    main()
