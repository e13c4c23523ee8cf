"""Train-step time, real elements per second and peak memory of every scenario's reference model.

    python scripts/benchmark_steps.py                       # every scenario, on CUDA when available
    python scripts/benchmark_steps.py --scenarios video_text --steps 50
    python scripts/benchmark_steps.py --quick               # tiny data, a few steps (the test runs this)
    python scripts/benchmark_steps.py --out docs/images     # also a figure: steps_<device>.png

Each scenario runs its shipped YAML (so the batches are the ones `varlen fit` trains on: shuffled,
bucketed, under the config's budget) through a plain Lightning `Trainer` on one device, and the
steps after the warm-up are timed with the device synchronised. Where a scenario offers several
batch layouts (video-text: `padded` and `packed`), each is a row of its table.

Columns: median step time (forward, backward, optimizer); real elements per second (what the
DataModule's `batch_stats` counts: tokens, window samples, atoms, segments + tokens, bands);
real / allocated elements of the batches; the largest batch's tensors; peak memory (CUDA: the
allocator's peak during the timed steps; CPU: the process's peak resident set during the timed
steps, model and data included, as the CPU allocator keeps no statistics: Linux's high-water
mark is reset before them).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

#: scenario -> (config, layouts it offers, arguments that make it tiny for --quick)
SCENARIOS = {
    "text": (
        "configs/text_bert.yaml",
        (None,),
        ["--data.init_args.synthetic_samples=96", "--data.init_args.batch_size=8"],
    ),
    "bearing": (
        "configs/bearing_cwru.yaml",
        (None,),
        ["--data.init_args.simulated_per_class=1", "--data.init_args.simulated_seconds=[1.0, 2.0]"],
    ),
    "video_text": (
        "configs/video_text.yaml",
        ("padded", "packed"),
        ["--data.init_args.synthetic_videos=60", "--data.init_args.max_tokens=[48, 1024]"],
    ),
    "molecules": ("configs/molecules_esol.yaml", (None,), ["--data.init_args.max_tokens=512"]),
    "hyperspectral": ("configs/hyperspectral.yaml", (None,), ["--data.init_args.batch_size=32"]),
}


def tensor_bytes(batch) -> int:
    """Bytes of the tensors a batch holds (a dict, or a PyG `Batch`)."""
    values = batch.values() if isinstance(batch, dict) else (v for _, v in batch)
    return sum(v.numel() * v.element_size() for v in values if torch.is_tensor(v))


class StepTimer(pl.Callback):
    """Times training steps after `warmup` with the device synchronised, and counts their elements.

    The device is the one the steps run on, read when training starts: after `fit` Lightning has
    moved the model back to the CPU, so the model's device then names the wrong one. The row's
    label, the synchronisation and the peak memory's source all come from `self.device`.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.times: list[float] = []
        self.real = self.allocated = self.largest = 0
        self.device: torch.device | None = None
        self.peak_mib = float("nan")
        self._start = 0.0
        self._step = 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def on_train_start(self, trainer, pl_module) -> None:
        self.device = pl_module.device

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._step == self.warmup:
            reset_peak(self.device)
        self._sync()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._sync()
        self._step += 1
        if self._step <= self.warmup:
            return
        self.times.append(time.perf_counter() - self._start)
        stats = trainer.datamodule.batch_stats(batch)
        self.real += stats.real
        self.allocated += stats.padded
        self.largest = max(self.largest, tensor_bytes(batch))

    def on_train_end(self, trainer, pl_module) -> None:
        # before fit's teardown, so neither moving the model back nor cleaning up counts
        self.peak_mib = peak_mib(self.device)

    def report(self) -> dict:
        """The row's device and peak memory, both from the device the steps ran on."""
        return {"device": self.device.type, "peak_mib": self.peak_mib}


def reset_peak(device: torch.device) -> None:
    """Start the peak memory of `device` afresh: the CUDA allocator's, or the process's RSS."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()


def peak_mib(device: torch.device) -> float:
    """Peak memory (MiB) since `reset_peak` on the same `device`."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_kib() / 1024


def reset_peak_rss() -> None:
    """Reset the process's resident high-water mark (Linux: `5` into `/proc/self/clear_refs`)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # elsewhere the peak is the process's since it started


def peak_rss_kib() -> int:
    """The resident high-water mark in KiB (`VmHWM`; `ru_maxrss` where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(name: str, layout: str | None, steps: int, warmup: int, quick: bool, workdir: Path) -> dict:
    """One row: the scenario's config (with `layout`), `steps` timed training steps."""
    from varlen.cli.dispatch import main

    config, _, tiny = SCENARIOS[name]
    args = ["--config", str(ROOT / config), f"--trainer.default_root_dir={workdir}"]
    if layout is not None:
        args.append(f"--data.init_args.layout={layout}")
    cli = main(args + (tiny if quick else []), run=False)
    timer = StepTimer(warmup)
    trainer = pl.Trainer(
        accelerator="auto",
        devices=1,
        max_steps=warmup + steps,
        max_epochs=-1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(cli.model, datamodule=cli.datamodule)
    timed = sum(timer.times)
    seen = timer.report()
    return {
        "layout": layout or "default",
        "device": seen["device"],
        "steps": len(timer.times),
        "step_ms": 1000 * statistics.median(timer.times) if timer.times else float("nan"),
        "real_per_s": timer.real / timed if timed else float("nan"),
        "efficiency": timer.real / max(timer.allocated, 1),
        "batch_mib": timer.largest / 2**20,
        "peak_mib": seen["peak_mib"],
    }


def plot(rows: list[tuple[str, dict]], device: str, path: Path) -> Path:
    """One bar per scenario and layout: real / allocated elements, and real elements per second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{name} ({row['layout']})" if row["layout"] != "default" else name for name, row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 0.45 * len(rows) + 1.4), sharey=True)
    left.barh(labels, [row["efficiency"] for _, row in rows], color="tab:blue")
    left.set(xlim=(0, 1), xlabel="real / allocated elements")
    right.barh(labels, [row["real_per_s"] for _, row in rows], color="tab:green")
    right.set(xscale="log", xlabel="real elements per second (log)")
    left.invert_yaxis()
    fig.suptitle(f"Train steps of the reference models: {device}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[tuple[str, dict]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per row")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--quick", action="store_true", help="tiny data and 2 timed steps (for tests)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the figure (steps_<cpu|cuda>.png)")
    args = parser.parse_args(argv)
    sys.argv = sys.argv[:1]  # the CLI below is given its own arguments
    steps, warmup = (2, 1) if args.quick else (args.steps, args.warmup)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# Train steps of the reference models: {device}, torch {torch.__version__}\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="varlen-steps-") as tmp:
        for name in args.scenarios:
            print(f"## {name}\n")
            print(
                "| layout | device | steps | step (ms, median) | real elements/s | real / allocated "
                "| largest batch (MiB) | peak memory (MiB) |"
            )
            print("|---|---|---:|---:|---:|---:|---:|---:|")
            for layout in SCENARIOS[name][1]:
                row = measure(name, layout, steps, warmup, args.quick, Path(tmp) / name)
                rows.append((name, row))
                print(
                    f"| {row['layout']} | {row['device']} | {row['steps']} | {row['step_ms']:.1f} | "
                    f"{row['real_per_s']:,.0f} | {row['efficiency']:.3f} | {row['batch_mib']:.2f} | "
                    f"{row['peak_mib']:.0f} |",
                    flush=True,
                )
            print()
    if args.out is not None and rows:
        kind = rows[0][1]["device"]
        print(f"figure: {plot(rows, device, args.out / f'steps_{kind}.png')}")
    sys.stdout.flush()
    return rows


if __name__ == "__main__":
    main()
