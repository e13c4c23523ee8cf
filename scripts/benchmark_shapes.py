"""What the shape policy costs and gives on SST-2's training split: an epoch's distinct batch shapes against
its padding, with exact buckets and with `max_shapes` rungs, at the budgets measured on the GPU.

    python scripts/benchmark_shapes.py                      # SST-2 from $VARLEN_DATA/text
    python scripts/benchmark_shapes.py --limits 16 24 32 --worlds 1 8

One row per (budget, world size, max_shapes): the rungs fitted, the epoch's distinct (batch size, padded
length) shapes, real / allocated tokens (real over batch size x padded length, every rank's batches of
epoch 0; packed, `layout="packed"`: over the rows of `max_tokens`, one shape), batches per epoch, and
the seconds the DataModule's set-up spent fitting the rungs. Nothing is
timed on a device: what a shape costs there is `scripts/benchmark_gpu.py`'s.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def row(text: Path, budget: int, world: int, limit: int | None, layout: str = "padded") -> dict:
    from varlen.datamodules import TextClassificationDataModule
    from varlen.datamodules.shaping import ShapePolicy

    dm = TextClassificationDataModule(
        train_file=text / "sst2_train.tsv", val_file=text / "sst2_dev.tsv", text_column="sentence",
        label_column="label", max_tokens=budget, max_shapes=limit, layout=layout,
    )  # fmt: skip
    dm._world_size = lambda: world  # plan for `world` ranks, as setup under DDP does
    fitted = []
    fit = ShapePolicy.fit_shapes

    def timed(self) -> None:
        start = time.perf_counter()
        fit(self)
        fitted.append(time.perf_counter() - start)

    ShapePolicy.fit_shapes = timed
    try:
        dm.setup("fit")
    finally:
        ShapePolicy.fit_shapes = fit
    sampler = dm.batch_sampler("train", True, num_replicas=world, rank=0)
    shapes = sampler.shapes(0)
    real = int(np.asarray(dm.dataset("train").lengths).sum())
    return {
        "rungs": None if dm.rungs is None else len(dm.rungs[0].lengths),
        "shapes": sampler.shape_count(0),
        "efficiency": real / int((shapes[:, 0] * shapes[:, 1]).sum()),
        "batches": len(shapes),
        "fit_s": fitted[0] if fitted else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    from varlen.storage.paths import data_root

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="sst2_train.tsv's folder (default: $VARLEN_DATA/text)")
    parser.add_argument("--budgets", type=int, nargs="*", default=[547, 7365])
    parser.add_argument("--worlds", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--limits", type=int, nargs="*", default=[16, 24, 32], help="max_shapes (besides None)")
    args = parser.parse_args(argv)
    text = args.data or data_root() / "text"
    print("| max_tokens | ranks | max_shapes | rungs | distinct shapes | real / allocated | batches | fit s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        for world in args.worlds:
            for limit in [None, *args.limits]:
                r = row(text, budget, world, limit)
                name = "None (exact buckets)" if limit is None else f"{limit}" + (" (default)" if limit == 24 else "")
                print(
                    f"| {budget:,} | {world} | {name} | {r['rungs'] or '-'} | {r['shapes']} | {r['efficiency']:.4f} "
                    f"| {r['batches']:,} | {r['fit_s']:.2f} |",
                    flush=True,
                )
            r = row(text, budget, world, None, "packed")
            print(
                f"| {budget:,} | {world} | packed rows | - | {r['shapes']} | {r['efficiency']:.4f} "
                f"| {r['batches']:,} | - |"
            )


if __name__ == "__main__":
    main()
