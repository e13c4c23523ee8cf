"""A toy scenario (random-length integer sequences, label = parity of the sum) for core tests."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from varlen.batching import pad_sequences
from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.models.base import VarLenModule


class ToySequences(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.lengths = np.clip(rng.lognormal(2.0, 0.7, n).astype(np.int64), 1, 60)
        flat = rng.integers(1, 10, int(self.lengths.sum()))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.flat = flat

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        ids = self.flat[self.offsets[i] : self.offsets[i + 1]]
        return {"index": i, "ids": ids, "label": int(ids.sum() % 2)}


def collate_toy(samples: list[dict]) -> dict[str, torch.Tensor]:
    padded = pad_sequences([s["ids"] for s in samples], pad_value=0)
    return {
        "index": torch.tensor([s["index"] for s in samples]),
        "ids": padded.values,
        "mask": padded.mask,
        "labels": torch.tensor([s["label"] for s in samples]),
    }


class ToyDataModule(VarLenDataModule):
    mask_keys = ("mask",)
    default_batching = (16, None)

    def __init__(
        self,
        num_samples: int = 300,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_workers: int = 0,
        predict_split: str = "test",
    ) -> None:
        super().__init__(**base_args(locals()))
        self.num_samples = num_samples
        self.num_classes = 2
        self.class_names = ["short", "long"]
        self.collate_fn = collate_toy

    def build(self, stage: str | None) -> dict[str, ToySequences]:
        val = ToySequences(64, 2)
        return {"train": ToySequences(self.num_samples, 1), "val": val, "test": val}


class ToyModel(VarLenModule):
    def __init__(self, num_classes: int = 2, hidden: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, hidden)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, batch: dict) -> torch.Tensor:
        mask = batch["mask"].unsqueeze(-1).float()
        pooled = (self.embed(batch["ids"]) * mask).sum(1) / mask.sum(1)
        return self.head(pooled)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch), batch["labels"])
        self.log_mean({"train/loss": loss}, batch)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log_mean({"val/loss": nn.functional.cross_entropy(self(batch), batch["labels"])}, batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
