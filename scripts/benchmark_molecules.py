"""Molecular graphs: loader throughput against PyG's loaders, and MoleculeNet regression accuracy.

Two commands, each printing markdown tables (`--out DIR` also saves the main figure as a PNG):

`python scripts/benchmark_molecules.py throughput [--csv PATH] [--max-tokens 2048] [--out DIR]`
    Training epochs through (a) varlen's `MoleculeDataModule` loader (node + edge budget),
    (b) PyG's `DataLoader` with a fixed batch size giving the same number of batches (+-5%) and
    (c) PyG's `DynamicBatchSampler` with a node budget giving about as many batches, all over
    the same featurised graphs, measured in the same run (rounds interleave the loaders): graphs/s
    through the loader alone and through a GINE train step, each as a ratio to (b), the largest
    nodes and nodes + edges of any batch, and whether the budget held. Default table:
    Lipophilicity from `$VARLEN_DATA/molecules/lipo.csv` when present, else packaged ESOL.
    Figure: `molecules_throughput.png`, graphs/s of each loader (loader only, train step).

`python scripts/benchmark_molecules.py accuracy [--datasets esol freesolv lipo] [--splits ...] [--out DIR]`
    ESOL, FreeSolv and Lipophilicity (`$VARLEN_DATA/molecules`; ESOL falls back to the
    packaged copy), 80/10/10, for each split (`random`, `scaffold`, `scaffold_balanced`) and
    seed (the seed draws the split where it is random, and the model's initialisation): the
    reference `MoleculeGNN` with the model and data settings of `configs/molecules_<name>.yaml`
    (descriptors where the config has them; its quick-run trainer limits are not used), trained
    up to `--epochs` with early stopping on val RMSE (`--patience`), the best validation
    checkpoint tested. Prints test RMSE mean +- std per dataset and split beside MoleculeNet's
    published MPNN figures (`PUBLISHED`). Figure: `molecules_accuracy.png`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from varlen.datamodules.molecules import SPLIT_MODES, MoleculeDataModule
from varlen.models.molecules import MoleculeGNN
from varlen.storage.paths import data_root, expand_data_paths

ROOT = Path(__file__).resolve().parents[1]
LIPO = data_root() / "molecules" / "lipo.csv"


def make_datamodule(csv: Path | None, max_tokens: int, cache_dir: str | None) -> MoleculeDataModule:
    if csv is None and LIPO.is_file():
        csv = LIPO
    if csv is None:
        return MoleculeDataModule(max_tokens=max_tokens, cache_dir=cache_dir)
    columns = ["lipo"] if csv.name == "lipo.csv" else None
    return MoleculeDataModule(
        dataset="lipo" if columns else None,
        path=str(csv),
        smiles_column="smiles",
        target_columns=columns,
        max_tokens=max_tokens,
        cache_dir=cache_dir,
    )


def run_epoch(loader, model: MoleculeGNN | None, optimizer) -> dict[str, float]:
    """One pass over `loader`: graphs, time, the largest batch, and optional train steps."""
    graphs, largest_nodes, largest_cost, batches = 0, 0, 0, 0
    start = time.perf_counter()
    for batch in loader:
        batches += 1
        graphs += int(batch.num_graphs)
        largest_nodes = max(largest_nodes, int(batch.num_nodes))
        largest_cost = max(largest_cost, int(batch.num_nodes) + int(batch.edge_index.shape[1]))
        if model is not None:
            if not hasattr(batch, "y_mask"):
                batch.y_mask = ~torch.isnan(batch.y)
                batch.y = torch.nan_to_num(batch.y)
            loss = model.loss(model.raw(batch), batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    elapsed = time.perf_counter() - start
    return {
        "graphs": graphs,
        "batches": batches,
        "graphs_per_s": graphs / elapsed,
        "largest_nodes": largest_nodes,
        "largest_cost": largest_cost,
    }


def pyg_graphs(train) -> list:
    """PyG's usual in-memory dataset: a list of `Data` over the same featurised graphs."""
    from torch_geometric.data import Data

    graphs = []
    for i in range(len(train)):
        s = train[i]
        graphs.append(
            Data(
                x=torch.from_numpy(s["x"]),
                edge_index=torch.from_numpy(s["edge_index"]),
                edge_attr=torch.from_numpy(s["edge_attr"]),
                y=torch.from_numpy(s["y"]).view(1, -1),
                num_nodes=len(s["x"]),
            )
        )
    return graphs


def throughput(args: argparse.Namespace) -> None:
    from torch_geometric.loader import DataLoader, DynamicBatchSampler

    torch.set_num_threads(args.threads)
    dm = make_datamodule(args.csv, args.max_tokens, args.cache_dir)
    start = time.perf_counter()
    dm.prepare_data()  # featurise into the cache (or find it there)
    dm.setup("fit")
    setup_s = time.perf_counter() - start
    train = dm.dataset("train")
    graphs = pyg_graphs(train)
    nodes, cost = train.num_nodes, train.lengths
    node_budget = int(round(args.max_tokens * nodes.mean() / cost.mean()))
    fixed = max(1, int(round(len(train) / len(dm.train_dataloader()))))
    peer = f"PyG DataLoader (batch_size={fixed})"  # the acceptance's peer: same number of batches (+-5%)
    loaders = {
        f"varlen MoleculeDataModule (max_tokens={args.max_tokens} nodes+edges)": lambda: dm.train_dataloader(),
        peer: lambda: DataLoader(graphs, batch_size=fixed, shuffle=True),
        f"PyG DynamicBatchSampler (max_num={node_budget} nodes)": lambda: DataLoader(
            graphs, batch_sampler=DynamicBatchSampler(graphs, max_num=node_budget, mode="node", shuffle=True)
        ),
    }
    print(
        f"\nData: {dm.table.path.name}, {len(train)} training graphs; atoms per molecule mean "
        f"{nodes.mean():.1f}, max {nodes.max()}; atoms + directed bonds mean {cost.mean():.1f}, max {cost.max()}. "
        f"varlen prepare_data + setup (read + featurise or cache + split): {setup_s:.2f} s. "
        f"torch threads: {args.threads}.\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load, step = measure(loaders, args.repeats, args.step_repeats)
    print_throughput(load, step, peer, args)
    if args.out:
        print(f"\nfigure: {plot_throughput(load, step, peer, dm.table.path.name, Path(args.out))}")


def plot_throughput(load: dict, step: dict, peer: str, table: str, out: Path) -> Path:
    """Graphs/s of each loader, loading only and through a train step, with the ratio to `peer` on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(load)
    short = [name.split(" (")[0].replace("varlen MoleculeDataModule", "varlen") for name in names]
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.6), sharey=True)
    for ax, (title, rows) in zip(axes, (("loader only", load), ("GINE train step", step)), strict=True):
        rates = [rows[name]["graphs_per_s"] for name in names]
        bars = ax.barh(range(len(names)), rates, color=["#55a868", "#4c72b0", "#8172b2"][: len(names)])
        for bar, rate in zip(bars, rates, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {rate / rows[peer]['graphs_per_s']:.2f}x",
                    va="center", fontsize=7)  # fmt: skip
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("graphs/s", fontsize=8)
        ax.set_xlim(0, max(rates) * 1.25)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(range(len(names)), short)
    axes[0].invert_yaxis()
    fig.suptitle(f"{table}: training epochs, ratio to {peer}", fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "molecules_throughput.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def measure(loaders: dict, repeats: int, step_repeats: int) -> tuple[dict, dict]:
    """Each loader's best loader-only epoch and best train-step epoch.

    Rounds interleave the loaders and each keeps its best round: a burst of load on a shared
    machine then slows one round of every loader instead of all rounds of one.
    """
    for make in loaders.values():
        run_epoch(make(), None, None)  # warm-up (imports, first allocations)
    load: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for name, make in loaders.items():
            load[name] = best(load.get(name), run_epoch(make(), None, None))
    trainers = {}
    for name in loaders:
        torch.manual_seed(0)
        model = MoleculeGNN(num_tasks=1, task="regression", hidden=64, num_layers=3)
        trainers[name] = model, torch.optim.AdamW(model.parameters(), lr=1e-3)
    step: dict[str, dict[str, float]] = {}
    for _ in range(step_repeats):
        for name, make in loaders.items():
            step[name] = best(step.get(name), run_epoch(make(), *trainers[name]))
    return load, step


def print_throughput(load: dict, step: dict, peer: str, args: argparse.Namespace) -> None:
    """The markdown table: graphs/s and their ratio to `peer`, largest batches, whether the budget held."""
    base_load, base_step = load[peer]["graphs_per_s"], step[peer]["graphs_per_s"]
    print("| loader | batches | loader graphs/s | vs PyG DataLoader | train-step graphs/s | vs PyG DataLoader ", end="")
    print("| largest nodes/batch | largest nodes+edges/batch | budget held |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for name, row in load.items():
        held = "yes" if row["largest_cost"] <= args.max_tokens else f"no (> {args.max_tokens})"
        print(
            f"| {name} | {row['batches']} | {row['graphs_per_s']:.0f} | {row['graphs_per_s'] / base_load:.2f}x | "
            f"{step[name]['graphs_per_s']:.0f} | {step[name]['graphs_per_s'] / base_step:.2f}x | "
            f"{row['largest_nodes']} | {row['largest_cost']} | {'no budget' if name == peer else held} |"
        )
    varlen_batches = next(iter(load.values()))["batches"]
    print(
        f"\nBatches: PyG DataLoader {load[peer]['batches']} / varlen {varlen_batches} = "
        f"{load[peer]['batches'] / varlen_batches:.3f}. Loader graphs/s: best of {args.repeats} interleaved "
        f"epochs of loading + collating only (no model). Train-step graphs/s: best of {args.step_repeats} "
        "interleaved epochs with a GINE (MoleculeGNN, hidden 64, 3 layers) forward + backward + AdamW step, the same "
        "model for every loader. PyG's DynamicBatchSampler bounds nodes only, reads every sample to learn its size "
        "(the dataset is loaded twice per epoch) and has no DDP sharding; varlen reads sizes from the cached graph "
        "offsets and shards one global plan over ranks."
    )


def best(kept: dict[str, float] | None, new: dict[str, float]) -> dict[str, float]:
    """The faster of two epochs' results."""
    return new if kept is None or new["graphs_per_s"] > kept["graphs_per_s"] else kept


#: MoleculeNet's published MPNN test RMSE (Wu et al. 2018, "MoleculeNet: a benchmark for molecular machine
#: learning", Chem. Sci. 9, 513-530), on the paper's random 80/10/10 splits: (mean, std or None, where it was read).
PUBLISHED: dict[str, tuple[float, float | None, str]] = {
    # chemprop's README "Results" (kept in forks such as aamini/chemprop): column "GraphConv/MPNN (deepchem)", the
    # MolNet best model, MPNN for ESOL and FreeSolv (its Lipophilicity figure, 0.655, is GraphConv's)
    "esol": (0.58, 0.03, "chemprop README, Results"),
    "freesolv": (1.15, 0.12, "chemprop README, Results"),
    # Papers with Code, "Neural Message Passing for Quantum Chemistry": "Graph Regression, Lipophilicity, MPNN, RMSE
    # 0.719" (the MoleculeNet figure; its std was not in the source found)
    "lipo": (0.719, None, "Papers with Code, MPNN on Lipophilicity"),
}
NAMES = {"esol": "ESOL", "freesolv": "FreeSolv", "lipo": "Lipophilicity"}
UNITS = {"esol": "log mol/L", "freesolv": "kcal/mol", "lipo": "log D"}
SHARED = data_root() / "molecules"
TABLES = {"esol": "delaney-processed.csv", "freesolv": "SAMPL.csv", "lipo": "lipo.csv"}


def config_settings(name: str) -> tuple[dict, dict]:
    """The model and data `init_args` of `configs/molecules_<name>.yaml`."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / f"molecules_{name}.yaml").read_text())
    return dict(config["model"].get("init_args") or {}), dict(config["data"].get("init_args") or {})


def make_run(name: str, split: str, seed: int, args: argparse.Namespace) -> tuple[MoleculeDataModule, MoleculeGNN]:
    """A DataModule and model with the config's settings, for one split and seed."""
    model_args, data_args = config_settings(name)
    table = SHARED / TABLES[name]
    if table.is_file():
        data_args["path"] = str(table)
    elif data_args.get("path"):  # the config's ${VARLEN_DATA}/... (absent: the reader's clear error)
        data_args["path"] = expand_data_paths(data_args["path"])
    data_args.update(split=split, seed=seed, cache_dir=args.cache_dir)
    dm = MoleculeDataModule(**data_args)
    model = MoleculeGNN(**model_args, num_tasks=dm.num_tasks, task=dm.task, num_descriptors=dm.num_descriptors)
    return dm, model


def train_and_test(name: str, split: str, seed: int, args: argparse.Namespace) -> dict[str, float]:
    """One run: fit with early stopping on val RMSE, test the best validation checkpoint."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    pl.seed_everything(seed, workers=True, verbose=False)
    dm, model = make_run(name, split, seed, args)
    checkpoint = ModelCheckpoint(monitor="val/rmse", mode="min", dirpath=Path(args.ckpt_dir) / f"{name}-{split}-{seed}")
    stopping = EarlyStopping(monitor="val/rmse", mode="min", patience=args.patience)
    trainer = pl.Trainer(
        max_epochs=epochs_for(name, args.epochs),
        accelerator="cpu",
        logger=False,
        callbacks=[checkpoint, stopping],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
        metrics = trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)[0]
    sizes = {k: len(v) for k, v in dm.split_positions.items()}
    return {
        "rmse": float(metrics["test/rmse"]),
        "mae": float(metrics["test/mae"]),
        "val_rmse": float(checkpoint.best_model_score),
        "epochs": trainer.current_epoch,
        "seconds": time.perf_counter() - start,
        "molecules": sum(sizes.values()),
    }


def epochs_for(name: str, epochs: list[str]) -> int:
    """The most epochs for dataset `name` from `--epochs` items `N` (every dataset) and `name=N`."""
    chosen = {k: int(v) for k, _, v in (item.rpartition("=") for item in epochs)}
    return chosen.get(name, chosen.get("", 60))


def accuracy(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    total = time.perf_counter()
    for name in args.datasets:
        for split in args.splits:
            for seed in args.seeds:
                run = train_and_test(name, split, seed, args)
                results.setdefault((name, split), []).append(run)
                print(
                    f"{name} split={split} seed={seed}: test RMSE {run['rmse']:.3f}, MAE {run['mae']:.3f} "
                    f"(best val RMSE {run['val_rmse']:.3f}, {run['epochs']} epochs, {run['seconds']:.0f} s)",
                    flush=True,
                )
    print(
        f"\n{len(args.seeds)} seeds {args.seeds}, 80/10/10, up to {' '.join(args.epochs)} epochs, early stopping on "
        f"val RMSE (patience {args.patience}), best-val checkpoint tested; {time.perf_counter() - total:.0f} s in all, "
        f"{args.threads} torch thread(s).\n"
    )
    table = accuracy_table(results, args)
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "molecules_accuracy.md").write_text(table + "\n")
        print(f"\nfigure: {plot_accuracy(results, args, out)}")


def mean_std(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def accuracy_table(results: dict, args: argparse.Namespace) -> str:
    """Markdown: test RMSE mean +- std per dataset and split, the published MPNN figure, then per-seed values."""
    head = " | ".join(args.splits)
    lines = [
        f"| dataset (molecules, unit) | {head} | MoleculeNet MPNN (random split) |",
        "|---|" + "---:|" * (len(args.splits) + 1),
    ]
    for name in args.datasets:
        runs = {split: results[(name, split)] for split in args.splits}
        cells = []
        for split in args.splits:
            mean, std = mean_std([r["rmse"] for r in runs[split]])
            cells.append(f"{mean:.3f} ± {std:.3f}")
        published, spread, _ = PUBLISHED[name]
        paper = f"{published:.3g} ± {spread:.2g}" if spread is not None else f"{published:.3g}"
        molecules = runs[args.splits[0]][0]["molecules"]
        lines.append(f"| {NAMES[name]} ({molecules:,}, {UNITS[name]}) | {' | '.join(cells)} | {paper} |")
    lines += ["", "| dataset | split | test RMSE per seed | epochs run per seed |", "|---|---|---|---|"]
    for (name, split), runs in results.items():
        per_seed = ", ".join(f"{r['rmse']:.3f}" for r in runs)
        lines.append(f"| {NAMES[name]} | {split} | {per_seed} | {', '.join(str(r['epochs']) for r in runs)} |")
    return "\n".join(lines)


def plot_accuracy(results: dict, args: argparse.Namespace, out: Path) -> Path:
    """One panel per dataset: test RMSE bars per split (std as error bars), MoleculeNet's MPNN as a marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"random": "#4c72b0", "scaffold": "#dd8452", "scaffold_balanced": "#55a868"}
    fig, axes = plt.subplots(1, len(args.datasets), figsize=(6.4, 3.6), squeeze=False)
    for ax, name in zip(axes[0], args.datasets, strict=True):
        for x, split in enumerate(args.splits):
            mean, std = mean_std([r["rmse"] for r in results[(name, split)]])
            ax.bar(x, mean, yerr=std, capsize=3, color=colors.get(split, "gray"), label=split)
        published, spread, _ = PUBLISHED[name]
        x = args.splits.index("random") if "random" in args.splits else 0
        ax.errorbar(x, published, yerr=spread, fmt="D", color="black", capsize=3, label="MoleculeNet MPNN (random)")
        ax.set_title(NAMES[name], fontsize=9)
        ax.set_xticks([])
        ax.set_ylabel(f"test RMSE ({UNITS[name]})", fontsize=8)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7, frameon=False)
    fig.suptitle(f"MoleculeGNN, {len(args.seeds)} seeds (mean ± std)", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = out / "molecules_accuracy.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    tp = commands.add_parser("throughput", help="loader throughput vs PyG DataLoader / DynamicBatchSampler")
    tp.add_argument("--csv", type=Path, default=None, help="table to use (default: shared lipo.csv, else ESOL)")
    tp.add_argument("--max-tokens", type=int, default=2048, help="nodes + edges budget per batch")
    tp.add_argument("--repeats", type=int, default=5, help="loader-only epochs per loader (best kept)")
    tp.add_argument("--step-repeats", type=int, default=3, help="train-step epochs per loader (best kept)")
    tp.add_argument("--threads", type=int, default=1)
    tp.add_argument("--cache-dir", default=None)
    tp.add_argument("--out", default=None, help="folder for molecules_throughput.png")
    acc = commands.add_parser("accuracy", help="ESOL / FreeSolv / Lipophilicity test RMSE over seeds and splits")
    acc.add_argument("--datasets", nargs="+", default=list(TABLES), choices=list(TABLES))
    acc.add_argument("--splits", nargs="+", default=list(SPLIT_MODES), choices=list(SPLIT_MODES))
    acc.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    acc.add_argument(
        "--epochs",
        nargs="+",
        default=["60", "freesolv=80", "lipo=20"],
        help="most epochs per run: N for every dataset, name=N for one (default: 60, FreeSolv 80, Lipophilicity 20: "
        "the 27 default runs take about an hour on one shared CPU core)",
    )
    acc.add_argument("--patience", type=int, default=15, help="epochs without a better val RMSE before stopping")
    acc.add_argument("--threads", type=int, default=1)
    acc.add_argument("--cache-dir", default=None)
    acc.add_argument("--ckpt-dir", default=str(Path(tempfile.gettempdir()) / "varlen-molecules-accuracy"))
    acc.add_argument("--out", default=None, help="folder for molecules_accuracy.png and the table")
    args = parser.parse_args()
    throughput(args) if args.command == "throughput" else accuracy(args)


if __name__ == "__main__":
    main()
