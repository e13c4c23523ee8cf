"""A fit that an interruption costs nothing: `last.ckpt` kept fresh, written whole, and a clean stop.

`varlen fit` adds these to its Trainer (any Trainer can):

* `Resumable` keeps `last.ckpt` in the checkpoint folder (the first ModelCheckpoint's, where
  Lightning's epoch-end checkpoints go) every `every_min` minutes of training, and on SIGINT (Ctrl-C) or
  SIGTERM (a scheduler's pre-emption) stops the fit at the end of the step being trained: `last.ckpt` is
  saved there, where the training position is exact (a DataModule's `train_position`), then Lightning's own
  interruption runs (its `KeyboardInterrupt` and `SIGTERMException` paths). A second Ctrl-C stops at
  once, saving nothing. Lightning alone saves nothing on Ctrl-C and, on SIGTERM, trains to the epoch's end and
  exits 0: a scheduler reads a pre-empted run as finished. `Resumable.stop` says what happened, and
  `Stop.line` the command that resumes it; `varlen fit` prints it and exits `128 + the signal`
  (130, 143), as a shell reports a process a signal ended.
* `AtomicCheckpointIO` writes each checkpoint under a temporary name in its own folder, then renames
  it: a kill or a full disk mid-write never leaves a torn file under the final name (Lightning's IO writes
  through the system's temporary folder, and moves from another file system by copying into place).
"""

from __future__ import annotations

import math
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from varlen.storage.cache import atomic_write, writable_folder

__all__ = [
    "AtomicCheckpointIO",
    "Resumable",
    "Stop",
    "check_output_folders",
    "fit_resumably",
    "resume_command",
    "with_resumable",
]

#: the way out of a checkpoint folder that cannot be written
CHECKPOINT_ADVICE = "give --trainer.default_root_dir (or the ModelCheckpoint's dirpath) a folder with room"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO, a local checkpoint written under a temporary name in its folder and renamed
    into place (`varlen.storage.cache.atomic_write`: a full or read-only folder is a DataError naming it);
    a URL (`s3://`) goes through Lightning's own."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_write(Path(path), lambda tmp: torch.save(checkpoint, tmp), advice=CHECKPOINT_ADVICE)


@dataclass(frozen=True)
class Stop:
    """How a fit was interrupted: the signal, the epoch (from 0) and global step it stopped at, and the
    checkpoint saved there (None: none saved at that step) or, failing that, an earlier one (`earlier`)."""

    signal: int
    epoch: int
    step: int
    checkpoint: str | None = None
    earlier: str | None = None

    @property
    def status(self) -> int:
        """The exit status a shell gives a process this signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signal

    def line(self, argv: Sequence[str] | None) -> str:
        """The one line a user reads: where the fit stopped and the command that resumes it (`argv`: the
        command's arguments after `varlen`; None: unknown, the checkpoint alone is named)."""
        where = f"varlen: interrupted ({signal.Signals(self.signal).name}) at epoch {self.epoch + 1} step {self.step}"
        path = self.checkpoint or self.earlier
        if path is None:
            return f"{where}; no checkpoint saved yet, nothing to resume"
        saved = "saved there" if self.checkpoint else "stopped at once; the steps since the last save are lost"
        again = resume_command(argv, path) if argv else f"the same command with --ckpt_path {shlex.quote(path)}"
        return f"{where}; {saved}: {path}; resume with: {again}"


def resume_command(argv: Sequence[str], checkpoint: str) -> str:
    """`varlen` and `argv` with `--ckpt_path checkpoint` in place of any `--ckpt_path` it had."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return shlex.join(["varlen", *kept, "--ckpt_path", str(checkpoint)])


class Resumable(pl.Callback):
    """Keeps a fit resumable (see the module docstring).

    Args:
        every_min: minutes of training between two saves of `last.ckpt` (at a step's end); 0: only at an
            interruption (and where the ModelCheckpoint saves it: `save_last`).
    """

    def __init__(self, every_min: float = 15.0) -> None:
        if every_min < 0:
            raise ValueError(f"every_min={every_min}: give the minutes between two saves of last.ckpt (0: none)")
        self.every_s = 60.0 * every_min
        self.stop: Stop | None = None
        self.path: str | None = None  # last.ckpt of this run (None: no checkpoint folder, checkpointing off)
        self._signal: int | None = None  # a SIGINT received (the first: stop at the step's end)
        self._due = math.inf
        self._saved_step = -1
        self._previous: Any = None  # the SIGINT handler this one replaced
        self._loud = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.path = _last_path(trainer)
        self._due = time.monotonic() + self.every_s if self.every_s > 0 else math.inf
        self._loud = trainer.is_global_zero
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._signal is not None:  # the second: stop now, wherever the step is
            self._restore()
            raise KeyboardInterrupt
        self._signal = signal.SIGINT
        if self._loud:
            print(
                "varlen: SIGINT: stopping at the end of this step, after saving last.ckpt (Ctrl-C again: stop now)",
                file=sys.stderr,
                flush=True,
            )

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        signum = self._signal or (signal.SIGTERM if trainer.received_sigterm else None)
        due = time.monotonic() >= self._due
        if trainer.world_size > 1:  # rank zero decides: every rank saves (a barrier) and stops at the same step
            signum, due = trainer.strategy.broadcast((signum, due), src=0)
        if due or signum is not None:
            self._save(trainer)
            self._due = time.monotonic() + self.every_s if self.every_s > 0 else math.inf
        if signum is not None:
            self._signal = signum
            raise KeyboardInterrupt if signum == signal.SIGINT else SIGTERMException()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Records an interruption (`stop`); a SIGTERM that Lightning stopped at an epoch's end or
        between validation batches (a whole step's state) saves `last.ckpt` there too."""
        if not isinstance(exception, KeyboardInterrupt | SIGTERMException):
            self._restore()
            return
        signum = signal.SIGINT if isinstance(exception, KeyboardInterrupt) else signal.SIGTERM
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking and self.path is not None
        if signum == signal.SIGTERM and fitting and self._saved_step != trainer.global_step:
            self._save(trainer)
        saved = self.path if self._saved_step == trainer.global_step else None
        earlier = self.path if saved is None and self.path and Path(self.path).is_file() else None
        self.stop = Stop(signum, trainer.current_epoch, trainer.global_step, saved, earlier)

    def _save(self, trainer: pl.Trainer) -> None:
        if self.path is not None:
            trainer.save_checkpoint(self.path, weights_only=False)  # a whole state, to resume from
            self._saved_step = trainer.global_step

    def _restore(self) -> None:
        """Put back the SIGINT handler this callback replaced (not Lightning's shutdown one, set since)."""
        if self._previous is not None and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, self._previous)
        self._previous = None


def _last_path(trainer: pl.Trainer) -> str | None:
    """Where this run keeps `last.ckpt`: the first ModelCheckpoint's `last_model_path` (a resumed run's
    own), else `last.ckpt` in its folder, versioned as Lightning versions it (`last-v1.ckpt`) where another
    run's is there; None without a ModelCheckpoint (checkpointing off)."""
    callback = trainer.checkpoint_callback
    if not isinstance(callback, ModelCheckpoint) or callback.dirpath is None:
        return None
    if callback.last_model_path:
        return callback.last_model_path
    path, version = callback.format_checkpoint_name({}, callback.CHECKPOINT_NAME_LAST), 1
    resumed = Path(trainer.ckpt_path).resolve() if trainer.ckpt_path else None
    while Path(path).exists() and Path(path).resolve() != resumed:
        path, version = callback.format_checkpoint_name({}, callback.CHECKPOINT_NAME_LAST, ver=version), version + 1
    if callback.save_last:
        callback.last_model_path = path  # its own save_last (an epoch's end) writes the same file
    return path


def check_output_folders(trainer: pl.Trainer) -> None:
    """Before a fit: the folders it will write (`default_root_dir`, the ModelCheckpoint's `dirpath`, the
    loggers') made and checked writable, so that a file or a read-only folder there is one DataError naming it
    and the setting, not a traceback minutes later."""
    callback = trainer.checkpoint_callback
    folders = {"--trainer.default_root_dir": trainer.default_root_dir}
    if isinstance(callback, ModelCheckpoint) and callback.dirpath is not None:
        folders["the ModelCheckpoint's dirpath"] = callback.dirpath
    for logger in trainer.loggers:
        if getattr(logger, "save_dir", None):
            folders[f"the {type(logger).__name__}'s save_dir"] = logger.save_dir
    for setting, folder in folders.items():
        if "://" not in str(folder):
            writable_folder(Path(folder) / ".probe", advice=f"give {setting} a folder you can write to")


def with_resumable(callbacks: Sequence[pl.Callback], every_min: float, checkpointing: bool) -> list[pl.Callback]:
    """`callbacks` with one `Resumable` and, where `checkpointing` is on and none is listed,
    Lightning's default ModelCheckpoint (each epoch's end) with `save_last`: `last.ckpt` then follows every
    save. A listed ModelCheckpoint keeps its settings (`last.ckpt` goes to its folder)."""
    callbacks = list(callbacks)
    if not any(isinstance(c, Resumable) for c in callbacks):
        callbacks.append(Resumable(every_min))
    if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
        callbacks.append(ModelCheckpoint(save_last=True))
    return callbacks


def fit_resumably(trainer: pl.Trainer, model: pl.LightningModule, argv: Sequence[str] | None, **kwargs: Any) -> None:
    """`trainer.fit(model, **kwargs)` once the folders it writes are checked (`check_output_folders`);
    a fit a `Resumable` saw interrupted prints `Stop.line` (`argv`: the command's arguments) and
    exits with `Stop.status` (130, 143), never 0 (Lightning's after SIGTERM) or 1 (after Ctrl-C)."""
    check_output_folders(trainer)
    try:
        trainer.fit(model, **kwargs)
    except BaseException:
        stop = next((c.stop for c in trainer.callbacks if isinstance(c, Resumable) and c.stop), None)
        if stop is None:
            raise
        if trainer.is_global_zero:
            print(stop.line(argv), file=sys.stderr, flush=True)
        sys.exit(stop.status)
