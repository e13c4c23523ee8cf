"""`fit_callbacks`: the callbacks `varlen fit` adds to its Trainer, in one call, for your own Trainer too.

`varlen fit` builds its list with this same call (its options `--data_wait`, `--warm_shapes`, `--epoch_lines`,
`--checkpoint_every_min`, `--progress_every` are this function's arguments), so a script's
`Trainer(callbacks=fit_callbacks())` trains as the command does: the time spent waiting for data
(`DataWait`), each batch shape run once before training where a new one has a cost (`WarmShapes`), one line an
epoch (`EpochProgress`), a line every 30 s where no progress bar shows (`StepProgress`), and `last.ckpt` kept
at intervals and at an interruption (`Resumable`, beside a `ModelCheckpoint(save_last=True)`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Literal

import lightning.pytorch as pl

from varlen.batching.data_wait import DataWait
from varlen.batching.warmup import WarmShapes
from varlen.callbacks.progress import EpochProgress, StepProgress
from varlen.callbacks.resumable import with_resumable

__all__ = ["fit_callbacks", "one_of_kind"]


def fit_callbacks(
    callbacks: Sequence[pl.Callback] | pl.Callback | None = None,
    *,
    data_wait: bool = True,
    warm_shapes: bool | Literal["always"] = True,
    epoch_lines: bool | Sequence[str] = True,
    checkpoint_every_min: float = 15.0,
    checkpointing: bool = True,
    progress_every: float = 30.0,
    progress_bar: bool | None = None,
) -> list[pl.Callback]:
    """`callbacks` (yours, kept first) with what `varlen fit` adds; one you list of a kind replaces varlen's.

    Args:
        callbacks: your own callbacks.
        data_wait: a `DataWait` (False: none).
        warm_shapes: a `WarmShapes`: True where a new shape costs (not a CPU in eager mode), `"always"`, False.
        epoch_lines: an `EpochProgress`: True, every `val/` metric; a list, those metrics; False, none.
        checkpoint_every_min: minutes between `Resumable`'s saves of `last.ckpt` (0: at epoch ends and
            interruptions only).
        checkpointing: as the Trainer's `enable_checkpointing`: False adds no `ModelCheckpoint`.
        progress_every: seconds between `StepProgress` lines where the progress bar does not show (0: none).
        progress_bar: whether the Trainer shows its progress bar (None: where stdout is a terminal; give the
            Trainer `enable_progress_bar=sys.stdout.isatty()` to match).
    """
    given = [] if callbacks is None else [callbacks] if isinstance(callbacks, pl.Callback) else list(callbacks)
    # a DataWait before an EpochProgress: its line shows the epoch's share
    given = one_of_kind(given, DataWait, data_wait, DataWait)
    when = "always" if warm_shapes == "always" else "auto"
    given = one_of_kind(given, WarmShapes, warm_shapes, lambda: WarmShapes(when=when))
    metrics = None if epoch_lines is True else epoch_lines
    given = one_of_kind(given, EpochProgress, epoch_lines, lambda: EpochProgress(metrics=metrics))
    given = with_resumable(given, checkpoint_every_min, checkpointing)
    bar = sys.stdout.isatty() if progress_bar is None else progress_bar
    if progress_every and not bar and not any(isinstance(c, StepProgress) for c in given):
        given.append(StepProgress(progress_every))
    return given


def one_of_kind(callbacks: list, kind: type, setting: object, make: Callable[[], object]) -> list:
    """`callbacks` without any `kind` where `setting` is False, else with one (`make()`) where none is
    listed (a listed one replaces varlen's)."""
    if setting is False:
        return [c for c in callbacks if not isinstance(c, kind)]
    return callbacks if any(isinstance(c, kind) for c in callbacks) else [*callbacks, make()]
