"""A sequence batch packed: the variable-length field's samples end to end in one row of `width` elements.

Keys, for the field `f`: `f` `[width, ...]` (the pad value after the last sample), `f_mask` `[width]`
(True = a sample's element), `f_cu_seqlens` `[B + 1]` int32 (where each sample starts; the last: the real
elements) and `f_lengths` `[B]`. One shape for every batch of a split; what
`SequenceModel` reads packed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["pack_arrays", "packed_field"]


def packed_field(name: str, values: torch.Tensor, lengths: np.ndarray, width: int, pad: float) -> dict:
    """The keys of field `name` whose samples' elements, end to end, are `values` `[n, ...]`."""
    n = int(values.shape[0])
    if n > width:
        raise ValueError(f"{name}: {len(lengths)} samples of {n} elements do not fit a packed row of {width}")
    row = torch.full((width, *values.shape[1:]), pad, dtype=values.dtype)
    row[:n] = values
    lengths = np.asarray(lengths, dtype=np.int64)
    return {
        name: row,
        f"{name}_mask": torch.arange(width) < n,
        f"{name}_cu_seqlens": torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)),
        f"{name}_lengths": torch.from_numpy(lengths),
    }


def pack_arrays(name: str, arrays: Sequence[np.ndarray], width: int, pad: float, dtype=None) -> dict:
    """`packed_field` of single samples' arrays (a transformed batch, a list of samples)."""
    values = torch.from_numpy(np.concatenate([np.asarray(a) for a in arrays]))
    return packed_field(name, values if dtype is None else values.to(dtype), [len(a) for a in arrays], width, pad)
