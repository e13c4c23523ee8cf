"""A WDCNN-style 1-D CNN for bearing-fault windows, exact under padding, with recording-level votes.

WDCNN (Zhang et al., 2017) opens with a wide, strided kernel (64 samples, stride 16) that acts as
a learned filter bank over the raw signal, then stacks small kernels. Two changes make it exact
on padded batches (only tail windows are shorter, but they share batches with full ones):

- every layer tracks each window's valid length and zeroes what lies beyond it, so a padded
  position never feeds a real one (zero padding equals the convolution's own zero padding);
- :class:`MaskedBatchNorm1d` takes its batch statistics over real positions only; in eval mode
  it uses the running statistics, which are per-element and cannot see padding.

Recording-level predictions sum the window log-probabilities of each recording (a product of
window likelihoods, the usual naive-Bayes vote) over the whole evaluation epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

from varlen.batching import lengths_to_mask
from varlen.models.base import VarLenModule

__all__ = ["BearingClassifier", "MaskedBatchNorm1d", "MaskedConvBlock", "RecordingMetrics", "aggregate_by_recording"]


class MaskedBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm over ``[B, C, L]`` whose training statistics count only real positions.

    Padded tails would otherwise pull the mean towards zero and shrink the variance.
    Outputs at padded positions are zeroed. ``momentum=None`` means a cumulative average of the
    batch statistics, as in :class:`torch.nn.BatchNorm1d`; ``affine=False`` is supported.

    Raises:
        ValueError: ``track_running_stats=False``: eval mode would then normalise with the
            statistics of the batch, so a window's output would depend on its batch mates.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        if not track_running_stats:
            raise ValueError(
                "MaskedBatchNorm1d needs track_running_stats=True: without running statistics eval mode "
                "would normalise with batch statistics, and outputs would depend on the other windows"
            )
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine, track_running_stats=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        keep = mask[:, None, :].to(x.dtype)
        if self.training:
            count = keep.sum()
            mean = (x * keep).sum(dim=(0, 2)) / count
            var = (((x - mean[None, :, None]) * keep) ** 2).sum(dim=(0, 2)) / count
            with torch.no_grad():
                self.num_batches_tracked += 1
                # momentum=None: cumulative moving average, weight 1/n for the n-th batch
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                unbiased = var * count / torch.clamp(count - 1, min=1)
                self.running_mean.lerp_(mean, factor)
                self.running_var.lerp_(unbiased, factor)
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean[None, :, None]) * torch.rsqrt(var[None, :, None] + self.eps)
        if self.affine:
            y = y * self.weight[None, :, None] + self.bias[None, :, None]
        return y * keep


class MaskedConvBlock(nn.Module):
    """Conv -> masked BatchNorm -> ReLU -> max-pool(2), with valid lengths carried along."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, padding: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel, stride=stride, padding=padding)
        self.norm = MaskedBatchNorm1d(out_channels)
        self.kernel, self.stride, self.padding = kernel, stride, padding

    def out_lengths(self, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Valid lengths after the convolution and after the pooling (at least 1 each)."""
        conv = torch.clamp((lengths + 2 * self.padding - self.kernel) // self.stride + 1, min=1)
        return conv, torch.clamp(conv // 2, min=1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conv_lengths, pooled_lengths = self.out_lengths(lengths)
        x = self.conv(x)
        x = F.relu(self.norm(x, lengths_to_mask(conv_lengths, x.shape[-1])))
        x = F.max_pool1d(x, 2)
        return x * lengths_to_mask(pooled_lengths, x.shape[-1])[:, None, :].to(x.dtype), pooled_lengths


def aggregate_by_recording(
    log_probs: torch.Tensor, recording_ids: torch.Tensor, labels: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Sum window log-probabilities per recording.

    Returns:
        ``(ids, summed [R, K], labels [R] or None)``: the distinct recording ids (sorted), their
        summed log-probabilities (argmax = the recording's prediction) and each one's label.
    """
    ids, inverse = torch.unique(recording_ids, return_inverse=True)
    summed = torch.zeros(len(ids), log_probs.shape[1], dtype=log_probs.dtype, device=log_probs.device)
    summed.index_add_(0, inverse, log_probs)
    rec_labels = None
    if labels is not None:
        rec_labels = torch.zeros(len(ids), dtype=labels.dtype, device=labels.device)
        rec_labels.scatter_(0, inverse, labels)
    return ids, summed, rec_labels


class RecordingMetrics(Metric):
    """Accuracy and macro-F1 of recording-level votes over an epoch (DDP: states concatenated).

    A recording's windows may be spread over many batches and ranks, so the window
    log-probabilities are kept until :meth:`compute`.
    """

    full_state_update = False

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.add_state("log_probs", default=[], dist_reduce_fx="cat")
        self.add_state("recording_ids", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")

    def update(self, log_probs: torch.Tensor, recording_ids: torch.Tensor, labels: torch.Tensor) -> None:
        self.log_probs.append(log_probs.detach().float())
        self.recording_ids.append(recording_ids)
        self.labels.append(labels)

    def compute(self) -> dict[str, torch.Tensor]:
        cat = [torch.cat(s) if isinstance(s, list) else s for s in (self.log_probs, self.recording_ids, self.labels)]
        _, summed, labels = aggregate_by_recording(*cat)
        preds = summed.argmax(dim=1)
        return {
            "acc": multiclass_accuracy(preds, labels, self.num_classes, average="micro"),
            "macro_f1": multiclass_f1_score(preds, labels, self.num_classes, average="macro"),
        }


class BearingClassifier(VarLenModule):
    """WDCNN-family classifier of vibration windows, padding-invariant, with recording votes.

    Args:
        num_classes: classes (linked from the DataModule).
        in_channels: signal channels (linked from the DataModule).
        class_names: class names (linked; kept for predictions and checkpoints).
        channels: output channels of the wide first block and the small-kernel blocks.
        first_kernel: the wide first kernel (WDCNN: 64).
        first_stride: its stride (WDCNN: 16).
        hidden: width of the fully connected layer before the classes.
        dropout: dropout before the last layer.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 1,
        class_names: list[str] | None = None,
        channels: Sequence[int] = (16, 32, 64, 64, 64),
        first_kernel: int = 64,
        first_stride: int = 16,
        hidden: int = 100,
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.class_names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
        blocks = [
            MaskedConvBlock(in_channels, channels[0], first_kernel, first_stride, (first_kernel - first_stride) // 2)
        ]
        blocks += [MaskedConvBlock(a, b, 3, 1, 1) for a, b in zip(channels[:-1], channels[1:], strict=True)]
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Sequential(
            nn.Linear(channels[-1], hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_classes)
        )
        self.min_width = self._min_width()
        self.lr, self.weight_decay = lr, weight_decay
        metrics = MetricCollection(
            {
                "acc": MulticlassAccuracy(num_classes, average="micro"),
                "macro_f1": MulticlassF1Score(num_classes, average="macro"),
            }
        )
        # attributes, not a ModuleDict: "train" would clash with nn.Module.train
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.val_recording_metrics = RecordingMetrics(num_classes)
        self.test_recording_metrics = RecordingMetrics(num_classes)

    def _min_width(self) -> int:
        """Smallest input width for which every layer still has an output position.

        Narrower batches (a lone short tail window) are zero-padded up to it; with the valid
        lengths carried separately that changes no real output.
        """
        width = 1
        for block in reversed(self.blocks):
            width = 2 * width  # before the pooling
            width = (width - 1) * block.stride + block.kernel - 2 * block.padding  # before the conv
        return max(width, 1)

    def forward(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Window logits ``[B, num_classes]``; uses ``signals`` ``[B, C, W]`` and ``lengths``."""
        x, lengths = batch["signals"], batch["lengths"].to(batch["signals"].device)
        x = x * lengths_to_mask(lengths, x.shape[-1])[:, None, :].to(x.dtype)
        if x.shape[-1] < self.min_width:
            x = F.pad(x, (0, self.min_width - x.shape[-1]))
        for block in self.blocks:
            x, lengths = block(x, lengths)
        pooled = x.sum(dim=-1) / lengths[:, None].to(x.dtype)  # zeros beyond each length
        return self.head(pooled)

    def _step(self, batch: Mapping[str, Any], stage: str) -> torch.Tensor:
        logits = self(batch)
        loss = F.cross_entropy(logits, batch["labels"])
        metrics = getattr(self, f"{stage}_metrics")
        metrics.update(logits, batch["labels"])
        self.log_mean({f"{stage}/loss": loss}, batch, prog_bar=stage != "train")
        self.log_dict(metrics, batch_size=self.batch_size_of(batch), on_step=False, on_epoch=True)
        if stage != "train":
            getattr(self, f"{stage}_recording_metrics").update(
                logits.log_softmax(-1), batch["recording_ids"], batch["labels"]
            )
        return loss

    def training_step(self, batch: Mapping[str, Any], batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        self._step(batch, "test")

    def _log_recordings(self, stage: str) -> None:
        """Recording votes over the whole epoch: ``compute`` gathers every rank's windows first,
        so the values are global (a recording's windows may lie on several ranks)."""
        metric = getattr(self, f"{stage}_recording_metrics")
        if metric.update_count:
            values = metric.compute()
            self.log_global({f"{stage}/recording_{k}": v for k, v in values.items()})
        metric.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_recordings("val")

    def on_test_epoch_end(self) -> None:
        self._log_recordings("test")

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> dict[str, torch.Tensor]:
        """Window log-probabilities with the ids needed to vote per recording afterwards."""
        return {
            "index": batch["index"],
            "recording_ids": batch["recording_ids"],
            "window_index": batch["window_index"],
            "log_probs": self(batch).log_softmax(-1),
        }

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
