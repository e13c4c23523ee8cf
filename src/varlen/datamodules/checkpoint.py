"""What a DataModule puts in every checkpoint and takes back: its data state and the training position.

`DataStateCheckpoint` is the part of `VarLenDataModule` that
Lightning's `state_dict` / `load_state_dict` reach: what the data taught the model (class names,
training statistics, the tokenizer...) as plain values, refused or restored when a checkpoint is loaded,
and the training sampler's position while fitting. The base sets `datasets`, `trainer`,
`_train_sampler`, `_checkpoint_state`, `_resume_position` and `rungs` (the shape policy's, saved
with the data state and the settings they were fitted for: a run resumed on another number of ranks keeps
its rungs, so its batches; one resumed with other batching settings fits its own, and its sampler plans the
rest of the saved epoch again under them). A mid-epoch checkpoint whose draw changed (`sample_weights`,
`source_weights`, `mix`) is refused by name, with both ways out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from varlen import notices
from varlen.batching.resume import RESUME_VARIABLE, mid_epoch, skip_requested
from varlen.errors import DataError

__all__ = ["DRAWN", "DataStateCheckpoint", "plain"]

#: the data state's keys that decide which samples an epoch draws: inside an epoch, a change is refused
DRAWN = ("sample_weights", "source_weights", "mix")


def plain(value: Any) -> Any:
    """`value` as JSON-like Python values (arrays and tuples as lists, numpy scalars as Python
    ones): what a checkpoint can hold and `torch.load(weights_only=True)` reads back."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


class DataStateCheckpoint:
    """The checkpoint side of a DataModule (see the module docstring)."""

    datasets: dict[str, Any]
    sample_weights: str | None
    source_weights: Any
    mix: str
    _train_sampler: Any
    _checkpoint_state: dict[str, Any] | None
    _resume_position: dict[str, Any] | None
    served_steps: dict[int, int]
    rungs: Any
    batch_size: int | None
    max_tokens: Any
    max_shapes: int | None
    rung_batch_sizes: dict[int, int] | None
    pad_to_multiple_of: int | None
    sampler_cost: str
    #: the trainer's `reload_dataloaders_every_n_epochs` while a resumed epoch of its own length runs (the
    #: next epoch's loader is reloaded once, so that Lightning reads its length), put back at that reload
    _reload_was: int | None = None

    def rungs_of(self, lengths: list[list[int]] | None) -> Any:
        """Rungs of these lengths (`rungs_of`)."""

    # -- what the data taught the model: saved in every checkpoint ----------------------------

    #: keys of `data_state` whose change a checkpoint refuses: a model trained on other
    #: classes (or classes in another order, or another vocabulary) is another model
    state_must_match: tuple[str, ...] = ("class_names",)
    #: keys of `data_state` computed from the training split: a checkpoint's values replace
    #: the rebuilt ones (`restore_data_state`), so a model meets data in its training units
    state_restored: tuple[str, ...] = ()

    def data_state(self) -> dict[str, Any]:
        """What the model's outputs depend on that the data taught it or was chosen for it (class
        names in id order, training-split statistics, the tokenizer...), known after `setup`.
        Default: `class_names` where the DataModule has them."""
        names = getattr(self, "class_names", None)
        return {"class_names": list(names)} if names is not None else {}

    def restore_data_state(self, state: Mapping[str, Any]) -> None:
        """Put a checkpoint's `state_restored` values in place of the rebuilt ones."""

    def _saved_state(self) -> dict[str, Any]:
        """`data_state`, how the training samples were drawn (a change warns; inside an epoch it is
        refused: its rest cannot be drawn again), the rungs and the settings they were fitted for."""
        drawn = {name: getattr(self, name) for name in DRAWN}
        rungs = {"rungs": None if self.rungs is None else [list(r.lengths) for r in self.rungs]}
        return plain({**self.data_state(), **drawn, **rungs, "batching": self._batching()})

    def _batching(self) -> dict[str, Any]:
        """The settings the rungs are fitted for: the same at a resume, the checkpoint's rungs are adopted."""
        names = ("batch_size", "max_tokens", "max_shapes", "rung_batch_sizes", "pad_to_multiple_of", "sampler_cost")
        return {name: getattr(self, name, None) for name in names}

    def plain_data_state(self) -> dict[str, Any]:
        """`data_state` as plain values (lists, Python numbers)."""
        return plain(self.data_state())

    def state_dict(self) -> dict[str, Any]:
        """Lightning saves this in every checkpoint: `data_state` as plain values, while fitting the
        training sampler's position (see `resume_position`), and a mixture's training batches per rank
        served in each epoch (where a schedule of steps starts the next one)."""
        if not self.datasets:
            return {}
        position = self._train_position()
        steps = {"served_steps": {str(e): n for e, n in self.served_steps.items()}} if self.served_steps else {}
        return {"data_state": self._saved_state()} | ({"train_position": position} if position else {}) | steps

    def _train_position(self) -> dict[str, Any] | None:
        """The training sampler's state at the batch Lightning has trained up to, or None when not fitting."""
        trainer, sampler = self.trainer, self._train_sampler
        if trainer is None or sampler is None or trainer.state.fn != "fit":
            return None
        epoch = int(trainer.current_epoch)
        trained = int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)
        state = sampler.state_dict() | {"epoch": epoch, "batches_served": trained}
        if state.get("epoch_batches") is not None and epoch != sampler.epoch:  # the length of another epoch
            state["epoch_batches"] = None
        return state | {"segments": sampler.saved_segments(epoch)}

    def resume_position(self) -> dict[str, Any] | None:
        """The training position a loaded checkpoint recorded, handed (once) to the training sampler it builds.

        Lightning reads the loader's length before it loads the loader's own state, and ends the epoch when
        its count of batches reaches that length: an epoch resumed on another number of ranks, whose length
        is its own, would end early (samples lost) unless the sampler knows its position when it is made.
        """
        position, self._resume_position = self._resume_position, None
        return position

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Check a checkpoint's data state against the rebuilt one and restore its statistics.

        Lightning calls this after `setup`; called before, it is applied when `setup` runs.

        Raises:
            DataError: a `state_must_match` value changed, or (inside an epoch) how the training samples
                are drawn: each names both values and the ways out.
        """
        self._resume_position = state_dict.get("train_position")
        self.served_steps = {int(e): int(n) for e, n in state_dict.get("served_steps", {}).items()}
        saved = state_dict.get("data_state")
        if saved is None:
            return
        if not self.datasets:
            self._checkpoint_state = dict(state_dict)
            return
        batching = plain(self._batching())
        if saved.get("batching", batching) == batching:
            self.rungs = self.rungs_of(saved.get("rungs"))  # the run's own (a checkpoint without them: exact buckets)
        current = self._saved_state()
        quiet = ("rungs", "batching", *self.state_restored)  # a change of batching: the sampler says it
        changed = [k for k in saved if k in current and saved[k] != current[k] and k not in quiet]
        refused = [k for k in changed if k in self.state_must_match]
        if refused:
            raise DataError(
                f"{type(self).__name__}: the checkpoint was trained with "
                + "; ".join(f"{k}={saved[k]!r} where this DataModule has {current[k]!r}" for k in refused)
                + ": its outputs would mean something else. Use the training's values (e.g. class_names=...)"
            )
        self._refuse_other_draws(saved, current, [k for k in changed if k in DRAWN])
        if changed:
            notices.warn(
                f"{type(self).__name__}: the checkpoint was trained with "
                + "; ".join(f"{k}={saved[k]!r} (here {current[k]!r})" for k in changed)
            )
        restored = {k: saved[k] for k in self.state_restored if k in saved}
        if restored:
            self.restore_data_state(restored)

    def _refuse_other_draws(self, saved: Mapping[str, Any], current: Mapping[str, Any], drawn: list[str]) -> None:
        """Refuse a checkpoint saved inside an epoch whose samples were drawn otherwise: the rest of that draw
        cannot be told from the position (at an epoch's start or end, the new draw simply starts).

        Raises:
            DataError: naming each setting, both values, and both ways out.
        """
        position = self._resume_position
        if not drawn or position is None or not mid_epoch(position) or skip_requested():
            return
        epoch, served = int(position["epoch"]), int(position["batches_served"])
        raise DataError(
            f"{type(self).__name__}: the checkpoint stopped inside epoch {epoch} ({served} batches per rank served), "
            "whose samples were drawn with "
            + "; ".join(f"{k}={saved[k]!r} where this DataModule has {k}={current[k]!r}" for k in drawn)
            + ": the rest of that draw cannot be planned again. Resume with "
            + ", ".join(f"{k}={saved[k]!r}" for k in drawn)
            + f" to finish epoch {epoch} (and change it from a checkpoint saved at an epoch's end), or set "
            f"{RESUME_VARIABLE}=next_epoch to skip the rest of epoch {epoch} and start epoch {epoch + 1} with "
            + ", ".join(f"{k}={current[k]!r}" for k in drawn)
        )

    def _reload_after_resumed_epoch(self, sampler: Any) -> None:
        """Have the fitting trainer reload the training loader once, at the epoch after a resumed one of its own
        length: Lightning reads a loader's length once per load and ends every epoch at that count, so a next
        epoch longer than the resumed one would lose its last batches (their samples never served)."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != "fit" or not getattr(sampler, "resumed_epoch", lambda: False)():
            return
        if trainer.reload_dataloaders_every_n_epochs != 1:
            self._reload_was = trainer.reload_dataloaders_every_n_epochs
            trainer.reload_dataloaders_every_n_epochs = 1

    def _reloaded(self) -> None:
        """The trainer's own `reload_dataloaders_every_n_epochs` back, once the reload after a resumed epoch came."""
        if self._reload_was is not None and self.trainer is not None:
            self.trainer.reload_dataloaders_every_n_epochs = self._reload_was
        self._reload_was = None
