"""A Hugging Face encoder over packed text rows: attention within each text, each text's first token pooled.

A packed batch (`TextClassificationDataModule(layout="packed")`) is one row `[1, T]`: its texts end
to end, `cu_seqlens` `[B + 1]` where each starts, `position_ids` restarting at 0 at each. The encoder
runs unchanged but for three things: its attention goes through `ATTENTION` (registered with
transformers' `AttentionInterface`), which attends within the texts by `cu_seqlens` with
`packed_attention` (torch's varlen FlashAttention on CUDA, exact per-text
SDPA elsewhere); its positions start where the model numbers them (`first_position`); and the final
token states are cut to each text's first token (or mean) before the model's own head reads them.

Only a model whose attention provably goes through the interface and whose reading of the states is known
runs packed: `packing_refusal` says why any other cannot, and `check_packable` refuses it by
name before the first step. `tests/test_packed_encoders.py` holds every family of `PACKED_FAMILIES`
to its padded logits and gradients, and proves that the refused ones would mix texts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from varlen import notices
from varlen.errors import DataError
from varlen.models.attention import packed_attention, varlen_attn

__all__ = [
    "ATTENTION",
    "PACKED_FAMILIES",
    "Family",
    "check_packable",
    "first_position",
    "packed_logits",
    "packing_refusal",
]

#: the name of varlen's packed attention in transformers' attention interface
ATTENTION = "varlen_packed"

log = logging.getLogger(__name__)
_told: set[int] = set()


class Family(NamedTuple):
    """How an encoder family runs packed rows.

    Attributes:
        states: the module (a path under the base model) whose output is the final token states, before the
            head reads its first token: a hook hands the head each text's first token (or mean) instead.
        after_padding: positions counted from `pad_token_id + 1` (RoBERTa's numbering), else from 0.
    """

    states: str
    after_padding: bool = False


#: the encoder families (`config.model_type`) packed exactly: their attention goes through transformers'
#: attention interface (`_supports_attention_backend`) and their heads read the states of `states`
PACKED_FAMILIES: dict[str, Family] = {
    "albert": Family("encoder"),
    "bert": Family("encoder"),
    "camembert": Family("encoder", after_padding=True),
    "distilbert": Family("transformer"),
    "electra": Family("encoder"),
    "modernbert": Family("final_norm"),
    "roberta": Family("encoder", after_padding=True),
    "xlm-roberta": Family("encoder", after_padding=True),
}


def packing_refusal(model: nn.Module) -> str | None:
    """Why `model` (a transformers sequence classifier) cannot run packed rows exactly; None: it can."""
    config = getattr(model, "config", None)
    if not getattr(type(model), "_supports_attention_backend", False):
        return (
            "its attention never goes through transformers' attention interface (_supports_attention_backend "
            "is False), so the texts of a row would attend to each other"
        )
    if getattr(config, "model_type", None) not in PACKED_FAMILIES:
        return "varlen has not checked where this family numbers positions and reads the first token"
    if getattr(config, "is_decoder", False):
        return "it is configured as a decoder (is_decoder: causal attention)"
    return None


def check_packable(model: nn.Module) -> None:
    """Refuse, by name, a model that would not give a packed row's texts their padded logits.

    Raises:
        DataError: (a `ValueError`; `varlen` prints it alone) the model and its family, why, the families
            that run packed, and `layout: padded`.
    """
    reason = packing_refusal(model)
    if reason is not None:
        kind = getattr(getattr(model, "config", None), "model_type", None)
        raise DataError(
            f"layout: packed cannot run {type(model).__name__} (model_type {kind!r}): {reason}; use layout: "
            f"padded (packed runs {', '.join(sorted(PACKED_FAMILIES))})"
        )


def first_position(config: Any) -> int:
    """The position the model gives a text's first token: `pad_token_id + 1` for the RoBERTa family (which
    numbers positions after the padding index), else 0. A packed row's positions restart at each text, so the
    model cannot derive them from the padding as it does on padded batches."""
    family = PACKED_FAMILIES.get(config.model_type)
    return int(config.pad_token_id) + 1 if family is not None and family.after_padding else 0


def _say_which_attention(model: nn.Module, device: torch.device) -> None:
    """Once per model, training on CUDA with attention dropout: why torch's varlen kernel is not the one used."""
    config = model.config
    dropout = float(getattr(config, "attention_probs_dropout_prob", getattr(config, "attention_dropout", 0)) or 0)
    if id(model) in _told or not model.training or device.type != "cuda" or varlen_attn is None or dropout == 0:
        return
    _told.add(id(model))
    notices.info(
        log,
        "packed rows attend per text with SDPA while training: the encoder's attention dropout is %s "
        "and torch's varlen kernel has no dropout (config_overrides with it 0 uses the kernel)",
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
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature (`query` `[1, H, T, dh]`) -> `([1, T, H, dh], None)`: attention
    within each text of the row; the tail after the last text (`packed_tokens` on) gets zeros. A
    `sliding_window` (ModernBERT's local layers) keeps, as transformers' flash path does, the keys at most
    `sliding_window - 1` tokens away, inside the text."""
    cu, longest, real = kwargs["cu_seq_lens_q"], kwargs["max_length_q"], kwargs["packed_tokens"]
    q, k, v = (x[0, :, :real].transpose(0, 1) for x in (query, key, value))
    window = None if sliding_window is None else sliding_window - 1
    out = packed_attention(q, k, v, cu, longest, dropout, scaling, window=window)
    return F.pad(out, (0, 0, 0, 0, 0, query.shape[2] - real))[None], None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _attention)


def _pooled(states: torch.Tensor, cu: torch.Tensor, real: int, mean: bool) -> torch.Tensor:
    """`[B, 1, d]`: each text's first token of the row's states `[1, T, d]` (its mean with `mean`)."""
    if not mean:
        return states[0, cu[:-1].long()][:, None]
    lengths = cu.diff().long()
    texts = torch.repeat_interleave(torch.arange(len(lengths), device=cu.device), lengths, output_size=real)
    sums = states.new_zeros(len(lengths), states.shape[-1]).index_add(0, texts, states[0, :real])
    return (sums / lengths[:, None].to(states.dtype))[:, None]


def _states_module(model: nn.Module) -> nn.Module:
    module = model.base_model
    for name in PACKED_FAMILIES[model.config.model_type].states.split("."):
        module = getattr(module, name)
    return module


def packed_logits(model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor:
    """`[B, classes]` logits of `model` (an `AutoModelForSequenceClassification`) on a packed batch: the
    same per text as on the texts padded, to float rounding (attention never crosses a text's end).

    Raises:
        DataError: the model cannot run packed rows exactly (`check_packable`).
    """
    check_packable(model)
    _register()
    cu, real = batch["cu_seqlens"], int(batch["packed_tokens"])
    _say_which_attention(model, cu.device)
    config = model.config
    mean = getattr(config, "classifier_pooling", "cls") == "mean"  # ModernBERT's mean pooling

    def read(module: nn.Module, args: tuple, output: Any) -> Any:
        if isinstance(output, torch.Tensor):
            return _pooled(output, cu, real, mean)
        if isinstance(output, tuple):
            return (_pooled(output[0], cu, real, mean), *output[1:])
        output["last_hidden_state"] = _pooled(output[0], cu, real, mean)
        return output

    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids") if k in batch}
    inputs["position_ids"] = batch["position_ids"] + first_position(config)
    before = config._attn_implementation
    hook = _states_module(model).register_forward_hook(read)
    config._attn_implementation = ATTENTION
    try:
        return model(
            **inputs,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=int(batch["max_seqlen"]),
            max_length_k=int(batch["max_seqlen"]),
            packed_tokens=real,
        ).logits
    finally:
        config._attn_implementation = before
        hook.remove()
