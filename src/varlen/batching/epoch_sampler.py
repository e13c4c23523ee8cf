"""Batches that carry their epoch: what a dataset whose training samples change every epoch (band subsets,
window augmentation) draws from, in whichever process fetches them."""

from __future__ import annotations

from varlen.batching.sampler import BucketBatchSampler

__all__ = ["EpochBatchSampler", "EpochIndices"]


class EpochIndices(list):
    """A batch of indices that also carries the epoch it was planned for (it pickles with it).

    The loader hands this list to the dataset's ``__getitems__`` in whichever process runs it, so
    per-epoch draws depend on ``(seed, epoch, index)`` only: workers need no shared state and a
    run resumed mid-epoch replays exactly the same draws. A plain list carries no epoch.
    """

    def __init__(self, indices, epoch: int) -> None:
        super().__init__(indices)
        self.epoch = epoch


class EpochBatchSampler(BucketBatchSampler):
    """:class:`BucketBatchSampler` (same arguments, plan and state) whose batches are :class:`EpochIndices`."""

    def batch_of(self, indices: list[int], epoch: int) -> EpochIndices:
        return EpochIndices(indices, epoch)
