"""`WarmShapes` gives back everything its warm-up touched (parameters and buffers by name, reassigned ones
too, plain attributes, optimizer and scheduler state, the AMP scaler, every generator) and runs where a new
batch shape has a first-time cost; the shape advice is given there only, naming only a knob that exists."""

from __future__ import annotations

import logging
import random
import time

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from toy import ToyDataModule, ToySequences

from varlen.batching.data_wait import DataWait
from varlen.batching.given_back import given_back
from varlen.batching.shape_cost import first_time_cost
from varlen.batching.warmup import WarmShapes
from varlen.callbacks.progress import EpochProgress
from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.models.base import VarLenModule


class PaddedToys(VarLenDataModule):
    """Toy sequences padded to the rungs by the default collate (a DataModule that takes `max_shapes`)."""

    ragged_keys = ("ids",)
    mask_keys = ("ids_mask",)

    def __init__(self, max_tokens: int = 96, max_shapes: int | None = 6, seed: int = 0) -> None:
        super().__init__(**base_args(locals()))

    def build(self, stage: str | None) -> dict[str, ToySequences]:
        val = ToySequences(64, 2)
        return {"train": ToySequences(160, 1), "val": val, "test": val}


class Reassigning(VarLenModule):
    """What a training step may change besides the gradients: a buffer its forward reassigns (an EMA), a plain
    attribute it counts in, the optimizer's learning rate decayed in place; Adam keeps moments."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 2)
        self.register_buffer("ema", torch.zeros(()))
        self.calls = 0

    def forward(self, batch: dict) -> torch.Tensor:
        mask = batch["ids_mask"].unsqueeze(-1).float()
        pooled = (self.embed(batch["ids"]) * mask).sum(1) / mask.sum(1)
        self.ema = 0.9 * self.ema + 0.1 * pooled.detach().mean()  # a new tensor under the buffer's name
        return self.head(pooled) + self.ema

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        self.calls += 1
        for group in self.optimizers().param_groups:
            group["lr"] *= 0.99
        loss = torch.nn.functional.cross_entropy(self(batch), torch.as_tensor(batch["label"]))
        return loss + 1e-3 * self.calls

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)


def fit(callbacks: list, tmp_path, ckpt_path=None, epochs: int = 2) -> tuple[dict, dict, Reassigning]:
    """The state a fit ends with: the module's state_dict and the optimizer's."""
    pl.seed_everything(0, verbose=False)
    model = Reassigning()
    saves = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=saves, enable_progress_bar=False,
        enable_model_summary=False, callbacks=callbacks, default_root_dir=tmp_path, num_sanity_val_steps=0,
        limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, PaddedToys(), ckpt_path=ckpt_path)
    return model.state_dict(), trainer.optimizers[0].state_dict(), model


def same(a, b) -> bool:
    """Equal bit for bit, through dicts and lists of tensors and plain values."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(same, a, b))
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "resumed"])
def test_a_warm_up_gives_back_reassigned_buffers_attributes_and_the_optimizer(resumed: bool, tmp_path) -> None:
    """With and without the warm-up, the same weights, buffers and optimizer state at the end (resumed: Adam's
    moments loaded before the warm-up runs)."""
    ckpt = None
    if resumed:
        fit([ModelCheckpoint(dirpath=tmp_path, save_last=True)], tmp_path, epochs=1)
        ckpt = tmp_path / "last.ckpt"
    warm = WarmShapes(when="always")
    (weights, optimizer, model), (plain_weights, plain_optimizer, plain_model) = (
        fit(callbacks, tmp_path, ckpt_path=ckpt) for callbacks in ([warm], [])
    )
    assert warm.shapes > 1
    assert [k for k in plain_weights if not same(weights[k], plain_weights[k])] == []
    assert same(optimizer, plain_optimizer) and optimizer["state"]  # Adam's moments, and the decayed lr
    assert model.calls == plain_model.calls


def test_the_scaler_schedulers_generators_and_new_attributes_are_given_back() -> None:
    """Whatever runs inside: the AMP scaler's scale, a scheduler's step, every generator, an attribute set or a
    buffer registered inside, a parameter changed in place."""
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale(torch.ones(()))  # the scale exists, as after a first step
    before = {k: v.clone() for k, v in module.state_dict().items()}
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    draws = (random.random(), np.random.rand(), torch.rand(()))
    random.setstate(states[0]), np.random.set_state(states[1]), torch.set_rng_state(states[2])
    with given_back(module, [optimizer], [scheduler], scaler):
        module(torch.ones(4, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
        scaler.update(new_scale=2.0)
        module.register_buffer("added", torch.ones(1))
        module.register_buffer("cache", torch.ones(1), persistent=False)
        module.note = "set inside"
        with torch.no_grad():
            module.weight.mul_(3)
        random.random(), np.random.rand(), torch.rand(())
    assert same(module.state_dict(), before) and not hasattr(module, "note") and module.weight.grad is None
    assert list(module.buffers()) == [] and module._non_persistent_buffers_set == set()
    assert optimizer.state_dict()["state"] == {} and optimizer.param_groups[0]["lr"] == 0.1
    assert scheduler.last_epoch == 0 and scaler.get_scale() == 1024.0
    assert same((random.random(), np.random.rand(), torch.rand(())), draws)


def test_on_a_cpu_in_eager_mode_the_warm_up_is_skipped_with_one_line(tmp_path, caplog) -> None:
    """No shape costs anything extra there: nothing runs, one line says why and how to run it anyway."""
    warm = WarmShapes()
    with caplog.at_level(logging.INFO, logger="varlen"):
        fit([warm], tmp_path, epochs=1)
    assert warm.shapes == 0
    (line,) = [r.getMessage() for r in caplog.records if "WarmShapes" in r.getMessage()]
    assert "skipped" in line and "CPU in eager mode" in line and "always" in line


def test_a_first_time_cost_is_a_device_or_a_compiled_module() -> None:
    """Eager on a CPU: none. On another device, compiled whole (as Lightning unwraps it) or in part: the reason."""
    from lightning.pytorch.utilities.compile import from_compiled

    assert first_time_cost(Reassigning()) is None
    assert "meta" in first_time_cost(torch.nn.Linear(2, 2, device="meta"))
    assert "compiled" in first_time_cost(from_compiled(torch.compile(Reassigning(), backend="eager")))
    part = Reassigning()
    part.head = torch.compile(part.head, backend="eager")
    assert "compiled" in first_time_cost(part)
    whole = Reassigning()
    whole.compile(backend="eager")
    assert "compiled" in first_time_cost(whole)
    with pytest.raises(ValueError, match="when"):
        WarmShapes(when="sometimes")


# -- the shape advice ---------------------------------------------------------------------------------------


PLAN_S = 0.15  # what a new shape costs the simulated model: two new shapes pass the floor of 0.25 s


class Planner(VarLenModule):
    """Pays 150 ms the first time it meets a batch shape, as cuDNN builds an attention plan per shape (on a
    CPU, in eager mode: a cost of the kind the advice is for, where no such cost exists)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 2)
        self.planned: set[tuple] = set()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if tuple(batch["ids"].shape) not in self.planned:
            self.planned.add(tuple(batch["ids"].shape))
            time.sleep(PLAN_S)
        mask = batch["ids_mask" if "ids_mask" in batch else "mask"].unsqueeze(-1).float()
        logits = self.head((self.embed(batch["ids"]) * mask).sum(1) / mask.sum(1))
        return torch.nn.functional.cross_entropy(logits, torch.as_tensor(batch.get("label", batch.get("labels"))))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def advice(data: pl.LightningDataModule, tmp_path, capsys, **wait) -> tuple[str | None, str]:
    """The shape advice a one-epoch fit gives (None: none) and its epoch line."""
    pl.seed_everything(0, verbose=False)
    waits = DataWait(advise_above=0.1, shape_floor_s=0.25, **wait)
    pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[waits, EpochProgress()], default_root_dir=tmp_path,
        num_sanity_val_steps=0, limit_val_batches=0,
    ).fit(Planner(), data)  # fmt: skip
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    return waits.shape_advice, line


def test_no_shape_advice_where_a_shape_costs_nothing_extra(tmp_path, capsys) -> None:
    """On a CPU in eager mode the steps that meet a new shape are slow for another reason (a loaded machine):
    no advice. Told that shapes cost (as on a GPU), the same fit gets it."""
    assert advice(PaddedToys(), tmp_path, capsys)[0] is None
    assert advice(PaddedToys(), tmp_path, capsys, advise_shapes=True)[0] is not None


def test_the_shape_advice_counts_epochs_as_the_epoch_line_does(tmp_path, capsys) -> None:
    said, line = advice(PaddedToys(), tmp_path, capsys, advise_shapes=True)
    assert line.startswith("epoch 1/1:") and " of epoch 1 " in said


def test_the_shape_advice_names_max_shapes_only_where_the_datamodule_takes_it(tmp_path, capsys) -> None:
    """PaddedToys takes `max_shapes` (its value is named); the toy DataModule, like the molecules' and
    video-text's, has no such argument: the line says so and advises no knob it lacks."""
    said = advice(PaddedToys(), tmp_path, capsys, advise_shapes=True)[0]
    assert "with PaddedToys's max_shapes (6 here)" in said and "WarmShapes" in said
    said = advice(ToyDataModule(num_samples=96), tmp_path, capsys, advise_shapes=True)[0]
    assert "with ToyDataModule's max_shapes" not in said and "ToyDataModule takes no max_shapes (" in said
