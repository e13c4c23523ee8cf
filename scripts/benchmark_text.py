"""Padding, collate speed and training throughput on real SST-2 lengths, against Hugging Face and
lhotse; long documents as windows against truncation.

    python scripts/benchmark_text.py [--data $VARLEN_DATA/text] [--train-steps 20] [--out DIR]
    python scripts/benchmark_text.py --part budget --out plots/      # the padding figure only
    python scripts/benchmark_text.py --part long [--long-docs 400 --long-epochs 1]   # about 20-40 CPU minutes

Parts (`--part`, comma-separated; default `sst2,budget`), each printing markdown tables:

`sst2`
  1. Padding efficiency (real / padded tokens) and collate microseconds per batch for random
     batches, HF `LengthGroupedSampler` + `DataCollatorWithPadding` (the `group_by_length`
     recipe), and varlen's sampler at the same mean batch size and under a token budget. Each
     batching is collated by both HF's collator and varlen on the very same batches: HF's from the
     per-sample dicts a `datasets` table yields (fetched beforehand, not timed), varlen's whole
     path from its storage: the batched fetch (`__getitems__`: one gather of the `Ragged` ids,
     padded) and the collate (naming the fields). The last column collates `dataset[i]` dicts.
  2. Time to build one epoch's plan for 1M lengths: varlen vs `LengthGroupedSampler`.
  3. CPU training throughput (real tokens/s) of the reference MiniLM classifier, random vs
     varlen batches, same model, same steps.
`budget`
  Padding efficiency against the budget (`max_tokens`) on SST-2 lengths: varlen's
  `BucketBatchSampler` under `max_tokens` (padded tokens), lhotse's `DynamicBucketingSampler`
  under `max_duration` = the same number (its budget counts real tokens: a length is a
  "duration"), and HF `group_by_length` and random batches at varlen's mean batch size for that
  budget (a fixed batch size is their only knob). With `--out DIR`: `text_padding_budget.png`.
  Re-mixing of the same batchings: the share of pairs batched together in one epoch that are
  together again in the next, on all lengths and on a `--subset` of them (a small dataset).
`weights`
  Padding efficiency of weighted draws (`weights=`: random uniform and lognormal weights, a
  mean over 3 epochs) against the unweighted plan at each budget, and the time to build the
  sampler and one epoch's plan, weighted or not, on the SST-2 lengths and on 1M of them.
`mixture`
  SST-2 and `--long-reviews` synthetic long reviews as two sources, `source_weights` 3:1, under
  each `mix`: the share each source served per epoch (acceptance: 0.75 / 0.25 +- 0.01), padding
  efficiency, and fetch + collate time per batch (a batch of two sources is joined: a second pad).
`long`
  Document-level accuracy on long texts (the synthetic IMDB-like reviews: median about 300
  tokens, opinions few and mostly late), the same MiniLM, `max_length` and learning rate:
  truncation to the first window (for the same epochs, and for as many epochs as give it the
  optimizer steps of the windows run) against every window (log-probabilities summed per
  document), beside the vote of the opinion words a reader of the first window / the whole
  review would take.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from varlen.storage.paths import data_root

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def efficiency(batches: list[list[int]], lengths: np.ndarray) -> float:
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    return real / padded


def best_us(run, batches, repeats: int) -> float:
    """Microseconds per batch of `run(b)` over `batches`: the best of `repeats` passes (other
    processes on a shared machine only ever slow a pass down; every contender gets the same rule)."""
    passes = []
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            run(b)
        passes.append(time.perf_counter() - start)
    return 1e6 * min(passes) / len(batches)


def time_collate(collate, batches, fetch, repeats: int = 5) -> float:
    """Microseconds per batch to collate what `fetch(batch)` returned (fetched beforehand, not timed)."""
    chosen = [fetch(b) for b in batches]
    return best_us(collate, chosen, repeats)


def sst2(data: str):
    """The SST-2 DataModule (all 67,349 training sentences), set up."""
    from varlen.datamodules import TextClassificationDataModule

    dm = TextClassificationDataModule(
        train_file=f"{data}/sst2_train.tsv",
        val_file=f"{data}/sst2_dev.tsv",
        text_column="sentence",
        max_length=128,
    )
    dm.setup("fit")
    return dm


def sst2_part(args: argparse.Namespace, dm) -> None:
    """Tables 1-3 of part `sst2`: padding and collate speed, plan time, training throughput."""
    from transformers import DataCollatorWithPadding
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from varlen.batching import BucketBatchSampler

    train = dm.dataset("train")
    lengths = train.lengths
    bs = args.batch_size

    torch.manual_seed(0)
    random_batches = [b.tolist() for b in torch.randperm(len(lengths)).split(bs)]
    hf_sampler = LengthGroupedSampler(bs, lengths=lengths.tolist(), generator=torch.Generator().manual_seed(0))
    hf_order = list(hf_sampler)
    hf_batches = [hf_order[i : i + bs] for i in range(0, len(hf_order), bs)]
    varlen_batches = list(BucketBatchSampler(lengths, batch_size=bs, seed=0))
    budget = int(bs * lengths.mean())
    budget_batches = list(BucketBatchSampler(lengths, max_tokens=budget, seed=0))

    hf_collator = DataCollatorWithPadding(dm.tokenizer)
    hf_samples = [
        {
            "input_ids": train[i]["input_ids"].tolist(),
            "attention_mask": [1] * int(lengths[i]),
            "labels": train[i]["label"],
        }
        for i in range(len(train))
    ]
    varlen_samples = [train[i] for i in range(len(train))]

    def fetch_and_collate_us(batches, repeats: int = 5) -> float:
        """Varlen's whole path from storage: the batched fetch (gather + pad) and the collate."""
        return best_us(lambda b: dm.collate_fn(train.__getitems__(b)), batches, repeats)

    rng = np.random.default_rng(0)

    def subset(batches):
        picks = rng.choice(len(batches), size=min(args.collate_batches, len(batches)), replace=False)
        return [batches[k] for k in picks]

    rows = [
        ("random batches", random_batches),
        ("HF LengthGroupedSampler (group_by_length)", hf_batches),
        (f"varlen BucketBatchSampler, batch_size={bs}", varlen_batches),
        (f"varlen BucketBatchSampler, max_tokens={budget}", budget_batches),
    ]
    print(
        "| batching | mean batch size | padding efficiency | HF DataCollatorWithPadding us/batch "
        "| varlen fetch + collate us/batch | speed-up | varlen collate of sample dicts us/batch | speed-up |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, batches in rows:
        some = subset(batches)
        hf_us = time_collate(hf_collator, some, lambda b: [hf_samples[i] for i in b])
        ours_us = fetch_and_collate_us(some)
        dicts_us = time_collate(dm.collate_fn, some, lambda b: [varlen_samples[i] for i in b])
        print(
            f"| {name} | {len(lengths) / len(batches):.1f} | {efficiency(batches, lengths):.4f} | "
            f"{hf_us:.0f} | {ours_us:.0f} | {hf_us / ours_us:.1f}x | {dicts_us:.0f} | {hf_us / dicts_us:.1f}x |"
        )

    big = np.random.default_rng(1).choice(lengths, size=1_000_000)
    start = time.perf_counter()
    sampler = BucketBatchSampler(big, batch_size=bs, seed=0)
    sampler.set_epoch(1)
    len(sampler)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    list(LengthGroupedSampler(bs, lengths=big.tolist(), generator=torch.Generator().manual_seed(0)))
    hf_s = time.perf_counter() - start
    print("\n| one epoch's plan for 1M lengths | seconds |")
    print("|---|---:|")
    print(f"| varlen BucketBatchSampler | {ours_s:.3f} |")
    print(f"| HF LengthGroupedSampler | {hf_s:.3f} |")

    if args.train_steps:
        from varlen.models import TextClassifier

        print(f"\n| CPU training, MiniLM, {args.train_steps} steps of {bs} | real tokens/s | padding efficiency |")
        print("|---|---:|---:|")
        results = {}
        for name, batches in (("random batches", random_batches), ("varlen batches", varlen_batches)):
            torch.manual_seed(0)
            model = TextClassifier(num_classes=dm.num_classes).train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
            steps = batches[: args.train_steps + 1]
            real = 0
            for k, b in enumerate(steps):
                if k == 1:  # the first step warms up
                    start = time.perf_counter()
                    real = 0
                batch = dm.collate_fn(train.__getitems__(b))
                loss = torch.nn.functional.cross_entropy(model(batch), batch["labels"])
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                real += int(batch["attention_mask"].sum())
            results[name] = real / (time.perf_counter() - start)
            print(f"| {name} | {results[name]:.0f} | {efficiency(steps[1:], lengths):.4f} |")
        print(f"\nvarlen / random real tokens per second: {results['varlen batches'] / results['random batches']:.2f}x")


# -- padding efficiency against the budget -------------------------------------------------------


def lhotse_batches(lengths: np.ndarray, budget: int, epoch: int = 0) -> list[list[int]] | None:
    """lhotse's `DynamicBucketingSampler` over cuts whose duration is a text's token count
    (`max_duration` = `budget`: its budget counts real tokens); None without lhotse."""
    try:
        from lhotse import CutSet, MonoCut
        from lhotse.dataset import DynamicBucketingSampler
    except ImportError:
        return None
    cuts = CutSet.from_cuts(MonoCut(str(i), 0.0, float(n), 0) for i, n in enumerate(lengths.tolist()))
    with warnings.catch_warnings():  # "eagerly read CutSet": true, and irrelevant to the batches it plans
        warnings.filterwarnings("ignore", message=".*eagerly read CutSet.*")
        sampler = DynamicBucketingSampler(cuts, max_duration=budget, shuffle=True, seed=0, world_size=1, rank=0)
        sampler.set_epoch(epoch)
        return [[int(cut.id) for cut in batch] for batch in sampler]


NAMES = ("varlen max_tokens", "lhotse DynamicBucketingSampler", "HF group_by_length", "random batches")


def batchings(lengths: np.ndarray, budget: int, epoch: int) -> dict[str, list[list[int]] | None]:
    """One epoch of each batching at `budget` (the others at varlen's mean batch size)."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from varlen.batching import BucketBatchSampler

    sampler = BucketBatchSampler(lengths, max_tokens=budget, seed=0)
    sampler.set_epoch(epoch)
    ours = list(sampler)
    bs = max(1, round(len(lengths) / len(ours)))  # varlen's mean batch size at this budget
    generator = torch.Generator().manual_seed(epoch)  # the Trainer reseeds its sampler every epoch
    order = list(LengthGroupedSampler(bs, lengths=lengths.tolist(), generator=generator))
    torch.manual_seed(epoch)
    return {
        NAMES[0]: ours,
        NAMES[1]: lhotse_batches(lengths, budget, epoch),
        NAMES[2]: [order[i : i + bs] for i in range(0, len(order), bs)],
        NAMES[3]: [b.tolist() for b in torch.randperm(len(lengths)).split(bs)],
    }


def pairs_kept(first: list[list[int]], second: list[list[int]], n: int) -> float:
    """Share of the sample pairs batched together in `first` that are together again in `second`."""
    ids = [np.empty(n, np.int64) for _ in range(2)]
    for out, batches in zip(ids, (first, second), strict=True):
        for k, batch in enumerate(batches):
            out[batch] = k
    pairs = lambda counts: float((counts * (counts - 1) // 2).sum())  # noqa: E731
    together = pairs(np.unique(ids[0], return_counts=True)[1])
    both = pairs(np.unique(ids[0] * (ids[1].max() + 1) + ids[1], return_counts=True)[1])
    return both / max(together, 1.0)


def budget_part(lengths: np.ndarray, budgets: list[int], out: Path | None, subset: int) -> None:
    """Padding efficiency and re-mixing of each batching at each budget: tables, and the figure with `--out`.

    Re-mixing: the share of pairs of samples batched together in epoch 0 that are together again
    in epoch 1 (lower: batches change more), on every length and on a seeded subset of `subset`
    (a small dataset, where buckets hold few samples).
    """
    small = lengths[np.random.default_rng(0).permutation(len(lengths))[:subset]]
    results: dict[str, list[float]] = {name: [] for name in NAMES}
    sizes: dict[str, list[float]] = {name: [] for name in NAMES}
    kept: dict[str, dict[str, list[float]]] = {"all": {n: [] for n in NAMES}, "subset": {n: [] for n in NAMES}}
    for budget in budgets:
        epochs = [batchings(lengths, budget, e) for e in (0, 1)]
        for name, batches in epochs[0].items():
            results[name].append(np.nan if batches is None else efficiency(batches, lengths))
            sizes[name].append(np.nan if batches is None else len(lengths) / len(batches))
            kept["all"][name].append(np.nan if batches is None else pairs_kept(batches, epochs[1][name], len(lengths)))
        few = [batchings(small, budget, e) for e in (0, 1)]
        for name, batches in few[0].items():
            kept["subset"][name].append(np.nan if batches is None else pairs_kept(batches, few[1][name], len(small)))
    if all(np.isnan(results[NAMES[1]])):
        print("\nlhotse is not installed (pip install lhotse): left out of the tables and the figure")
    print("\n| padding efficiency (mean batch size) | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    print("|---|" + "---:|" * len(budgets))
    for name in NAMES:
        if not all(np.isnan(results[name])):
            cells = [f"{e:.4f} ({n:.0f})" for e, n in zip(results[name], sizes[name], strict=True)]
            print(f"| {name} | " + " | ".join(cells) + " |")
    for part, title in (("all", f"all {len(lengths):,}"), ("subset", f"a subset of {len(small):,}")):
        print(
            f"\n| pairs batched together again next epoch ({title}) | "
            + " | ".join(f"budget {b}" for b in budgets)
            + " |"
        )
        print("|---|" + "---:|" * len(budgets))
        for name in NAMES:
            if not all(np.isnan(kept[part][name])):
                print(f"| {name} | " + " | ".join(f"{k:.3f}" for k in kept[part][name]) + " |")
    if out is not None:
        plot_budget(budgets, results, out)


def plot_budget(budgets: list[int], results: dict[str, list[float]], out: Path) -> Path:
    """`text_padding_budget.png`: padding efficiency against the budget, one line per batching."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for (name, values), marker in zip(results.items(), "osD^", strict=True):
        if not all(np.isnan(values)):
            ax.plot(budgets, values, marker=marker, label=name)
    ax.set(xscale="log", xlabel="budget: tokens per batch (max_tokens)", ylabel="real / padded tokens", ylim=(0, 1.02))
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.set_title("SST-2 (MiniLM tokens): padding efficiency against the budget", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "text_padding_budget.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"\nplot: {path}")
    return path


# -- weighted draws: padding and plan time -------------------------------------------------------


def weights_part(lengths: np.ndarray, budgets: list[int], epochs: int = 3) -> None:
    """Padding efficiency with random weights against the unweighted plan (same budget), and plan time."""
    from varlen.batching import BucketBatchSampler

    rng = np.random.default_rng(0)
    draws = {"uniform(0, 1)": rng.random(len(lengths)), "lognormal(0, 1)": rng.lognormal(0.0, 1.0, len(lengths))}

    def mean_efficiency(weights: np.ndarray | None, budget: int) -> float:
        sampler = BucketBatchSampler(lengths, max_tokens=budget, seed=0, weights=weights)
        measured = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            measured.append(efficiency(list(sampler), lengths))
        return float(np.mean(measured))

    print(f"\n| padding efficiency, mean of {epochs} epochs | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    print("|---|" + "---:|" * len(budgets))
    plain = [mean_efficiency(None, b) for b in budgets]
    print("| unweighted | " + " | ".join(f"{e:.4f}" for e in plain) + " |")
    for name, weights in draws.items():
        drawn = [mean_efficiency(weights, b) for b in budgets]
        print(f"| weights {name} | " + " | ".join(f"{e:.4f}" for e in drawn) + " |")
        points = [100 * (d - p) for d, p in zip(drawn, plain, strict=True)]
        print(f"| difference, points ({name}) | " + " | ".join(f"{d:+.2f}" for d in points) + " |")

    big = np.random.default_rng(1).choice(lengths, size=1_000_000)
    print("\n| plan time, s (best of 3), budget 512 | built, SST-2 | one epoch, SST-2 | built, 1M | one epoch, 1M |")
    print("|---|---:|---:|---:|---:|")
    modes = {"unweighted": None, "weights, with replacement": {}, "weights, without replacement, half": {"half": 1}}
    for name, mode in modes.items():
        cells = []
        for sizes in (lengths, big):
            kwargs = {} if mode is None else {"weights": np.random.default_rng(2).random(len(sizes))}
            if mode:
                kwargs.update(num_samples=len(sizes) // 2, replacement=False)
            built, planned = [], []
            for epoch in range(3):
                start = time.perf_counter()
                sampler = BucketBatchSampler(sizes, max_tokens=512, seed=0, **kwargs)
                built.append(time.perf_counter() - start)
                start = time.perf_counter()
                sampler.set_epoch(epoch + 1)
                len(sampler)  # builds the epoch's plan
                planned.append(time.perf_counter() - start)
            cells += [min(built), min(planned)]
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


# -- a mixture of sources: SST-2 with long reviews, 3:1 ----------------------------------------------


def mixture_part(args: argparse.Namespace, epochs: int = 3, budget: int = 4096) -> None:
    """SST-2 and the synthetic long reviews (`--long-reviews` of them) mixed 3:1 under each
    `mix`: the share each source served per epoch, padding efficiency, and fetch + collate time
    of 200 batches (joined batches of two sources cost a second pad)."""
    from varlen.datamodules import TextClassificationDataModule

    long_reviews = {"name": "long", "synthetic": "long_reviews", "synthetic_samples": args.long_reviews}
    print(f"\n| mix (budget {budget}, source_weights 3:1) | epoch | SST-2 share | long share "
          "| padding efficiency | batches | fetch + collate, ms per batch |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mix in ("within_batch", "per_source"):
        dm = TextClassificationDataModule(
            train_file=f"{args.data}/sst2_train.tsv",
            val_file=f"{args.data}/sst2_dev.tsv",
            text_column="sentence",
            max_length=128,
            max_tokens=budget,
            sources=[long_reviews],
            source_weights=[3, 1],
            mix=mix,
        )
        dm.prepare_data()
        dm.setup("fit")
        mixture = dm.dataset("train")
        lengths = mixture.lengths
        sampler = dm.batch_sampler("train", True)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            batches = list(sampler)
            shares = np.bincount(mixture.sources[np.concatenate(batches)], minlength=2) / sum(map(len, batches))
            cost = ""
            if epoch == 0:
                chosen = batches[:200]
                start = time.perf_counter()
                for batch in chosen:
                    dm.collate_fn(mixture.__getitems__(batch))
                cost = f"{1e3 * (time.perf_counter() - start) / len(chosen):.2f}"
            print(f"| {mix} | {epoch} | {shares[0]:.4f} | {shares[1]:.4f} | {efficiency(batches, lengths):.4f} "
                  f"| {len(batches):,} | {cost} |")  # fmt: skip
    print(f"(sources: SST-2 train {mixture.counts()['main']:,} sentences, long reviews {mixture.counts()['long']:,})")


# -- long documents: windows against truncation ----------------------------------------------------


def fit_long(overflow: str, epochs: int, args: argparse.Namespace) -> dict[str, float]:
    """Train the MiniLM classifier on the long synthetic reviews with `overflow`; document metrics."""
    import lightning.pytorch as pl

    from varlen.datamodules import TextClassificationDataModule
    from varlen.models import TextClassifier

    dm = TextClassificationDataModule(
        synthetic="long_reviews",
        synthetic_samples=args.long_docs,
        max_length=args.long_max_length,
        overflow=overflow,
        stride=args.long_stride,
        batch_size=None,
        max_tokens=args.long_max_tokens,
    )
    pl.seed_everything(0, verbose=False)
    model = TextClassifier(num_classes=2, lr=args.long_lr, warmup_ratio=0.1)
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
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    out = {"train seconds": seconds, "train samples": len(dm.dataset("train")), "steps": trainer.global_step}
    evaluate = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    for split in ("val", "test"):
        loader = dm.val_dataloader() if split == "val" else dm.test_dataloader()
        metrics = evaluate.validate(model, dataloaders=loader, verbose=False)[0]
        key = "val/document_accuracy" if overflow == "windows" else "val/accuracy"
        out[f"{split} documents"] = dm.dataset(split).num_documents
        out[f"{split} accuracy"] = metrics[key]
        out[f"{split} window accuracy"] = metrics["val/accuracy"]
    return out


def long_part(args: argparse.Namespace) -> None:
    """Document accuracy with windows against truncation at the same `max_length`."""
    from varlen.datasets.text import synthetic_tables
    from varlen.datasets.text.synthetic import opinion_votes

    tables = synthetic_tables(args.long_docs, "long_reviews")
    first_words = args.long_max_length - 2  # the first window's words (about one token each)
    print(
        f"\nLong synthetic reviews: {args.long_docs} training documents, max_length {args.long_max_length}, "
        f"stride {args.long_stride}, {args.long_epochs} epoch(s), MiniLM, lr {args.long_lr}\n"
    )
    print(
        "| documents read as | epochs | optimizer steps | val document accuracy | test document accuracy "
        "| window accuracy (test) | train seconds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    references = (("first window", first_words), ("whole text", None))
    for name, words in references:
        acc = [np.mean(opinion_votes(tables[s].texts, words) == np.asarray(tables[s].labels)) for s in ("val", "test")]
        print(f"| reference: vote of the opinion words, {name} | - | - | {acc[0]:.3f} | {acc[1]:.3f} | - | - |")
    windows = fit_long("windows", args.long_epochs, args)
    same_steps = max(args.long_epochs, round(args.long_epochs * windows["train samples"] / args.long_docs))
    runs = [
        ("truncate", args.long_epochs, fit_long("truncate", args.long_epochs, args)),
        ("truncate", same_steps, fit_long("truncate", same_steps, args)),
        ("windows", args.long_epochs, windows),
    ]
    for overflow, epochs, r in runs:
        window = f"{r['test window accuracy']:.3f}" if overflow == "windows" else "-"
        print(
            f"| MiniLM, overflow={overflow} | {epochs} | {r['steps']:,} | {r['val accuracy']:.3f} "
            f"| {r['test accuracy']:.3f} | {window} | {r['train seconds']:.0f} |"
        )
    for _, epochs, r in runs[:2]:
        gain = windows["test accuracy"] - r["test accuracy"]
        print(f"\nwindows - truncation ({epochs} epoch(s)), test document accuracy: {gain:+.3f}", end="")
    print(f" ({windows['test documents']} test documents)")


def quiet_training() -> None:
    """No Lightning tips, device banners or weight-loading reports between the table rows."""
    import logging

    import transformers

    from varlen.cli.dispatch import quiet

    quiet()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", default="sst2,budget", help="comma-separated: sst2, budget, weights, mixture, long")
    parser.add_argument("--data", default=str(data_root() / "text"), help="SST-2's folder (default: $VARLEN_DATA/text)")
    parser.add_argument("--out", type=Path, default=None, help="save the padding-budget figure (PNG) here")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--collate-batches", type=int, default=400)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--budgets", default="128,256,512,1024,2048,4096")
    parser.add_argument("--subset", type=int, default=2000, help="sentences of the small set of the re-mixing table")
    parser.add_argument("--long-reviews", type=int, default=20000, help="long reviews mixed with SST-2 (mixture)")
    parser.add_argument("--long-docs", type=int, default=400, help="training documents (val, test: a fifth each)")
    parser.add_argument("--long-max-length", type=int, default=128)
    parser.add_argument("--long-stride", type=int, default=32)
    parser.add_argument("--long-max-tokens", type=int, default=1024)
    parser.add_argument("--long-epochs", type=int, default=1)
    parser.add_argument("--long-lr", type=float, default=1e-4)
    args = parser.parse_args()
    parts = set(args.part.split(","))
    known = {"sst2", "budget", "weights", "long", "mixture"}
    if not parts <= known:
        parser.error(f"unknown part(s) {sorted(parts - known)}")
    if parts & {"sst2", "budget", "weights"}:
        dm = sst2(args.data)
        lengths = dm.dataset("train").lengths
        print(f"SST-2 train: {len(lengths)} sentences, MiniLM tokens: mean {lengths.mean():.1f}, max {lengths.max()}\n")
        if "sst2" in parts:
            sst2_part(args, dm)
        if "budget" in parts:
            budget_part(lengths, [int(b) for b in args.budgets.split(",")], args.out, args.subset)
        if "weights" in parts:
            weights_part(lengths, [int(b) for b in args.budgets.split(",")])
    if "mixture" in parts:
        mixture_part(args)
    if "long" in parts:
        quiet_training()
        long_part(args)


if __name__ == "__main__":
    main()
