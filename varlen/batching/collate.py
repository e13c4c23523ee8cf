"""Collate helpers: pad ragged arrays to the batch maximum in one preallocated tensor.

The common case (arrays that differ only along their first axis: token ids, frames, signal
windows, spectra) is one ``np.concatenate`` and one masked scatter, with no Python loop over
tokens. Arrays ragged along several axes (segments x tokens) are copied with one slice
assignment per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch


class Padded(NamedTuple):
    """A padded batch.

    Attributes:
        values: ``[B, *max_shape]`` tensor, pad value where there is no data.
        lengths: ``[B]`` (first-axis lengths) or ``[B, ndim]`` (ragged along several axes).
        mask: ``[B, *max_shape[:ragged]]`` bool, True where there is real data (the "keep"
            convention; see :func:`blocked_mask` / :func:`additive_mask` for attention masks).
    """

    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor


def round_up(n: int, multiple: int | None) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (unchanged when ``multiple`` is falsy)."""
    return -(-n // multiple) * multiple if multiple else n


def _concat(arrays: Sequence) -> torch.Tensor:
    """One tensor of all samples along the first axis (numpy joins them without a per-item tensor)."""
    if all(isinstance(a, torch.Tensor) for a in arrays):
        return torch.cat(list(arrays))
    return torch.from_numpy(np.concatenate([np.asarray(a) for a in arrays]))


def pad_sequences(
    arrays: Sequence[np.ndarray | torch.Tensor | Sequence],
    pad_value: float | int = 0,
    pad_to_multiple_of: int | None = None,
    dtype: torch.dtype | None = None,
    ragged_dims: int = 1,
) -> Padded:
    """Pad arrays that differ in their leading ``ragged_dims`` axes into one tensor.

    Args:
        arrays: one array per sample; trailing axes after the ragged ones must agree.
        pad_value: value written where a sample has no data (e.g. the tokenizer's pad id).
        pad_to_multiple_of: round the padded first axis up to this multiple (tensor cores).
        dtype: output dtype; default: that of the first array.
        ragged_dims: how many leading axes vary between samples (1 for sequences, 2 for
            segments x tokens).

    Returns:
        :class:`Padded` with values, lengths and a keep-mask over the ragged axes.
    """
    if len(arrays) == 0:
        raise ValueError("cannot pad an empty list of arrays")
    tensors = [a if isinstance(a, torch.Tensor) else np.asarray(a) for a in arrays]
    ndims = {t.ndim for t in tensors}
    if len(ndims) != 1 or next(iter(ndims)) < ragged_dims:
        raise ValueError(f"arrays must all have the same number of axes (>= {ragged_dims}), got {sorted(ndims)}")
    trailing = {tuple(t.shape[ragged_dims:]) for t in tensors}
    if len(trailing) != 1:
        raise ValueError(f"arrays differ beyond their first {ragged_dims} axes: shapes {sorted(trailing)}")
    shapes = torch.tensor([t.shape[:ragged_dims] for t in tensors], dtype=torch.long).reshape(len(tensors), ragged_dims)
    max_shape = shapes.amax(dim=0).tolist()
    max_shape[-1] = round_up(max_shape[-1], pad_to_multiple_of)  # the innermost ragged axis
    if dtype is None:
        first = tensors[0]
        dtype = first.dtype if isinstance(first, torch.Tensor) else torch.from_numpy(first[:0].copy()).dtype
    out = torch.full((len(tensors), *max_shape, *next(iter(trailing))), pad_value, dtype=dtype)
    grids = [torch.arange(m) for m in max_shape]
    if ragged_dims == 1:
        lengths = shapes[:, 0]
        mask = grids[0][None, :] < lengths[:, None]
        out[mask] = _concat(tensors).to(dtype)
        return Padded(out, lengths, mask)
    mask = torch.ones((len(tensors), *max_shape), dtype=torch.bool)
    for d, grid in enumerate(grids):
        view = [1] * (ragged_dims + 1)
        view[d + 1] = max_shape[d]
        mask &= grid.view(view) < shapes[:, d].view([len(tensors)] + [1] * ragged_dims)
    for i, t in enumerate(tensors):
        out[(i, *[slice(0, s) for s in t.shape[:ragged_dims]])] = torch.as_tensor(
            np.array(t) if isinstance(t, np.ndarray) else t, dtype=dtype
        )
    return Padded(out, shapes, mask)


def lengths_to_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """Keep-mask ``[B, max_length]`` (True = real) from lengths ``[B]``."""
    max_length = int(lengths.max()) if max_length is None else max_length
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]


def blocked_mask(keep: torch.Tensor) -> torch.Tensor:
    """Bool mask in the convention of ``nn.MultiheadAttention``: True = *blocked* (not attended).

    ``keep`` is a keep-mask (True = real / allowed), as every varlen batch carries.
    """
    return ~keep.bool()


def additive_mask(keep: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Float mask added to attention scores: 0 where allowed, ``-inf`` where blocked.

    The form ``scaled_dot_product_attention`` and ``nn.MultiheadAttention`` accept as a float
    ``attn_mask``. A query row with nothing allowed yields NaN there; mask such rows out.
    """
    out = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return out.masked_fill_(~keep.bool(), float("-inf"))
