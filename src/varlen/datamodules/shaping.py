"""The shape policy of a DataModule (`max_shapes`, `rung_batch_sizes`): the rungs its batches are cut for
and padded to, fitted once on the training split.

`ShapePolicy` is the part of `VarLenDataModule` that does it: after
`setup` builds the splits, `ShapePolicy.fit_shapes` fits the rungs
(`fit_rungs`: the most rungs whose training epoch, planned on the world's ranks,
keeps within `max_shapes` shapes), or takes them from a `rung_batch_sizes` table. Every split's sampler
cuts for them, and each batch it yields carries the lengths it pads to (`varlen.batching.indices`), which
the dataset's fetch and the collate read (`ShapePolicy.fetched_from`: a dataset without a batched fetch
is fetched through one). The rungs are the run's: saved with the data state, a checkpoint's are taken back
whatever the resumed world would fit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any

import numpy as np
import torch.distributed as dist

from varlen import notices
from varlen.batching.indices import BatchFetch, BatchIndices, fetch, widths_of
from varlen.batching.plan import PlanSpec, fit_rungs
from varlen.batching.shape_policy import Rungs, batch_widths, cant_hold, fit_count, round_up
from varlen.datamodules.streaming import stream_sampler
from varlen.datasets.mixture import MixtureCollator, SourceMixture
from varlen.errors import DataError
from varlen.stream.shape_policy import histogram_rungs

__all__ = ["ShapePolicy", "check_max_shapes", "check_max_tokens", "check_rung_batch_sizes"]

log = logging.getLogger("varlen")


def check_max_shapes(value: Any) -> int | None:
    """`max_shapes` as an int >= 1, or None (exact buckets)."""
    if value is not None and (isinstance(value, bool) or not int(value) == value >= 1):
        raise ValueError(f"max_shapes must be a whole number >= 1 (None: exact buckets), got {value!r}")
    return None if value is None else int(value)


#: the form `rung_batch_sizes` takes, said by every message about it
RUNG_TABLE_FORM = "{padded length: batch size}, whole numbers >= 1 (e.g. {16: 512}; varlen tune --budget prints one)"


def _whole(value: Any) -> int | None:
    """`value` as an int when it is a whole number (not a bool, not text), else None."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, Number):
        return None
    try:
        return int(value) if int(value) == value else None
    except (TypeError, ValueError, OverflowError):  # nan, inf, complex
        return None


def check_rung_batch_sizes(table: Mapping[Any, Any] | None, owner: str, stream: Any) -> dict[int, int] | None:
    """`rung_batch_sizes` as `{padded length: batch size}` of whole numbers >= 1, by length.

    Raises:
        ValueError: a stream, no mapping, or an entry that is no such pair (naming it and the form).
    """
    if table is None:
        return None
    if stream is not None:
        raise ValueError(f"{owner}: rung_batch_sizes plans in memory: a streamed training split takes max_tokens")
    if not isinstance(table, Mapping) or not table:
        raise ValueError(f"{owner}: rung_batch_sizes maps {RUNG_TABLE_FORM}; got {table!r}")
    out = {}
    for length, count in table.items():
        entry = f"{owner}: rung_batch_sizes[{length!r}] = {count!r}"
        for what, value in (("key", length), ("batch size", count)):
            if _whole(value) is None:
                raise ValueError(f"{entry}: the {what} {value!r} is no whole number; it maps {RUNG_TABLE_FORM}")
        if _whole(length) < 1 or _whole(count) < 1:
            raise ValueError(f"{entry}: lengths and batch sizes are >= 1; it maps {RUNG_TABLE_FORM}")
        out[_whole(length)] = _whole(count)
    return dict(sorted(out.items()))


def check_max_tokens(max_tokens: Any, axes: tuple[str, ...], owner: str) -> None:
    """Refuse a budget of another count of values than the size axes (one value budgets every axis alike).

    Raises:
        ValueError: naming `max_tokens`, the axes and how many values it takes (a warning and the plan's
            traceback before).
    """
    given = 0 if max_tokens is None else np.atleast_1d(np.asarray(max_tokens, dtype=object)).size
    if given not in (0, 1, len(axes)):
        shown = list(max_tokens) if isinstance(max_tokens, (list, tuple)) else max_tokens
        takes = (
            f"1, one per size axis {list(axes)}"
            if len(axes) == 1
            else f"1 (every axis) or {len(axes)}, one per size axis {list(axes)}"
        )
        raise ValueError(f"{owner}: max_tokens={shown} has {given} values; the budget takes {takes}")


class ShapePolicy:
    """The rungs of a DataModule's batches (see the module docstring); the base sets `datasets`,
    `collate_fn`, `max_shapes`, `rung_batch_sizes`, `pad_to_multiple_of` and `rungs`."""

    datasets: dict[str, Any]
    collate_fn: Any
    max_shapes: int | None
    max_tokens: int | tuple[int, ...] | None
    size_axes: tuple[str, ...]
    rung_batch_sizes: dict[int, int] | None
    pad_to_multiple_of: int | None
    rungs: tuple[Rungs, ...] | None

    def fit_shapes(self) -> None:
        """Fit the training split's rungs (or take the table's), which every split's sampler cuts for; first, a budget
        of another count of values than the size axes is refused (every DataModule's, once its axes are known)."""
        check_max_tokens(self.max_tokens, tuple(self.size_axes), type(self).__name__)
        train = self.datasets.get("train")
        if train is None or self.sampler_cost != "padded" or not self.sampler_rounds_sizes:
            return
        if self.rung_batch_sizes is not None:
            self._check_top_rung(train)
            self.rungs = self.rungs_of([list(self.rung_batch_sizes)])
            return
        if self.max_shapes is None:
            return
        if not any(getattr(obj, "pads_to_widths", False) for obj in (self._own_collate(), *self._train_parts())):
            notices.info(
                log,
                f"{type(self).__name__}: max_shapes={self.max_shapes} is not applied: neither the training dataset "
                "nor the collate pads to the lengths a batch carries (varlen.batching.indices.PadsToWidths); "
                "batches take exact buckets",
            )
            return
        spec = self._plan_spec(self.batch_size, self.max_tokens, self.pad_to_multiple_of)
        world = self._world_size()
        if self.stream is not None:  # grid edges from the size indexes, each probe a streamed plan's epoch 0
            rungs, shapes = self._fit_streamed(spec, world)
        else:  # each probe every epoch the training sampler serves: its draws' plans (weights cut other batches)
            sizes = self.of_each_source(train, "sampler_lengths")
            weighted = self._weights_readable()

            def shapes_of(rungs: tuple[Rungs, ...]) -> int:
                return self._new_sampler("train", self.shuffle, world, 0, rungs, weighted=weighted).served_shape_count()

            rungs, shapes = fit_rungs(sizes, spec, self.max_shapes, shapes_of)
        if shapes > self.max_shapes:
            notices.warn(f"{type(self).__name__}: {cant_hold(self.max_shapes, shapes)}")
        schedule = getattr(self, "mixture_schedule", None)
        if schedule is not None and schedule.interpolate == "linear" and not schedule.constant:
            notices.warn(
                f"{type(self).__name__}: max_shapes={self.max_shapes} is held at the stages of source_weights; the "
                "epochs between them (interpolate: linear) draw other counts per size and may take more shapes"
            )
        self.rungs = self.rungs_of([list(r.lengths) for r in rungs])

    def _weights_readable(self) -> bool:
        """Whether the training weights read (a bad weight is refused where training reads them, at the training
        loader: a validation, test or predict run never needs them); unreadable, the rungs fit the unweighted plan."""
        try:
            self.train_weights()
        except DataError:
            return False
        return True

    def _check_top_rung(self, train: Any) -> None:
        """Refuse a `rung_batch_sizes` table whose top rung is below a training sample: such samples would pad
        to their own lengths, a shape each (the table's batch sizes were measured for its rungs only)."""
        sizes = np.asarray(self.of_each_source(train, "sampler_lengths"))
        sizes = round_up(sizes.reshape(len(sizes), -1)[:, 0], self.pad_to_multiple_of)
        top = max(self.rung_batch_sizes)
        longer = np.flatnonzero(sizes > top)
        if len(longer):
            first = int(longer[np.argmax(sizes[longer])])
            raise ValueError(
                f"{type(self).__name__}: rung_batch_sizes' top rung {top} is below {len(longer)} training samples "
                f"(the longest: sample {first}, size {int(sizes[first])}), which would each pad to their own length, "
                f"a shape each: add a rung of at least {int(sizes[first])} to rung_batch_sizes (varlen tune --budget "
                "measures its batch size), or leave those samples out"
            )

    def _fit_streamed(self, spec: PlanSpec, world: int) -> tuple[tuple[Rungs, ...], int]:
        """A streamed training split's rungs (grid edges of its sources' summed histograms) and their shapes."""
        indexes = [part.index for part in self._train_parts()]
        total = sum(index.histograms(0).sum(axis=0, dtype=np.int64) for index in indexes)
        edges = indexes[0].edges

        def shapes_of(count: int) -> int:
            rungs = histogram_rungs(total, edges, spec, count)
            return stream_sampler(self, world, 0, rungs[0].lengths).shape_count(0)

        count = fit_count(shapes_of, self.max_shapes, self.max_shapes)
        rungs = histogram_rungs(total, edges, spec, count)
        return rungs, shapes_of(count)

    def rungs_of(self, lengths: list[list[int]] | None) -> tuple[Rungs, ...] | None:
        """Rungs of these lengths, one list per size axis (fitted, a table's, or a checkpoint's), past the top
        rung rounded up to `pad_to_multiple_of`; None: exact buckets."""
        return None if lengths is None else tuple(Rungs(tuple(r), self.pad_to_multiple_of) for r in lengths)

    def fetched_from(self, split: str) -> Any:
        """The dataset `split`'s loader fetches from: its own, or, cut for rungs, one without a batched fetch
        through `BatchFetch` (its samples then reach the collate with the
        lengths their batch carries)."""
        dataset = self.dataset(split)
        if self.rungs is None or getattr(dataset, "__getitems__", None) is not None:
            return dataset
        return BatchFetch(dataset)

    def fetch_batch(self, split: str, indices: Sequence[int]) -> Any:
        """The samples `indices` of `split` fetched as its loader fetches a batch (`fetch`), cut for the rungs:
        carrying the lengths they pad it to (what a look at batches outside the loader collates: `varlen inspect`,
        `varlen tune`, the contract tests)."""
        dataset = self.dataset(split)
        if self.rungs is not None and widths_of(indices) is None:
            held = self.__dict__.setdefault("_sizes", {}).get(split)
            if held is None or held[0] is not dataset:
                held = self._sizes[split] = (dataset, np.asarray(self.of_each_source(dataset, "sampler_lengths")))
            indices = BatchIndices(indices, batch_widths(held[1][np.asarray(indices, dtype=np.int64)], self.rungs))
        return fetch(dataset, indices)

    def rung_caps(self) -> tuple[int, ...] | None:
        """The table's batch size of each rung, when the rungs are the table's (else None)."""
        table = self.rung_batch_sizes
        if table is None or self.rungs is None or list(self.rungs[0].lengths) != list(table):
            return None
        return tuple(table.values())

    def _own_collate(self) -> Any:
        """The scenario's collate (a mixture's wraps it)."""
        collate = self.collate_fn
        while isinstance(collate, MixtureCollator):
            collate = collate.collate
        return collate

    def _train_parts(self) -> list[Any]:
        train = self.datasets["train"]
        return list(train.parts) if isinstance(train, SourceMixture) else [train]

    def _world_size(self) -> int:
        """The ranks the training split is served on: the trainer's, else torch.distributed's, else 1."""
        if self.trainer is not None:
            return int(self.trainer.world_size)
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
