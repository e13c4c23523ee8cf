"""HIV with `sample_weights: balanced`: the actives' share of the served training samples, and
test ROC-AUC with and without balance after a short training.

`python scripts/measure_balance.py share [--epochs 5]`
    Per epoch, the actives' share of the molecules the training sampler serves (from the plan,
    which may repeat a molecule) and, for epoch 0, of the molecules the loader's batches hold.
    Acceptance (issue 19): 0.50 +- 0.02 per epoch.

`python scripts/measure_balance.py auc [--seeds 0 1 2] [--epochs 3]`
    The reference `MoleculeGNN` (a small one: `--hidden`, `--layers`) trained `--epochs`
    epochs with and without balance, the last epoch's model tested (ROC-AUC on the balanced
    scaffold test split). A short training: a figure to report, not a tuned result.

HIV: `$VARLEN_DATA/molecules/HIV.csv.gz` (preset `hiv`; 7 unreadable SMILES skipped).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from varlen.datamodules.molecules import MoleculeDataModule
from varlen.storage.paths import data_root

HIV = data_root() / "molecules" / "HIV.csv.gz"


def hiv(seed: int = 0, balanced: bool = True, cache_dir: str | None = None) -> MoleculeDataModule:
    dm = MoleculeDataModule(dataset="hiv", path=str(HIV), on_bad="skip", seed=seed, cache_dir=cache_dir,
                            sample_weights="balanced" if balanced else None)  # fmt: skip
    dm.setup("fit")
    return dm


def share(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    dm = hiv(cache_dir=args.cache_dir)
    labels = dm.class_labels(dm.dataset("train"))
    sampler = dm.batch_sampler("train", True)
    print(f"HIV train split: {len(labels):,} molecules, actives {labels.mean():.4f} of the split "
          f"(setup {time.perf_counter() - start:.1f} s)\n")  # fmt: skip
    print("| epoch | served | distinct | actives' share | batches |")
    print("|---|---|---|---|---|")
    shares = []
    for epoch in range(args.epochs):
        order = sampler.global_plan(epoch).order
        shares.append(labels[order].mean())
        print(f"| {epoch} | {len(order):,} | {len(np.unique(order)):,} | {shares[-1]:.4f} | {len(sampler):,} |")
    print(f"\nmin {min(shares):.4f}, max {max(shares):.4f} (acceptance 0.50 +- 0.02)")
    loader = dm.train_dataloader()
    served = np.concatenate([batch.y[:, 0].numpy() for batch in loader])
    print(f"epoch 0 through the loader: {len(served):,} molecules, actives {served.mean():.4f}")


def auc(args: argparse.Namespace) -> None:
    import lightning.pytorch as pl

    from varlen.models.molecules import MoleculeGNN

    print("| seed | balanced | test ROC-AUC | val ROC-AUC | seconds |")
    print("|---|---|---|---|---|")
    results: dict[bool, list[float]] = {False: [], True: []}
    for seed in args.seeds:
        for balanced in (False, True):
            pl.seed_everything(seed, workers=True, verbose=False)
            start = time.perf_counter()
            dm = hiv(seed, balanced, args.cache_dir)
            model = MoleculeGNN(hidden=args.hidden, num_layers=args.layers, num_tasks=dm.num_tasks, task=dm.task)
            trainer = pl.Trainer(max_epochs=args.epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer.fit(model, datamodule=dm)
                val = trainer.callback_metrics.get("val/roc_auc")
                test = trainer.test(model, datamodule=dm, verbose=False)[0]["test/roc_auc"]
            results[balanced].append(float(test))
            seconds = time.perf_counter() - start
            print(f"| {seed} | {balanced} | {float(test):.4f} | {float(val):.4f} | {seconds:.0f} |", flush=True)
    for balanced, values in results.items():
        print(f"balanced={balanced}: test ROC-AUC {np.mean(values):.4f} +- {np.std(values):.4f} ({len(values)} seeds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=None)
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("share")
    one.add_argument("--epochs", type=int, default=5)
    two = commands.add_parser("auc")
    two.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    two.add_argument("--epochs", type=int, default=3)
    two.add_argument("--hidden", type=int, default=64)
    two.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    {"share": share, "auc": auc}[args.command](args)


if __name__ == "__main__":
    main()
