"""Collate helpers: pad ragged arrays to the batch maximum in one preallocated tensor.

The common case (arrays that differ only along their first axis: token ids, frames, signal
windows, spectra) is one `np.concatenate` and one masked scatter, with no Python loop over
tokens. Arrays ragged along several axes (segments x tokens) are copied with one slice
assignment per sample.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from varlen.batching.shape_policy import PadTo, pad_length, round_up

__all__ = [
    "Padded",
    "additive_mask",
    "blocked_mask",
    "lengths_to_mask",
    "numpy_dtype",
    "pad_flat",
    "pad_sequences",
    "round_up",
]


class Padded(NamedTuple):
    """A padded batch.

    Attributes:
        values: `[B, *max_shape]` tensor, pad value where there is no data.
        lengths: `[B]` (first-axis lengths) or `[B, ndim]` (ragged along several axes).
        mask: `[B, *max_shape[:ragged]]` bool, True where there is real data (the "keep"
            convention; see `blocked_mask` / `additive_mask` for attention masks).
    """

    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor


#: below this many elements per sample, one masked scatter beats a copy per sample
SCATTER_BELOW = 256


@functools.cache
def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype of a torch dtype."""
    return torch.empty(0, dtype=dtype).numpy().dtype


def pad_sequences(
    arrays: Sequence[np.ndarray | torch.Tensor | Sequence],
    pad_value: float | int = 0,
    pad_to_multiple_of: PadTo = None,
    dtype: torch.dtype | None = None,
    ragged_dims: int = 1,
) -> Padded:
    """Pad CPU arrays that differ in their leading `ragged_dims` axes into one tensor.

    The work is done in numpy on one preallocated buffer that becomes the tensor without a
    copy: short samples (token ids) are joined and scattered through the mask in one step,
    long ones (signal windows) are copied one slice per sample.

    Args:
        arrays: one array per sample; trailing axes after the ragged ones must agree.
        pad_value: value written where a sample has no data (e.g. the tokenizer's pad id).
        pad_to_multiple_of: round the innermost ragged axis up to this multiple (tensor cores), or to
            its rung (`Rungs`, the shape policy).
        dtype: output dtype; default: that of the first array.
        ragged_dims: how many leading axes vary between samples (1 for sequences, 2 for
            segments x tokens).

    Returns:
        `Padded` with values, lengths and a keep-mask over the ragged axes.
    """
    if len(arrays) == 0:
        raise ValueError("cannot pad an empty list of arrays")
    arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays]
    for i, a in enumerate(arrays):
        if a.ndim < ragged_dims or a.shape[ragged_dims:] != arrays[0].shape[ragged_dims:]:
            raise ValueError(
                f"sample {i} has shape {a.shape}, sample 0 has {arrays[0].shape}: samples must have at least "
                f"{ragged_dims} ragged axes and agree beyond them"
            )
    trailing = arrays[0].shape[ragged_dims:]
    np_dtype = numpy_dtype(dtype) if dtype is not None else arrays[0].dtype
    if ragged_dims == 1:
        lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
        width = pad_length(int(lengths.max()), pad_to_multiple_of)
        if width * math.prod(trailing) < SCATTER_BELOW:
            return pad_flat(np.concatenate(arrays).astype(np_dtype, copy=False), lengths, pad_value, pad_to_multiple_of)
        out = np.full((len(arrays), width, *trailing), pad_value, dtype=np_dtype)
        for i, a in enumerate(arrays):
            out[i, : len(a)] = a
        mask = np.arange(width) < lengths[:, None]
        return Padded(torch.from_numpy(out), torch.from_numpy(lengths), torch.from_numpy(mask))
    sizes = np.array([a.shape[:ragged_dims] for a in arrays], dtype=np.int64)
    max_shape = sizes.max(axis=0).tolist()
    max_shape[-1] = pad_length(max_shape[-1], pad_to_multiple_of)
    out = np.full((len(arrays), *max_shape, *trailing), pad_value, dtype=np_dtype)
    mask = np.ones((len(arrays), *max_shape), dtype=bool)
    for d in range(ragged_dims):
        grid_shape = [1] * (ragged_dims + 1)
        grid_shape[d + 1] = max_shape[d]
        mask &= np.arange(max_shape[d]).reshape(grid_shape) < sizes[:, d].reshape([-1] + [1] * ragged_dims)
    for i, a in enumerate(arrays):
        out[(i, *[slice(0, n) for n in a.shape[:ragged_dims]])] = a
    return Padded(torch.from_numpy(out), torch.from_numpy(sizes), torch.from_numpy(mask))


def pad_flat(
    values: np.ndarray,
    lengths: np.ndarray,
    pad_value: float | int = 0,
    pad_to_multiple_of: PadTo = None,
    dtype: torch.dtype | None = None,
) -> Padded:
    """Pad samples stored back to back (`values` = their concatenation) in one scatter.

    The fast path for ragged storage (token ids kept as one flat array plus offsets): no
    per-sample work at all.

    Args:
        values: `[sum(lengths), *trailing]`, the samples one after another.
        lengths: `[B]` length of each sample.
        pad_value: value written where a sample has no data.
        pad_to_multiple_of: round the padded length up to this multiple, or to its rung (`Rungs`).
        dtype: output dtype; default: that of `values`.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        raise ValueError("cannot pad an empty batch")
    if int(lengths.sum()) != len(values):
        raise ValueError(f"lengths add up to {int(lengths.sum())} but there are {len(values)} values")
    width = pad_length(int(lengths.max()), pad_to_multiple_of)
    out = np.full(
        (len(lengths), width, *values.shape[1:]), pad_value, dtype=numpy_dtype(dtype) if dtype else values.dtype
    )
    mask = np.arange(width) < lengths[:, None]
    out[mask] = values
    return Padded(torch.from_numpy(out), torch.from_numpy(lengths), torch.from_numpy(mask))


def lengths_to_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """Keep-mask `[B, max_length]` (True = real) from lengths `[B]`."""
    max_length = int(lengths.max()) if max_length is None else max_length
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]


def blocked_mask(keep: torch.Tensor) -> torch.Tensor:
    """Bool mask in the convention of `nn.MultiheadAttention`: True = *blocked* (not attended).

    `keep` is a keep-mask (True = real / allowed), as every varlen batch carries.
    """
    return ~keep.bool()


def additive_mask(keep: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Float mask added to attention scores: 0 where allowed, `-inf` where blocked.

    The form `scaled_dot_product_attention` and `nn.MultiheadAttention` accept as a float
    `attn_mask`. A query row with nothing allowed yields NaN there; mask such rows out.
    """
    out = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return out.masked_fill_(~keep.bool(), float("-inf"))
