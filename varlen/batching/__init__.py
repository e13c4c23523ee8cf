"""The shared core: the batch plan, the bucketing sampler, collate helpers and telemetry."""

from varlen.batching.collate import (
    Padded,
    additive_mask,
    blocked_mask,
    lengths_to_mask,
    pad_flat,
    pad_sequences,
    round_up,
)
from varlen.batching.plan import PlanSpec, build_plan
from varlen.batching.sampler import BucketBatchSampler, EpochTracker

__all__ = [
    "BatchStats",
    "BucketBatchSampler",
    "EpochTracker",
    "Padded",
    "PaddingTelemetry",
    "PlanSpec",
    "additive_mask",
    "blocked_mask",
    "build_plan",
    "lengths_to_mask",
    "mask_stats",
    "pad_flat",
    "pad_sequences",
    "round_up",
]


def __getattr__(name: str):
    # The telemetry callback imports Lightning; keep `import varlen.batching` light without it.
    if name in {"PaddingTelemetry", "BatchStats", "mask_stats"}:
        from varlen.batching import telemetry

        return getattr(telemetry, name)
    raise AttributeError(f"module 'varlen.batching' has no attribute {name!r}")
