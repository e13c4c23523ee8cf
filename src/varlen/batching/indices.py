"""Batches that say how they are padded: the indices a sampler yields carry the padded length of each size axis
their plan cut them for (and, for training, their epoch), in whichever process fetches them.

Why: under the shape policy (`max_shapes`) a batch pads to its rung, not its longest sample; the plan knows
that length when it cuts the batch, so the batch carries it (`BatchIndices`, `EpochIndices`)
and whatever pads reads it there (`pad_to`): no dataset, source or collate is handed the rungs. A
batched fetch passes the lengths on in what it returns; a list of single samples carries them as
`Samples` (`fetch`; `BatchFetch` for a dataset without a batched fetch). A batch that
says nothing (a plain DataLoader, your own sampler) pads to its longest, up to `pad_to_multiple_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset

from varlen.batching.shape_policy import PadTo, Rungs

__all__ = ["BatchFetch", "BatchIndices", "EpochIndices", "PadsToWidths", "Samples", "fetch", "pad_to"]
__all__ += ["widths_of", "with_widths"]


class PadsToWidths:
    """A dataset or collate that pads each batch to the lengths it carries (`pad_to`): what a DataModule's
    shape policy needs of whatever pads (else `max_shapes` is not applied). Or set `pads_to_widths = True`."""

    pads_to_widths = True


class BatchIndices(list):
    """A batch of indices that also carries the padded length of each size axis (`widths`) its plan cut it
    for (None: its longest); it pickles with them."""

    def __init__(self, indices, widths: Sequence[int] | None = None) -> None:
        super().__init__(indices)
        self.widths = None if widths is None else tuple(int(w) for w in widths)

    def like(self, indices) -> BatchIndices:
        """Other indices (a part of this batch: one source's) that say what this batch says."""
        return BatchIndices(indices, self.widths)


class EpochIndices(BatchIndices):
    """A batch of indices that also carries the epoch it was planned for (it pickles with it).

    The loader hands this list to the dataset's `__getitems__` in whichever process runs it, so
    per-epoch draws depend on `(seed, epoch, index)` only: workers need no shared state and a
    run resumed mid-epoch replays exactly the same draws. A plain list carries no epoch.
    """

    def __init__(self, indices, epoch: int, widths: Sequence[int] | None = None) -> None:
        super().__init__(indices, widths)
        self.epoch = epoch

    def like(self, indices) -> EpochIndices:
        return EpochIndices(indices, self.epoch, self.widths)


class Samples(list):
    """A batch's single samples (`dataset[i]` each) that carry its `widths` to the collate."""

    def __init__(self, samples, widths: Sequence[int] | None = None) -> None:
        super().__init__(samples)
        self.widths = widths


def widths_of(batch: Any) -> tuple[int, ...] | None:
    """The padded length of each size axis `batch` (indices or fetched samples) carries, or None."""
    return getattr(batch, "widths", None)


def pad_to(batch: Any, multiple: int | None, axis: int = 0) -> PadTo:
    """What `batch` pads size axis `axis` to: the length it carries (a longer row, which its plan did not
    cut it for, up to `multiple`), else its longest up to `multiple`; for `pad_length` and the gathers."""
    widths = widths_of(batch)
    return multiple if widths is None else Rungs((widths[axis],), multiple)


def with_widths(fetched: Any, indices: Sequence[int]) -> Any:
    """`fetched`, a plain list of single samples made `Samples` carrying the widths of `indices`
    (when they carry any): what a batched fetch that returns single samples gives back."""
    widths = widths_of(indices)
    return Samples(fetched, widths) if widths is not None and type(fetched) is list else fetched


def fetch(dataset: Any, indices: Sequence[int]) -> Any:
    """The batch of `indices` as a loader fetches it: the dataset's batched fetch (`__getitems__`) when it
    has one, else a list of `dataset[i]`; a list carries the widths of `indices`."""
    getitems = getattr(dataset, "__getitems__", None)
    return with_widths(getitems(indices) if getitems is not None else [dataset[i] for i in indices], indices)


class BatchFetch(Dataset):
    """A dataset without a batched fetch, fetched a batch at a time (`fetch`), so that its samples reach
    the collate with the widths their batch carries."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        return fetch(self.dataset, indices)
