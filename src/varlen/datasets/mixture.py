"""Several datasets of one scenario served as one split: the training data of a mixture of sources.

A `SourceMixture` numbers its sources' samples one after the other (sample `i` of source
`s` is `offsets[s] + i`), so the sampler plans over all of them at once: their `lengths` are
concatenated, and weights (`share_weights`) set each source's share of an epoch. A batch
is fetched from each source it draws on by that source's own batched fetch (`__getitems__`, the
epoch of an `EpochIndices` passed on), with `index` made the mixture's;
a batch drawing on several sources is joined by `MixtureCollator` before the scenario's
collate names its fields: a type's own `concat` where it has one (graphs), else the padded
fields of the parts padded to the longest and stacked (padding stays padding: masks say what is real).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from varlen.batching.indices import BatchIndices, with_widths

__all__ = ["MixedFetch", "MixtureCollator", "SourceMixture", "join_padded", "share_weights"]


@dataclasses.dataclass
class MixedFetch:
    """A batch drawn on several sources: each source's fetched part, indices already the mixture's."""

    parts: list[Any]


class SourceMixture(Dataset):
    """The datasets of `sources` (name -> dataset, in order) served as one.

    Attributes:
        names: the sources' names, in order.
        offsets: `[S + 1]` first index of each source (and the total).
        sources: `[N]` source of each sample (int16).
    """

    def __init__(self, sources: Mapping[str, Dataset]) -> None:
        if not sources:
            raise ValueError("a mixture needs at least one source")
        self.names = list(sources)
        self.parts = list(sources.values())
        self.offsets = np.concatenate([[0], np.cumsum([len(part) for part in self.parts])]).astype(np.int64)
        self.sources = np.repeat(np.arange(len(self.parts), dtype=np.int16), np.diff(self.offsets))

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def counts(self) -> dict[str, int]:
        """Samples of each source."""
        return dict(zip(self.names, np.diff(self.offsets).tolist(), strict=True))

    def concatenated(self, per_source: Callable[[Dataset], np.ndarray | None]) -> np.ndarray | None:
        """`per_source(part)` of every part, concatenated (None when a part gives None)."""
        values = [per_source(part) for part in self.parts]
        return None if any(v is None for v in values) else np.concatenate([np.asarray(v) for v in values])

    @property
    def lengths(self) -> np.ndarray:
        """Every source's `lengths`, concatenated (`[N]` or `[N, D]`)."""
        return self.concatenated(lambda part: np.asarray(part.lengths))

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and position in it of each mixture index."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            bad = int(indices[(indices < 0) | (indices >= len(self))][0])
            raise IndexError(f"index {bad} is out of range for a mixture of {len(self)} samples")
        source = self.sources[indices].astype(np.int64)
        return source, indices - self.offsets[source]

    def __getitem__(self, i: int) -> Any:
        (source,), (local,) = self.locate(np.asarray([i]))
        sample = self.parts[source][int(local)]
        sample["index"] = int(i)
        return sample

    def __getitems__(self, indices: Sequence[int]) -> Any:
        """Each source's part of the batch, fetched by that source; one part is returned as it is."""
        wanted = np.asarray(indices, dtype=np.int64)
        source, local = self.locate(wanted)
        parts = []
        for s in np.unique(source).tolist():
            mine = source == s
            positions = local[mine].tolist()
            if isinstance(indices, BatchIndices):  # the epoch and padded lengths travel with the indices
                positions = indices.like(positions)
            parts.append(self._fetch(self.parts[s], positions, wanted[mine]))
        return parts[0] if len(parts) == 1 else MixedFetch(parts)

    @staticmethod
    def _fetch(part: Dataset, positions: Sequence[int], indices: np.ndarray) -> Any:
        """`part`'s batched fetch (a list of its samples when it has none), indexed as the mixture."""
        getitems = getattr(part, "__getitems__", None)
        if getitems is None:
            samples = [part[p] for p in positions]
            for sample, i in zip(samples, indices.tolist(), strict=True):
                sample["index"] = i
            return with_widths(samples, positions)
        fetched = getitems(positions)
        if isinstance(fetched, list):
            for sample, i in zip(fetched, indices.tolist(), strict=True):
                sample["index"] = i
        else:
            old = fetched.index
            fetched.index = torch.as_tensor(indices, dtype=torch.int64) if torch.is_tensor(old) else indices
        return fetched


def join_padded(parts: Sequence[Any]) -> Any:
    """Fetched batches of one dataclass type joined into one: each tensor (or array) field padded
    with zeros at the end of every axis to the parts' largest size, then stacked along the first;
    a field that is None in every part stays None."""
    kind = type(parts[0])
    if not dataclasses.is_dataclass(kind) or any(type(p) is not kind for p in parts):
        names = sorted({type(p).__name__ for p in parts})
        raise TypeError(f"cannot join fetched batches of types {names}: give the type a concat(parts) classmethod")
    joined = {}
    for field in dataclasses.fields(kind):
        values = [getattr(p, field.name) for p in parts]
        if all(v is None for v in values):
            joined[field.name] = None
        elif any(v is None for v in values):
            raise ValueError(f"cannot join {kind.__name__} batches: {field.name} is missing in some of them")
        else:
            joined[field.name] = _stack_padded(values)
    return kind(**joined)


def _stack_padded(values: list[Any]) -> Any:
    numpy = isinstance(values[0], np.ndarray)
    tensors = [torch.from_numpy(v) if numpy else v for v in values]
    shape = [max(sizes) for sizes in zip(*(t.shape for t in tensors), strict=True)]
    padded = []
    for t in tensors:
        room = [size - have for size, have in zip(shape[:0:-1], t.shape[:0:-1], strict=True)]
        padded.append(F.pad(t, [p for gap in room for p in (0, gap)]) if any(room) else t)
    stacked = torch.cat(padded)
    return stacked.numpy() if numpy else stacked


class MixtureCollator:
    """The scenario's collate over a mixture's fetches: a batch of one source is collated as it
    is, a batch of several joined first (`type.concat(parts)` where the type has one, else
    `join_padded`). Lists of single samples are collated together."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, fetched: Any) -> Any:
        if isinstance(fetched, MixedFetch):
            parts = fetched.parts
            if all(isinstance(p, list) for p in parts):
                fetched = with_widths([sample for part in parts for sample in part], parts[0])
            else:
                concat = getattr(type(parts[0]), "concat", None)
                fetched = concat(parts) if concat is not None else join_padded(parts)
        return self.collate(fetched)

    def __getattr__(self, name: str) -> Any:  # the scenario collate's settings (pad id, ...)
        if name == "collate":
            raise AttributeError(name)
        return getattr(self.collate, name)


def share_weights(
    proportions: Sequence[float], counts: Sequence[int], within: Sequence[np.ndarray | None]
) -> np.ndarray:
    """Per-sample weights that give source `s` the share `proportions[s] / sum(proportions)` of
    every epoch, its samples drawn by `within[s]` (None: equally), normalised inside the source."""
    shares = np.asarray(proportions, dtype=np.float64)
    shares = shares / shares.sum()
    weights = []
    for share, count, inner in zip(shares, counts, within, strict=True):
        inner = np.ones(count) if inner is None else np.asarray(inner, dtype=np.float64)
        total = inner.sum()
        weights.append(inner * (share / total) if total > 0 else np.zeros(count))
    return np.concatenate(weights)
