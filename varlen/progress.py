"""`EpochProgress`: one line per epoch that a log file or a terminal can both show.

Lightning's progress bar redraws a line many times a second, which is unreadable in a log (the CLI
shows it on a terminal only). This callback prints one line when an epoch ends (after its
validation): the epoch, the chosen metrics, the padding efficiency of the epoch's training batches
(and of each variable-length field, where a DataModule serves several: ``padding 0.720 (signal 0.810,
events 0.550)``),
the training samples per second (data loading included) and, where a
:class:`~varlen.batching.data_wait.DataWait` listed before it timed the epoch, the share of it spent
waiting for data. ``varlen fit`` adds one (after its DataWait) unless
``--epoch_lines=false``; a progress bar that shows prints the line above itself, not inside it.
Plain text: no terminal codes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from varlen.batching.telemetry import training_batch_stats, training_field_stats

__all__ = ["EpochProgress"]


class EpochProgress(pl.Callback):
    """Prints ``<name> epoch 2/6: val/loss 0.41 | padding 0.981 | 2,904 samples/s | waiting 2.1% | 3.1 s``
    per epoch.

    Args:
        metrics: logged metrics to show (default: every ``val/`` metric that was logged).
        name: a prefix naming the run (e.g. the scenario).
    """

    def __init__(self, metrics: Sequence[str] | None = None, name: str = "") -> None:
        self.metrics = list(metrics) if metrics else None
        self.name = name
        self._start = 0.0
        self._samples = self._real = self._padded = 0
        self._fields: dict[str, list[int]] = {}  # field -> [real, padded] this epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()
        self._samples = self._real = self._padded = 0
        self._fields = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
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
        parts.append(f"{elapsed:.1f} s")
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        prefix = f"{self.name} " if self.name else ""
        line = f"{prefix}epoch {trainer.current_epoch + 1}{epochs}: " + " | ".join(parts)
        bar = trainer.progress_bar_callback
        if bar is not None and bar.is_enabled:
            bar.print(line)
        else:
            print(line, flush=True)


def _wait_share(trainer: pl.Trainer) -> float | None:
    """This epoch's data-wait share from a DataWait that ran its epoch end before this callback's, if any."""
    from varlen.batching.data_wait import DataWait  # data_wait imports telemetry, as this module does

    for callback in trainer.callbacks:
        last = callback.epochs[-1] if isinstance(callback, DataWait) and callback.epochs else {}
        if last.get("epoch") == trainer.current_epoch:
            return last["wait_share"]
    return None
