"""The base of the models that read a sample as tokens: a transformer encoder that attends to a
sample's real tokens only, then their mean, on padded and packed batches alike."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from varlen.batching import blocked_mask
from varlen.models.attention import Rows, packed_encoder, row_mean
from varlen.models.base import VarLenModule

__all__ = ["PooledEncoder"]


class PooledEncoder(VarLenModule):
    """Tokens -> a transformer encoder over each sample's real tokens -> their mean -> a LayerNorm.

    A subclass takes its own arguments and hands these on as `**kwargs` (LightningCLI lists them
    with its own); it builds its embedding, then `build_encoder`, then its head (the order of
    construction fixes the seeded initial weights), and defines `_eval_step(batch, metrics, stage)`
    over its `val_metrics` / `test_metrics`.

    Args:
        d_model: token width.
        nhead: attention heads.
        num_layers: encoder layers.
        dim_feedforward: feed-forward width.
        dropout: dropout in the encoder.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
    """

    def __init__(
        self,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 2,
        dim_feedforward: int = 128,
        dropout: float = 0.1,
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()  # the subclass's arguments too (Lightning reads every __init__ up the chain)

    def build_encoder(self, activation: str = "relu") -> None:
        """`self.encoder` (pre-norm layers) and `self.norm`, the LayerNorm of the pooled mean."""
        hp = self.hparams
        options = {"batch_first": True, "norm_first": True, "activation": activation}
        layer = nn.TransformerEncoderLayer(hp.d_model, hp.nhead, hp.dim_feedforward, hp.dropout, **options)
        # Padding invariance holds on both encoder paths (checked: the eval/no-grad fused fast path and
        # the regular one agree with an unpadded run to ~1e-7). Nested tensors (which would drop padded
        # tokens in eval only) are turned off explicitly rather than relying on PyTorch skipping them
        # for norm_first layers.
        self.encoder = nn.TransformerEncoder(layer, hp.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hp.d_model)

    def pool(self, tokens: torch.Tensor, keep: torch.Tensor | None = None, rows: Rows | None = None) -> torch.Tensor:
        """`[B, d_model]`: the normed mean of each sample's encoded tokens, of padded `tokens`
        `[B, T, d]` with their keep-mask `keep` (True = real), or packed ones `[N, d]` in `rows`
        (attention within each sample)."""
        if rows is not None:
            return self.norm(row_mean(packed_encoder(self.encoder, tokens, rows), rows))
        hidden = self.encoder(tokens, src_key_padding_mask=blocked_mask(keep))  # True = blocked
        weights = keep.unsqueeze(-1).to(hidden.dtype)
        return self.norm((hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0))  # mean over real tokens only

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.val_metrics, "val")

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, self.test_metrics, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
