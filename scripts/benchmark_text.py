"""Padding, collate speed and training throughput on real SST-2 lengths, against Hugging Face.

    python scripts/benchmark_text.py [--data ../shared/data/text] [--train-steps 20]

Tables (markdown):
1. Padding efficiency (real / padded tokens) and collate microseconds per batch for random
   batches, HF ``LengthGroupedSampler`` + ``DataCollatorWithPadding`` (the ``group_by_length``
   recipe), and varlen's sampler at the same mean batch size and under a token budget. Each
   batching is collated by both HF's collator and varlen on the very same batches: HF's from the
   per-sample dicts a ``datasets`` table yields (fetched beforehand, not timed), varlen's whole
   path from its storage: the batched fetch (``__getitems__``: one gather of the ``Ragged`` ids,
   padded) and the collate (naming the fields). The last column collates ``dataset[i]`` dicts.
2. Time to build one epoch's plan for 1M lengths: varlen vs ``LengthGroupedSampler``.
3. CPU training throughput (real tokens/s) of the reference MiniLM classifier, random vs
   varlen batches, same model, same steps.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def efficiency(batches: list[list[int]], lengths: np.ndarray) -> float:
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches)
    return real / padded


def best_us(run, batches, repeats: int) -> float:
    """Microseconds per batch of ``run(b)`` over ``batches``: the best of ``repeats`` passes (other
    processes on a shared machine only ever slow a pass down; every contender gets the same rule)."""
    passes = []
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            run(b)
        passes.append(time.perf_counter() - start)
    return 1e6 * min(passes) / len(batches)


def time_collate(collate, batches, fetch, repeats: int = 5) -> float:
    """Microseconds per batch to collate what ``fetch(batch)`` returned (fetched beforehand, not timed)."""
    chosen = [fetch(b) for b in batches]
    return best_us(collate, chosen, repeats)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "text"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--collate-batches", type=int, default=400)
    parser.add_argument("--train-steps", type=int, default=20)
    args = parser.parse_args()

    from transformers import DataCollatorWithPadding
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from varlen.batching import BucketBatchSampler
    from varlen.datamodules import TextClassificationDataModule

    dm = TextClassificationDataModule(
        train_file=f"{args.data}/sst2_train.tsv",
        val_file=f"{args.data}/sst2_dev.tsv",
        text_column="sentence",
        max_length=128,
    )
    dm.setup("fit")
    train = dm.dataset("train")
    lengths = train.lengths
    bs = args.batch_size
    print(f"SST-2 train: {len(lengths)} sentences, MiniLM tokens: mean {lengths.mean():.1f}, max {lengths.max()}\n")

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


if __name__ == "__main__":
    main()
