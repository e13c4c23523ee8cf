"""A Hugging Face encoder over packed text rows: attention within each text, the first token of each pooled.

A packed batch (``TextClassificationDataModule(layout="packed")``) is one row ``[1, T]``: its texts end
to end, ``cu_seqlens`` ``[B + 1]`` where each starts, ``position_ids`` restarting at each. The encoder runs
unchanged but for two things: its attention goes through :data:`ATTENTION` (registered with transformers'
``AttentionInterface``), which attends within the texts by ``cu_seqlens`` with
:func:`~varlen.models.attention.packed_attention` (torch's varlen FlashAttention on CUDA, exact per-text
SDPA elsewhere), and the module that reads the first ([CLS]) token (the pooler, or a head on the hidden
states) is handed each text's first token instead of the row's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from varlen import notices
from varlen.models.attention import packed_attention, varlen_attn

__all__ = ["ATTENTION", "first_token_reader", "packed_logits"]

#: the name of varlen's packed attention in transformers' attention interface
ATTENTION = "varlen_packed"

log = logging.getLogger(__name__)
_told: set[int] = set()


def _say_which_attention(model: nn.Module, device: torch.device) -> None:
    """Once per model, training on CUDA with attention dropout: why torch's varlen kernel is not the one used."""
    dropout = float(getattr(model.config, "attention_probs_dropout_prob", 0.0) or 0.0)
    if id(model) in _told or not model.training or device.type != "cuda" or varlen_attn is None or dropout == 0:
        return
    _told.add(id(model))
    notices.info(
        log,
        "packed rows attend per text with SDPA while training: the encoder's attention_probs_dropout_prob is %s "
        "and torch's varlen kernel has no dropout (config_overrides: {attention_probs_dropout_prob: 0} uses it)",
        dropout,
    )


def _attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature (``query`` ``[1, H, T, dh]``) -> ``([1, T, H, dh], None)``: attention
    within each text of the row; the tail after the last text (``packed_tokens`` on) gets zeros."""
    cu, longest, real = kwargs["cu_seq_lens_q"], kwargs["max_length_q"], kwargs["packed_tokens"]
    q, k, v = (x[0, :, :real].transpose(0, 1) for x in (query, key, value))
    out = packed_attention(q, k, v, cu, longest, dropout, scaling)
    return F.pad(out, (0, 0, 0, 0, 0, query.shape[2] - real))[None], None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _attention)


def first_token_reader(model: nn.Module) -> nn.Module:
    """The module of a sequence classifier that reads the first token of the hidden states: the base model's
    pooler (BERT, MiniLM, ALBERT, DeBERTa), else the classification head (RoBERTa, ELECTRA)."""
    pooler = getattr(model.base_model, "pooler", None)
    if isinstance(pooler, nn.Module):
        return pooler
    head = getattr(model, "classifier", None)
    if isinstance(head, nn.Module) and not isinstance(head, nn.Linear):
        return head
    raise ValueError(
        f"packed batches need a {type(model).__name__} whose pooler or classification head reads the first "
        "token of the hidden states (BERT, RoBERTa, ALBERT, ELECTRA, DeBERTa families); use layout='padded'"
    )


def packed_logits(model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor:
    """``[B, classes]`` logits of ``model`` (an ``AutoModelForSequenceClassification``) on a packed batch: the
    same per text as on the texts padded, to float rounding (attention never crosses a text's end)."""
    _register()
    cu = batch["cu_seqlens"]
    _say_which_attention(model, cu.device)
    firsts = cu[:-1].long()
    reader = first_token_reader(model)

    def read_firsts(module: nn.Module, args: tuple) -> tuple:
        return (args[0][0, firsts][:, None], *args[1:])  # [1, T, d] -> [B, 1, d]: each text's first token

    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "position_ids") if k in batch}
    config = model.config
    before = config._attn_implementation
    hook = reader.register_forward_pre_hook(read_firsts)
    config._attn_implementation = ATTENTION
    try:
        return model(
            **inputs,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=int(batch["max_seqlen"]),
            max_length_k=int(batch["max_seqlen"]),
            packed_tokens=int(batch["packed_tokens"]),
        ).logits
    finally:
        config._attn_implementation = before
        hook.remove()
