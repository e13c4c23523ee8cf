"""Writes tests/data/eab78fa/: a checkpoint saved mid-epoch by varlen at commit eab78fa, and the batches after it.

Not run by the suite: tests/test_old_checkpoint.py resumes the checkpoint with the current code and compares
what it serves with the batches recorded here. It was run with that commit's own code (its package was at
`varlen/`, not `src/varlen/`), from the repository root::

    git archive eab78fa | tar -x -C /tmp/eab
    PYTHONPATH=/tmp/eab HF_HUB_OFFLINE=1 python tests/data/make_eab78fa_checkpoint.py tests/data/eab78fa

Each of `CASES` is a 2-epoch fit of SequenceDataModule's synthetic set under a token budget (the bucketed
sampler, the shape policy's rungs), seeded, through a Trainer: `bucketed` one source; `mixture` two sources
drawn half and half with balanced sample weights (the weighted draw, the mixture's state). `cli` is
`bucketed` run by that commit's `varlen fit` (its checkpoint holds what LightningCLI adds: the classes'
paths, the command's callbacks). Each checkpoint at step `CHECKPOINT_STEP` (mid epoch 0) goes to
`<case>.ckpt`, every batch of the uninterrupted run to `batches.json`. The old code's own resume of each
checkpoint is checked against them before anything is written, so the fixture records what eab78fa itself did.
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
MAKER = "make_eab78fa_checkpoint"  # this module's name where varlen fit imports its callbacks from
#: each case's DataModule arguments, the same in the test (the model's linked ones are taken from the data)
CASES = {
    "bucketed": {"synthetic": 240, "max_tokens": 1024, "seed": 7, "num_workers": 0},
    "mixture": {
        "synthetic": 160, "sources": [{"name": "extra", "synthetic": 80}],
        "source_weights": {"main": 0.5, "extra": 0.5}, "sample_weights": "balanced",
        "max_tokens": 1024, "seed": 7, "num_workers": 0,
    },
}  # fmt: skip
CASES["cli"] = CASES["bucketed"]  # run by varlen fit
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
    """Saves the checkpoint once `step` optimizer steps are done (as ModelCheckpoint's every_n_train_steps)."""

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def trainer_fit(data: dict, checkpoint: Path | None = None, ckpt_path: Path | None = None) -> list[dict]:
    """The batches of a fit through a Trainer (a checkpoint saved at `CHECKPOINT_STEP` where given)."""
    from varlen.datamodules import SequenceDataModule
    from varlen.models import SequenceModel

    pl.seed_everything(0, verbose=False)
    dm = SequenceDataModule(**data)
    dm.prepare_data()
    dm.setup("fit")
    model = SequenceModel(**{name: getattr(dm, name) for name in LINKED}, **MODEL)
    served = Served()
    callbacks = [served, *([SaveAt(CHECKPOINT_STEP, checkpoint)] if checkpoint else [])]
    pl.Trainer(**TRAINER, callbacks=callbacks).fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return served.batches


def cli_config(data: dict, root: Path, callbacks: list[dict]) -> dict:
    """`varlen fit`'s config of the fit: `data`, the model, the Trainer's settings and `callbacks`."""
    trainer = {k: v for k, v in TRAINER.items() if k != "enable_checkpointing"}  # the command keeps last.ckpt
    return {
        "trainer": trainer | {"default_root_dir": str(root), "callbacks": callbacks},
        "model": {"class_path": "varlen.models.SequenceModel", "init_args": MODEL},
        "data": {"class_path": "varlen.datamodules.SequenceDataModule", "init_args": data},
    }


def cli_fit(data: dict, checkpoint: Path | None = None, ckpt_path: Path | None = None) -> list[dict]:
    """The batches of the same fit run by eab78fa's `varlen fit` (its `varlen.cli.main`), in this process."""
    from varlen.cli import main

    pl.seed_everything(0, verbose=False)
    with tempfile.TemporaryDirectory() as root:
        save = [{"class_path": f"{MAKER}.SaveAt", "init_args": {"step": CHECKPOINT_STEP, "path": str(checkpoint)}}]
        config = cli_config(data, Path(root), [{"class_path": f"{MAKER}.Served"}, *(save if checkpoint else [])])
        (Path(root) / "fit.yaml").write_text(json.dumps(config))
        resume = ["--ckpt_path", str(ckpt_path)] if ckpt_path else []
        cli = main(["fit", "--config", str(Path(root) / "fit.yaml"), *resume, "--warm_shapes=false"])
    return next(c for c in cli.trainer.callbacks if type(c).__name__ == "Served").batches


def record_case(name: str, data: dict, out: Path) -> list[dict]:
    """Fits `data` once with a checkpoint at `CHECKPOINT_STEP` (written to OUT/NAME.ckpt) and once resumed
    from it; the first fit's batches, after checking that the resume served its batches from that step on."""
    fit = cli_fit if name == "cli" else trainer_fit
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = Path(scratch) / "step.ckpt"
        served = fit(data, checkpoint=checkpoint)
        resumed = fit(data, ckpt_path=checkpoint)
        after = [b for b in served if b["step"] >= CHECKPOINT_STEP]
        if resumed != after:
            raise SystemExit(f"{name}: {COMMIT}'s own resume differs from its uninterrupted run: not a fixture")
        epochs = sorted({b["epoch"] for b in after})
        if epochs != list(range(EPOCHS)) or after[0]["epoch"] != 0:
            raise SystemExit(f"{name}: the checkpoint should fall mid epoch 0: epochs after it {epochs}")
        shutil.copyfile(checkpoint, out / f"{name}.ckpt")
    print(f"{name}: {len(served)} batches, {len(after)} after step {CHECKPOINT_STEP}", file=sys.stderr)
    return served


def main(out: Path) -> None:
    import varlen

    source = Path(varlen.__file__).resolve().parent
    if (source.parent / "src").exists() or source.parent.name == "src":
        raise SystemExit(f"varlen imported from {source}: run with PYTHONPATH=<an export of {COMMIT}>")
    torch.set_num_threads(1)  # a tiny model: much faster on a busy machine
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "commit": COMMIT,
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "model": MODEL,
        "trainer": {k: v for k, v in TRAINER.items() if k != "enable_checkpointing"},
        "checkpoint_step": CHECKPOINT_STEP,
        "cases": {name: {"data": data, "batches": record_case(name, data, out)} for name, data in CASES.items()},
    }
    (out / "batches.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
