"""The main job: a short real training of every scenario on its embedded default, then a summary.

    python scripts/demo.py                 # all scenarios
    python scripts/demo.py text bearing    # some of them
    python scripts/demo.py --max-epochs 1 --max-batches 2   # a quick look (the tests run this)

Each scenario runs its shipped YAML through the `varlen` CLI (so this is exactly what
`varlen fit --config configs/<scenario>.yaml` does), printing one line per epoch (its
validation metrics, padding efficiency and samples/s); the final table reports its main
validation metric, the padding efficiency of its batches, its training throughput and the share of
its last epoch's training time spent waiting for data (`DataWait`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: scenario -> (config, validation metrics to report)
SCENARIOS = {
    "text": ("configs/text_bert.yaml", ("val/accuracy", "val/macro_f1")),
    "bearing": ("configs/bearing_cwru.yaml", ("val/macro_f1", "val/recording_macro_f1")),
    "video_text": ("configs/video_text.yaml", ("val/align_acc", "val/t2v_R1")),
    "molecules": ("configs/molecules_esol.yaml", ("val/rmse",)),
    "hyperspectral": ("configs/hyperspectral.yaml", ("val/oa", "val/aa", "val/kappa")),
}


def run(name: str, config: str, metrics: tuple[str, ...], workdir: Path, limits: list[str] = ()) -> dict:
    from varlen.batching.data_wait import DataWait
    from varlen.batching.telemetry import PaddingTelemetry
    from varlen.cli.dispatch import main

    start = time.perf_counter()
    cli = main(
        [
            "fit",
            "--config",
            str(ROOT / config),
            f"--trainer.default_root_dir={workdir / name}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.callbacks+=varlen.callbacks.progress.EpochProgress",  # a line per epoch instead of a bar
            f"--trainer.callbacks.name={name}",
            f"--trainer.callbacks.metrics=[{', '.join(metrics)}]",
            *limits,
        ]
    )
    telemetry = next(c for c in cli.trainer.callbacks if isinstance(c, PaddingTelemetry))
    last = telemetry.epochs[-1] if telemetry.epochs else {}
    wait = next(c for c in cli.trainer.callbacks if isinstance(c, DataWait))
    logged = cli.trainer.callback_metrics
    return {
        "scenario": name,
        "metrics": ", ".join(f"{m} {float(logged[m]):.3f}" if m in logged else f"{m} missing" for m in metrics),
        "padding_efficiency": last.get("padding_efficiency", float("nan")),
        "samples_per_s": last.get("samples_per_s", float("nan")),
        "data_wait": wait.epochs[-1]["wait_share"] if wait.epochs else float("nan"),
        "epochs": cli.trainer.current_epoch,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--max-epochs", type=int, default=None, help="fewer epochs than each config's (a quick look)")
    parser.add_argument("--max-batches", type=int, default=None, help="at most this many batches per epoch and split")
    args = parser.parse_args(argv)
    limits = [f"--trainer.max_epochs={args.max_epochs}"] if args.max_epochs else []
    if args.max_batches:
        limits += [f"--trainer.limit_{s}_batches={args.max_batches}" for s in ("train", "val")]
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="varlen-demo-") as tmp:
        for name in args.scenarios or SCENARIOS:
            config, metrics = SCENARIOS[name]
            print(f"\n=== {name}: varlen fit --config {config}", flush=True)
            rows.append(run(name, config, metrics, Path(tmp), limits))
    print("\n## varlen main job: short training on each embedded default\n")
    print("| scenario | validation metrics | padding efficiency | train samples/s | data wait | epochs | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['scenario']} | {r['metrics']} | {r['padding_efficiency']:.4f} | "
            f"{r['samples_per_s']:.1f} | {r['data_wait']:.1%} | {r['epochs']} | {r['seconds']:.0f} |"
        )
    print(f"\n{next_step()}")
    sys.stdout.flush()


def next_step() -> str:
    """Where the `varlen` command is: the demo ran inside the set-up's `.venv`, which the user's shell has not
    activated (after the demo, a bare `varlen --help` answered "command not found")."""
    command = Path(sys.executable).with_name("varlen")
    activate = command.with_name("activate")
    try:
        command, activate = command.relative_to(Path.cwd()), activate.relative_to(Path.cwd())
    except ValueError:
        pass  # the venv is not under the working directory: name it by its whole path
    return f"next: `source {activate}` then `varlen --help` (or `{command} --help` as it is)"


if __name__ == "__main__":
    main()
