"""A spectral transformer: one token per band, so one model reads any band set from any sensor."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torchmetrics
from torch import nn

from varlen.models.attention import Rows
from varlen.models.pooled_encoder import PooledEncoder

__all__ = ["AverageAccuracy", "SpectralTransformer", "patch_features", "wavelength_encoding"]


def wavelength_encoding(wavelengths: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal encoding of wavelengths in nm, `[..., dim]`.

    The band's physical wavelength plays the role a token position plays in text: two sensors'
    bands at 700 nm get the same code, which is what lets a model trained on one band set read
    another. Periods run geometrically from `2*pi` nm to `2*pi*max_period` nm.
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=wavelengths.device) / half)
    angles = wavelengths.float().unsqueeze(-1) * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def patch_features(spectra: torch.Tensor) -> torch.Tensor:
    """Per-band features of a batch `[B, K]` (spectra) or `[B, K, P, P]` (patches).

    Features are the centre value, the patch mean and the patch standard deviation per band:
    size-agnostic, so the same weights read spectra (a 1 x 1 patch) and any patch size.
    """
    if spectra.dim() == 2:
        return torch.stack([spectra, spectra, torch.zeros_like(spectra)], dim=-1)
    flat = spectra.flatten(2)
    p = spectra.shape[-1]
    centre = spectra[..., p // 2, p // 2]
    return torch.stack([centre, flat.mean(-1), flat.std(-1, unbiased=False)], dim=-1)


class AverageAccuracy(torchmetrics.classification.MulticlassStatScores):
    """Average accuracy (AA): the mean recall over the classes present in the targets.

    `MulticlassAccuracy(average="macro")` also averages in classes absent from the targets but
    predicted (recall 0/0 counted as 0), which lowers AA whenever a spatial split leaves a rare
    class out of the test blocks; the hyperspectral literature averages over present classes only.
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__(num_classes, average="none")

    def compute(self) -> torch.Tensor:
        tp, _, _, fn = self._final_state()
        support = tp + fn
        present = support > 0
        return (tp[present].float() / support[present]).mean()


class SpectralTransformer(PooledEncoder):
    """Pixel classifier over bands: value/patch features + wavelength encoding -> transformer -> masked mean.

    Validation / test metrics: `oa` (overall accuracy, micro), `aa` (average accuracy: mean
    recall over the classes present, `AverageAccuracy`) and `kappa` (Cohen's kappa), all
    torchmetrics objects (synced as states under DDP); losses and the training accuracy are
    batch-size-weighted means over every rank (`log_mean`),
    so validating on one or two processes gives the same numbers.

    Args:
        num_classes: classes (None: the DataModule's, at `setup`; `varlen fit` links it).
        class_names: their names (None: the DataModule's; kept in the hyperparameters for reports).
        **kwargs: the encoder's and the optimizer's, see `PooledEncoder`.
    """

    linked = ("num_classes", "class_names")

    def __init__(
        self,
        num_classes: int | None = None,
        class_names: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.build_when_known()

    def build_layers(self) -> None:
        num_classes = self.hparams.num_classes
        self.embed = nn.Linear(3, self.hparams.d_model)  # (centre, mean, std) per band, see patch_features
        self.build_encoder(activation="gelu")
        self.head = nn.Linear(self.hparams.d_model, num_classes)
        metrics = {
            "oa": torchmetrics.classification.MulticlassAccuracy(num_classes, average="micro"),
            "aa": AverageAccuracy(num_classes),
            "kappa": torchmetrics.classification.MulticlassCohenKappa(num_classes),
        }
        self.val_metrics = torchmetrics.MetricCollection(metrics, prefix="val/")
        self.test_metrics = self.val_metrics.clone(prefix="test/")

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits `[B, num_classes]`; `band_mask` is a keep-mask (True = real band). Packed
        (`band_cu_seqlens`): `spectra` `[N]` or `[N, P, P]` and `wavelengths` `[N]`, the pixels'
        bands end to end, attention within each pixel's bands."""
        cu = batch.get("band_cu_seqlens")
        spectra = batch["spectra"]
        features = patch_features(spectra) if cu is None else patch_features(spectra[None])[0]
        tokens = self.embed(features) + wavelength_encoding(batch["wavelengths"], self.hparams.d_model)
        if cu is not None:
            return self.head(self.pool(tokens, rows=Rows.of(cu)))
        return self.head(self.pool(tokens, keep=batch["band_mask"]))

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        acc = (logits.argmax(-1) == batch["labels"]).float().mean()
        self.log_mean({"train/loss": loss, "train/oa": acc}, batch, prog_bar=True)
        return loss

    def _eval_step(self, batch: Mapping[str, torch.Tensor], metrics: torchmetrics.MetricCollection, stage: str):
        logits = self(batch)
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        metrics.update(logits, batch["labels"])
        self.log_mean({f"{stage}/loss": loss}, batch)
        self.log_dict(metrics, on_epoch=True, batch_size=self.batch_size_of(batch))
