"""What every scenario's DataModule shares: loaders, sampler wiring, the report, the setup order."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import Dataset

from varlen.batching import BucketBatchSampler
from varlen.batching.loader import VarLenLoader
from varlen.batching.pad_collate import PadCollate
from varlen.batching.plan import PlanSpec
from varlen.batching.shape_policy import DEFAULT_MAX_SHAPES, Rungs
from varlen.batching.telemetry import BatchStats
from varlen.datamodules.arguments import (
    BASE_ARGS,
    LOADER_TIMEOUT,
    PredictSplit,
    StartMethod,
    base_args,
    check_loader_arguments,
    handed_on,
)
from varlen.datamodules.checkpoint import DataStateCheckpoint, plain
from varlen.datamodules.contract import CheckedCollate, batch_stats_of, check_split, describe, with_stand_ins
from varlen.datamodules.shaping import ShapePolicy, check_max_shapes, check_rung_batch_sizes
from varlen.datamodules.sources import (
    Mix,
    SourceMixing,
    SourceWeights,
)
from varlen.datamodules.streaming import check_stream, stream_sampler, streamed_train
from varlen.datamodules.weighting import BALANCED, weights_of
from varlen.datasets.mixture import SourceMixture
from varlen.errors import DataError
from varlen.prepare.report import DataReport, OnBad

__all__ = ["BASE_ARGS", "LINKED", "PredictSplit", "StartMethod", "VarLenDataModule", "base_args", "plain"]

#: DataModule attributes handed to the model argument of the same name, when both exist (the CLI links
#: them; the model's hyperparameters hold their values, so the DataModule's leave them out)
LINKED = (
    "num_classes",
    "num_tasks",
    "task",
    "in_channels",
    "node_features",
    "edge_features",
    "feature_dim",
    "vocab_size",
    "pad_token_id",
    "class_names",
    "num_descriptors",
    "input_field",
)


class VarLenDataModule(SourceMixing, ShapePolicy, DataStateCheckpoint, pl.LightningDataModule):
    """Base of every varlen DataModule: the loaders, their bucketing sampler, the report.

    A subclass implements `build`, which returns its datasets by split (each with a
    `lengths` array and samples that carry an `index`: checked, see
    `varlen.datamodules.contract`), sets `self.collate_fn` (left None: dict samples are padded
    key by key, `PadCollate`), and lists its keep-mask keys in
    `mask_keys` (or overrides `batch_stats`; none: the batch's `<key>_mask`). Files are read and
    checked by readers in `varlen.datasets`; splits come from `varlen.prepare.splits`; caches
    are written in `prepare_data` and only read in `build`. Bad input goes through
    `self.report.bad(...)`: raised, or counted under `on_bad="skip"`. Everything else, the
    loaders (`VarLenLoader`, resumable through Lightning
    checkpoints) and the `BucketBatchSampler` (DDP-safe), comes from here.

    Batch sizes compose the same way in every scenario (as lhotse's `max_duration` and
    `max_cuts`): `batch_size` alone gives batches of that many samples; `max_tokens` alone
    a budget; both, the budget with at most `batch_size` samples per batch. With neither, the
    scenario's `default_batching` applies.

    Args:
        batch_size: samples per batch; with `max_tokens`, the most samples in a batch.
        max_tokens: budget per batch on the padded size (or summed size, see `sampler_cost`);
            one value per size axis for multi-axis sizes.
        shuffle: reshuffle training batches every epoch (seeded by `seed`).
        seed: seed of the batch plan and of the splits.
        num_buckets: size buckets of the sampler (None: automatic).
        pad_to_multiple_of: pad the ragged axis to a multiple of this (8 for tensor cores).
        max_shapes: the most distinct (batch size, padded length) shapes an epoch takes per size axis (the
            shape policy, `varlen.datamodules.shaping`): padded lengths (rungs) fitted on the training
            split where they pad least, every split cut for and padded to them. A GPU pays once per new
            shape (cuDNN attention plans in bf16); `WarmShapes` pays them
            before training. None: exact buckets (least padding, as many shapes as the sizes give).
        rung_batch_sizes: padded length -> the most samples a batch of it holds (`varlen tune --budget`
            writes it): these lengths are the rungs, each batch within its count and `max_tokens`.
        num_workers: loader worker processes.
        pin_memory: pin batches for fast host-to-GPU copies (None: when CUDA is available).
        persistent_workers: keep workers between epochs (needs `num_workers > 0`).
        prefetch_factor: batches prefetched per worker (needs `num_workers > 0`).
        multiprocessing_context: how workers start: `"fork"`, `"spawn"`, `"forkserver"` (None:
            the platform's default; Python 3.14 on Linux starts with `forkserver`). Under any of
            them a worker maps the data files again, so it holds no copy of the data.
        timeout: seconds a loader worker's batch may take; past it the loader stops with an error naming
            the worker (a stuck worker would otherwise block training forever). 0 waits forever. Only
            with `num_workers > 0`.
        predict_split: the split `trainer.predict` runs on (`train`, `val` or `test`, in
            a fixed order, every sample once); a DataModule that reads a source of its own for
            prediction builds a `predict` split, which wins.
        on_bad: `"raise"` at the first bad input (a `DataError` naming
            the file, row or sample), or `"skip"` it and count it in `report`.
        sources: more training sources (see `varlen.datamodules.sources`): each a mapping of
            this DataModule's arguments that differ for it, and an optional `name` (this
            DataModule's own source is `main`). Their training splits are served together;
            validation and test are the main source's (the others' are counted as unused). A
            subclass whose `build` returns `train` as a mapping name -> dataset mixes those.
        source_weights: each source's share of every epoch (a list in source order, or a mapping
            by name); None: as many as each holds. Inside a source, samples are drawn by
            `sample_weights` where the DataModule has them, else equally. Or a schedule: a list of
            stages `{weights: ..., until_epoch: E}` (or `until_step`), optionally
            `{stages: [...], interpolate: linear}` (see `varlen.batching.schedule`).
        mix: `"within_batch"` (sources share batches) or `"per_source"` (each batch holds one
            source's samples).
        stream: a dataset written by `varlen optimize` (LitData chunks and their size index), a
            local folder or a store's URL (`s3://...`), or a mapping of `url`, `storage_options`
            (LitData's, e.g. `endpoint_url`), `cache_dir`, `timeout` (seconds a store read may
            take, 60) and `verify` (`always`: each chunk hashed at every read, not once per node): the
            training split is read from it and planned from its size index; val / test come from this
            DataModule's own sources (see `varlen.datamodules.streaming`).

    Attributes:
        report: `DataReport` of the last `setup`: per split, samples kept,
            skipped (by reason, with examples), truncated and data left unused.
    """

    mask_keys: tuple[str, ...] = ()
    #: what each column of `sampler_lengths` counts (for `varlen inspect` and messages)
    size_axes: tuple[str, ...] = ("size",)
    sampler_cost: str = "padded"
    #: the sampler rounds sizes up to `pad_to_multiple_of`; False when `sampler_lengths`
    #: already holds padded sizes (e.g. products of several padded axes)
    sampler_rounds_sizes: bool = True
    #: `(batch_size, max_tokens)` when the user sets neither: the scenario's sensible default
    default_batching: tuple[int | None, int | tuple[int, ...] | None] = (32, None)
    #: the training sampler's weights: None, `"balanced"` (`class_labels`) or a column
    #: (`weight_column`); a classification DataModule takes it as its `sample_weights` argument
    sample_weights: str | None = None
    #: the arguments that say where a source's data is (files, roots, a synthetic set): an entry of
    #: `sources` has its own or their defaults, never the main source's
    source_arguments: tuple[str, ...] = ()
    #: a streamed training split's window in batches (None: the plan's default)
    stream_window_batches: int | None = None
    #: keys the default collate pads (with `<key>_mask`) even in a batch of equal lengths
    ragged_keys: tuple[str, ...] = ()
    #: arguments kept out of the hyperparameters (in-memory data: a checkpoint and the loggers get no copy)
    unsaved_arguments: tuple[str, ...] = ()
    #: base arguments the subclass sets itself, by name in its `super().__init__`: not the caller's
    fixed_arguments: tuple[str, ...] = ()

    def __init__(
        self,
        batch_size: int | None = None,
        max_tokens: int | list[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        max_shapes: int | None = DEFAULT_MAX_SHAPES,
        rung_batch_sizes: dict[int, int] | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        multiprocessing_context: StartMethod = None,
        timeout: float = LOADER_TIMEOUT,
        predict_split: PredictSplit = "test",
        on_bad: OnBad = "raise",
        sources: list[dict[str, Any]] | None = None,
        source_weights: SourceWeights = None,
        mix: Mix = "within_batch",
        stream: str | dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        # every subclass's arguments too, for the loggers and checkpoints; linked values are the model's
        self.save_hyperparameters(ignore=[*LINKED, *self.unsaved_arguments])
        owner = type(self).__name__
        self._set_sources(owner, sources, source_weights, mix, inspect.currentframe())
        self.stream = check_stream(stream, owner, self.other_sources, shuffle)
        self.rung_batch_sizes = check_rung_batch_sizes(rung_batch_sizes, owner, self.stream)
        if self.rung_batch_sizes and max_tokens is None:  # the table alone: a budget that never binds before it
            max_tokens = max(length * count for length, count in self.rung_batch_sizes.items())
        if batch_size is None and max_tokens is None:
            batch_size, max_tokens = self.default_batching
        if isinstance(max_tokens, (list, tuple)):
            max_tokens = tuple(int(t) for t in max_tokens)
        self._plan_spec(batch_size, max_tokens)  # refuses bad values now, not at the first loader
        check_loader_arguments(locals())
        self.batch_size, self.max_tokens, self.shuffle, self.seed = batch_size, max_tokens, shuffle, seed
        self.num_buckets, self.pad_to_multiple_of = num_buckets, pad_to_multiple_of
        self.max_shapes = check_max_shapes(max_shapes)
        self.rungs: tuple[Rungs, ...] | None = None  # the shape policy's, fitted by setup
        self.num_workers, self.persistent_workers = num_workers, persistent_workers
        self.prefetch_factor, self.multiprocessing_context = prefetch_factor, multiprocessing_context
        self.timeout = float(timeout)
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.predict_split, self.on_bad, self.report = predict_split, on_bad, DataReport(on_bad)
        self.datasets: dict[str, Dataset] = {}
        self.collate_fn: Any = None
        self._checkpoint_state: dict[str, Any] | None = None  # loaded before setup: applied by setup
        self._resume_position: dict[str, Any] | None = None  # a checkpoint's training position, not yet used
        self._train_sampler: Any = None  # the training sampler last made (its position goes in checkpoints)
        self._train_weights: tuple[Dataset, np.ndarray] | None = None  # (train dataset, its weights)
        self.host_stats: BatchStats | None = None  # the last training batch, counted before its transfer
        self.host_sources: np.ndarray | None = None  # its samples per source (a mixture's), likewise

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that hands the base's arguments on with `**kwargs` shows them in its signature
        (`handed_on`), but those in its `fixed_arguments`."""
        super().__init_subclass__(**kwargs)
        parent = next(c for c in cls.__mro__[1:] if issubclass(c, VarLenDataModule))
        cls.__signature__ = handed_on(cls, parent, cls.__dict__.get("fixed_arguments", ()))

    # -- what subclasses implement or may override ------------------------------------------

    def build(self, stage: str | None) -> dict[str, Dataset]:
        """The datasets by split (`train`, `val`, `test`, optionally `predict`)."""
        raise NotImplementedError

    def sampler_lengths(self, dataset: Dataset) -> np.ndarray:
        """Per-sample sizes the sampler batches by (default: the dataset's `lengths`)."""
        return np.asarray(dataset.lengths)

    @staticmethod
    def sample_sizes(samples: list[Any]) -> np.ndarray:
        """The sizes of decoded samples (`dataset[i]` dicts), `[n, D]`: what `sampler_lengths`
        gives for them, checked against a stream's size index. Static, so loader workers receive it by
        name; a DataModule that streams implements it."""
        raise NotImplementedError("this DataModule cannot check streamed samples: implement sample_sizes")

    def sampler_groups(self, dataset: Dataset) -> np.ndarray | None:
        """Optional group id per sample; batches then never mix groups (default: no groups)."""
        return None

    def class_labels(self, dataset: Dataset) -> np.ndarray | None:
        """Class id per sample (-1: no label), for `sample_weights="balanced"` and `varlen
        inspect`; None where there are no classes. Default: the dataset's `labels`, if any."""
        labels = getattr(dataset, "labels", None)
        return None if labels is None else np.asarray(labels, dtype=np.int64)

    def weight_column(self, dataset: Dataset, column: str) -> np.ndarray:
        """Per-sample weights read from the data's `column` (checked, naming the row)."""
        raise DataError(f"{type(self).__name__} reads no weight column ({column!r}): use sample_weights={BALANCED!r}")

    def batch_stats(self, batch: Mapping[str, Any]) -> BatchStats:
        """Samples, real and padded elements of a collated batch (for telemetry)."""
        return batch_stats_of(batch, self.mask_keys)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count a training batch while it is on the host (`host_stats`, read by
        `PaddingTelemetry`): counted on the device, every step
        would wait for it. A mixture's samples are counted per source too (`host_sources`,
        and per epoch in `report`)."""
        trainer = self.trainer
        if trainer is not None and trainer.training:
            self.host_stats = self.batch_stats(batch)
            mixture = self.datasets.get("train")
            if isinstance(mixture, SourceMixture):
                index = np.asarray(batch["index"], dtype=np.int64)
                self.host_sources = np.bincount(mixture.sources[index], minlength=len(mixture.names))
                self.report.serve(
                    trainer.current_epoch, dict(zip(mixture.names, self.host_sources.tolist(), strict=True))
                )
                self._note_step(trainer.current_epoch)
        return batch

    @staticmethod
    def _plan_spec(
        batch_size: int | None, max_tokens: int | tuple[int, ...] | None, pad_to_multiple_of: int | None = None
    ) -> PlanSpec:
        """The sampler's spec of these two: a budget capped at `batch_size` samples, or fixed batches."""
        if max_tokens is None:
            return PlanSpec(batch_size=batch_size, pad_to_multiple_of=pad_to_multiple_of)
        budget = tuple(int(t) for t in np.atleast_1d(max_tokens))
        return PlanSpec(max_tokens=budget, max_batch_size=batch_size, pad_to_multiple_of=pad_to_multiple_of)

    # -- setup ------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets once (Lightning calls this per stage), then log the report once."""
        if self.datasets:
            return
        self.report.clear()
        built = self.build(stage)
        if not isinstance(built, Mapping):
            raise TypeError(f"{type(self).__name__}.build() must return datasets by split, got {type(built).__name__}")
        if self.collate_fn is None:
            self.collate_fn = PadCollate(self.ragged_keys, pad_to_multiple_of=self.pad_to_multiple_of)
        if self.stream is not None:  # the training split from the stream (mixed with the sources'); val / test as built
            built = {**built, "train": streamed_train(self)}
        datasets = self._mix_sources(with_stand_ins(built, self.report), stage)  # test = val where not given
        for split, dataset in datasets.items():
            if not (split == "train" and self.stream is not None):  # a stream's sizes are its size index's
                check_split(self, split, dataset)
            self.report.keep(split, len(dataset))
        self.datasets = datasets
        if self.source_name is None:  # a source's DataModule fits its shapes as the mixture's (the main's)
            self.fit_shapes()
        if self.source_name is None:  # a source's DataModule reports through the mixture's
            self.report.announce(type(self).__name__)
        if self._checkpoint_state is not None:
            state, self._checkpoint_state = self._checkpoint_state, None
            self.load_state_dict(state)

    def __repr__(self) -> str:
        """Its class, split sizes (or "not set up") and batching, e.g. `Name(train=1,200 val=240 | max_tokens=2048,
        batch_size=None, shuffle=True)`."""
        return describe(self)

    #: `print(dm)` too: Lightning's `__str__` builds every loader to print their lengths
    __str__ = __repr__

    # -- loaders ----------------------------------------------------------------------------

    def dataset(self, split: str) -> Dataset:
        """The dataset of `split`, with a clear error when `setup` did not build it."""
        if split not in self.datasets:
            raise RuntimeError(
                f"{type(self).__name__} has no {split!r} split (built: {sorted(self.datasets)}); "
                "call setup() first or give that split a source"
            )
        return self.datasets[split]

    def train_weights(self) -> np.ndarray | None:
        """The training sampler's per-sample weights (None: unweighted), computed once per training
        split: from `sample_weights` (inverse class frequency, or the weight column) and, for
        several sources, their `source_weights`."""
        dataset = self.dataset("train")
        if self._train_weights is None or self._train_weights[0] is not dataset:
            self._train_weights = (dataset, weights_of(self, dataset))
        return self._train_weights[1]

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """The batch sampler class of `split`; a subclass may carry extra per-batch state."""
        return BucketBatchSampler

    def batch_sampler(
        self, split: str, shuffle: bool, num_replicas: int | None = None, rank: int | None = None
    ) -> BucketBatchSampler:
        """The bucketing batch sampler of `split` (ranks default to torch.distributed's); the
        shuffled training split's draws by `train_weights`, every other split serves each
        sample once. The weights are an argument of the sampler, so the sampler Lightning
        rebuilds under DDP (with its saved arguments) keeps them. A streamed training split's is a
        `StreamBatchSampler`."""
        if split != "train":
            return self._new_sampler(split, shuffle, num_replicas, rank, self.rungs)
        streamed = self.stream is not None
        sampler = self._train_sampler = (
            stream_sampler(self, num_replicas, rank)
            if streamed
            else self._new_sampler(split, shuffle, num_replicas, rank, self.rungs, resume=True)
        )
        self._reload_after_resumed_epoch(sampler)
        if not streamed and shuffle and isinstance(self.dataset(split), SourceMixture):
            self._report_draw(sampler, self.dataset(split))
        return sampler

    def _new_sampler(
        self,
        split: str,
        shuffle: bool,
        num_replicas: int | None,
        rank: int | None,
        rungs,
        resume: bool = False,
        weighted: bool = True,
    ) -> BucketBatchSampler:
        """The in-memory batch sampler of `split` (see `batch_sampler`), cut for `rungs`; with
        `resume`, at the epoch Lightning is about to serve and the position its checkpoint recorded."""
        spec = self._plan_spec(self.batch_size, self.max_tokens)
        weights = self.train_weights() if split == "train" and shuffle and weighted else None
        dataset = self.dataset(split)
        return self.sampler_class(split)(
            self.of_each_source(dataset, "sampler_lengths"),
            batch_size=spec.batch_size,
            max_tokens=self.max_tokens,
            max_batch_size=spec.max_batch_size,
            shuffle=shuffle,
            seed=self.seed,
            cost=self.sampler_cost,
            num_buckets=self.num_buckets,
            pad_to_multiple_of=self.pad_to_multiple_of if self.sampler_rounds_sizes else None,
            rungs=rungs,
            rung_batch_sizes=self.rung_caps() if rungs is self.rungs else None,
            num_replicas=num_replicas,
            rank=rank,
            groups=self._sampler_groups(dataset),
            weights=weights,
            shares=dataset.sources if weights is not None and isinstance(dataset, SourceMixture) else None,
            **(self.fit_start() if resume else {}),
        )

    def _fit_epoch(self) -> int:
        """The epoch a fitting trainer is about to serve (0 outside a fit): what a training sampler's `len()`
        describes when Lightning reads it, before it sets the epoch."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != "fit":
            return 0
        return int(trainer.fit_loop.epoch_progress.current.processed)

    def loader(self, split: str, shuffle: bool = False) -> VarLenLoader:
        """A resumable loader over `split`, batched by `batch_sampler`."""
        extra: dict[str, Any] = {}
        if self.num_workers > 0:
            extra = {"persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor}
            extra["timeout"] = self.timeout
            extra["multiprocessing_context"] = self.multiprocessing_context
        return VarLenLoader(
            self.fetched_from(split),
            batch_sampler=self.batch_sampler(split, shuffle),
            collate_fn=CheckedCollate(self.collate_fn, type(self).__name__, split),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            **extra,
        )

    def train_dataloader(self) -> VarLenLoader:
        self._reloaded()
        self._reload_every_epoch()
        return self.loader("train", shuffle=self.shuffle)

    def val_dataloader(self) -> VarLenLoader:
        return self.loader("val")

    def test_dataloader(self) -> VarLenLoader:
        return self.loader("test")

    def predict_dataloader(self) -> VarLenLoader:
        """The `predict` split when the DataModule built one, else `predict_split` (in order)."""
        return self.loader("predict" if "predict" in self.datasets else self.predict_split)


class _OneSource(VarLenDataModule):
    """A DataModule of one source read whole: no other `sources` to mix, no `stream` (the base's values,
    fixed). Private, so that the command line lists only the scenarios built on it."""

    fixed_arguments = ("sources", "source_weights", "mix", "stream")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(sources=None, source_weights=None, mix="within_batch", stream=None, **kwargs)
