"""Batches that carry their epoch: what a dataset whose training samples change every epoch (band subsets,
window augmentation) draws from, in whichever process fetches them."""

from __future__ import annotations

from varlen.batching.indices import EpochIndices
from varlen.batching.sampler import BucketBatchSampler

__all__ = ["EpochBatchSampler", "EpochIndices"]


class EpochBatchSampler(BucketBatchSampler):
    """`BucketBatchSampler` (same arguments, plan and state) whose batches are `EpochIndices`."""

    def batch_of(self, indices: list[int], epoch: int, widths: tuple[int, ...] | None = None) -> EpochIndices:
        return EpochIndices(indices, epoch, self.widths(indices) if widths is None else widths)
