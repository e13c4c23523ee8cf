"""`SequenceDataset`: one split's rows of a source's columns, each batch padded in one gather per field.

A split is a set of row positions into `SequenceColumns`
(shared by the splits carved from one source, never copied); `lengths` are the size fields' lengths
at those rows, computed once. `__getitems__` pads every variable-length field of the batch with
`Ragged.pad` (one gather each) and gathers the fixed fields
and labels: a `SequenceBatch`, already the batch (`SequenceCollator` only hands it on).
Each field is served in its stored dtype, or the one `dtypes` names (cast in the gather). A training
batch that carries its epoch (`EpochIndices`) of a split with a `transform`
(`SampleTransform`) is its samples transformed, then padded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from varlen.batching.indices import PadsToWidths, pad_to, with_widths
from varlen.batching.pad_collate import PadCollate
from varlen.batching.shape_policy import PadTo
from varlen.datasets.sequence.columns import SequenceColumns
from varlen.datasets.sequence.packed import pack_arrays, packed_field
from varlen.datasets.sequence.transform import SampleTransform

__all__ = ["SIZES", "SequenceBatch", "SequenceDataset"]

#: a single sample's entry holding its sizes (one per size field): what the sampler budgets it by,
#: read back from streamed samples (`SequenceDataModule.sample_sizes`)
SIZES = "sizes"


class SequenceBatch(dict):
    """A fetched batch (a dict of tensors) that knows its variable-length fields and their pad values,
    so that batches fetched from several sources join (`concat`) padded with those values."""

    def __init__(self, values: Mapping[str, Any], fields: Sequence[str], pad_values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self.fields, self.pad_values = tuple(fields), dict(pad_values)

    @property
    def index(self) -> torch.Tensor:
        """The batch's `index` (a mixture renumbers it as an attribute)."""
        return self["index"]

    @index.setter
    def index(self, value: torch.Tensor) -> None:
        self["index"] = value

    @classmethod
    def concat(cls, parts: Sequence[SequenceBatch]) -> SequenceBatch:
        """Batches joined along the batch axis, each field padded to the longest with its pad value."""
        first = parts[0]
        joined = {}
        for key in first:
            values = [p[key] for p in parts]
            field = key if key in first.fields else key[: -len("_mask")] if key.endswith("_mask") else None
            if field in first.fields and values[0].ndim > 1:
                width = max(v.shape[1] for v in values)
                fill = first.pad_values.get(field, 0) if key == field else False
                values = [_pad_axis1(v, width, fill) for v in values]
            joined[key] = torch.cat(values)
        return cls(joined, first.fields, first.pad_values)


def _pad_axis1(tensor: torch.Tensor, width: int, fill: Any) -> torch.Tensor:
    gap = width - tensor.shape[1]
    if not gap:
        return tensor
    pads = [0, 0] * (tensor.ndim - 2) + [0, gap]
    return F.pad(tensor, pads, value=fill)


class SequenceDataset(PadsToWidths, Dataset):
    """One split of a source (see the module docstring).

    Args:
        columns: the source's columns.
        positions: `[N]` the rows of this split, in order.
        labels: `[N]` class ids (int64) or targets (float32) of those rows, or None.
        size_fields: the fields whose lengths are a sample's sizes.
        pad_values: per variable-length field, the value padding writes (default 0).
        pad_to_multiple_of: round each padded length up to this multiple (a size field of a batch that carries
            its padded lengths: to its axis's, `pad_to`).
        where: the source, as messages name it (a row `r` of the split is row `positions[r]` there).
        dtypes: field -> the dtype it is served in (default: as stored).
        transform: what a training batch's samples go through (see the module docstring), or None.

    Attributes:
        packing: the row's length when the one variable-length field's samples are packed end to end
            (`packed`; the DataModule's `layout="packed"` sets it), else None.
        lengths: `[N]` (one size field) or `[N, D]`, the size fields' lengths.
    """

    def __init__(
        self,
        columns: SequenceColumns,
        positions: np.ndarray,
        labels: np.ndarray | None,
        size_fields: Sequence[str],
        pad_values: Mapping[str, float | int] | None = None,
        pad_to_multiple_of: int | None = None,
        where: str = "",
        dtypes: Mapping[str, np.dtype] | None = None,
        transform: SampleTransform | None = None,
    ) -> None:
        self.columns, self.where, self.transform = columns, where, transform
        self.dtypes = {name: np.dtype(d) for name, d in (dtypes or {}).items()}
        self.positions = np.asarray(positions, dtype=np.int64)
        self.labels = labels
        self.size_fields = tuple(size_fields)
        self.pad_values = {name: (pad_values or {}).get(name, 0) for name in columns.ragged}
        self.pad_to_multiple_of = pad_to_multiple_of
        self.packing: int | None = None
        sizes = [columns.ragged[name].lengths[self.positions] for name in self.size_fields]
        self.lengths = sizes[0] if len(sizes) == 1 else np.stack(sizes, axis=1)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One sample: `index`, each field's array, each fixed value, `label` and its `sizes`."""
        row = int(self.positions[i])
        sample: dict[str, Any] = {"index": int(i)}
        for name, ragged in self.columns.ragged.items():
            start = int(ragged.starts[row])
            sample[name] = np.array(ragged.values[start : start + int(ragged.lengths[row])], self.dtypes.get(name))
        for name, values in self.columns.fixed.items():
            value = np.array(values[row], self.dtypes.get(name))
            sample[name] = value if values.ndim > 1 else value[()]
        if self.labels is not None:
            sample["label"] = self.labels[i]
        sample[SIZES] = np.atleast_1d(self.lengths[i]).astype(np.int64)
        return sample

    def __getitems__(self, indices: Sequence[int]) -> SequenceBatch:
        """The batch of `indices`: every field padded to its longest row, a size field to the length the batch
        carries (one gather per field)."""
        wanted = np.asarray(indices, dtype=np.int64)
        epoch = getattr(indices, "epoch", None)
        if self.transform is not None and epoch is not None:  # a training batch: its samples transformed
            fields = tuple(self.columns.ragged)
            axes = {name: axis for axis, name in enumerate(self.size_fields)}
            pad = PadCollate(fields, self.pad_values, self.pad_to_multiple_of, axes)
            collate = lambda transformed: pad(with_widths(transformed, indices))  # noqa: E731  (the plan's widths)
            samples = [{k: v for k, v in self[i].items() if k != SIZES} for i in wanted.tolist()]
            if self.packing is not None:  # the rest gathered as single values, the one field packed
                (name,) = fields
                rest = PadCollate((), self.pad_values)

                def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
                    arrays = [s[name] for s in samples]
                    batch = rest([{k: v for k, v in s.items() if k != name} for s in samples])
                    return batch | pack_arrays(name, arrays, self.packing, self.pad_values[name], self._dtype(name))

            return SequenceBatch(self.transform.batch(samples, epoch, collate), fields, self.pad_values)
        rows = self.positions[wanted]
        batch: dict[str, torch.Tensor] = {"index": torch.from_numpy(wanted)}
        for name, ragged in self.columns.ragged.items():
            if self.packing is not None:  # the one variable-length field, end to end
                packed = ragged.pack(rows, _torch_dtype(self.dtypes.get(name)))
                lengths = ragged.lengths[rows]
                batch |= packed_field(name, packed.values, lengths, self.packing, self.pad_values[name])
                continue
            padded = ragged.pad(rows, self.pad_values[name], self._pad_to(indices, name), self._dtype(name))
            batch[name], batch[f"{name}_mask"], batch[f"{name}_lengths"] = padded.values, padded.mask, padded.lengths
        for name, values in self.columns.fixed.items():
            batch[name] = torch.from_numpy(
                np.take(values, rows, axis=0).astype(self.dtypes.get(name, values.dtype), copy=False)
            )
        if self.labels is not None:
            batch["labels"] = torch.from_numpy(self.labels[wanted])
        return SequenceBatch(batch, tuple(self.columns.ragged), self.pad_values)

    def _pad_to(self, indices: Sequence[int], name: str) -> PadTo:
        """What field `name` of the batch of `indices` pads to: a size field, to the length the batch carries
        on its axis; the others (and a batch that carries none), to their longest up to `pad_to_multiple_of`."""
        if name not in self.size_fields:
            return self.pad_to_multiple_of
        return pad_to(indices, self.pad_to_multiple_of, self.size_fields.index(name))

    def _dtype(self, name: str) -> torch.dtype | None:
        return _torch_dtype(self.dtypes.get(name))


def _torch_dtype(dtype: np.dtype | None) -> torch.dtype | None:
    return None if dtype is None else torch.from_numpy(np.empty(0, dtype)).dtype
