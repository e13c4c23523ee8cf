"""A plan's batches dealt to ranks: every rank as many (a rank without a batch would hang DDP), every sample
once, every budget held: the surplus dropped, or the largest batches split (the same ones every epoch), or,
where the samples are too few to split, a few batches repeating a sample."""

from __future__ import annotations

import numpy as np

from varlen import notices

__all__ = ["deal", "repeat_to_multiple", "split_largest", "split_to_multiple"]


def split_largest(bounds: np.ndarray, count: int) -> np.ndarray:
    """`bounds` with its largest batch split in two, `count` times (fewer when every batch is down to
    one sample), each half where the batch was: every sample once, every budget held. Of equally large
    batches, the one that starts first in the plan's order is split, whatever the epoch's batch order: the
    same places every epoch, so the halves add the same shapes (the shape policy counts them once)."""
    bounds = bounds.copy()
    for _ in range(count):
        if not len(bounds):
            break
        k = int(np.lexsort((bounds[:, 0], bounds[:, 0] - bounds[:, 1]))[0])
        start, end = bounds[k]
        if end - start < 2:
            break
        middle = start + (end - start + 1) // 2
        bounds = np.insert(bounds, k + 1, [middle, end], axis=0)
        bounds[k, 1] = middle
    return bounds


def split_to_multiple(bounds: np.ndarray, multiple: int) -> np.ndarray:
    """Split the largest batches in two until the count is a multiple of `multiple`.

    Keeps every sample exactly once and every budget held; raises if there are fewer samples
    than needed for one non-empty batch per rank.
    """
    short = (-len(bounds)) % multiple
    if short == 0:
        return bounds
    total = int((bounds[:, 1] - bounds[:, 0]).sum())
    if total < len(bounds) + short:
        raise ValueError(
            f"{total} samples cannot fill {len(bounds) + short} batches (one per rank on "
            f"{multiple} ranks); use fewer ranks or more data"
        )
    return split_largest(bounds, short)


def deal(bounds: np.ndarray, num_replicas: int, drop_last: bool) -> np.ndarray:
    """`bounds` made to divide over `num_replicas` ranks: the surplus dropped, or batches split; where
    the samples are too few to split into a multiple of the ranks (3 samples too large to share a batch, on
    2 ranks), a few batches repeat a sample (fewer than the ranks; warned about, as `DistributedSampler`
    pads its ranks), since a rank without a batch would hang the others.

    Raises:
        ValueError: fewer samples than ranks (a usage error: every rank would serve repeats).
    """
    if drop_last:
        return bounds[: len(bounds) - len(bounds) % num_replicas]
    short = -len(bounds) % num_replicas
    total = int((bounds[:, 1] - bounds[:, 0]).sum())
    if short and total < num_replicas:
        raise ValueError(
            f"{total} samples cannot fill {len(bounds) + short} batches (one per rank on "
            f"{num_replicas} ranks); use fewer ranks or more data"
        )
    bounds, repeated = repeat_to_multiple(split_largest(bounds, short), num_replicas)
    if repeated:
        notices.warn(
            f"{total} samples cannot be split into a multiple of {num_replicas} batches: {repeated} batch(es) "
            "repeat a sample so that every rank gets as many (a rank without a batch would hang the others)"
        )
    return bounds


def repeat_to_multiple(rows: np.ndarray, multiple: int) -> tuple[np.ndarray, int]:
    """`rows` with its first rows repeated (in turn) until their count is a multiple of `multiple`, and
    how many were: what gives every rank a batch when the samples are too few to split further."""
    repeated = -len(rows) % multiple if len(rows) else 0
    if repeated:
        rows = np.concatenate([rows, rows[np.arange(repeated) % len(rows)]])
    return rows, repeated
