"""The shared core: the batch plan, the bucketing sampler, ragged storage and gathers, collate helpers, telemetry
(padding, and the training loop's wait for data)."""

from varlen.batching.epoch_sampler import EpochBatchSampler, EpochIndices
from varlen.batching.padding import (
    Padded,
    additive_mask,
    blocked_mask,
    lengths_to_mask,
    pad_flat,
    pad_sequences,
    round_up,
)
from varlen.batching.plan import PlanSpec, build_plan
from varlen.batching.ragged import PackedBatch, PaddedBatch, Ragged, concat_ranges
from varlen.batching.sampler import BucketBatchSampler, EpochTracker

__all__ = [
    "BatchStats",
    "BucketBatchSampler",
    "DataWait",
    "EpochBatchSampler",
    "EpochIndices",
    "EpochTracker",
    "PackedBatch",
    "Padded",
    "PaddedBatch",
    "PaddingTelemetry",
    "VarLenLoader",
    "PlanSpec",
    "Ragged",
    "additive_mask",
    "blocked_mask",
    "build_plan",
    "concat_ranges",
    "lengths_to_mask",
    "mask_stats",
    "pad_flat",
    "pad_sequences",
    "round_up",
]


def __getattr__(name: str):
    # The telemetry callback imports Lightning and the loader torchdata: `import varlen.batching` stays light.
    if name in {"PaddingTelemetry", "BatchStats", "mask_stats"}:
        from varlen.batching import telemetry

        return getattr(telemetry, name)
    if name == "DataWait":
        from varlen.batching.data_wait import DataWait

        return DataWait
    if name == "VarLenLoader":
        from varlen.batching.loader import VarLenLoader

        return VarLenLoader
    raise AttributeError(f"module 'varlen.batching' has no attribute {name!r}")
