"""Run by test_lightning_integration: `Trainer(strategy="ddp", devices=2)` with default flags.

Usage: ddp_toy_fit.py OUT_DIR MAX_TOKENS [CHECKPOINT_EVERY RESUME_FROM [DEVICES [EPOCHS]]] (MAX_TOKENS `bN`:
batches of N samples instead; EPOCHS: 2 by default): with a checkpoint
interval, every N-th step is saved to OUT_DIR/ckpt; with RESUME_FROM, the fit resumes from that
checkpoint; DEVICES processes (default 2).
Each rank writes the batches it trained on to OUT_DIR/batches<rank>.json (their epochs to
OUT_DIR/epochs<rank>.json) and its PaddingTelemetry
epoch summaries to OUT_DIR/telemetry<rank>.json; the varlen logger prints to stderr.
"""

import json
import logging
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from toy import ToyDataModule, ToyModel

from varlen.batching.telemetry import PaddingTelemetry
from varlen.testing import StepCounter


class BatchLog(pl.Callback):
    def __init__(self, out_dir: str) -> None:
        self.out_dir, self.batches, self.epochs = Path(out_dir), [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append(batch["index"].tolist())
        self.epochs.append(trainer.current_epoch)

    def on_train_end(self, trainer, pl_module) -> None:
        (self.out_dir / f"batches{trainer.global_rank}.json").write_text(json.dumps(self.batches))
        (self.out_dir / f"epochs{trainer.global_rank}.json").write_text(json.dumps(self.epochs))
        telemetry = next(c for c in trainer.callbacks if isinstance(c, PaddingTelemetry))
        (self.out_dir / f"telemetry{trainer.global_rank}.json").write_text(json.dumps(telemetry.epochs))


if __name__ == "__main__":
    out_dir, budget = sys.argv[1], sys.argv[2]
    batching = {"batch_size": int(budget[1:])} if budget.startswith("b") else {"max_tokens": int(budget)}
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    resume = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
    devices = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    epochs = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("varlen").setLevel(logging.INFO)
    callbacks = [StepCounter(out_dir), BatchLog(out_dir), PaddingTelemetry()]
    if every:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=Path(out_dir) / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}"
            )
        )
    dm = ToyDataModule(num_samples=301, **batching)
    trainer = pl.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=devices,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=bool(every),
        enable_progress_bar=False,
        callbacks=callbacks,
    )
    trainer.fit(ToyModel(), datamodule=dm, ckpt_path=resume)
    if torch.distributed.is_initialized():  # gloo's threads must not outlive the interpreter
        torch.distributed.destroy_process_group()
