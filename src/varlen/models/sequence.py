"""A generic sequence model for `SequenceDataModule`: a masked transformer
encoder over one padded field, pooled over its real elements, for classification or regression."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torchmetrics import MeanSquaredError, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from varlen.models.attention import Rows
from varlen.models.pooled_encoder import PooledEncoder

__all__ = ["SequenceModel", "position_encoding"]

TASKS = ("classification", "regression")


def position_encoding(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """Sinusoidal codes of positions `0..length-1`, `[length, dim]`: a sample's codes do not depend
    on how long its batch is padded."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=device) / max(half, 1))
    angles = torch.arange(length, device=device, dtype=torch.float32)[:, None] * freqs
    codes = torch.cat([angles.sin(), angles.cos()], dim=-1)
    return nn.functional.pad(codes, (0, dim - codes.shape[-1]))


class SequenceModel(PooledEncoder):
    """Reads `batch[input_field]` and its `<input_field>_mask`: each element embedded (a linear map of
    its `feature_dim` values, or an embedding of integer ids when `vocab_size` is given), positions
    added, a transformer encoder that attends to real elements only (`src_key_padding_mask`), then the
    mean over real elements. Outputs `[B, num_classes]` logits (classification: cross-entropy; metrics
    `acc` and macro `f1`) or `[B]` predictions (regression: mean squared error; metric `rmse`).
    Padding never changes a sample's output. Supported inputs: float (or integer / boolean) elements of
    any fixed shape (`[T]`: `feature_dim` 1, `[T, k]`, `[T, a, b]` flattened), or integer ids
    one per element (`vocab_size`).

    Args:
        num_classes: classes (ignored for regression).
        task: `classification` or `regression`.
        class_names: the classes' names (kept in the hyperparameters).
        input_field: the batch key read (the DataModule's first size field).
        feature_dim: values per element (unneeded with `vocab_size`).
        vocab_size: ids are `0..vocab_size-1` (None: the elements are features).
        **kwargs: the encoder's and the optimizer's, see `PooledEncoder`.

    The six above are the DataModule's (`varlen fit` links them): each left None is taken from the
    DataModule the model trains on (`VarLenModule.setup`), so `SequenceModel()` fits any `SequenceDataModule`.
    """

    linked = ("num_classes", "task", "class_names", "input_field", "feature_dim", "vocab_size")

    def __init__(
        self,
        num_classes: int | None = None,
        task: str | None = None,
        class_names: list[str] | None = None,
        input_field: str | None = None,
        feature_dim: int | None = None,
        vocab_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        if task is not None and task not in TASKS:
            raise ValueError(f"task must be one of {TASKS} (the data needs a label column), got {task!r}")
        super().__init__(**kwargs)
        self.build_when_known()

    def needs(self) -> list[str]:
        """The dimensions still unknown: ids need no `feature_dim`, a regression no `num_classes`."""
        hp = self.hparams
        unneeded = {"vocab_size", *(["feature_dim"] if hp.vocab_size is not None else [])}
        unneeded |= {"num_classes"} if hp.task == "regression" else set()
        return [name for name in super().needs() if name not in unneeded]

    def build_layers(self) -> None:
        hp = self.hparams
        task, num_classes = hp.task, hp.num_classes
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS} (the data needs a label column), got {task!r}")
        if task == "classification" and not num_classes:
            raise ValueError("classification needs num_classes >= 1")
        self.task, self.input_field = task, hp.input_field
        d_model = hp.d_model
        if hp.vocab_size is not None:
            self.embed: nn.Module = nn.Embedding(hp.vocab_size, d_model)
        else:
            self.embed = nn.Linear(hp.feature_dim, d_model)
        self.build_encoder()
        self.head = nn.Linear(d_model, num_classes if task == "classification" else 1)
        if task == "classification":
            metrics = {
                "accuracy": MulticlassAccuracy(num_classes, average="micro"),
                "macro_f1": MulticlassF1Score(num_classes, average="macro"),
            }
        else:
            metrics = {"rmse": MeanSquaredError(squared=False)}
        self.val_metrics = MetricCollection(metrics, prefix="val/")
        self.test_metrics = self.val_metrics.clone(prefix="test/")

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits `[B, num_classes]` (classification) or predictions `[B]` (regression), of a padded batch
        or a packed one (`<input_field>_cu_seqlens`: the samples' elements end to end, `[N, ...]`)."""
        values = batch[self.input_field]
        cu = batch.get(f"{self.input_field}_cu_seqlens")
        if cu is not None and len(values) != int(cu[-1]):  # a packed row's tail after its samples
            values = values[: int(cu[-1])]
        leading = 1 if cu is not None else 2
        if isinstance(self.embed, nn.Embedding):
            tokens = self.embed(values.long())
        else:
            tokens = self.embed(values.reshape(*values.shape[:leading], -1).to(self.embed.weight.dtype))
        if cu is not None:  # packed: attention within each sample, the same weights on real elements only
            rows = Rows.of(cu)
            codes = position_encoding(rows.max_len, tokens.shape[-1], tokens.device).to(tokens.dtype)
            pooled = self.pool(tokens + codes[rows.positions], rows=rows)
        else:
            tokens = tokens + position_encoding(tokens.shape[1], tokens.shape[2], tokens.device).to(tokens.dtype)
            pooled = self.pool(tokens, keep=batch[f"{self.input_field}_mask"])
        out = self.head(pooled)
        return out if self.task == "classification" else out.squeeze(-1)

    def _loss(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if self.task == "classification":
            return nn.functional.cross_entropy(output, batch["labels"])
        return nn.functional.mse_loss(output, batch["labels"].to(output.dtype))

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(self(batch), batch)
        self.log_mean({"train/loss": loss}, batch, prog_bar=True)
        return loss

    def _eval_step(self, batch: Mapping[str, torch.Tensor], metrics: MetricCollection, stage: str) -> None:
        output = self(batch)
        self.log_mean({f"{stage}/loss": self._loss(output, batch)}, batch)
        metrics.update(output, batch["labels"] if self.task == "classification" else batch["labels"].to(output.dtype))
        self.log_dict(metrics, on_epoch=True, batch_size=self.batch_size_of(batch))
