"""Run by test_stream_s3: a 2-process DDP fit (`Trainer(strategy="ddp", devices=2)`) of the text
DataModule whose training split streams from a store (moto's S3 on 127.0.0.1 in the tests).

Usage: ddp_stream_fit.py OUT_DIR DATA_JSON SAMPLES CHECKPOINT_EVERY [RESUME_FROM]: DATA_JSON holds the
DataModule's streaming arguments (`stream`, and `sources`, `source_weights`, `mix` for a streamed
mixture); every N-th step is
saved to OUT_DIR/ckpt; with RESUME_FROM the fit resumes from that checkpoint. Each rank writes the
batches it trained on, with their epochs, to OUT_DIR/batches<rank>.json.
"""

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import nn

from varlen.datamodules.text import TextClassificationDataModule


class BatchLog(pl.Callback):
    def __init__(self, out_dir: str) -> None:
        self.out_dir, self.batches = Path(out_dir), []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append([trainer.current_epoch, batch["index"].tolist()])

    def on_train_end(self, trainer, pl_module) -> None:
        (self.out_dir / f"batches{trainer.global_rank}.json").write_text(json.dumps(self.batches))


class Counting(pl.LightningModule):
    """The least model a fit needs: one weight, a loss from the batch's tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight * batch["attention_mask"].float().mean()).sum() ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    out_dir, data, samples, every = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    resume = sys.argv[5] if len(sys.argv) > 5 else None
    checkpoints = pl.callbacks.ModelCheckpoint(
        dirpath=Path(out_dir) / "ckpt", every_n_train_steps=every, save_top_k=-1, filename="{step}"
    )
    dm = TextClassificationDataModule(synthetic_samples=samples, batch_size=None, max_tokens=400, num_workers=1, **data)
    dm.stream_window_batches = 4  # several windows in a small split
    trainer = pl.Trainer(
        accelerator="cpu", strategy="ddp", devices=2, max_epochs=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[BatchLog(out_dir), checkpoints], num_sanity_val_steps=0,
        limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Counting(), datamodule=dm, ckpt_path=resume)
    if torch.distributed.is_initialized():  # gloo's threads must not outlive the interpreter
        torch.distributed.destroy_process_group()
