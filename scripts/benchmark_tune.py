"""varlen tune against an exhaustive run of its grid, and the cost of the DataWait callback.

    python scripts/benchmark_tune.py grid --config configs/bearing_cwru.yaml
    python scripts/benchmark_tune.py grid --config configs/molecules_esol.yaml
    python scripts/benchmark_tune.py overhead --config configs/text_bert.yaml --steps 30

`grid` measures the config's training loader twice over the same grid: as `varlen tune` does
(each setting until its rate is settled, slow starts cut at the best run's time), then exhaustively
(each setting to its batch or time limit, starts up to `--start-seconds`). It prints both tables,
their wall times, and the exhaustive run's figure for tune's pick against the exhaustive best: how
much tune's early stop loses. Any other argument goes to `varlen tune` (`--workers`, `--with-model`...).

`overhead` fits the config's model for `--steps` steps with and without
`DataWait` (a CSV logger writing every step), alternating, and
prints the steps/s of each and the time spent inside the callback's hooks per step (timed around
each hook: the figure the steps/s difference is too noisy to show on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.loggers import CSVLogger

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(rest: list[str], with_model: bool):
    """The config's DataModule (set up for fit) and model, as `varlen fit` builds them."""
    from varlen.cli.dispatch import DataOnlyCLI, VarLenCLI, main

    made = main(list(rest), run=False, cli_class=VarLenCLI if with_model else DataOnlyCLI)
    made.datamodule.prepare_data()
    made.datamodule.setup("fit")
    return made.datamodule, made.model if with_model else None


def grid_benchmark(argv: list[str]) -> None:
    from varlen.tune.command import parser, run_tune
    from varlen.tune.config import command_config

    options, rest = parser().parse_known_args(argv)
    config = command_config(rest)
    dm, model = build(rest, options.with_model)
    runs = {}
    for name, exhaustive in (("tune", False), ("exhaustive", True)):
        options.exhaustive = exhaustive
        tuned = run_tune(dm, model, config, options)
        print(f"\n{name}: {tuned.seconds:.0f} s", flush=True)
        print("\n".join(tuned.lines(options.within)), flush=True)
        runs[name] = tuned
    picked = runs["tune"].best.setting
    full = {row.setting: row for row in runs["exhaustive"].rows}
    best = max(row.run_per_s for row in full.values())
    at_pick = full[picked].run_per_s
    print(
        f"\n| config | tune wall s | exhaustive wall s | tune's pick | pick, exhaustive run batches/s | "
        f"exhaustive best run batches/s | pick / best |\n|---|---|---|---|---|---|---|\n"
        f"| {Path(config_path(rest)).name} | {runs['tune'].seconds:.0f} | {runs['exhaustive'].seconds:.0f} | "
        f"{short(picked)} | {at_pick:,.1f} | {best:,.1f} | {at_pick / best:.3f} |"
    )


def config_path(rest: list[str]) -> str:
    for i, arg in enumerate(rest):
        if arg == "--config":
            return rest[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return "?"


def short(s) -> str:
    if not s.num_workers:
        return "0 workers"
    persistent = ", persistent" if s.persistent_workers else ""
    return f"{s.num_workers} workers x{s.prefetch_factor} {s.multiprocessing_context}{persistent}"


def timed_callback():
    """DataWait with the time inside its per-step hooks (the fetch wrappers' own work included) summed in
    `spent["step"]`, and its epoch end's (the gather over ranks, the epoch's log) in `spent["epoch"]`."""
    from varlen.batching.data_wait import DataWait

    class Timed(DataWait):
        spent = {"step": 0.0, "epoch": 0.0}

        def _timed(name, kind):
            def hook(self, *args, **kwargs):
                start = time.perf_counter()
                try:
                    return getattr(DataWait, name)(self, *args, **kwargs)
                finally:
                    type(self).spent[kind] += time.perf_counter() - start

            return hook

        on_train_batch_start = _timed("on_train_batch_start", "step")
        on_train_batch_end = _timed("on_train_batch_end", "step")
        _fetch_start = _timed("_fetch_start", "step")
        _fetch_end = _timed("_fetch_end", "step")
        on_train_epoch_end = _timed("on_train_epoch_end", "epoch")

    return Timed(advise_above=None)


class StepClock(pl.Callback):
    """Step ends after the first `warmup` steps."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.ends = warmup, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ends.append(time.perf_counter())

    def steps_per_s(self) -> float:
        ends = self.ends[self.warmup :]
        return (len(ends) - 1) / (ends[-1] - ends[0])


def overhead_benchmark(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="benchmark_tune.py overhead")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    options, rest = p.parse_known_args(argv)
    dm, model = build(rest, True)
    rates: dict[bool, list[float]] = {False: [], True: []}
    hook_us, epoch_ms = [], []
    with tempfile.TemporaryDirectory() as logs:
        for repeat in range(options.repeats):
            for with_callback in (False, True) if repeat % 2 == 0 else (True, False):
                clock = StepClock(options.warmup)
                callbacks = [clock] + ([timed_callback()] if with_callback else [])
                trainer = pl.Trainer(
                    accelerator="auto",
                    devices=1,
                    max_steps=options.warmup + options.steps,
                    max_epochs=-1,
                    limit_val_batches=0,
                    num_sanity_val_steps=0,
                    logger=CSVLogger(logs),
                    log_every_n_steps=1,
                    enable_checkpointing=False,
                    enable_progress_bar=False,
                    enable_model_summary=False,
                    callbacks=callbacks,
                )
                trainer.fit(model, datamodule=dm)
                rates[with_callback].append(clock.steps_per_s())
                if with_callback:
                    spent = type(callbacks[1]).spent
                    hook_us.append(1e6 * spent["step"] / len(clock.ends))
                    epoch_ms.append(1e3 * spent["epoch"])
                    spent.update(step=0.0, epoch=0.0)
                print(f"repeat {repeat}, DataWait {with_callback}: {rates[with_callback][-1]:.3f} steps/s", flush=True)
    without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
    per_step = statistics.median(hook_us)
    print(
        "\n| config | steps | steps/s without | steps/s with DataWait | difference | DataWait hooks per step | "
        "share of a step | epoch end, once |\n|---|---|---|---|---|---|---|---|\n"
        f"| {Path(config_path(rest)).name} {' '.join(a for a in rest if a.startswith('--data'))} | "
        f"{options.steps} x {options.repeats} | {without:.3f} | {with_:.3f} | {with_ / without - 1:+.1%} | "
        f"{per_step:.0f} us | {per_step * without / 1e6:.4%} | {statistics.median(epoch_ms):.1f} ms |"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    command, *args = sys.argv[1:] or ["grid"]
    {"grid": grid_benchmark, "overhead": overhead_benchmark}[command](args)
