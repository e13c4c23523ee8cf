"""Run by test_lightning_integration: `Trainer(strategy="ddp", devices=2)` with default flags."""

import sys

import lightning.pytorch as pl
from toy import ToyDataModule, ToyModel

from varlen.testing import StepCounter

if __name__ == "__main__":
    out_dir, max_tokens = sys.argv[1], int(sys.argv[2])
    dm = ToyDataModule(num_samples=301, batch_size=None, max_tokens=max_tokens)
    trainer = pl.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[StepCounter(out_dir)],
    )
    trainer.fit(ToyModel(), datamodule=dm)
