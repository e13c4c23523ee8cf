"""Padding and throughput telemetry: how much of each batch is real data, and how fast it flows."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import lightning.pytorch as pl
import torch

__all__ = ["BatchStats", "PaddingTelemetry", "mask_stats", "training_batch_stats", "training_field_stats"]


class BatchStats(NamedTuple):
    """What one batch holds: samples, real elements, and elements after padding."""

    samples: int
    real: int
    padded: int


def mask_stats(batch: Mapping[str, Any], mask_keys: Sequence[str]) -> BatchStats:
    """Batch stats from keep-masks (True = real): real = sum over masks, padded = their sizes; samples are the
    batch's `index` entries where it has one (a packed row's mask has one row for many samples)."""
    masks = [batch[k] for k in mask_keys]
    if not masks:
        raise ValueError("mask_stats needs at least one mask key")
    real = sum(int(m.sum()) for m in masks)
    padded = sum(m.numel() for m in masks)
    samples = len(batch["index"]) if "index" in batch else int(masks[0].shape[0])
    return BatchStats(samples, real, padded)


def training_batch_stats(trainer: pl.Trainer, batch: Any) -> BatchStats | None:
    """A training batch's counts: those its varlen DataModule took on the host before the transfer
    (`host_stats`), else the DataModule's `batch_stats` of the batch, else None."""
    datamodule = getattr(trainer, "datamodule", None)
    stats = getattr(datamodule, "host_stats", None)
    if stats is None and hasattr(datamodule, "batch_stats"):
        stats = datamodule.batch_stats(batch)
    return stats


def training_field_stats(trainer: pl.Trainer) -> dict[str, BatchStats] | None:
    """A training batch's counts per variable-length field, where its DataModule serves several and took
    them on the host (`host_fields`: e.g. `SequenceDataModule`'s `field_stats`), else None."""
    return getattr(getattr(trainer, "datamodule", None), "host_fields", None) or None


class PaddingTelemetry(pl.Callback):
    """Logs padding efficiency (real / padded elements), real elements per second and batch size.

    Per training step (this rank's batch): `telemetry/padding_efficiency`,
    `telemetry/real_per_s` and `telemetry/batch_size`. Per epoch, over every rank's batches:
    `telemetry/epoch_padding_efficiency`, `telemetry/epoch_samples_per_s`,
    `telemetry/epoch_real_per_s` (samples and elements summed over ranks, divided by the
    slowest rank's time), for a DataModule of several variable-length fields each one's
    `telemetry/epoch_padding_efficiency_<field>` (`training_field_stats`), and for a training
    split of several sources `telemetry/served_<source>` (its
    samples served, over ranks) beside `telemetry/scheduled_<source>` (the samples its share of the epoch,
    as `source_weights` or their schedule set it for this epoch, asks of the same total), kept in
    `epochs` as well, the same on every rank. Rates use the
    wall time between batch starts, so they include data loading. Works with any logger (it logs
    through `LightningModule.log`).

    A varlen DataModule counts each training batch while it is still on the host
    (`on_before_batch_transfer`: `VarLenDataModule.host_stats`), so counting never waits
    for the device; with `mask_keys`, or another DataModule, the masks are counted where they are.

    Args:
        mask_keys: batch keys of keep-masks to count. Default: the DataModule's counts
            (`datamodule.batch_stats(batch)`), which every varlen DataModule provides.
    """

    def __init__(self, mask_keys: Sequence[str] | None = None) -> None:
        self.mask_keys = tuple(mask_keys) if mask_keys else None
        self.epochs: list[dict[str, float]] = []
        self._reset()

    def _reset(self) -> None:
        self._totals = [0, 0, 0]
        self._sources: list[str] = []
        self._served: list[int] = []
        self._fields: dict[str, list[int]] = {}  # field -> [real, padded] this epoch
        self._epoch_start: float | None = None
        self._last_start: float | None = None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset()

    @torch.no_grad()
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        stats = mask_stats(batch, self.mask_keys) if self.mask_keys else training_batch_stats(trainer, batch)
        if stats is None:
            raise RuntimeError("PaddingTelemetry needs mask_keys= or a DataModule with batch_stats(batch)")
        for i, value in enumerate(stats):
            self._totals[i] += value
        for name, counts in (training_field_stats(trainer) or {}).items():
            part = self._fields.setdefault(name, [0, 0])
            part[0], part[1] = part[0] + counts.real, part[1] + counts.padded
        self._count_sources(trainer)
        if self._epoch_start is None:
            self._epoch_start = now
        metrics = {
            "telemetry/padding_efficiency": stats.real / max(stats.padded, 1),
            "telemetry/batch_size": float(stats.samples),
        }
        if self._last_start is not None:
            metrics["telemetry/real_per_s"] = self._last_real / max(now - self._last_start, 1e-9)
        self._last_start, self._last_real = now, stats.real
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=stats.samples)

    def _count_sources(self, trainer: pl.Trainer) -> None:
        """Add the batch's samples per source, which a varlen DataModule counted on the host."""
        datamodule = getattr(trainer, "datamodule", None)
        counts = getattr(datamodule, "host_sources", None)
        if counts is None:
            return
        if not self._sources:
            self._sources = list(datamodule.dataset("train").names)
            self._served = [0] * len(self._sources)
        for i, n in enumerate(counts.tolist()):
            self._served[i] += n

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._epoch_start is None:
            return
        elapsed = max(time.perf_counter() - self._epoch_start, 1e-9)
        fields = [n for part in self._fields.values() for n in part]  # every rank's DataModule has the same fields
        values = [*self._totals, elapsed, *self._served, *fields]
        local = torch.tensor(values, dtype=torch.float64, device=pl_module.device)
        every = pl_module.all_gather(local).reshape(-1, len(local))  # [ranks, ...]; one row outside DDP
        samples, real, padded = every[:, :3].sum(0).tolist()
        elapsed = float(every[:, 3].max())
        served = every[:, 4 : 4 + len(self._served)].sum(0).tolist()
        counts = every[:, 4 + len(self._served) :].sum(0).tolist()
        per_field = {name: counts[2 * k] / max(counts[2 * k + 1], 1) for k, name in enumerate(self._fields)}
        shares = getattr(trainer.datamodule, "scheduled_shares", lambda epoch: None)(trainer.current_epoch)
        asked = {name: shares[name] * sum(served) for name in self._sources} if self._sources and shares else {}
        summary = {
            "telemetry/epoch_padding_efficiency": real / max(padded, 1),
            "telemetry/epoch_samples_per_s": samples / elapsed,
            "telemetry/epoch_real_per_s": real / elapsed,
            **{f"telemetry/epoch_padding_efficiency_{name}": value for name, value in per_field.items()},
            **{f"telemetry/served_{name}": n for name, n in zip(self._sources, served, strict=True)},
            **{f"telemetry/scheduled_{name}": n for name, n in asked.items()},
        }
        self.epochs.append({k.split("/")[-1].removeprefix("epoch_"): v for k, v in summary.items()})
        pl_module.log_dict(summary, on_step=False, on_epoch=True, batch_size=1, sync_dist=False)
