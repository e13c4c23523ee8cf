"""Bring your own data: variable-length sensor recordings in a JSON Lines file, on varlen.

Each line is `{"id": "...", "values": [float, ...], "label": "walk"}`. The DataModule is all a
user writes: read and check the file (bad lines through `self.report`), keep the values
unpadded in one `Ragged`, split with `varlen.prepare.splits`, pad a
whole batch in one gather. Bucketing by length, budgets, DDP, resume, the report and
`varlen inspect` come from the base class; `tests/test_examples.py` runs varlen's contract
tests on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.ragged import Ragged
from varlen.datamodules import VarLenDataModule, base_args
from varlen.errors import DataError, DatasetNotFoundError
from varlen.models import VarLenModule
from varlen.prepare.report import OnBad
from varlen.prepare.splits import stratified_split

__all__ = ["CLASSES", "SensorClassifier", "SensorDataModule", "SensorSequences", "as_batch", "write_example"]

CLASSES = ("rest", "walk", "run")


class SensorSequences(PadsToWidths, torch.utils.data.Dataset):
    """Recordings as one flat array plus row spans; `__getitems__` pads a whole batch at once, to the
    padded length its batch carries (`pad_to`: the DataModule's shape policy, few batch shapes)."""

    def __init__(self, values: Ragged, labels: np.ndarray) -> None:
        self.values, self.labels, self.lengths = values, labels, values.lengths

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([i])

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        padded = self.values.pad(indices, 0, pad_to(indices, None))
        labels = torch.from_numpy(self.labels[indices])
        return {"index": torch.as_tensor(indices), "values": padded.values, "mask": padded.mask, "labels": labels}


def as_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The collate: the dataset's batched fetch already is the batch."""
    return batch


class SensorDataModule(VarLenDataModule):
    """Activity recordings of different lengths (one size axis: readings)."""

    mask_keys, size_axes = ("mask",), ("readings",)
    default_batching = (16, None)  # (batch_size, max_tokens) when neither is given

    def __init__(self, path: str, val_fraction: float = 0.2, batch_size: int | None = None,
                 max_tokens: int | None = None, seed: int = 0, on_bad: OnBad = "raise") -> None:  # fmt: skip
        super().__init__(**base_args(locals()))
        self.path, self.val_fraction, self.collate_fn = Path(path), val_fraction, as_batch
        self.class_names, self.num_classes = list(CLASSES), len(CLASSES)

    def build(self, stage: str | None) -> dict[str, SensorSequences]:
        if not self.path.is_file():
            raise DatasetNotFoundError("sensor recordings", self.path, "write them with write_example(path)")
        rows, labels = [], []
        for line_no, line in enumerate(self.path.read_text().splitlines(), 1):
            where = f"{self.path}, line {line_no}"
            try:
                record = json.loads(line)
                values = np.asarray(record.get("values", []), dtype=np.float32)
            except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as error:
                self.report.bad(where, f"not a JSON object with numeric values ({type(error).__name__})")
                continue
            if record.get("label") not in CLASSES:
                self.report.bad(where, "unknown label", item="recording")
            elif values.size == 0 or not np.isfinite(values).all():
                self.report.bad(where, "empty or non-finite values", item="recording")
            else:
                rows.append(values)
                labels.append(CLASSES.index(record["label"]))
        if not rows:
            raise DataError(f"{self.path}: no usable recording")
        storage, labels = Ragged.from_arrays(rows), np.asarray(labels)
        parts = stratified_split(labels, {"train": 1 - self.val_fraction, "val": self.val_fraction}, self.seed)
        train, val = (SensorSequences(storage.take(parts[k]), labels[parts[k]]) for k in ("train", "val"))
        return {"train": train, "val": val, "test": val}


class SensorClassifier(VarLenModule):
    """A tiny baseline: per-reading features, their mean and max over the real readings only."""

    def __init__(self, num_classes: int = 3, class_names: list[str] | None = None, hidden: int = 16) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden))
        self.head = nn.Linear(2 * hidden, num_classes)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        keep = batch["mask"].unsqueeze(-1).float()
        h = self.embed(batch["values"].unsqueeze(-1)) * keep
        mean = h.sum(1) / keep.sum(1)
        peak = h.masked_fill(keep == 0, float("-inf")).amax(1)
        return self.head(torch.cat([mean, peak], dim=-1))

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch), batch["labels"])
        self.log_mean({f"{stage}/loss": loss}, batch)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def write_example(path: str | Path, count: int = 300, seed: int = 0) -> Path:
    """Synthetic recordings: noise around a level and a rhythm that depend on the activity."""
    rng = np.random.default_rng(seed)
    lines = []
    for k in range(count):
        label = int(rng.integers(3))
        n = int(np.clip(rng.lognormal(4.0, 0.6), 8, 400))
        t = np.arange(n)
        values = label + np.sin(t * (0.2 + 0.4 * label)) * label + rng.normal(0, 0.5, n)
        lines.append(json.dumps({"id": f"rec{k:04d}", "values": np.round(values, 3).tolist(), "label": CLASSES[label]}))
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)
