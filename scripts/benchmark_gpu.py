"""The side by side on an accelerator: varlen's batching against what users do today, one model, one data set.

    python scripts/benchmark_gpu.py                        # every row, on CUDA when there is one
    python scripts/benchmark_gpu.py --rows core            # bf16 with default backends, and varlen with cuDNN off
    python scripts/benchmark_gpu.py --quick                # CPU, a tiny random BERT and synthetic texts: seconds
    python scripts/benchmark_gpu.py --json out.jsonl --out docs/images

The model is varlen's `TextClassifier` (the offline MiniLM) fine-tuned on SST-2's training sentences
(`$VARLEN_DATA/text`, the shipped `configs/text_sst2.yaml` data), one Lightning `Trainer` per row,
`--steps` timed training steps after `--skip` untimed ones, the loader in the loop (0 workers, as the
measurements of issue 34), the device synchronised at the timing's ends only. Batchings, at about 38 and
about 512 samples a batch:

- `varlen`: the DataModule as shipped: `max_tokens` 547 / 7,365, the shape policy (`max_shapes` 24) and
  `WarmShapes` (its seconds in the `warm-up s` column, outside the timing);
- `varlen exact`: the same budget with exact buckets (`max_shapes=None`), no warm-up (varlen before);
- `varlen packed`: `layout="packed"`: each batch one row of 547 / 7,365 tokens, the sentences end to end
  (one shape, no padding but the row's tail), attention within each sentence by torch's varlen kernel (its
  encoder's attention-probability dropout set to 0, as that kernel has none; the other rows keep 0.1);
- `longest`: random batches of 38 / 512 padded to their longest by transformers' `DataCollatorWithPadding`;
- `max_length`: the same padded to `max_length` 128 (`padding="max_length"`);
- `grouped`: transformers' `LengthGroupedSampler` (`group_by_length`) with `DataCollatorWithPadding`.

Each row runs in a fresh process (a fork server's child, torch imported once): cuDNN keeps the plans it
built for a shape for the life of a process, so a row must not find another's. Precisions `bf16-mixed`
and `32-true`; attention with torch's default backends (cuDNN first on Hopper in bf16) and with cuDNN's
off (`torch.backends.cuda.enable_cudnn_sdp(False)`). Columns: samples/s and real tokens/s over the timed
steps, real / allocated tokens, distinct batch shapes met, the share of the time waiting for the loader,
peak device memory, the warm-up's seconds, and each varlen row's samples/s over the best peer's of its
group (same size, precision and backends).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import lightning.pytorch as pl  # noqa: E402  (after the environment above)
import torch  # noqa: E402

#: batching -> what it is, in the table
BATCHINGS = {
    "varlen": "varlen, shape policy + WarmShapes",
    "varlen exact": "varlen, exact buckets (no policy)",
    "varlen packed": "varlen, packed rows (varlen attention)",
    "longest": "random, DataCollatorWithPadding",
    "max_length": "random, padded to max_length 128",
    "grouped": "LengthGroupedSampler",
}
PEERS = ("longest", "max_length", "grouped")
#: samples a batch -> varlen's token budget that gives about as many on SST-2 (13.3 tokens a sentence)
BUDGETS = {38: 547, 512: 7365}
MAX_LENGTH = 128
TINY = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
#: torch's varlen kernel has no dropout: the packed row's encoder drops none of its attention probabilities
NO_ATTENTION_DROPOUT = {"attention_probs_dropout_prob": 0.0}


@dataclass(frozen=True)
class Row:
    batching: str
    size: int
    precision: str
    cudnn: bool


def rows_of(kind: str, sizes: list[int]) -> list[Row]:
    """`core`: bf16 with default backends for every batching, and varlen with cuDNN off; `all`: also
    every batching with cuDNN off and every batching in fp32."""
    rows = [Row(b, s, "bf16-mixed", True) for s in sizes for b in BATCHINGS]
    rows += [Row("varlen", s, "bf16-mixed", False) for s in sizes]
    if kind == "all":
        rows += [Row(b, s, "bf16-mixed", False) for s in sizes for b in BATCHINGS if b != "varlen"]
        rows += [Row(b, s, "32-true", True) for s in sizes for b in BATCHINGS]
    return rows


# -- one row (in its own process) -----------------------------------------------------------------


def datamodule(row: Row, settings: dict):
    from varlen.datamodules import TextClassificationDataModule

    policy = {"varlen": {}, "varlen packed": {"layout": "packed"}}.get(row.batching, {"max_shapes": None})
    source = settings["source"]
    return TextClassificationDataModule(
        **source, max_length=MAX_LENGTH, max_tokens=settings["budget"] or BUDGETS[row.size],
        cache_dir=settings["cache"], seed=0, **policy,
    )  # fmt: skip


def peer_loader(row: Row, dm, settings: dict):
    """The row's loader of what users do today, over the DataModule's own token ids (the same texts)."""
    import numpy as np
    from transformers import DataCollatorWithPadding
    from transformers.trainer_pt_utils import LengthGroupedSampler

    train = dm.dataset("train")
    features = [
        {"input_ids": train.ids.values[s : s + n].tolist(), "label": int(label), "index": i}
        for i, (s, n, label) in enumerate(zip(train.ids.starts, train.ids.lengths, train.labels, strict=True))
    ]
    padding = {"padding": "max_length", "max_length": MAX_LENGTH} if row.batching == "max_length" else {}
    collate = DataCollatorWithPadding(dm.tokenizer, **padding)
    size = settings["batch"] or row.size
    generator = torch.Generator().manual_seed(0)
    if row.batching == "grouped":
        lengths = np.asarray(train.ids.lengths).tolist()
        sampler = LengthGroupedSampler(size, lengths=lengths, generator=generator)
        return torch.utils.data.DataLoader(features, batch_size=size, sampler=sampler, collate_fn=collate)
    return torch.utils.data.DataLoader(features, batch_size=size, shuffle=True, generator=generator, collate_fn=collate)


def measure(row: Row, settings: dict) -> dict:
    """One row: a Trainer's `skip + steps` training steps, the last `steps` timed."""
    from varlen.batching.warmup import WarmShapes
    from varlen.models import TextClassifier

    torch.backends.cuda.enable_cudnn_sdp(row.cudnn)
    pl.seed_everything(0, verbose=False)
    dm = datamodule(row, settings)
    dm.prepare_data()
    dm.setup("fit")
    overrides = (TINY if settings["quick"] else {}) | (NO_ATTENTION_DROPOUT if row.batching == "varlen packed" else {})
    model = TextClassifier(num_classes=2, lr=5e-5, pretrained=not settings["quick"], config_overrides=overrides or None)
    timer = Timer(settings["skip"], settings["steps"])
    warm = WarmShapes(when="always")  # as on a GPU, where it runs by default: the CPU smoke run warms too
    callbacks = [timer] + ([warm] if row.batching in ("varlen", "varlen packed") else [])
    trainer = pl.Trainer(
        accelerator=settings["accelerator"], devices=1, precision=row.precision,
        max_steps=settings["skip"] + settings["steps"], max_epochs=-1, limit_val_batches=0, num_sanity_val_steps=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks,
    )  # fmt: skip
    if row.batching.startswith("varlen"):
        trainer.fit(model, datamodule=dm)
    else:
        trainer.fit(model, train_dataloaders=peer_loader(row, dm, settings))
    return timer.result(model) | {"warm_s": warm.seconds, "warm_shapes": warm.shapes}


class Timer(pl.Callback):
    """Times training steps after `skip` (the device synchronised at both ends only), and counts each timed
    batch's samples, real and allocated tokens (summed on the device: no step waits for them), its shape and
    the host's wait for the loader (from one step's end to the next one's start)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps, self.step = skip, steps, 0
        self.samples, self.allocated, self.shapes, self.real = 0, 0, set(), None
        self.wait, self.start, self.end, self.last_end = 0.0, 0.0, 0.0, None

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self.step == self.skip:
            if module.device.type == "cuda":
                torch.cuda.synchronize(module.device)
                torch.cuda.reset_peak_memory_stats(module.device)
            self.start = time.perf_counter()
        elif self.step > self.skip and self.last_end is not None:
            self.wait += now - self.last_end
        if self.step >= self.skip:
            mask = batch["attention_mask"]
            self.samples += len(batch["labels"])  # packed: one row of many samples
            self.allocated += mask.numel()
            self.real = mask.sum() if self.real is None else self.real + mask.sum()
            self.shapes.add(tuple(mask.shape))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.step += 1
        if self.step == self.skip + self.steps:
            if module.device.type == "cuda":
                torch.cuda.synchronize(module.device)
            self.end = time.perf_counter()
        self.last_end = time.perf_counter()

    def result(self, module: pl.LightningModule) -> dict:
        elapsed = max(self.end - self.start, 1e-9)
        real = int(self.real) if self.real is not None else 0
        cuda = module.device.type == "cuda"
        return {
            "device": str(module.device),
            "steps": self.step - self.skip,
            "samples_per_s": self.samples / elapsed,
            "tokens_per_s": real / elapsed,
            "samples_per_batch": self.samples / max(self.step - self.skip, 1),
            "efficiency": real / max(self.allocated, 1),
            "shapes": len(self.shapes),
            "wait_share": self.wait / elapsed,
            "peak_mib": torch.cuda.max_memory_allocated(module.device) / 2**20 if cuda else float("nan"),
            "seconds": elapsed,
        }


def child(row: Row, settings: dict, out) -> None:
    try:
        out.send(measure(row, settings))
    except BaseException as error:  # reported in the row, the others go on
        out.send({"error": f"{type(error).__name__}: {error}"})


def run_isolated(rows: list[Row], settings: dict, timeout: float, keep) -> list[dict]:
    """Each row in a child of one fork server (torch, Lightning and transformers imported once, no CUDA
    state shared), at most `timeout` seconds each; `keep(row, result)` as each ends."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        ["torch", "lightning.pytorch", "transformers", "varlen.datamodules", "varlen.models"]
    )
    results = []
    for row in rows:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=child, args=(row, settings, send))
        started = time.perf_counter()
        process.start()
        send.close()
        result = receive.recv() if receive.poll(timeout) else {"error": f"no result in {timeout:.0f} s"}
        process.join(5)
        if process.is_alive():
            process.kill()
        results.append(result | {"row_s": time.perf_counter() - started})
        keep(row, results[-1])
    return results


def report(row: Row, result: dict) -> None:
    """One line per row as it ends."""
    name = f"  {row.batching:13s} {row.size:4d} {row.precision:10s} cuDNN {'on ' if row.cudnn else 'off'}:"
    if "error" in result:
        print(f"{name} {result['error']}", flush=True)
    else:
        figures = f"{result['samples_per_s']:9,.0f} samples/s, {result['shapes']} shapes, {result['row_s']:.0f} s"
        print(f"{name} {figures}", flush=True)


# -- the tables ---------------------------------------------------------------------------------


def best_peer(results: list[tuple[Row, dict]], row: Row) -> float | None:
    same = [r["samples_per_s"] for other, r in results if other.batching in PEERS and "error" not in r
            and (other.size, other.precision, other.cudnn) == (row.size, row.precision, row.cudnn)]  # fmt: skip
    return max(same) if same else None


def table(results: list[tuple[Row, dict]]) -> list[str]:
    lines = [
        "| batching | precision | cuDNN attention | samples / batch | samples/s | real tokens/s | real / allocated "
        "| shapes met | wait share | peak MiB | warm-up s | / best peer |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row, r in results:
        name = f"{BATCHINGS[row.batching]}"
        if "error" in r:
            lines.append(
                f"| {name} | {row.precision} | {'on' if row.cudnn else 'off'} | ~{row.size} | {r['error'][:60]} |"
            )
            continue
        peer = best_peer(results, row)
        ratio = f"{r['samples_per_s'] / peer:.2f}x" if peer and row.batching.startswith("varlen") else ""
        warm = f"{r['warm_s']:.1f} ({r['warm_shapes']})" if r.get("warm_shapes") else ""
        lines.append(
            f"| {name} | {row.precision} | {'on' if row.cudnn else 'off'} | {r['samples_per_batch']:.0f} "
            f"| {r['samples_per_s']:,.0f} | {r['tokens_per_s']:,.0f} | {r['efficiency']:.3f} | {r['shapes']} "
            f"| {r['wait_share']:.1%} | {r['peak_mib']:,.0f} | {warm} | {ratio} |"
        )
    return lines


def verdict(results: list[tuple[Row, dict]]) -> list[str]:
    """The issue's acceptance read off the rows: bf16 with default backends."""
    found = {(row.batching, row.size, row.precision, row.cudnn): r for row, r in results if "error" not in r}
    out = []
    for size in sorted({row.size for row, _ in results}):
        ours = found.get(("varlen", size, "bf16-mixed", True))
        peer = best_peer(results, Row("varlen", size, "bf16-mixed", True))
        off = found.get(("varlen", size, "bf16-mixed", False))
        if ours and peer:
            ratio = ours["samples_per_s"] / peer
            out.append(f"- ~{size} a batch, bf16, default backends: varlen at {ratio:.2f}x the best peer's samples/s")
        if ours and off:
            ratio = ours["samples_per_s"] / off["samples_per_s"]
            out.append(f"- ~{size} a batch, bf16: varlen with cuDNN attention at {ratio:.2f}x its cuDNN-off samples/s")
        packed = found.get(("varlen packed", size, "bf16-mixed", True))
        bucketed = [r for b in ("varlen", "varlen exact") if (r := found.get((b, size, "bf16-mixed", True)))]
        if packed and bucketed:
            best = max(bucketed, key=lambda r: r["samples_per_s"])
            out.append(
                f"- ~{size} a batch, bf16: packed at {packed['samples_per_s'] / best['samples_per_s']:.2f}x varlen's "
                f"best bucketed samples/s, peak memory {packed['peak_mib']:,.0f} MiB against {best['peak_mib']:,.0f}"
            )
    return out


def plot(results: list[tuple[Row, dict]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(row, r) for row, r in results if "error" not in r and row.precision == "bf16-mixed" and row.cudnn]
    sizes = sorted({row.size for row, _ in shown})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 3.2), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        here = [(row, r) for row, r in shown if row.size == size]
        ax.barh([row.batching for row, _ in here], [r["samples_per_s"] for _, r in here], color="#4472c4")
        ax.invert_yaxis()
        ax.set(xlabel="samples/s", title=f"~{size} samples a batch, bf16, default backends")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[tuple[Row, dict]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", choices=["core", "all"], default="all")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--steps", type=int, default=100, help="timed steps per row")
    parser.add_argument("--skip", type=int, default=2, help="untimed steps first (CUDA and library start-up)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds a row may take")
    parser.add_argument("--data", type=Path, default=None, help="sst2_train.tsv's folder (default: $VARLEN_DATA/text)")
    parser.add_argument("--quick", action="store_true", help="CPU, tiny model, synthetic texts, 3 steps (the test)")
    parser.add_argument("--isolate", action="store_true", help="each row in a process of its own on a CPU too")
    parser.add_argument("--json", type=Path, default=None, help="also write each row as a JSON line here, as it ends")
    parser.add_argument("--report", type=Path, default=None, help="measure nothing: the tables of a --json file")
    parser.add_argument("--out", type=Path, default=None, help="folder for the figure (gpu_side_by_side.png)")
    args = parser.parse_args(argv)
    if args.report is not None:
        return tables(read_rows(args.report), args.out)
    from varlen.storage.paths import data_root

    cuda = torch.cuda.is_available() and not args.quick
    text = args.data or data_root() / "text"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text("")

    def keep(row: Row, result: dict) -> None:
        report(row, result)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps(asdict(row) | result) + "\n")

    with tempfile.TemporaryDirectory(prefix="varlen-gpu-") as cache:
        settings = {
            "quick": args.quick, "accelerator": "cuda" if cuda else "cpu", "cache": cache,
            "steps": 3 if args.quick else args.steps, "skip": 1 if args.quick else args.skip,
            "batch": 8 if args.quick else None, "budget": 256 if args.quick else None,
            "source": {"synthetic_samples": 200} if args.quick else {
                "train_file": str(text / "sst2_train.tsv"), "val_file": str(text / "sst2_dev.tsv"),
                "text_column": "sentence", "label_column": "label",
            },
        }  # fmt: skip
        rows = [Row(b, 38, "32-true", True) for b in BATCHINGS] if args.quick else rows_of(args.rows, args.sizes)
        datamodule(rows[0], settings).prepare_data()  # the token cache, built once for every row
        device = torch.cuda.get_device_name() if cuda else f"CPU ({torch.get_num_threads()} threads)"
        print(f"# varlen against what users do today: {device}, torch {torch.__version__}\n", flush=True)
        if cuda or args.isolate:
            measured = run_isolated(rows, settings, args.timeout, keep)
        else:  # no plan caches to keep apart on a CPU
            measured = []
            for row in rows:
                started = time.perf_counter()
                measured.append(measure(row, settings) | {"row_s": time.perf_counter() - started})
                keep(row, measured[-1])
    return tables(list(zip(rows, measured, strict=True)), args.out)


def read_rows(path: Path) -> list[tuple[Row, dict]]:
    """The rows a `--json` file kept."""
    found = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            row = Row(*(record.pop(k) for k in ("batching", "size", "precision", "cudnn")))
            found.append((row, record))
    return found


def tables(results: list[tuple[Row, dict]], out: Path | None) -> list[tuple[Row, dict]]:
    """The tables per batch size, the verdict and the figure."""
    for size in sorted({row.size for row, _ in results}):
        print(f"\n## ~{size} samples a batch (varlen: max_tokens {BUDGETS[size]:,})\n")
        print("\n".join(table([(row, r) for row, r in results if row.size == size])))
    print("\n" + "\n".join(verdict(results)))
    if out:
        print(f"\nfigure: {plot(results, out / 'gpu_side_by_side.png')}")
    return results


if __name__ == "__main__":
    main()
