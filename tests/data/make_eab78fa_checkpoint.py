"""Writes tests/data/eab78fa/: a checkpoint saved mid-epoch by varlen at commit eab78fa, and the batches after it.

Not run by the suite: tests/test_old_checkpoint.py resumes the checkpoint with the current code and compares
what it serves with the batches recorded here. It was run with that commit's own code (its package was at
``varlen/``, not ``src/varlen/``), from the repository root::

    git archive eab78fa | tar -x -C /tmp/eab
    PYTHONPATH=/tmp/eab HF_HUB_OFFLINE=1 python tests/data/make_eab78fa_checkpoint.py tests/data/eab78fa

Two epochs of SequenceDataModule's synthetic set under a token budget (the bucketed sampler and the shape
policy's rungs), one fit, seeded: the checkpoint at step ``CHECKPOINT_STEP`` (mid epoch 0), every batch of
the uninterrupted run in ``batches.json``. The old code's own resume of the checkpoint is checked against
them before anything is written, so the fixture records what eab78fa itself did.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import lightning.pytorch as pl
import torch

COMMIT = "eab78fa"
#: the DataModule's and model's arguments, the same in the test (the model's linked ones taken from the data)
DATA = {"synthetic": 240, "max_tokens": 1024, "seed": 7, "num_workers": 0}
MODEL = {"d_model": 8, "nhead": 2, "num_layers": 1, "dim_feedforward": 16, "dropout": 0.0}
LINKED = ("num_classes", "task", "input_field", "feature_dim", "vocab_size")
EPOCHS = 2
CHECKPOINT_STEP = 7
TRAINER = {
    "accelerator": "cpu", "devices": 1, "max_epochs": EPOCHS, "limit_val_batches": 0, "num_sanity_val_steps": 0,
    "logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False,
}  # fmt: skip


class Served(pl.Callback):
    """Each training batch as it starts: its epoch, step, sample indices and padded shape."""

    def __init__(self) -> None:
        self.batches: list[dict] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append(
            {
                "epoch": trainer.current_epoch,
                "step": trainer.global_step,
                "index": batch["index"].tolist(),
                "shape": list(batch["values"].shape),
            }
        )


class SaveAt(pl.Callback):
    """Saves the checkpoint once ``step`` optimizer steps are done (as ModelCheckpoint's every_n_train_steps)."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def fit(callbacks: list[pl.Callback], ckpt_path: Path | None = None) -> None:
    from varlen.datamodules import SequenceDataModule
    from varlen.models import SequenceModel

    pl.seed_everything(0, verbose=False)
    dm = SequenceDataModule(**DATA)
    dm.prepare_data()
    dm.setup("fit")
    model = SequenceModel(**{name: getattr(dm, name) for name in LINKED}, **MODEL)
    pl.Trainer(**TRAINER, callbacks=callbacks).fit(model, datamodule=dm, ckpt_path=ckpt_path)


def main(out: Path) -> None:
    import varlen

    source = Path(varlen.__file__).resolve().parent
    if (source.parent / "src").exists() or source.parent.name == "src":
        raise SystemExit(f"varlen imported from {source}: run with PYTHONPATH=<an export of {COMMIT}>")
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = Path(scratch) / "step.ckpt"
        served = Served()
        fit([served, SaveAt(CHECKPOINT_STEP, checkpoint)])
        resumed = Served()
        fit([resumed], ckpt_path=checkpoint)
        after = [b for b in served.batches if b["step"] >= CHECKPOINT_STEP]
        if resumed.batches != after:
            raise SystemExit(f"{COMMIT}'s own resume differs from its uninterrupted run: not a fixture")
        epochs = sorted({b["epoch"] for b in after})
        if epochs != list(range(EPOCHS)) or after[0]["epoch"] != 0:
            raise SystemExit(f"the checkpoint should fall mid epoch 0: epochs after it {epochs}")
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(checkpoint, out / "step=7.ckpt")
    record = {
        "commit": COMMIT,
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "data": DATA,
        "model": MODEL,
        "trainer": {k: v for k, v in TRAINER.items() if k != "enable_checkpointing"},
        "checkpoint_step": CHECKPOINT_STEP,
        "batches": served.batches,
    }
    (out / "batches.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{out}: {len(served.batches)} batches, {len(after)} after step {CHECKPOINT_STEP}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
