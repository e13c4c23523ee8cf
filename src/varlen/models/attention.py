"""Attention restricted to the rows of a packed batch (no padding in the batch), and the rows themselves.

A packed field is `[N, ...]` with offsets `cu_seqlens` `[R + 1]` (`varlen.datasets.video_text.packed`): the
segments of each video, the tokens of each caption. `Rows` derives what every mechanism
needs from the offsets (row of each element, position inside it, longest row); the mechanisms
take `(q, k, v [N, H, dh], rows, dropout_p)` and return `[N, H, dh]` where each element
attended to its own row only. `pair_attention` is the cross-modal case: queries attend to
the keys an index-pair list allows. Pure tensor functions (the model applies its own weights).

`packed_attention` is the one entry every packed model calls: torch's own variable-length
FlashAttention (`torch.nn.attention.varlen.varlen_attn`) where it runs (CUDA, half precision, no
attention dropout: the kernel has none), else `rows_attention`, the same result on any device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

try:  # torch >= 2.10
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - older torch: the exact fallback everywhere
    varlen_attn = None

__all__ = [
    "PACKED_ATTENTION",
    "Rows",
    "nested_attention",
    "packed_attention",
    "packed_encoder",
    "pair_attention",
    "row_mean",
    "rows_attention",
    "varlen_kernel_runs",
]


class Rows(NamedTuple):
    """The rows of a packed sequence `[N, ...]`, from their offsets (`*_cu_seqlens` `[R + 1]`)."""

    cu: torch.Tensor  # [R + 1] int64
    lengths: torch.Tensor  # [R]
    ids: torch.Tensor  # [N] row of each element
    positions: torch.Tensor  # [N] position inside its row
    max_len: int

    @classmethod
    def of(cls, cu_seqlens: torch.Tensor) -> Rows:
        cu = cu_seqlens.long()
        lengths = cu.diff()
        ids = torch.repeat_interleave(torch.arange(len(lengths), device=cu.device), lengths)
        positions = torch.arange(len(ids), device=cu.device) - cu[ids]
        return cls(cu, lengths, ids, positions, int(lengths.max()) if len(lengths) else 0)


def row_mean(x: torch.Tensor, rows: Rows) -> torch.Tensor:
    """`[R, d]` mean of each row of the packed `x` `[N, d]`."""
    total = x.new_zeros(len(rows.lengths), x.shape[-1]).index_add(0, rows.ids, x)
    return total / rows.lengths.clamp_min(1)[:, None].to(x.dtype)


def rows_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: Rows,
    dropout_p: float,
    scale: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """SDPA over `[R, H, L, dh]`: each row padded to the longest row for the attention alone.

    Projections and feed-forward stay on the `N` real elements; only the scores pay for the
    padding inside rows (`R * L^2` of them, with `L` the batch's longest row). With `window`,
    an element attends to the keys of its row at most `window` positions away (a local attention).
    """
    _, heads, dim = q.shape
    count, width = len(rows.lengths), rows.max_len
    flat = rows.ids * width + rows.positions

    def padded(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(count * width, heads, dim).index_copy(0, flat, x)
        return out.view(count, width, heads, dim).transpose(1, 2)

    positions = torch.arange(width, device=q.device)
    real = positions < rows.lengths[:, None]  # [R, L]
    keep = real[:, None, None, :]
    if window is not None:  # the padding's queries keep every key: a fully masked row would be nan
        near = (positions[:, None] - positions[None, :]).abs() <= window
        keep = keep & (near | ~real[:, :, None])[:, None]
    out = F.scaled_dot_product_attention(
        padded(q), padded(k), padded(v), attn_mask=keep, dropout_p=dropout_p, scale=scale
    )
    return out.transpose(1, 2).reshape(count * width, heads, dim)[flat]


def nested_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: Rows, dropout_p: float) -> torch.Tensor:
    """SDPA on nested jagged tensors (`torch.nested`, `layout=torch.jagged`) built on the offsets."""

    def nested(x: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(x.contiguous(), rows.cu).transpose(1, 2)

    return F.scaled_dot_product_attention(nested(q), nested(k), nested(v), dropout_p=dropout_p).transpose(1, 2).values()


def varlen_kernel_runs(x: torch.Tensor, dropout_p: float = 0.0) -> bool:
    """Whether torch's varlen FlashAttention takes `x`: on CUDA, in fp16/bf16, without dropout."""
    return varlen_attn is not None and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0


def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    dropout_p: float = 0.0,
    scale: float | None = None,
    rows: Rows | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """`[N, H, dh]`: each element of `q` attends to the keys of its own row (`cu_seqlens` `[R + 1]`,
    `cu_seqlens[-1] == N`, the longest row `max_seqlen`; with `window`, those at most `window`
    positions away): torch's varlen kernel where it runs (`varlen_kernel_runs`), else
    `rows_attention` (exact, dropout included; `rows` if known)."""
    if varlen_kernel_runs(q, dropout_p):
        cu, side = cu_seqlens.to(torch.int32), -1 if window is None else window
        return varlen_attn(q, k, v, cu, cu, int(max_seqlen), int(max_seqlen), scale=scale, window_size=(side, side))
    return rows_attention(q, k, v, rows if rows is not None else Rows.of(cu_seqlens), dropout_p, scale, window)


def _auto(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: Rows, dropout_p: float) -> torch.Tensor:
    return packed_attention(q, k, v, rows.cu, rows.max_len, dropout_p, rows=rows)


#: packed attention mechanisms by name, `(q, k, v [N, H, dh], rows, dropout_p) -> [N, H, dh]`: "auto"
#: is `packed_attention` (the varlen kernel where it runs, else "rows"); the aligner's docstring says
#: how "rows" was chosen on CPU (scripts/benchmark_video_text.py adds the measured alternatives: SDPA
#: with a block-diagonal mask, flex_attention with a block mask)
PACKED_ATTENTION: dict[str, Callable[..., torch.Tensor]] = {
    "auto": _auto,
    "rows": rows_attention,
    "nested": nested_attention,
}


def _self_attention(
    layer: nn.TransformerEncoderLayer, x: torch.Tensor, rows: Rows, attention: Callable
) -> torch.Tensor:
    mha = layer.self_attn
    qkv = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).view(len(x), 3, mha.num_heads, -1)
    attended = attention(*qkv.unbind(1), rows, mha.dropout if layer.training else 0.0).reshape(len(x), -1)
    return layer.dropout1(mha.out_proj(attended))


def _feed_forward(layer: nn.TransformerEncoderLayer, x: torch.Tensor) -> torch.Tensor:
    return layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))


def packed_encoder(
    encoder: nn.TransformerEncoder, x: torch.Tensor, rows: Rows, attention: Callable = _auto
) -> torch.Tensor:
    """`encoder` (`nn.TransformerEncoderLayer` s, pre- or post-norm) over the packed `x` `[N, d]`,
    attention within each row: the same weights and arithmetic as `encoder(padded, src_key_padding_mask=...)`
    on the real positions, with projections, norms and feed-forward on the `N` real elements only."""
    for layer in encoder.layers:
        if layer.norm_first:
            x = x + _self_attention(layer, layer.norm1(x), rows, attention)
            x = x + _feed_forward(layer, layer.norm2(x))
        else:  # post-norm (torch's default): each norm after its residual sum
            x = layer.norm1(x + _self_attention(layer, x, rows, attention))
            x = layer.norm2(x + _feed_forward(layer, x))
    return x if encoder.norm is None else encoder.norm(x)


def pair_attention(
    mha: nn.MultiheadAttention, query: torch.Tensor, key: torch.Tensor, q_index: torch.Tensor, k_index: torch.Tensor
) -> torch.Tensor:
    """`mha(query, key, key)` where query `q_index[p]` may attend to key `k_index[p]` only.

    Scores on the pairs alone `[P, H]`, a softmax per query (`scatter_reduce` / `index_add`)
    and a weighted `index_add` of the values: `O(P)`, whatever the batch. Every query needs a pair.
    """
    heads = mha.num_heads
    w, b = mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3)
    q, k, v = (F.linear(x, w[i], b[i]).view(len(x), heads, -1) for i, x in enumerate((query, key, key)))
    scores = (q[q_index] * k[k_index]).sum(-1) * q.shape[-1] ** -0.5
    top = scores.new_zeros(len(query), heads).scatter_reduce(
        0, q_index[:, None].expand_as(scores), scores.detach(), "amax", include_self=False
    )
    weights = (scores - top[q_index]).exp()
    weights = weights / weights.new_zeros(len(query), heads).index_add(0, q_index, weights)[q_index]
    out = v.new_zeros(len(query), heads, v.shape[-1]).index_add(0, q_index, weights[..., None] * v[k_index])
    return mha.out_proj(out.reshape(len(query), -1))
