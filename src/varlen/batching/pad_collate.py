"""`PadCollate`: dict samples collated key by key, variable-length arrays padded, never stacked unequal.

The base DataModule's collate when a subclass sets none, and the collate of
`SequenceDataModule`'s single samples. A key whose arrays differ
along their first axis (or that is declared ragged) is padded to the batch's longest (or to the length the
batch carries: `pad_to`) with its pad value
and gets `<key>_mask` (True = real) and `<key>_lengths`; arrays of one shape are stacked; numbers
become a tensor (ints int64, floats float64, as torch's own collate); anything else stays a list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.padding import pad_sequences
from varlen.errors import DataError

__all__ = ["PadCollate"]


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of an array or tensor, None for anything else."""
    return tuple(value.shape) if isinstance(value, (np.ndarray, torch.Tensor)) else None


def _sample_name(sample: Mapping[str, Any], position: int) -> str:
    index = sample.get("index")
    return f"sample {int(index)}" if isinstance(index, (int, np.integer)) else f"sample {position} of the batch"


class PadCollate(PadsToWidths):
    """Collate a list of sample dicts (`{"index": i, "x": array, "label": 3}`) into one batch dict.

    Args:
        ragged: keys always padded with a mask and lengths, even when a batch's samples happen to be
            of one length (declare every key whose length can vary: a model then always finds its mask).
        pad_values: the value written where a key's sample has no data (default 0).
        pad_to_multiple_of: round the padded length up to this multiple (a batch that carries its padded
            lengths, `varlen.batching.indices`, pads to them).
        key_axes: the size axis whose carried length each padded key pads to (default: every key, axis 0);
            a key not named pads to its longest, up to `pad_to_multiple_of`.

    Raises:
        DataError: samples that are not dicts, that miss a key another sample has, whose arrays differ
            beyond their first axis, or a key whose `_mask` / `_lengths` name a sample key already.
    """

    def __init__(
        self,
        ragged: Sequence[str] = (),
        pad_values: Mapping[str, float | int] | None = None,
        pad_to_multiple_of: int | None = None,
        key_axes: Mapping[str, int] | None = None,
    ) -> None:
        self.ragged = tuple(ragged)
        self.pad_values = dict(pad_values or {})
        self.pad_to_multiple_of = pad_to_multiple_of
        self.key_axes = None if key_axes is None else dict(key_axes)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not samples:
            raise ValueError("cannot collate an empty batch")
        first = samples[0]
        if not isinstance(first, Mapping):
            raise DataError(
                f"the default collate takes dict samples, got {type(first).__name__}: return "
                "{'index': i, 'x': array, ...} from the dataset's __getitem__, or set the DataModule's collate_fn"
            )
        keys = list(first)
        for position, sample in enumerate(samples):
            missing = [k for k in keys if k not in sample] if isinstance(sample, Mapping) else keys
            if missing or len(sample) != len(keys):
                extra = sorted(set(sample) - set(keys)) if isinstance(sample, Mapping) else []
                raise DataError(
                    f"{_sample_name(sample, position) if isinstance(sample, Mapping) else f'sample {position}'} "
                    f"has keys {sorted(sample) if isinstance(sample, Mapping) else type(sample).__name__} where "
                    f"{_sample_name(first, 0)} has {sorted(keys)} (missing {missing}, extra {extra}): every "
                    "sample of a dataset must give the same keys"
                )
        batch: dict[str, Any] = {}
        for key in keys:
            batch.update(self._collate_key(key, [s[key] for s in samples], samples))
        return batch

    def _collate_key(self, key: str, values: list[Any], samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        shapes = [_shape(v) for v in values]
        if any(s is None for s in shapes):
            if all(isinstance(v, (bool, int, float, np.number, np.bool_)) for v in values):
                return {key: torch.as_tensor(np.asarray(values))}
            return {key: list(values)}
        if key not in self.ragged and len(set(shapes)) == 1:
            return {key: torch.stack([torch.as_tensor(v) for v in values])}
        self._check_trailing(key, shapes, samples)
        for name in (f"{key}_mask", f"{key}_lengths"):
            if name in samples[0]:
                raise DataError(f"samples hold both {key!r} (padded, so it gets {name!r}) and {name!r}: rename one")
        arrays = [v.numpy() if isinstance(v, torch.Tensor) else v for v in values]
        axis = 0 if self.key_axes is None else self.key_axes.get(key)
        padding = self.pad_to_multiple_of if axis is None else pad_to(samples, self.pad_to_multiple_of, axis)
        padded = pad_sequences(arrays, self.pad_values.get(key, 0), padding)
        return {key: padded.values, f"{key}_mask": padded.mask, f"{key}_lengths": padded.lengths}

    @staticmethod
    def _check_trailing(key: str, shapes: list[tuple[int, ...]], samples: Sequence[Mapping[str, Any]]) -> None:
        """Arrays padded along their first axis must agree on the others (and have one)."""
        for position, shape in enumerate(shapes):
            if len(shape) == 0 or shape[1:] != shapes[0][1:]:
                raise DataError(
                    f"{key!r} has shape {shape} in {_sample_name(samples[position], position)} and {shapes[0]} in "
                    f"{_sample_name(samples[0], 0)}: arrays of a key may differ in their first axis only (padded, "
                    f"with {key}_mask); give every sample's {key!r} the same trailing shape"
                )
