"""Off a terminal a fit says it is alive: a line every `every` seconds (step of total, samples/s, waiting share,
time left); `varlen fit` adds it where no progress bar shows."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest

from varlen.batching.data_wait import DataWait
from varlen.callbacks.progress import EpochProgress, StepProgress, _duration
from varlen.cli import dispatch as cli

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_shapes import Noisy, PaddedToys  # noqa: E402


def test_a_line_every_interval_says_the_step_rate_wait_and_time_left(tmp_path, capsys) -> None:
    progress = StepProgress(every=0.0)  # every step, here
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[DataWait(), progress], default_root_dir=tmp_path, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Noisy(), PaddedToys())
    total = trainer.num_training_batches
    assert len(progress.lines) == total
    pattern = r"epoch 1/1 step (\d+)/(\d+) \(\d+%\) \| [\d,]+ samples/s \| waiting [\d.]+% \| \w+ left in the epoch"
    steps = [int(re.fullmatch(pattern, line)[1]) for line in progress.lines]
    assert steps == list(range(1, total + 1)) and progress.lines[-1].endswith("0s left in the epoch")
    assert capsys.readouterr().out.count("samples/s") >= total


def test_a_long_interval_prints_nothing_in_a_short_epoch(tmp_path) -> None:
    progress = StepProgress(every=3600)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[progress], default_root_dir=tmp_path, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Noisy(), PaddedToys())
    assert progress.lines == []


@pytest.mark.parametrize(("argv", "added"), [([], True), (["--progress_every=0"], False)])
def test_varlen_fit_adds_it_off_a_terminal(argv, added, tmp_path) -> None:
    config = str(Path(__file__).resolve().parents[1] / "configs" / "text_bert.yaml")
    args = ["--config", config, "--data.init_args.synthetic_samples=40", *argv]
    trainer = cli.main([*args, f"--trainer.default_root_dir={tmp_path}"], run=False).trainer  # pytest: no terminal
    found = [c for c in trainer.callbacks if isinstance(c, StepProgress)]
    assert (len(found) == 1 and found[0].every == 30.0) if added else not found


def test_durations_read_as_a_person_says_them() -> None:
    assert [_duration(s) for s in (4.4, 130, 3900)] == ["4s", "2m10s", "1h05m"]


def test_a_resumed_epoch_is_timed_from_the_resume(tmp_path, capsys) -> None:
    """Resumed mid-epoch (Lightning calls no on_train_epoch_start then), the lines read "0 samples/s ... 2h00m left"
    and "5317.7 s": the clocks ran from the machine's start. They start at the resume, the rate and the time left
    count the steps trained since."""
    quiet = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    saving = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}")
    first = pl.Trainer(max_epochs=1, limit_val_batches=0, max_steps=3, callbacks=[saving], **quiet)
    first.fit(Noisy(), PaddedToys())
    steps, epoch = StepProgress(every=0.0), EpochProgress()
    resumed = pl.Trainer(max_epochs=1, limit_val_batches=0, callbacks=[steps, epoch], **quiet)
    started = time.perf_counter()
    resumed.fit(Noisy(), PaddedToys(), ckpt_path=str(tmp_path / "step=3.ckpt"))
    wall = time.perf_counter() - started
    total = resumed.num_training_batches
    pattern = r"epoch 1/1 step (\d+)/\d+ \(\d+%\) \| ([\d,]+) samples/s \| (\w+) left in the epoch"
    found = [re.fullmatch(pattern, line) for line in steps.lines]
    assert [int(m[1]) for m in found] == list(range(4, total + 1))
    assert all(int(m[2].replace(",", "")) > 0 for m in found)
    assert all(_seconds(m[3]) <= wall + 1 for m in found)  # the time left: a share of this run's time
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("epoch 1/1:")]
    assert float(re.search(r"\| ([\d.]+) s \(", line)[1]) <= wall + 0.05 and "resumed at step 4" in line, line


def _seconds(duration: str) -> int:
    """`2m10s` -> 130 (what `_duration` wrote)."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    return 3600 * int(parts[1] or 0) + 60 * int(parts[2] or 0) + int(parts[3] or 0)
