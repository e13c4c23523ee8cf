"""`EpochProgress`: one line per epoch that a log file or a terminal can both show.

Lightning's progress bar redraws a line many times a second, which is unreadable in a log (the CLI
shows it on a terminal only). This callback prints one line when an epoch ends (after its
validation): the epoch, the chosen metrics, the padding efficiency of the epoch's training batches
(and of each variable-length field, where a DataModule serves several: `padding 0.720 (signal 0.810,
events 0.550)`),
the training samples per second (data loading included) and, where a
`DataWait` listed before it timed the epoch, the share of it spent
waiting for data. `varlen fit` adds one (after its DataWait) unless
`--epoch_lines=false`; a progress bar that shows prints the line above itself, not inside it.
Where no progress bar shows validation, a validation still running after `say_validation_after` seconds says
so once (`validating epoch 2/6: 12/40 batches in 5.1 s`): a long one is never silent, a short one adds no line
to every epoch; the epoch line gives its time (`3.1 s (validation 0.4 s)`). Plain text: no terminal codes;
every line through `varlen.notices.say` (rank zero, above a progress bar that shows).

`StepProgress`: off a terminal, where no progress bar shows, a line every 30 s while an epoch trains (the
step of the epoch's total, samples/s, the share spent waiting for data, the time left in the epoch), so a
run in a log file or under a scheduler says it is alive. `varlen fit` adds it there (`--progress_every`).

Both clocks start when an epoch starts, or when training starts: an epoch resumed from a mid-epoch checkpoint
(Lightning then calls no `on_train_epoch_start`) is timed from the resume, its rate and time left from the
steps trained since, and its epoch line says where it resumed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from varlen import notices
from varlen.batching.telemetry import training_batch_stats, training_field_stats

__all__ = ["EpochProgress", "StepProgress"]


class EpochProgress(pl.Callback):
    """Prints `<name> epoch 2/6: val/loss 0.41 | padding 0.981 | 2,904 samples/s | waiting 2.1% | 3.1 s`
    per epoch.

    Args:
        metrics: logged metrics to show (default: every `val/` metric that was logged).
        name: a prefix naming the run (e.g. the scenario).
        say_validation_after: seconds after which a validation still running says so, where no bar shows it.
    """

    def __init__(self, metrics: Sequence[str] | None = None, name: str = "", say_validation_after: float = 5.0) -> None:
        self.metrics = list(metrics) if metrics else None
        self.name = name
        self.say_validation_after = say_validation_after
        self._said, self._val_batches = False, 0  # this validation's line was said; its batches so far
        self._start = 0.0
        self._samples = self._real = self._padded = 0
        self._fields: dict[str, list[int]] = {}  # field -> [real, padded] this epoch
        self._first: int | None = None  # the epoch's first batch this run trains (> 0: resumed mid-epoch)
        self._validating = self._validated = 0.0  # when this validation began, the epoch's seconds of it

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_train_epoch_start(trainer, pl_module)  # a resumed epoch starts here, with no epoch start

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()
        self._samples = self._real = self._padded = 0
        self._fields = {}
        self._first = None
        self._validated = 0.0

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bar = trainer.progress_bar_callback  # one that shows says it itself; a sanity check says nothing
        self._said = trainer.sanity_checking or (bar is not None and bar.is_enabled)
        self._validating, self._val_batches = time.perf_counter(), 0

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args, **kwargs) -> None:
        """Once per validation, where no progress bar shows it and it has run `say_validation_after` seconds:
        a line that it runs, how far (its whole time: in the epoch line)."""
        seconds, self._val_batches = time.perf_counter() - self._validating, self._val_batches + 1
        if self._said or seconds < self.say_validation_after:
            return
        self._said = True
        total = sum(n for n in trainer.num_val_batches if isinstance(n, int)) if trainer.num_val_batches else 0
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        prefix = f"{self.name} " if self.name else ""
        done = f"{self._val_batches:,}/{total:,} batches in {seconds:.1f} s"
        notices.say(f"{prefix}validating epoch {trainer.current_epoch + 1}{epochs}: {done}", trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated += time.perf_counter() - self._validating

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        self._first = batch_idx if self._first is None else self._first
        stats = training_batch_stats(trainer, batch)
        if stats is not None:
            self._samples += stats.samples
            self._real += stats.real
            self._padded += stats.padded
        for name, counts in (training_field_stats(trainer) or {}).items():
            part = self._fields.setdefault(name, [0, 0])
            part[0], part[1] = part[0] + counts.real, part[1] + counts.padded

    @rank_zero_only
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        logged = trainer.callback_metrics
        names = self.metrics or sorted(k for k in logged if k.startswith("val/"))
        parts = [f"{k} {float(logged[k]):.4g}" for k in names if k in logged]
        if self._padded:
            each = ", ".join(f"{name} {real / max(padded, 1):.3f}" for name, (real, padded) in self._fields.items())
            parts.append(f"padding {self._real / self._padded:.3f}" + (f" ({each})" if each else ""))
        parts.append(f"{self._samples / elapsed:,.0f} samples/s")
        waited = _wait_share(trainer)
        if waited is not None:
            parts.append(f"waiting {waited:.1%}")
        validated = f", validation {self._validated:.1f} s" if self._validated else ""
        resumed = f", resumed at step {self._first + 1}" if self._first else ""
        parts.append(f"{elapsed:.1f} s" + (f" ({(validated + resumed)[2:]})" if validated or resumed else ""))
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        prefix = f"{self.name} " if self.name else ""
        notices.say(f"{prefix}epoch {trainer.current_epoch + 1}{epochs}: " + " | ".join(parts), trainer)


def _wait_share(trainer: pl.Trainer) -> float | None:
    """This epoch's data-wait share from a DataWait that ran its epoch end before this callback's, if any."""
    from varlen.batching.data_wait import DataWait  # data_wait imports telemetry, as this module does

    for callback in trainer.callbacks:
        last = callback.epochs[-1] if isinstance(callback, DataWait) and callback.epochs else {}
        if last.get("epoch") == trainer.current_epoch:
            return last["wait_share"]
    return None


class StepProgress(pl.Callback):
    """Prints `epoch 1/3 step 120/640 (19%) | 38 samples/s | waiting 2.1% | 2m10s left` every `every` seconds
    of training (rank zero; the rate and wait are this rank's, since the epoch began).

    Args:
        every: seconds between lines.
        name: a prefix naming the run.
    """

    def __init__(self, every: float = 30.0, name: str = "") -> None:
        self.every, self.name = float(every), name
        self.lines: list[str] = []
        self._start = self._last = 0.0
        self._samples = 0
        self._first: int | None = None  # the epoch's first batch this run trains (> 0: resumed mid-epoch)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_train_epoch_start(trainer, pl_module)  # a resumed epoch starts here, with no epoch start

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last = time.perf_counter()
        self._samples = 0
        self._first = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        self._first = batch_idx if self._first is None else self._first
        stats = training_batch_stats(trainer, batch)
        self._samples += stats.samples if stats is not None else 0
        now = time.perf_counter()
        if now - self._last >= self.every:
            self._last = now
            self._say(trainer, batch_idx + 1, now - self._start)

    @rank_zero_only
    def _say(self, trainer: pl.Trainer, step: int, elapsed: float) -> None:
        """The line for `step` of the epoch, `elapsed` seconds after this run's first step of it began."""
        total = trainer.num_training_batches
        known = isinstance(total, int) and total > 0
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        where = f"step {step}/{total} ({step / total:.0%})" if known else f"step {step}"
        parts = [f"epoch {trainer.current_epoch + 1}{epochs} {where}", f"{self._samples / elapsed:,.0f} samples/s"]
        waited = _waited(trainer)
        if waited is not None:
            parts.append(f"waiting {waited / elapsed:.1%}")
        if known:  # at the pace of the steps this run trained (a resumed epoch's earlier ones ran elsewhere)
            parts.append(f"{_duration((total - step) * elapsed / (step - (self._first or 0)))} left in the epoch")
        line = (f"{self.name} " if self.name else "") + " | ".join(parts)
        self.lines.append(line)
        notices.say(line, trainer)


def _waited(trainer: pl.Trainer) -> float | None:
    from varlen.batching.data_wait import DataWait

    return next((c.waited_s for c in trainer.callbacks if isinstance(c, DataWait)), None)


def _duration(seconds: float) -> str:
    """`45s`, `2m10s`, `1h05m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
