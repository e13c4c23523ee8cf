"""varlen tune: the budget search on a memory model, the budget's probe and worst batches, the grid's
table, pick, overrides and written config on a toy DataModule whose fetch takes a known time."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import yaml
from sleepy import SleepyData, SleepyStep
from toy import ToyDataModule, ToyModel

from varlen.batching.loader_rate import LoaderRate, loader_rate, loader_settings
from varlen.models import TextClassifier
from varlen.tune import largest_budget, tune_command
from varlen.tune.budget import NO_DEVICE, device_probe, worst_batches
from varlen.tune.command import _drift, _noisy
from varlen.tune.grid import Setting, pick, rows_of, run_batches_per_s, worker_counts

FETCH = 0.02  # seconds a toy batch's fetch sleeps


def memory(budget: int) -> int:
    """A known memory model: weights, then activations growing a little faster than the budget."""
    return 500_000 + 40 * budget + budget * budget // 50


@pytest.mark.parametrize("capacity", [600_000, 1_234_567, 9_999_999])
@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_the_budget_search_finds_the_boundary_of_a_memory_model_exactly(capacity: int, margin: float) -> None:
    probes = []

    def fits(budget: int) -> bool:
        probes.append(budget)
        return memory(budget) <= capacity

    low, high = 64, 100_000
    boundary = max(b for b in range(low, high + 1) if memory(b) <= capacity)
    assert largest_budget(fits, low, high, margin) == int(boundary * (1 - margin))
    assert len(probes) <= 2 * math.ceil(math.log2(high / low)) + 2  # doubling, then halving the bracket


def test_the_budget_search_stops_at_its_ends() -> None:
    assert largest_budget(lambda b: True, 8, 1000, 0.0) == 1000
    with pytest.raises(ValueError, match="even a budget of 8"):
        largest_budget(lambda b: b < 8, 8, 1000)
    with pytest.raises(ValueError, match="margin"):
        largest_budget(lambda b: True, 8, 1000, 1.0)


def test_budget_on_a_machine_without_a_device_says_so_and_exits_0(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  init_args:\n    max_tokens: 512\n")

    def build(rest, with_model):
        raise AssertionError("nothing is built without a device")

    assert tune_command(["--budget", "--config", str(config)], build) == 0
    assert capsys.readouterr().out.strip() == NO_DEVICE


def toy(max_tokens: int = 400) -> ToyDataModule:
    dm = ToyDataModule(num_samples=200, max_tokens=max_tokens)
    dm.setup("fit")
    return dm


def test_the_probe_takes_the_plans_largest_sample_and_largest_allocation_and_trains_them() -> None:
    dm = toy()
    sampler = dm.batch_sampler("train", True, num_replicas=1, rank=0)
    batches = [list(b) for b in sampler]
    sizes = dm.dataset("train").lengths
    allocated = [len(b) * sizes[b].max() for b in batches]
    expected = {tuple(max(batches, key=lambda b: sizes[b].max())), tuple(batches[int(np.argmax(allocated))])}
    assert {tuple(sorted(b)) for b in worst_batches(dm)} == {tuple(sorted(b)) for b in expected}
    model = ToyModel()
    before = [p.detach().clone() for p in model.parameters()]
    fits = device_probe(dm, model, (400,), 0, torch.device("cpu"))
    assert fits(800) and dm.max_tokens == 800  # on the CPU nothing runs out of memory
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # a step was taken


def run_tune(capsys, *args: str, with_model: bool = False) -> tuple[int, str]:
    def build(rest, model):
        dm = SleepyData(FETCH, batches=40)
        dm.setup("fit")
        return dm, SleepyStep(FETCH) if model else None

    code = tune_command([*args, "--prefetch", "2", "--start-methods", "fork", "--max-batches", "30"], build)
    return code, capsys.readouterr().out


def table_rows(out: str) -> tuple[list[list[str]], int]:
    """The table's cells, row by row, and which row is marked the pick."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "workers" in line and "run batches/s" in line)
    rows, marked = [], None
    for line in lines[head + 1 :]:
        if not re.match(r"^\s*\*?\s+\d", line):
            break
        if line.lstrip().startswith("*"):
            marked = len(rows)
        rows.append(line.replace("*", " ").split())
    return rows, marked


def test_tune_prints_the_grid_the_pick_and_writes_a_config_with_it(tmp_path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  max_epochs: 3\ndata:\n  class_path: toy.ToyDataModule\n  init_args:\n    seed: 5\n")
    written = tmp_path / "tuned.yaml"
    code, out = run_tune(capsys, "--config", str(config), "--workers", "0,1", "--write", str(written))
    assert code == 0
    rows, marked = table_rows(out)  # workers prefetch start pin persistent first batches/s +- real/s run timed stopped
    assert [(r[0], r[4]) for r in rows] == [("0", "no"), ("1", "no"), ("1", "yes")]
    assert float(rows[0][6]) == pytest.approx(1 / FETCH, rel=0.3)  # the fetch's known cost, in this process
    run = [float(r[9].replace(",", "")) for r in rows]
    assert run[marked] >= 0.98 * max(run) - 0.05  # the default --within 2% (and the table's rounding)
    overrides = out.split("batches/s over the run")[1].splitlines()[1].split()
    picked = dict(o.removeprefix("--data.init_args.").split("=") for o in overrides)
    assert (
        picked["num_workers"] == rows[marked][0]
        and picked["persistent_workers"] == {"no": "false", "yes": "true"}[rows[marked][4]]
    )
    data = yaml.safe_load(written.read_text())
    assert data["trainer"] == {"max_epochs": 3} and data["data"]["class_path"] == "toy.ToyDataModule"
    args = data["data"]["init_args"]
    assert args.pop("seed") == 5 and {k: yaml.safe_dump(v).split("\n")[0] for k, v in args.items()} == picked


def test_tune_with_the_model_measures_the_steps(tmp_path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  max_epochs: 1\n")
    code, out = run_tune(
        capsys, "--config", str(config), "--workers", "0", "--with-model", "--seconds", "0.6", with_model=True
    )
    assert code == 0 and "through the model's training step" in out
    (row,), _ = table_rows(out)
    assert float(row[6]) == pytest.approx(1 / (2 * FETCH), rel=0.3)  # fetch, then a step of as long


def rate(start_s: float, per_s: float) -> LoaderRate:
    return LoaderRate(start_s, 100, per_s, None, 0.002, "settled")


def test_worker_counts_reach_the_cores_per_device() -> None:
    assert worker_counts(8) == [0, 1, 2, 4, 8]
    assert worker_counts(6) == [0, 1, 2, 4, 6]
    assert worker_counts(1) == [0, 1]


def test_persistent_workers_pay_the_start_once_a_run() -> None:
    slow_start = rate(start_s=2.0, per_s=50.0)
    steady = 50.0
    assert run_batches_per_s(rate(0.0, steady), 40, 5, False) == pytest.approx(steady, rel=0.03)
    once, every = run_batches_per_s(slow_start, 40, 5, True), run_batches_per_s(slow_start, 40, 5, False)
    assert once > every
    # the run's time: the steady batches plus one start, or plus a start an epoch
    assert 200 / every - 200 / once == pytest.approx(4 * 2.0 - 4 / steady)


def test_the_pick_is_the_cheapest_setting_near_the_fastest() -> None:
    measured = [
        (Setting(0), rate(0.0, 90.0)),
        (Setting(2, 2, "fork"), rate(0.1, 100.0)),
        (Setting(4, 2, "fork"), rate(0.1, 101.0)),
    ]
    rows = rows_of(measured, 1000, 1)
    assert len(rows) == 5  # a loader with workers: with and without persistent workers
    best = pick(rows, within=0.02)
    assert best.setting == Setting(2, 2, "fork", persistent_workers=False)  # 4 workers win by under 2%
    assert pick(rows, within=0.0).setting.num_workers == 4
    noisy = [
        (setting, LoaderRate(0.1, 20, measured.batches_per_s, None, 0.3, "time")) for setting, measured in measured
    ]
    assert pick(rows_of(noisy, 1000, 1), within=0.0).setting.num_workers == 0  # 90 +- 30% is not slower than 101
    unsettled = [(Setting(1, 2, "fork"), LoaderRate(0.1, 4, 9.0, None, math.nan, "time")), *measured]
    assert pick(rows_of(unsettled, 1000, 1), within=0.02).setting.num_workers == 2  # 4 batches: no error to widen by


def test_the_loader_rate_inspect_prints_is_the_configs_own_loader() -> None:
    dm = SleepyData(FETCH, batches=40)
    dm.setup("fit")
    measured = loader_rate(dm, max_batches=30)
    assert measured.batches_per_s == pytest.approx(1 / FETCH, rel=0.3) and measured.real_per_s > 0
    line = measured.line(loader_settings(dm))
    assert f"{measured.batches_per_s:,.1f} batches/s" in line and "num_workers=0, prefetch_factor=None" in line


def test_figures_too_noisy_to_rank_say_so() -> None:
    settled = [(Setting(n), LoaderRate(0.1, 100, 50.0, None, 0.03, "settled: 3 passes within 4%")) for n in range(3)]
    assert _noisy(settled, 0.1) == ""
    # one pass a setting (`--repeats 1`): no standard error across passes, yet each settled
    single = [(Setting(n), LoaderRate(0.1, 100, 50.0, None, math.inf, "settled: 1 passes within 0%")) for n in range(3)]
    assert _noisy(single, 0.1) == ""
    stops = ["not settled: last 3 passes 40% apart at the 8 s cap", "not settled: last 1 passes too few to compare"]
    stops.append("settled: 3 passes within 2%")
    noisy = [
        (Setting(n), LoaderRate(0.1, 5, 5.0, None, error, stop))
        for n, (error, stop) in enumerate(zip([0.4, math.nan, 0.02], stops, strict=True))
    ]
    assert _noisy(noisy, 0.1).startswith("note: 2 of 3 settings did not settle within 10%")


def test_a_first_setting_that_moves_when_measured_again_says_the_load_changed() -> None:
    first = (Setting(0), rate(0.0, 100.0))
    assert _drift(first, (Setting(0), rate(0.0, 97.0))) == ""  # within the noise
    note = _drift(first, (Setting(0), rate(0.0, 50.0)))
    assert "100.0 batches/s first and 50.0 at the end" in note and "load changed" in note


# -- the search per rung (the shape policy's) ------------------------------------------------------


def rung_memory(tokens: int, length: int) -> int:
    """A known memory model: weights, then activations per token growing with the length (attention)."""
    return 300_000 + tokens * (30 + length // 4)


@pytest.mark.parametrize("capacity", [2_000_000, 40_000_000])
def test_the_count_search_lands_within_tolerance_of_the_boundary_in_few_steps(capacity: int) -> None:
    from varlen.tune.rungs import largest_count

    for length, start in ((8, 1), (64, 50), (500, 3)):
        steps = []

        def peak(count: int, length: int = length, steps: list = steps) -> int | None:
            steps.append(count)
            used = rung_memory(count * length, length)
            return None if used > capacity else used

        found = largest_count(peak, start, 10**6, capacity, tolerance=0.05)
        boundary = (capacity - rung_memory(0, length)) // (length * (30 + length // 4))  # the model's exact bound
        assert 0.95 * boundary <= found <= boundary and len(steps) <= 12, (length, found, boundary, steps)
    with pytest.raises(ValueError, match="one sample"):
        largest_count(lambda n: None, 4, 100, 1000)


def test_each_rung_gets_its_largest_batch_of_its_own_padded_length(tmp_path) -> None:
    """A DataModule's rungs, a memory model over the padded batch the indices make: every rung's count is
    within 5% of its boundary (less the margin), the table is what the DataModule then takes."""
    from varlen.datamodules import TextClassificationDataModule
    from varlen.tune.rungs import search_rungs

    dm = TextClassificationDataModule(synthetic_samples=400, max_tokens=512, max_shapes=6, cache_dir=tmp_path)
    dm.setup("fit")
    sizes, (rungs,) = np.asarray(dm.dataset("train").lengths), dm.rungs
    capacity = 1_500_000
    seen = []

    def peak_of(indices: list[int]) -> int | None:
        width = int(rungs.round(int(sizes[indices].max())))
        seen.append((len(indices), width))
        used = rung_memory(len(indices) * width, width)
        return None if used > capacity else used

    lines = []
    found = search_rungs(dm, peak_of, capacity, margin=0.1, log=lines.append)
    assert [r.length for r in found] == [r for r in rungs.lengths if (sizes <= r).any()] and len(lines) == len(found)
    for rung in found:
        exact = (capacity - rung_memory(0, rung.length)) // (rung.length * (30 + rung.length // 4))
        boundary = min(exact, len(sizes))  # no batch holds more samples than the split
        assert int(0.95 * boundary * 0.9) - 1 <= rung.batch <= boundary * 0.9, (rung, boundary)
        assert {w for n, w in seen} <= set(rungs.lengths)  # each probe a batch of one rung's padded length
    table = {r.length: r.batch for r in found}
    tuned = TextClassificationDataModule(synthetic_samples=400, rung_batch_sizes=table, cache_dir=tmp_path)
    tuned.setup("fit")
    for batch in tuned.batch_sampler("train", True):
        width = int(tuned.rungs[0].round(int(sizes[batch].max())))
        assert len(batch) <= table[width]


def test_budget_under_the_shape_policy_prints_the_table_a_config_takes(tmp_path, monkeypatch, capsys) -> None:
    """`varlen tune --budget` with a DataModule that has rungs searches each one (a fake device here: a
    memory model) and prints the `rung_batch_sizes` table, which a DataModule then takes as it is."""
    import types

    import varlen.tune.command as command
    from varlen.datamodules import TextClassificationDataModule

    dm = TextClassificationDataModule(synthetic_samples=300, max_tokens=512, max_shapes=5, cache_dir=tmp_path)
    dm.setup("fit")
    sizes = np.asarray(dm.dataset("train").lengths)

    def fake_peak(step, device):
        def peak_of(indices):
            step(indices)  # the real training step, on the CPU
            return rung_memory(len(indices) * int(sizes[indices].max()), int(sizes[indices].max()))

        return peak_of

    monkeypatch.setattr(command, "device_peak", fake_peak)
    properties = types.SimpleNamespace(total_memory=1_200_000)
    monkeypatch.setattr(command.torch.cuda, "get_device_properties", lambda device: properties)
    model = TextClassifier(num_classes=2, pretrained=False, config_overrides={"num_hidden_layers": 1, "hidden_size": 32,
                           "num_attention_heads": 2, "intermediate_size": 64})  # fmt: skip
    assert command._rung_budget(dm, model, None, 0.1, "a fake device", torch.device("cpu")) == 0
    out = capsys.readouterr().out
    table = out.split("rung_batch_sizes: ")[1].splitlines()[0]
    parsed = {int(k): int(v) for k, v in (pair.split(":") for pair in table.strip("{}").split(","))}
    assert list(parsed) == [r for r in dm.rungs[0].lengths if (sizes <= r).any()]
    TextClassificationDataModule(synthetic_samples=300, rung_batch_sizes=parsed, cache_dir=tmp_path).setup("fit")


def test_the_verdict_comes_first_and_says_whether_data_can_be_the_bottleneck() -> None:
    from varlen.tune.command import Tuned

    measured = [(Setting(0), rate(0.0, 1250.0)), (Setting(2, 2, "fork"), rate(0.1, 400.0))]
    pruned = [(Setting(1, 2, "spawn"), LoaderRate(math.nan, 0, math.nan, None, math.nan, "pruned: no batch"))]
    rows = rows_of(measured + pruned, 20, 4)
    alone = Tuned(rows, pick(rows), "header", 3, 1.0)
    first = alone.lines(0.02)[0]
    assert first.startswith("Pick 0 workers: ") and "The loader alone" in first and "--with-model" in first
    assert (
        f"longer than {1000 / alone.best.run_per_s:.1f} ms" in first and "2 settings were pruned" in first
    )  # (with and without persistent workers)
    even = [(Setting(0), rate(0.0, 5.0)), (Setting(2, 2, "fork"), rate(0.1, 5.1))]
    model = Tuned(rows_of(even, 20, 4), pick(rows_of(even, 20, 4)), "header", 2, 1.0, with_model=True)
    assert "the model sets the pace and data is not the bottleneck" in model.verdict()  # 2% apart
    uneven = Tuned(rows, pick(rows), "header", 3, 1.0, with_model=True)
    assert "data can be the bottleneck" in uneven.verdict()
