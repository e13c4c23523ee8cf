"""How `varlen tune` times a setting (a warm-up discarded, passes until they settle or a cap, said) and how its
table shows pruned settings (one line), on scripted passes and a fake clock: the structure, not a machine's
timings."""

from __future__ import annotations

import math

import pytest

from varlen.batching.loader_rate import LoaderRate
from varlen.tune.command import Tuned
from varlen.tune.grid import Setting, pick, rows_of
from varlen.tune.repeats import Settle, relative_spread, repeated
from varlen.tune.table import pruned_line, table


class Script:
    """Passes whose rates are scripted, each taking `seconds` of a fake clock."""

    def __init__(self, rates: list[float], seconds: float = 1.0) -> None:
        self.rates, self.seconds, self.now, self.calls = list(rates), seconds, 0.0, 0

    def clock(self) -> float:
        return self.now

    def measure(self) -> LoaderRate:
        self.now += self.seconds
        self.calls += 1
        rate = self.rates.pop(0)
        return LoaderRate(0.1 * self.calls, 30, rate, rate * 10, 0.01, "settled")


def test_the_warm_up_pass_is_left_out_of_the_figure() -> None:
    script = Script([12_033.0, 2_800.0, 2_750.0, 2_760.0])  # a first pass on cold caches, then the steady rate
    got = repeated(script.measure, Settle(warmup=1, repeats=3, spread=0.05, cap_s=60), script.clock)
    assert script.calls == 4 and got.batches_per_s == 2_760.0  # the median of the three after the warm-up
    assert got.real_per_s == 27_600.0 and got.start_s == pytest.approx(0.3)  # medians of the kept passes
    assert got.batches == 90 and got.stopped == "settled: 3 passes within 2%"


def test_passes_repeat_until_the_last_ones_agree() -> None:
    script = Script([500.0, 100.0, 300.0, 200.0, 205.0, 210.0, 999.0])
    got = repeated(script.measure, Settle(warmup=1, repeats=3, spread=0.05, cap_s=60), script.clock)
    assert script.calls == 6 and got.batches_per_s == 205.0  # 200, 205, 210: within 5%; 999 never measured
    assert got.stopped.startswith("settled: 3 passes")
    assert got.rel_error == pytest.approx(5 / math.sqrt(3) / 205)  # the standard error of their mean


def test_a_setting_that_does_not_settle_stops_at_its_cap_and_says_so() -> None:
    script = Script([100.0, 200.0, 100.0, 200.0, 100.0, 200.0, 100.0], seconds=2.0)
    got = repeated(script.measure, Settle(warmup=1, repeats=3, spread=0.1, cap_s=9), script.clock)
    assert script.calls == 5  # 10 s on the fake clock: past the 9 s cap, the warm-up's 2 s included
    assert got.batches_per_s == 100.0  # after the warm-up 200, 100, 200, 100: the median of the last three
    assert got.stopped == "not settled: last 3 passes 100% apart at the 9 s cap"
    one = Script([100.0, 200.0], seconds=5.0)
    alone = repeated(one.measure, Settle(warmup=1, repeats=3, spread=0.1, cap_s=9), one.clock)
    assert alone.stopped == "not settled: last 1 passes too few to compare at the 9 s cap"
    assert math.isinf(alone.rel_error)  # no spread to widen the pick's margin by (see pick)


def test_a_pruned_warm_up_is_raised_and_a_bad_rule_refused() -> None:
    def timed_out() -> LoaderRate:
        raise RuntimeError("DataLoader timed out after 0.02 seconds")

    with pytest.raises(RuntimeError, match="timed out"):
        repeated(timed_out, Settle(), lambda: 0.0)
    with pytest.raises(ValueError, match="repeats >= 1"):
        Settle(repeats=0)
    assert relative_spread([90.0, 100.0, 110.0]) == pytest.approx(0.2) and relative_spread([1.0, math.nan]) == math.inf


def measured_and_pruned() -> list:
    measured = [
        (Setting(0), LoaderRate(0.0, 90, 4_000.0, None, 0.01, "settled: 3 passes within 3%")),
        (Setting(1, 4, "fork"), LoaderRate(0.03, 72, 600.0, None, 0.02, "settled: 3 passes within 4%")),
    ]
    why = "pruned: no batch within 0.016 s, already slower than the best setting so far"
    pruned = [LoaderRate(math.nan, 0, math.nan, None, math.nan, why)]
    points = [Setting(n, p, m) for m in ("forkserver", "spawn") for n in (1, 2) for p in (2, 4)]
    return measured + [(point, pruned[0]) for point in points if point != Setting(1, 4, "forkserver")]


def test_pruned_settings_are_one_line_after_the_table_not_a_row_each() -> None:
    rows = rows_of(measured_and_pruned(), 69, 1)  # 7 pruned points: 14 rows with and without persistent workers
    lines = table(rows, pick(rows))
    assert len(lines) == 1 + 3 + 1  # the head, the measured rows (0 workers; 1 worker with and without), one line
    assert not any("pruned" in line for line in lines[:-1])
    assert (
        lines[-1]
        == pruned_line(rows)
        == (
            "pruned 14 settings, their first batch later than the whole run takes at the best setting so far: "
            "forkserver 1x2, 2x2, 2x4; spawn 1x2, 1x4, 2x2, 2x4 (workers x prefetch, each with and without persistent "
            "workers)"
        )
    )
    assert pruned_line(rows_of(measured_and_pruned()[:2], 69, 1)) == ""


def test_the_printed_report_carries_the_flag_of_a_setting_that_did_not_settle() -> None:
    flagged = "not settled: last 3 passes 40% apart at the 15 s cap"
    measured = [
        (Setting(0), LoaderRate(0.0, 90, 4_000.0, None, 0.01, "settled: 3 passes within 3%")),
        (Setting(2, 2, "fork"), LoaderRate(0.05, 72, 900.0, None, 0.12, flagged)),
    ]
    rows = rows_of(measured, 69, 1)
    printed = Tuned(rows, pick(rows), "header", 2, 3.0).lines(0.02)
    assert sum(line.endswith(flagged) for line in printed) == 2  # its rows with and without persistent workers
