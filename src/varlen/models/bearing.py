"""A WDCNN-style 1-D CNN for bearing-fault windows, exact under padding, with recording-level votes.

WDCNN (Zhang et al., 2017) opens with a wide, strided kernel (64 samples, stride 16) that acts as
a learned filter bank over the raw signal, then stacks small kernels. Two changes make it exact
on padded batches (only tail windows are shorter, but they share batches with full ones):

- every layer tracks each window's valid length and zeroes what lies beyond it, so a padded
  position never feeds a real one (zero padding equals the convolution's own zero padding);
- `MaskedBatchNorm1d` takes its batch statistics over real positions only; in eval mode
  it uses the running statistics, which are per-element and cannot see padding.

Recording-level predictions sum the window log-probabilities of each recording (a product of
window likelihoods, the usual naive-Bayes vote) over the whole evaluation epoch.

Across operating conditions, `adabn=True` applies AdaBN (Li et al., 2016; used with WDCNN by
Zhang et al., 2017): before testing (or predicting), every batch-norm layer's running statistics
are re-estimated on the unlabelled windows of the target split, layer by layer, exactly (sums
over every real position of the split, summed over ranks), and the source statistics are put
back afterwards. No weight changes and no label is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from varlen.batching import lengths_to_mask
from varlen.models.base import VarLenModule
from varlen.models.votes import ItemVotes, sum_by_item

__all__ = [
    "BearingClassifier",
    "LoaderBatches",
    "MaskedBatchNorm1d",
    "MaskedConvBlock",
    "RecordingMetrics",
    "aggregate_by_recording",
]


class MaskedBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm over `[B, C, L]` whose training statistics count only real positions.

    Padded tails would otherwise pull the mean towards zero and shrink the variance.
    Outputs at padded positions are zeroed. `momentum=None` means a cumulative average of the
    batch statistics, as in `torch.nn.BatchNorm1d`; `affine=False` is supported.

    Raises:
        ValueError: `track_running_stats=False`: eval mode would then normalize with the
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
                "would normalize with batch statistics, and outputs would depend on the other windows"
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

    def convolve(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The convolution's output (what the batch norm sees) and its keep mask `[B, L]`."""
        conv_lengths, _ = self.out_lengths(lengths)
        x = self.conv(x)
        return x, lengths_to_mask(conv_lengths, x.shape[-1])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, pooled_lengths = self.out_lengths(lengths)
        x, mask = self.convolve(x, lengths)
        x = F.max_pool1d(F.relu(self.norm(x, mask)), 2)
        return x * lengths_to_mask(pooled_lengths, x.shape[-1])[:, None, :].to(x.dtype), pooled_lengths


class LoaderBatches:
    """The collated batches of some loaders, read again on every iteration through each one's dataset
    and batch sampler, in this process.

    Opening a second iterator of a loader while Lightning's loop holds one (and maybe its
    persistent workers) is not safe; reading the batch plan and the batched fetch is, and holds
    one batch at a time (not a copy of every window).
    """

    def __init__(self, loaders: Any) -> None:
        self.loaders = list(loaders) if isinstance(loaders, Sequence) else [loaders]

    def __iter__(self):
        for loader in self.loaders:
            sampler = getattr(loader, "batch_sampler", None)
            if sampler is None:
                yield from loader
                continue
            dataset, collate = loader.dataset, loader.collate_fn
            fetch = getattr(dataset, "__getitems__", None)
            for indices in sampler:
                yield collate(fetch(indices) if fetch is not None else [dataset[i] for i in indices])


#: the windows' log-probabilities summed per recording (see `sum_by_item`)
aggregate_by_recording = sum_by_item


class RecordingMetrics(ItemVotes):
    """Accuracy (`accuracy`) and macro-F1 of the recordings' votes over an epoch."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(num_classes)


class BearingClassifier(VarLenModule):
    """WDCNN-family classifier of vibration windows, padding-invariant, with recording votes.

    Args:
        num_classes: classes (None: the DataModule's, at `setup`; `varlen fit` links it).
        in_channels: signal channels (None: the DataModule's).
        class_names: class names (None: the DataModule's; kept for predictions and checkpoints).
        conv_channels: output channels of the wide first block and the small-kernel blocks.
        first_kernel: the wide first kernel (WDCNN: 64).
        first_stride: its stride (WDCNN: 16).
        hidden: width of the fully connected layer before the classes.
        dropout: dropout before the last layer.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        adabn: re-estimate the batch-norm statistics on the test (and predict) windows before
            evaluating them (AdaBN, for a test condition unlike the training one); the training
            statistics are restored afterwards.
    """

    linked = ("num_classes", "in_channels", "class_names")

    def __init__(
        self,
        num_classes: int | None = None,
        in_channels: int | None = None,
        class_names: list[str] | None = None,
        conv_channels: Sequence[int] = (16, 32, 64, 64, 64),
        first_kernel: int = 64,
        first_stride: int = 16,
        hidden: int = 100,
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        adabn: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr, self.weight_decay, self.adabn = lr, weight_decay, adabn
        self._source_statistics: dict[str, torch.Tensor] | None = None
        self.build_when_known()

    def build_layers(self) -> None:
        hp = self.hparams
        num_classes, conv_channels, first_kernel, first_stride = (
            hp.num_classes, hp.conv_channels, hp.first_kernel, hp.first_stride
        )  # fmt: skip
        self.class_names = list(hp.class_names) if hp.class_names else [str(i) for i in range(num_classes)]
        blocks = [
            MaskedConvBlock(
                hp.in_channels, conv_channels[0], first_kernel, first_stride, (first_kernel - first_stride) // 2
            )
        ]
        blocks += [MaskedConvBlock(a, b, 3, 1, 1) for a, b in zip(conv_channels[:-1], conv_channels[1:], strict=True)]
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Sequential(
            nn.Linear(conv_channels[-1], hp.hidden),
            nn.ReLU(),
            nn.Dropout(hp.dropout),
            nn.Linear(hp.hidden, num_classes),
        )
        self.min_width = self._min_width()
        metrics = MetricCollection(
            {
                "accuracy": MulticlassAccuracy(num_classes, average="micro"),
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
        """Window logits `[B, num_classes]`; uses `signals` `[B, C, W]` and `lengths`."""
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
        """Recording votes over the whole epoch: `compute` gathers every rank's windows first,
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

    # -- AdaBN ----------------------------------------------------------------------------------

    def _features(self, batch: Mapping[str, Any], depth: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block `depth`'s convolution output and keep mask, the blocks before it in eval mode."""
        x, lengths = batch["signals"], batch["lengths"].to(batch["signals"].device)
        x = x * lengths_to_mask(lengths, x.shape[-1])[:, None, :].to(x.dtype)
        if x.shape[-1] < self.min_width:
            x = F.pad(x, (0, self.min_width - x.shape[-1]))
        for block in self.blocks[:depth]:
            x, lengths = block(x, lengths)
        return self.blocks[depth].convolve(x, lengths)

    @torch.no_grad()
    def adapt_batchnorm(self, batches: Iterable[Mapping[str, Any]], reduce=None, layers: int | None = None) -> None:
        """AdaBN: set every batch norm's running mean and (unbiased) variance to the target windows'.

        Layer by layer, each with the layers before it already adapted: sums of every real
        position's values over all `batches` (float64), so the result does not depend on how
        the windows are batched. Only the running statistics change (no gradient, no label read).

        Args:
            batches: collated batches of the target windows, iterated once per block (a list, a
                loader, `LoaderBatches`; a one-shot iterator is listed first); moved to the
                model's device here.
            reduce: sums a tensor over processes (under DDP, each rank holding a shard); None: one process.
            layers: adapt the first `layers` blocks only (None: all).
        """
        was_training = self.training
        self.eval()
        batches = list(batches) if isinstance(batches, Iterator) else batches
        for depth, block in enumerate(self.blocks[:layers]):
            total = torch.zeros(3, block.norm.num_features, dtype=torch.float64, device=self.device)
            for batch in batches:
                x, mask = self._features({k: self._to_device(v) for k, v in batch.items()}, depth)
                keep = mask[:, None, :].to(torch.float64)
                x = x.to(torch.float64) * keep
                total += torch.stack([keep.sum(dim=(0, 2)).expand(x.shape[1]), x.sum(dim=(0, 2)), (x * x).sum((0, 2))])
            count, first, second = reduce(total) if reduce is not None else total
            mean = first / count
            var = (second - count * mean**2) / torch.clamp(count - 1, min=1)
            block.norm.running_mean.copy_(mean.to(block.norm.running_mean.dtype))
            block.norm.running_var.copy_(var.clamp(min=0).to(block.norm.running_var.dtype))
        self.train(was_training)

    def _to_device(self, value: Any) -> Any:
        return value.to(self.device) if isinstance(value, torch.Tensor) else value

    def _adapt_to(self, loaders: Any) -> None:
        """Keep the source statistics, then adapt to `loaders`' windows (read as the loop would)."""
        self._source_statistics = {k: v.clone() for k, v in self.state_dict().items() if "running_" in k}
        strategy = self.trainer.strategy if self._trainer is not None else None
        world = strategy.world_size if strategy is not None else 1
        reduce = (lambda t: strategy.reduce(t, reduce_op="sum")) if world > 1 else None
        self.adapt_batchnorm(LoaderBatches(loaders), reduce)

    def _restore_source(self) -> None:
        if self._source_statistics is not None:
            self.load_state_dict(self._source_statistics, strict=False)
            self._source_statistics = None

    def on_test_start(self) -> None:
        if self.adabn:
            self._adapt_to(self.trainer.test_dataloaders)

    def on_test_end(self) -> None:
        self._restore_source()

    def on_predict_start(self) -> None:
        if self.adabn:
            self._adapt_to(self.trainer.predict_dataloaders)

    def on_predict_end(self) -> None:
        self._restore_source()

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
