"""A DataModule's training split read from LitData chunks (`stream`): the base's wiring, kept here.

`stream` names a dataset written by `varlen optimize` (chunks, `index.json` and the size index):
a local folder, or a store's URL with its options and cache (`StreamSource`,
whose index a process that sets up fetches to local disk). `setup` builds val / test from the
DataModule's own sources as usual, then replaces the training split by a
`StreamedDataset` over the dataset, after checking
the size index against `index.json` and against the DataModule (its size axes); the training
batches come from a `StreamBatchSampler` planned from the size index
alone. A weighted stream (`sample_weights`) draws by the draw sidecar's classes, so each decoded sample's
class (`sample_labels`, or the DataModule's static `sample_labels`) is checked against them.
litdata is imported only when `stream` is set (the `stream` extra); the sampler class is imported with
the base, before Lightning wraps every `BatchSampler` subclass's `__init__` to record
its arguments (a class imported later is not recorded, and Lightning cannot rebuild it under DDP).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from varlen.batching.shape_policy import Rungs
from varlen.datamodules.packing import check_streamed_rows, row_width
from varlen.datamodules.sources import MAIN
from varlen.datasets.mixture import SourceMixture
from varlen.errors import DataError
from varlen.stream.dataset import StreamedDataset
from varlen.stream.draw_index import weighted_index
from varlen.stream.engine import check_litdata
from varlen.stream.layout import WINDOW_BATCHES
from varlen.stream.sampler import StreamBatchSampler, StreamMixtureSampler  # imported with the base: see above
from varlen.stream.source import StreamSource
from varlen.stream.write import written_counts, written_state

__all__ = ["check_stream", "sample_labels", "stream_sampler", "streamed_train"]


def check_stream(
    stream: str | dict[str, Any] | None,
    owner: str,
    sources: Sequence[tuple[str, Mapping[str, Any]]] = (),
    shuffle: bool = True,
) -> StreamSource | None:
    """`stream` as a `StreamSource`, refused now (not at `setup`)
    where it cannot work (see `StreamSource.parse`). With other `sources` (`(name, arguments)`),
    every source streams (each its own `stream`) or none does.

    Raises:
        ValueError: a bad `stream`, a mixture of streamed and in-memory sources (naming them), or a
            stream without shuffling.
    """
    streamed = [name for name, arguments in sources if arguments.get("stream") is not None]
    in_memory = [name for name, arguments in sources if arguments.get("stream") is None]
    if stream is None:
        if streamed:
            raise ValueError(
                f"{owner}: source(s) {streamed} stream but the main source does not: streamed and in-memory "
                "sources cannot be mixed; give every source a stream (varlen optimize writes one), or none"
            )
        return None
    if in_memory:
        raise ValueError(
            f"{owner}: the main source streams but source(s) {in_memory} do not: streamed and in-memory sources "
            "cannot be mixed; give each its own stream (varlen optimize writes one)"
        )
    if not shuffle:
        raise ValueError(f"{owner}: stream needs shuffle=True (the streamed plan orders every epoch by seed and epoch)")
    return StreamSource.parse(stream, owner)


def streamed_train(dm: Any) -> Any:
    """The training split of `dm` read from `dm.stream`, checked (see the module docstring).

    Raises:
        DataError: no size index (naming `varlen index-sizes`), an index that does not describe the
            folder's `index.json`, or one of other size axes than the DataModule's.
        DataError: `sample_weights` the chunks' draw sidecar cannot give (written without it, without
            classes, or without that column).
        DataError: a packed layout's stream holding a sample longer than `max_tokens`
            (`check_streamed_rows`).
    """

    owner = type(dm).__name__
    if getattr(type(dm).sample_sizes, "__qualname__", "") == "VarLenDataModule.sample_sizes":
        raise ValueError(
            f"{owner}: stream needs sample_sizes (the sizes of decoded samples), which it does not implement"
        )
    check_litdata()
    # a weighted draw reads the sidecar's classes: each decoded sample's label is checked against them
    labels = getattr(type(dm), "sample_labels", sample_labels) if dm.sample_weights is not None else None
    dataset = StreamedDataset(dm.stream, type(dm).sample_sizes, labels)
    dataset.index.check()
    check_written_state(dm, dataset.index_dir)
    axes = tuple(dm.size_axes)
    if dataset.index.axes != axes:
        raise DataError(
            f"{dm.stream}: its size index counts {list(dataset.index.axes)}, {owner} batches by {list(axes)}: "
            f"write the chunks with this DataModule (varlen optimize --config CONFIG --output DIR)"
        )
    if dm.sampler_cost == "packed":  # every sample whole in a row of max_tokens: refused now, not at the collate
        limit = row_width(dm.max_tokens, None)
        fix = f"write the stream again with samples of at most {limit} (text: max_length <= {limit})"
        check_streamed_rows(dataset.index, limit, str(dm.stream), fix)
    if dm.sample_weights is not None:  # refused now (no sidecar, no classes, a column not written), not at fit
        weighted_index(dataset.index_dir, dm.sample_weights, owner)
    dm.report.stream("train", lambda: dataset.retries, written_counts(dataset.index_dir))
    return dataset


def sample_labels(samples: Sequence[Any]) -> np.ndarray | None:
    """The class ids of decoded samples (what `class_labels` gives for them, -1: none): each sample's
    `label` where every sample has an integer one, else None (nothing to check). A DataModule whose
    samples carry their class otherwise defines a static `sample_labels` of its own."""
    labels = [sample.get("label") if isinstance(sample, Mapping) else None for sample in samples]
    if not labels or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in labels):
        return None
    return np.asarray(labels, dtype=np.int64)


def check_written_state(dm: Any, index_dir: str) -> None:
    """Refuse chunks written by a DataModule whose `state_must_match` values (classes, vocabulary,
    targets...) differ from `dm`'s: its samples would mean something else to the model. Chunks
    written elsewhere (`varlen index-sizes`) carry no state and are not checked.

    Raises:
        DataError: naming the folder, each differing key and both values.
    """
    written = written_state(index_dir)
    if written is None:
        return
    mine = dm.plain_data_state()
    differ = [k for k in dm.state_must_match if k in written and k in mine and written[k] != mine[k]]
    if differ:
        raise DataError(
            f"{dm.stream}: written with "
            + "; ".join(f"{k}={written[k]!r} where {type(dm).__name__} has {mine[k]!r}" for k in differ)
            + ": write the chunks again with this configuration (varlen optimize --config CONFIG --output DIR)"
        )


def stream_sampler(dm: Any, num_replicas: int | None, rank: int | None, rungs: Any = "fitted") -> Any:
    """The training batch sampler of a streamed `dm` (its `batch_size` / `max_tokens`, its seed, its rungs);
    with other `rungs` (a probe of the shape policy's fit), one at epoch 0, with nothing resumed or reported."""
    probe = rungs != "fitted"
    rungs = (None if dm.rungs is None else dm.rungs[0].lengths) if not probe else rungs

    spec = dm._plan_spec(dm.batch_size, dm.max_tokens)
    if spec.max_tokens is not None and len(spec.max_tokens) > 1:
        raise ValueError(
            f"{type(dm).__name__}: a streamed split is planned on one size axis, max_tokens is {spec.max_tokens}"
        )
    dataset = dm.dataset("train")
    multiple = dm.pad_to_multiple_of if dm.sampler_rounds_sizes else None
    ladder = None if rungs is None else (Rungs(tuple(int(r) for r in rungs), multiple),)
    settings = {  # the plan's, and what Lightning needs to rebuild the sampler under DDP
        "spec": replace(spec, cost=dm.sampler_cost, pad_to_multiple_of=multiple, rungs=ladder),
        "seed": dm.seed,
        "window_batches": dm.stream_window_batches or WINDOW_BATCHES,
        "lanes": max(1, dm.num_workers),  # each loader worker reads windows of its own
        "num_replicas": num_replicas,
        "rank": rank,
        "state": None if probe else dm.resume_position(),
    }
    if isinstance(dataset, SourceMixture) or dm.sample_weights is not None:  # a draw every epoch
        return _mixture_sampler(dm, dataset, settings, report=not probe)
    return StreamBatchSampler(dataset.index_dir, **settings)  # the local copy of a store's index


def _mixture_sampler(dm: Any, dataset: Any, settings: dict[str, Any], report: bool = True) -> Any:
    """The training batch sampler of streamed sources, or of one drawn by `sample_weights`
    (`StreamMixtureSampler`): each source's folder and `sample_weights`, the sources' names,
    `source_weights` and `mix`; what each source serves of the first epoch goes in the report (`drawn`)."""
    mixed = isinstance(dataset, SourceMixture)
    parts, names = (dataset.parts, list(dataset.names)) if mixed else ([dataset], [MAIN])
    owners = (dm._mixture_owners or [dm] * len(parts)) if mixed else [dm]
    sampler = StreamMixtureSampler(
        [part.index_dir for part in parts],
        names=names,
        sample_weights=[owner.sample_weights for owner in owners],
        source_weights=dm.source_weights,
        mix=dm.mix,
        epoch=dm._fit_epoch() if report else 0,
        steps_before=dm.steps_before(dm._fit_epoch()) if report else None,
        **settings,
    )
    if mixed and report:  # what an epoch draws of each source (under a schedule, each stage's at its start)
        drawn = sampler.plan.draw(sampler.plan.epoch).source_samples
        dm.report.draw("train", dict(zip(names, drawn.astype(float).tolist(), strict=True)))
        if sampler.scheduled is not None:
            stages = [sampler.plan.draw_for(stage.shares).source_samples for stage in sampler.scheduled.stages]
            dm.report.draw_stages("train", [dict(zip(names, d.astype(float).tolist(), strict=True)) for d in stages])
    return sampler
