"""DataWait: the logged wait for data against the share known costs give, and the advice line.

A loader's fetch sleeps a known time per batch and the model's step another: the share of the
epoch the loop must wait follows from those costs (`simulated_share` plays the loader's
round-robin workers and prefetch against the steps), whatever the machine's speed, because sleeps
do not compete for its cores. Epochs with workers are checked in their second epoch, with persistent
workers: the first epoch's worker start-up is not a known cost.
"""

from __future__ import annotations

import logging
import re

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger
from sleepy import BATCHES, SleepyData, SleepyStep
from toy import ToySequences, collate_toy

from varlen.batching.data_wait import DataWait, WaitFigures, advice_line, read_cause, tune_command_line

FETCH, STEP = 0.16, 0.05  # seconds: the loader-bound case


class Recorded(Logger):
    """Keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[dict] = []

    name, version = "recorded", 0

    def log_metrics(self, metrics, step=None) -> None:
        self.metrics.append(dict(metrics))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


def simulated_share(fetch: float, step: float, workers: int, prefetch: int, batches: int) -> float:
    """The share of an epoch spent waiting when each batch costs `fetch` in a worker (round robin, at
    most `workers * prefetch` batches asked ahead, one more each time one is taken) and `step` in
    the loop; every worker idle at the start. Without workers the loop fetches itself."""
    if workers == 0:
        return fetch / (fetch + step)
    ahead = workers * prefetch
    sent = [0.0] * batches
    free = [0.0] * workers
    end = waited = 0.0
    for k in range(batches):
        start = max(free[k % workers], sent[k])
        free[k % workers] = start + fetch
        taken = max(start + fetch, end)
        waited += taken - end
        if k + ahead < batches:
            sent[k + ahead] = taken
        end = taken + step
    return waited / end


def fit(data, step_s: float, epochs: int, **trainer) -> DataWait:
    wait = DataWait(command="varlen tune --config toy.yaml")
    pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[wait],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **{"logger": False, **trainer},
    ).fit(SleepyStep(step_s), **data)
    return wait


@pytest.fixture
def advice_records():
    """What the `varlen` logger says during a test (it may not propagate to the root logger)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("varlen")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_a_loader_bound_run_without_workers_logs_the_known_share_and_one_advice_line(advice_records) -> None:
    logger = Recorded()
    wait = fit({"datamodule": SleepyData(FETCH)}, STEP, epochs=1, logger=logger, log_every_n_steps=1)
    expected = simulated_share(FETCH, STEP, 0, 0, BATCHES)
    (epoch,) = wait.epochs
    assert epoch["wait_share"] == pytest.approx(expected, abs=0.05)
    assert epoch["wait_share_max"] == epoch["wait_share"]  # one rank
    assert epoch["batches_per_s"] == pytest.approx(1 / (FETCH + STEP), rel=0.15)
    assert epoch["real_elements_per_s"] > 0
    per_step = [m["data/wait_ms"] for m in logger.metrics if "data/wait_ms" in m]
    assert len(per_step) == BATCHES and sum(per_step) / BATCHES == pytest.approx(1000 * FETCH, rel=0.1)
    lines = [r.getMessage() for r in advice_records if "waited for data" in r.getMessage()]
    assert lines == [wait.advice]
    assert f"{epoch['wait_share']:.0%} of epoch 1" in wait.advice and "no loader workers" in wait.advice
    fetched = float(re.search(r"fetches \(([\d.,]+) ms\)", wait.advice).group(1).replace(",", ""))
    assert fetched == pytest.approx(1000 * FETCH, rel=0.2)
    assert wait.advice.endswith("varlen tune --config toy.yaml")


def test_a_loader_bound_run_on_two_workers_logs_the_share_its_costs_give() -> None:
    wait = fit({"datamodule": SleepyData(FETCH, num_workers=2)}, STEP, epochs=2)
    expected = simulated_share(FETCH, STEP, 2, 2, BATCHES)
    assert 0.3 < expected < 0.6  # waits part of each step, not all of it
    assert wait.epochs[1]["wait_share"] == pytest.approx(expected, abs=0.05)


def test_a_compute_bound_run_on_a_plain_dataloader_waits_under_five_percent() -> None:
    """In-process fetches of a millisecond or two (the toy's gather and collate) against 100 ms steps (with
    workers, each batch's hand-over takes milliseconds on two busy cores: real wait, but not a known cost)."""
    loader = torch.utils.data.DataLoader(ToySequences(16 * 10, 1), batch_size=16, collate_fn=collate_toy)
    wait = fit({"train_dataloaders": loader}, 2 * STEP, epochs=1)
    assert wait.epochs[0]["wait_share"] < 0.05
    assert "real_elements_per_s" not in wait.epochs[0]  # a plain loader's batches are not counted
    assert wait.advice is None


def figures(**changed) -> WaitFigures:
    base = dict(epoch=1, share=0.4, share_max=0.4, wait_s=4.0, elapsed_s=10.0, batches=100, first_wait_s=0.1)
    base |= dict(workers=2, devices=1, cores=8, fetch_s=0.15, collate_s=0.02)
    return WaitFigures(**(base | changed))


def test_the_cause_is_read_from_the_figures() -> None:
    # the step computes in (10 - 4) / 100 = 60 ms; 2 workers make 2 / 170 ms: fewer than the loop asks
    assert "busy in the fetch" in read_cause(figures()) and "up to 8 workers per device" in read_cause(figures())
    assert "busy in the collate" in read_cause(figures(fetch_s=0.02, collate_s=0.15))
    assert "too few cores" in read_cause(figures(devices=4))  # 2 workers x 4 devices on 8 cores
    fast = dict(fetch_s=0.005, collate_s=0.001)  # 2 workers make 333 batches/s: they are not the limit
    assert read_cause(figures(**fast)).startswith("the hand-over")
    assert read_cause(figures(epoch=0, **fast)).startswith("a cold cache")
    assert read_cause(figures(first_wait_s=3.0)).startswith("the epoch's start")
    assert "persistent_workers=True" in read_cause(figures(first_wait_s=3.0))
    assert read_cause(figures(store="s3://bucket/train")).startswith("the reads from the stream's store")
    assert read_cause(figures(workers=0)).startswith("no loader workers")
    line = advice_line(figures(share_max=0.55), "varlen tune --config c.yaml")
    assert "40% of epoch 2" in line and "slowest rank 55%" in line and line.endswith("varlen tune --config c.yaml")


def test_the_tune_command_keeps_the_runs_config_and_data_arguments() -> None:
    argv = ["varlen", "fit", "--config", "c.yaml", "--trainer.max_epochs", "3", "--data.init_args.num_workers=4"]
    assert tune_command_line(argv) == "varlen tune --config c.yaml --data.init_args.num_workers=4"
    assert tune_command_line(["train.py"]) == "varlen tune --config CONFIG"
