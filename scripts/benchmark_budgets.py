"""Do packed and shaped plans keep their budgets? Two tables, each with the plan before issue 40 beside today's.

    python scripts/benchmark_budgets.py              # SST-2 from $VARLEN_DATA/text, else the synthetic reviews
    python scripts/benchmark_budgets.py --samples 3000 --worlds 2 4 8

1. Packed rows (`layout="packed"`, `max_tokens`) at `pad_to_multiple_of` 1 / 8 / 16 / 64: the real tokens over
   the rows' tokens of epoch 0. Before, the plan costed each text at its rounded size (emulated here by planning
   the rounded lengths); now at its real size, and only the row is rounded.
2. `max_shapes` with `sample_weights="balanced"` on 1-8 ranks: the most distinct (batch size, padded length)
   shapes an axis takes over the first epochs the weighted sampler serves. Before, the rungs were fitted on the
   unweighted epoch 0 (emulated: fitted by an unweighted sampler, served by the weighted one); now on the draw's.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
EPOCHS = 3


def text_arguments(samples: int) -> tuple[str, dict]:
    """SST-2 where `$VARLEN_DATA/text` holds it, else the embedded synthetic reviews."""
    text = Path(os.environ.get("VARLEN_DATA", "")) / "text"
    if (text / "sst2_train.tsv").is_file():
        files = {"train_file": text / "sst2_train.tsv", "val_file": text / "sst2_dev.tsv"}
        return "SST-2", files | {"text_column": "sentence", "label_column": "label"}
    return f"synthetic reviews ({samples:,})", {"synthetic_samples": samples}


def packed_fill(data: dict, budget: int, multiple: int | None) -> tuple[float, float, int]:
    """(fill before, fill now, row width) of an epoch of packed rows."""
    from varlen.batching import BucketBatchSampler
    from varlen.batching.shape_policy import round_up
    from varlen.datamodules import TextClassificationDataModule

    dm = TextClassificationDataModule(max_tokens=budget, layout="packed", pad_to_multiple_of=multiple, **data)
    dm.prepare_data()
    dm.setup("fit")
    lengths = np.asarray(dm.dataset("train").lengths)
    width = dm.packing[0]
    now = len(dm.batch_sampler("train", True).global_plan(0))
    before = len(BucketBatchSampler(round_up(lengths, multiple), max_tokens=budget, cost="packed").global_plan(0))
    return lengths.sum() / (before * width), lengths.sum() / (now * width), width


def served(sampler) -> int:
    shapes = np.concatenate([sampler.shapes(epoch) for epoch in range(EPOCHS)])
    return max(len(np.unique(shapes[:, [0, d]], axis=0)) for d in range(1, shapes.shape[1]))


def weighted_shapes(data: dict, budget: int, limit: int, world: int) -> tuple[int, int, bool]:
    """(shapes served before, now, whether now warned that the limit cannot hold) on `world` ranks."""
    from varlen.batching import BucketBatchSampler
    from varlen.datamodules import TextClassificationDataModule

    dm = TextClassificationDataModule(max_tokens=budget, max_shapes=limit, sample_weights="balanced", **data)
    dm._world_size = lambda: world  # plan for `world` ranks, as setup under DDP does
    dm.prepare_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
    warned = any("cannot hold" in str(w.message) for w in caught)
    now = served(dm.batch_sampler("train", True, num_replicas=world, rank=0))
    lengths = np.asarray(dm.dataset("train").lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = BucketBatchSampler(lengths, max_tokens=budget, max_shapes=limit, num_replicas=world, rank=0).rungs
        before = BucketBatchSampler(lengths, max_tokens=budget, rungs=old, weights=dm.train_weights(),
                                    num_replicas=world, rank=0)  # fmt: skip
    return served(before), now, warned


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3000, help="synthetic reviews without SST-2")
    parser.add_argument("--budget", type=int, default=512, help="packed rows' max_tokens")
    parser.add_argument("--shaped-budget", type=int, default=7365, help="the weighted plan's max_tokens")
    parser.add_argument("--limit", type=int, default=4, help="max_shapes")
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8])
    args = parser.parse_args(argv)
    name, data = text_arguments(args.samples)
    print(f"{name}: packed rows of max_tokens={args.budget}, real / allocated tokens of epoch 0\n")
    print("| pad_to_multiple_of | row | fill before | fill now |\n|---:|---:|---:|---:|")
    for multiple in (None, 8, 16, 64):
        before, now, width = packed_fill(data, args.budget, multiple)
        print(f"| {multiple or 1} | {width} | {before:.3f} | {now:.3f} |")
    print(f"\n{name}: max_shapes={args.limit}, sample_weights=balanced, max_tokens={args.shaped_budget}, "
          f"shapes served over {EPOCHS} epochs\n")  # fmt: skip
    print("| ranks | shapes before | shapes now | warned (cannot hold) |\n|---:|---:|---:|---|")
    for world in args.worlds:
        before, now, warned = weighted_shapes(data, args.shaped_budget, args.limit, world)
        print(f"| {world} | {before} | {now} | {'yes' if warned else 'no'} |")


if __name__ == "__main__":
    main()
