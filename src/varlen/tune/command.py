"""`varlen tune`: a config's training loader measured over a grid of settings on this machine.

`varlen tune --config CONFIG [--data.* ...]` measures batches/s and real elements/s for every
setting of the grid (workers from 0 up to the cores per device, prefetch factors, start methods,
pinning where a CUDA device is there; persistent workers from the same measures: see
`varlen.tune.grid`), each in passes (a `RateMeter` measure each): a warm-up pass discarded, then passes
until the last ones agree or the setting's time is up, said in the table (`varlen.tune.repeats`); it
prints the table and the best setting as `--data.init_args.*` arguments, and with `--write FILE`
a copy of the config with them (the user's file edited: its comments, order and quoting kept).
`--with-model` puts each batch through the model's training step
(`varlen.tune.measure`); `--budget` searches the largest `max_tokens` that fits a CUDA
device's memory (`varlen.tune.budget`). The DataModule and model come from `build`, which
the command dispatcher gives (`varlen.cli.dispatch` builds them as `fit` would).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from varlen.batching.loader_rate import LoaderRate
from varlen.errors import OneLineParser
from varlen.tune.budget import NO_DEVICE, search_budgets, train_step
from varlen.tune.config import command_config, config_files, epochs_and_batches, write_config
from varlen.tune.grid import Row, grid, pick, rows_of, worker_counts
from varlen.tune.measure import measure_setting
from varlen.tune.repeats import Settle, repeated
from varlen.tune.rungs import device_peak, search_rungs
from varlen.tune.table import PRUNED, table
from varlen.tune.table import short as _short
from varlen.tune.yaml_edit import HEADER

__all__ = ["Build", "Tuned", "parser", "run_tune", "table", "tune_command"]

#: `build(arguments, with_model) -> (DataModule set up for fit, model or None)`: the config's objects
Build = Callable[[list[str], bool], tuple[Any, Any]]


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="varlen tune",
        description="Measure a config's training loader over a grid of loader settings on this machine and print "
        "the best as --data.init_args.* arguments. Every other argument is the one `varlen fit` takes.",
    )
    p.add_argument("--with-model", action="store_true", help="put each batch through the model's training step")
    p.add_argument("--write", default=None, metavar="FILE", help="write a copy of the config with the best setting")
    p.add_argument("--workers", default=None, help="worker counts, e.g. 0,2,4 (default: 0 to the cores per device)")
    p.add_argument("--prefetch", default="2,4", help="prefetch factors with workers (default: 2,4)")
    p.add_argument("--start-methods", default=None, help="e.g. fork,spawn (default: every one this platform has)")
    p.add_argument("--devices", type=int, default=None, help="devices on this node (default: the config's, else 1)")
    p.add_argument("--max-batches", type=int, default=300, help="timed batches per pass at most (default: 300)")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per pass at most (default: 2)")
    p.add_argument("--rel-tol", type=float, default=0.05, help="a pass ends at this relative standard error")
    p.add_argument("--warmup", type=int, default=1, help="passes per setting run first and discarded (default: 1)")
    p.add_argument("--repeats", type=int, default=3, help="a setting's figure: the median of its last passes (3)")
    p.add_argument("--spread", type=float, default=0.1, help="settled: the last passes' rates this close (0.1)")
    p.add_argument("--setting-seconds", type=float, default=15.0, help="seconds per setting, warm-up included (15)")
    p.add_argument("--exhaustive", action="store_true", help="no early stop: every pass to its limits, none pruned")
    p.add_argument("--start-seconds", type=float, default=60.0, help="seconds the first batch may take (60)")
    p.add_argument("--within", type=float, default=0.02, help="the cheapest setting this close to the best wins")
    p.add_argument("--budget", action="store_true", help="search the largest max_tokens a CUDA device's memory fits")
    p.add_argument("--margin", type=float, default=0.1, help="share of the largest fitting budget left free (0.1)")
    p.add_argument("--budget-max", type=int, default=0, help="the search's upper end (default: from the sizes)")
    return p


def _numbers(text: str | None, name: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise ValueError(f"{name} takes whole numbers >= 0 separated by commas, got {text!r}")
    return values


def _methods(text: str | None) -> list[str]:
    """The start methods asked for, the quickest to start first (a slow start is cut at the best run's time)."""
    order, available = ("fork", "forkserver", "spawn"), multiprocessing.get_all_start_methods()
    methods = text.split(",") if text else available
    unknown = set(methods) - set(available)
    if unknown:
        raise ValueError(f"--start-methods: {sorted(unknown)} not on this platform ({available})")
    return sorted(methods, key=lambda m: order.index(m) if m in order else len(order))


@dataclass
class Tuned:
    """What a tune run found: the table's rows, the pick, the context line and the time it took."""

    rows: list[Row]
    best: Row
    header: str
    points: int
    seconds: float
    #: notes on the machine's load: the first setting's figure moved when measured again at the end, or most
    #: figures are too noisy to rank
    drift: str = ""

    #: whether each batch went through the model's training step (`--with-model`)
    with_model: bool = False

    def verdict(self) -> str:
        """One paragraph before the table: the pick, the loader's rate against the model's, and whether data
        can be the bottleneck."""
        best = self.best
        measured = [r for r in self.rows if math.isfinite(r.run_per_s)]
        pruned = sum(not math.isfinite(r.run_per_s) for r in self.rows)
        slowest = min(r.run_per_s for r in measured)
        spread = best.run_per_s / max(slowest, 1e-9)
        pick = f"Pick {_short(best.setting)}" + (", persistent" if best.setting.persistent_workers else "")
        out = [f"{pick}: {best.run_per_s:,.1f} batches/s in the run"]
        if self.with_model:
            if spread < 1.1:
                out.append(
                    f"through the model's training step every setting measured is within {spread - 1:.0%} of it: the "
                    "model sets the pace and data is not the bottleneck; the cheapest setting is picked"
                )
            else:
                out.append(
                    f"through the model's training step the settings differ up to {spread:.1f}x: data can be the "
                    "bottleneck, and the pick is the setting that feeds the model fastest"
                )
        else:
            out.append(
                f"the loader alone (no model): if a training step takes longer than {1000 / best.run_per_s:.1f} ms "
                "(most models' do), data is not the bottleneck whatever the setting; run with --with-model to "
                "measure through the model's own step"
            )
        if pruned:
            out.append(f"{pruned} settings were pruned, their first batches already slower than the best's")
        return ". ".join(part[0].upper() + part[1:] for part in out) + "."

    def lines(self, within: float) -> list[str]:
        fastest = max(r.run_per_s for r in self.rows if math.isfinite(r.run_per_s))
        return [
            self.verdict(),
            "",
            *table(self.rows, self.best),
            *([self.drift] if self.drift else []),
            f"best: {self.best.run_per_s:,.1f} batches/s over the run (fastest {fastest:,.1f}; the cheapest setting "
            f"within {within:.0%} or the measures' noise), {self.points} settings measured in {self.seconds:.0f} s:",
            f"  {self.best.setting.overrides()}",
        ]


def run_tune(dm: Any, model: Any, config: dict[str, Any], options: argparse.Namespace) -> Tuned:
    """The grid of `options` (`parser`'s) measured on `dm` (through `model` unless None); the
    context line is printed first, a progress bar runs while it measures.

    Raises:
        ValueError: an option's value is unusable (naming it).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    devices = options.devices or _config_devices(config)
    per_device = max(cores // devices, 1)
    workers = _numbers(options.workers, "--workers") or worker_counts(per_device)
    pins = (False, True) if torch.cuda.is_available() else (bool(dm.pin_memory),)
    points = grid(workers, _numbers(options.prefetch, "--prefetch"), _methods(options.start_methods), pins)
    epochs, epoch_batches = epochs_and_batches(config, _epoch_batches(dm, devices))
    limits = {"max_batches": options.max_batches, "max_seconds": options.seconds, "rel_tol": options.rel_tol}
    limits["settle"] = not options.exhaustive
    settle = Settle(options.warmup, options.repeats, options.spread, options.setting_seconds)
    header = (
        f"varlen tune: {type(dm).__name__} training loader, {epoch_batches:,} batches an epoch x {epochs} "
        f"epochs per rank; {cores} cores, {devices} device(s): up to {per_device} workers per device; "
        + ("through the model's training step" if model is not None else "the loader alone")
    )
    print(header, flush=True)
    started = time.perf_counter()
    trainer_args = {k: v for k, v in (config.get("trainer") or {}).items() if k in ("precision", "accelerator")}
    run = {"epochs": epochs, "epoch_batches": epoch_batches, "trainer_args": trainer_args}
    run["start_seconds"], run["settle"] = options.start_seconds, settle
    measured = _measure_all(dm, points, limits, model, run)
    drift = _drift(measured[0], _measure_all(dm, points[:1], limits, model, run)[0])  # the load: still the same?
    drift = "\n".join(note for note in (drift, _noisy(measured, options.spread)) if note)
    rows = rows_of(measured, epoch_batches, epochs)
    seconds = time.perf_counter() - started
    return Tuned(rows, pick(rows, options.within), header, len(points), seconds, drift, model is not None)


def _noisy(measured: list, spread: float) -> str:
    """A note when most measured settings did not settle (`tune.repeats`: their last passes still further apart
    than `spread` at the cap): the machine is too busy for the figures to rank the settings."""
    stops = [rate.stopped for _, rate in measured if rate.batches]
    loose = sum(stop.startswith("not settled") for stop in stops)
    if not stops or loose <= len(stops) / 2:
        return ""
    return (
        f"note: {loose} of {len(stops)} settings did not settle within {spread:.0%} (their batches vary with "
        "this machine's load): the pick is uncertain; raise --setting-seconds, or run again when the machine is quieter"
    )


def _drift(first: tuple, again: tuple) -> str:
    """A note when the first setting, measured again at the end, moved by more than its measures' noise
    allows (three standard errors, at least 15%): the settings measured in between met another load."""
    setting, (before, after) = first[0], (first[1], again[1])
    if not (math.isfinite(before.batches_per_s) and math.isfinite(after.batches_per_s)):
        return ""
    moved = abs(after.batches_per_s / before.batches_per_s - 1)
    noise = 3 * math.hypot(min(before.rel_error, 1.0), min(after.rel_error, 1.0))
    if moved <= max(noise, 0.15):
        return ""
    return (
        f"note: {_short(setting)} gave {before.batches_per_s:,.1f} batches/s first and {after.batches_per_s:,.1f} at "
        "the end: this machine's load changed while measuring, so rows measured at different times are not "
        "comparable; run varlen tune again when the machine is as it will be in training"
    )


def tune_command(argv: Sequence[str], build: Build) -> int:
    """Run `varlen tune` on `argv` (its options, then `fit`'s config arguments); the exit status."""
    p = parser()
    options, rest = p.parse_known_args(list(argv))
    config = command_config(rest)
    if options.budget:
        return _budget(options, rest, config, build)
    try:  # before anything is built
        _numbers(options.workers, "--workers")
        _numbers(options.prefetch, "--prefetch")
        _methods(options.start_methods)
        Settle(options.warmup, options.repeats, options.spread, options.setting_seconds)
    except ValueError as error:
        p.error(str(error))
    dm, model = build(rest, options.with_model)
    tuned = run_tune(dm, model, config, options)
    print("\n".join(tuned.lines(options.within)), flush=True)
    if options.write:
        best = tuned.best
        note = f"{HEADER} ({best.run_per_s:,.1f} batches/s over the run on this machine):\n"
        files = config_files(rest)  # the first is the file edited; the others' values are set into it
        source = files[0] if files else None
        written = write_config(options.write, config, best.setting.init_args(), note + best.setting.overrides(), source)
        print(f"config written: {written}")
    return 0


def _config_devices(config: dict[str, Any]) -> int:
    devices = (config.get("trainer") or {}).get("devices")
    return devices if isinstance(devices, int) and devices > 0 else max(torch.cuda.device_count(), 1)


def _epoch_batches(dm: Any, devices: int) -> int:
    """One rank's batches an epoch when `devices` ranks train."""
    try:
        return len(dm.batch_sampler("train", dm.shuffle, num_replicas=devices, rank=0))
    except ValueError:  # fewer samples than ranks: the loader of one
        return len(dm.batch_sampler("train", dm.shuffle, num_replicas=1, rank=0))


def _measure_all(dm: Any, points: list, limits: dict[str, Any], model: Any, run: dict[str, Any]) -> list:
    """Each point measured in turn (`repeated` passes by `run["settle"]`), under a progress bar; a point
    that fails is a row saying why.

    A worker's batch (the first, after the workers start, included) may take `run["start_seconds"]`; under
    early stopping, no longer than the whole run takes at the best setting so far either: a setting whose
    workers are not up by then cannot win (spawned workers that import for seconds, on a short run)."""
    measured: list = []
    epochs, batches = run["epochs"], run["epoch_batches"]
    with tqdm(total=len(points), desc="varlen tune", unit="setting", file=sys.stderr, disable=None) as bar:
        for setting in points:
            bar.set_postfix_str(_short(setting))
            limit = run["start_seconds"]
            finite = [r.run_per_s for r in rows_of(measured, batches, epochs) if math.isfinite(r.run_per_s)]
            if limits["settle"] and finite:
                limit = min(limit, epochs * batches / max(finite))

            try:
                rate = _repeated_passes(dm, setting, limits, model, run, limit, bar)
            except Exception as error:  # a timeout, or e.g. a dataset spawned workers cannot import
                rate = _failed(error, limit)
            measured.append((setting, rate))
            bar.update()
    return measured


def _repeated_passes(
    dm: Any, setting: Any, limits: dict[str, Any], model: Any, run: dict[str, Any], limit: float, bar: tqdm
) -> LoaderRate:
    """`setting`'s figure from passes (`repeated`), the pass and its batches shown on `bar`."""
    passes = 0

    def shown(meter) -> None:
        if meter.timed % 10 == 0:
            bar.set_postfix_str(f"{_short(setting)}: pass {passes}, {meter.timed} batches")

    def one_pass() -> LoaderRate:
        nonlocal passes
        passes += 1
        return measure_setting(dm, setting, limits, model, run["trainer_args"], shown, batch_limit=limit)

    return repeated(one_pass, run["settle"])


def _failed(error: Exception, limit: float) -> LoaderRate:
    said = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    if "gave no batch in" in said or "timed out" in said:
        said = f"{PRUNED}: no batch within {limit:.2g} s, already slower than the best setting so far"
    else:
        said = f"failed: {type(error).__name__}: {said}"[:120]
    return LoaderRate(math.nan, 0, math.nan, None, math.nan, said)


def _budget(options: argparse.Namespace, rest: list[str], config: dict[str, Any], build: Build) -> int:
    """`--budget`: the largest max_tokens per size axis, or the message that there is no device here."""
    if not torch.cuda.is_available():
        print(NO_DEVICE, flush=True)
        return 0
    dm, model = build(rest, True)
    precision = (config.get("trainer") or {}).get("precision")
    device = torch.cuda.get_device_name()
    if dm.rungs is not None and len(dm.rungs) == 1 and dm.stream is None:  # the shape policy's rungs: one batch each
        return _rung_budget(dm, model, precision, options.margin, device, torch.device("cuda"))
    found = search_budgets(dm, model, torch.device("cuda"), options.margin, precision, options.budget_max)
    print(
        f"varlen tune --budget: {type(dm).__name__}, the largest max_tokens whose worst batches train on {device} "
        f"with {options.margin:.0%} left free, per size axis (the others at the config's budget):"
    )
    for result in found:
        print(result.line())
    if len(found) == 1:
        print(f"  --data.init_args.max_tokens={found[0].budget}", flush=True)
    return 0


def _rung_budget(dm: Any, model: Any, precision: str | None, margin: float, name: str, device: torch.device) -> int:
    """`--budget` under the shape policy: each rung's largest batch (`varlen.tune.rungs`), as a table."""
    started = time.perf_counter()
    print(
        f"varlen tune --budget: {type(dm).__name__}, each rung's largest batch whose training step fits {name}, "
        f"{margin:.0%} left free (the longest rung first):",
        flush=True,
    )
    torch.set_float32_matmul_precision("high")  # memory is measured, not numbers: TF32 is faster and allocates the same
    peak_of = device_peak(train_step(dm, model, device, precision), device)
    capacity = torch.cuda.get_device_properties(device).total_memory
    found = search_rungs(dm, peak_of, capacity, margin, log=lambda line: print(line, flush=True))
    table = ", ".join(f"{r.length}: {r.batch}" for r in found)
    print(f"  in {time.perf_counter() - started:.1f} s; the table a config holds (data.init_args):")
    print(f"    rung_batch_sizes: {{{table}}}")
    print(f"  --data.init_args.rung_batch_sizes='{{{table}}}'", flush=True)
    return 0
