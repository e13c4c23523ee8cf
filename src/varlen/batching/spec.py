"""`PlanSpec`: how a plan cuts batches (a fixed batch size or a token budget, its cost, buckets, rungs), the one
value every plan takes, the in-memory one (`varlen.batching.plan`) and the streamed one
(`varlen.stream.layout`); and the spec of a sampler's settings given one by one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from varlen.batching.shape_policy import Rungs

__all__ = ["COST_MODES", "MAX_BUCKETS", "SUMMED", "PlanSpec", "sizes_spec", "spec_settings"]

COST_MODES = ("padded", "sum", "packed")
#: costs that sum the sizes (nothing padded): `packed` is `sum` whose in-memory plan fills batches best-fit
SUMMED = ("sum", "packed")
#: with the geometric edges (at most ~450 for int32 sizes), bucket ids stay within int16
MAX_BUCKETS = 16384


@dataclass(frozen=True)
class PlanSpec:
    """How to cut batches. Exactly one of `batch_size` and `max_tokens` is set.

    Attributes:
        batch_size: fixed number of samples per batch.
        max_tokens: budget per batch, one value per size dimension. With `cost="padded"` the
            cost of a batch is `len(batch) * max(size)` (what a padded tensor holds); with
            `cost="sum"` it is `sum(size)` (graphs: nothing is padded).
        cost: `"padded"`, `"sum"`, or `"packed"` (`sum` for samples laid end to end in a row of
            `max_tokens`: the in-memory plan fills each batch best-fit, see `best_fit`).
        max_batch_size: optional cap on samples per batch under a token budget.
        num_buckets: size buckets per dimension; more buckets, less padding, less mixing.
            None: about four batches' worth of samples per bucket (see `auto_buckets`).
        pad_to_multiple_of: sizes are rounded up to this multiple before costing, so the budget
            also holds for collates that pad to a multiple of 8; packed, the row is padded, never a sample
            (`size_multiple`).
        rungs: the shape policy's padded lengths, one `Rungs` per size
            axis (see `varlen.batching.shape_policy`): they are the buckets, a sample is costed at its
            rung (what the collate pads its batch to), and a group's short last batch is cut into
            powers of two. None: buckets from the sizes, costed at their largest.
        rung_batch_sizes: with one axis of `rungs` and a token budget, the most samples a batch of each
            rung holds (what `varlen tune --budget` measures per rung: each rung's largest batch that fits
            the device), on top of `max_tokens` and `max_batch_size`.
    """

    batch_size: int | None = None
    max_tokens: tuple[int, ...] | None = None
    cost: str = "padded"
    max_batch_size: int | None = None
    num_buckets: int | None = None
    pad_to_multiple_of: int | None = None
    rungs: tuple[Rungs, ...] | None = None
    rung_batch_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (self.batch_size is None) == (self.max_tokens is None):
            raise ValueError("give exactly one of batch_size and max_tokens")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_tokens is not None and min(self.max_tokens) < 1:
            given = self.max_tokens[0] if len(self.max_tokens) == 1 else list(self.max_tokens)  # as a config writes it
            raise ValueError(f"max_tokens must be >= 1, got {given}")
        if self.max_batch_size is not None and (self.max_tokens is None or self.max_batch_size < 1):
            raise ValueError(f"max_batch_size caps a token budget and must be >= 1, got {self.max_batch_size}")
        if self.cost not in COST_MODES:
            raise ValueError(f"cost must be one of {COST_MODES}, got {self.cost!r}")
        if self.num_buckets is not None and not 1 <= self.num_buckets <= MAX_BUCKETS:
            raise ValueError(f"num_buckets must be in [1, {MAX_BUCKETS}], got {self.num_buckets}")
        if self.rungs is not None and (
            not all(isinstance(r, Rungs) for r in self.rungs) or len(self.rungs) >= MAX_BUCKETS
        ):
            raise ValueError(f"rungs must be one Rungs per size axis, got {self.rungs!r}")
        if self.rungs is not None and self.cost in SUMMED:
            raise ValueError(f"rungs are padded lengths: a summed cost (cost={self.cost!r}) pads nothing")
        if self.rung_batch_sizes is not None and not (
            self.max_tokens is not None
            and self.rungs is not None
            and len(self.rungs) == 1
            and len(self.rung_batch_sizes) == len(self.rungs[0].lengths)
            and min(self.rung_batch_sizes) >= 1
        ):
            raise ValueError(
                f"rung_batch_sizes needs a token budget and one size axis of rungs, a batch size >= 1 for each rung "
                f"{None if self.rungs is None else [list(r.lengths) for r in self.rungs]}, got {self.rung_batch_sizes}"
            )

    @property
    def size_multiple(self) -> int | None:
        """What a sample's size is rounded up to before it is costed: `pad_to_multiple_of`, but packed nothing
        (the samples lie end to end at their real sizes; only the row is padded, to `max_tokens` rounded up)."""
        return None if self.cost == "packed" else self.pad_to_multiple_of


def sizes_spec(
    axes: int,
    batch_size: int | None = None,
    max_tokens: int | Sequence[int] | None = None,
    cost: str = "padded",
    max_batch_size: int | None = None,
    num_buckets: int | None = None,
    pad_to_multiple_of: int | None = None,
    rungs: Sequence[Rungs] | None = None,
    rung_batch_sizes: Sequence[int] | None = None,
) -> PlanSpec:
    """The `PlanSpec` of `BucketBatchSampler`'s arguments for sizes of `axes`
    size axes (`max_tokens` an int: the same budget on every axis)."""
    if isinstance(max_tokens, (int, np.integer)):
        max_tokens = (int(max_tokens),) * axes
    return PlanSpec(
        batch_size=batch_size,
        max_tokens=tuple(int(t) for t in max_tokens) if max_tokens is not None else None,
        cost=cost,
        max_batch_size=max_batch_size,
        num_buckets=num_buckets,
        pad_to_multiple_of=pad_to_multiple_of,
        rungs=None if rungs is None else tuple(rungs),
        rung_batch_sizes=None if rung_batch_sizes is None else tuple(int(b) for b in rung_batch_sizes),
    )


def spec_settings(spec: PlanSpec, given: dict[str, Any]) -> tuple:
    """`spec`'s settings one by one, in `PlanSpec`'s order, for a sampler whose
    arguments (`given`) set none of them.

    Raises:
        TypeError: a setting given beside the spec.
    """
    names = [field.name for field in fields(PlanSpec)]
    both = [name for name in names if given[name] is not None and (name != "cost" or given[name] != "padded")]
    if both:
        raise TypeError(f"give a spec or its settings one by one, not both: {both} given beside spec={spec}")
    return tuple(getattr(spec, name) for name in names)
