"""What every scenario's DataModule shares: loaders, sampler wiring, splits, batch stats."""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.stateful_dataloader import _StatefulMultiProcessingDataLoaderIter

from varlen.batching import BucketBatchSampler
from varlen.batching.telemetry import BatchStats, mask_stats

SPLITS = ("train", "val", "test", "predict")


class VarLenLoader(StatefulDataLoader):
    """A resumable loader whose workers are started with care for what varlen relies on.

    * The first batches of an epoch are requested from the sampler at the first ``next()``,
      not when the iterator is created (torchdata, like torch, prefetches at creation). Lightning
      creates the first iterator of a run *before* it calls ``set_epoch``, so with workers a
      resumed run would otherwise plan that epoch with the previous epoch's number.
    * Forked workers share the main process's memory until a garbage collector walks the
      inherited objects: it writes into each object's header, which copies the page, in the
      worker that walks it or, when the main process walks, once in the main process
      (~100 MiB of interpreter state; pytorch/pytorch#13246). So the collector is frozen
      (``gc.freeze``, as CPython's documentation advises before a fork) across the fork, which
      the workers keep for their lifetime, and in the main process while an epoch is being
      iterated: from its first batch to its end (or the workers' shutdown), so nothing stays
      uncollectable between epochs or after a fit. A loop of your own that leaves an epoch
      early keeps that freeze until the next epoch starts or the workers stop: call
      :meth:`shutdown_workers` (Lightning shuts them down itself). Skipped when the application
      froze objects itself, or with ``VarLenLoader.freeze_gc = False``.
    """

    freeze_gc = True

    def shutdown_workers(self) -> None:
        """Stop the workers now (and release the main process's collector); the next ``iter()`` starts new ones."""
        if isinstance(self._iterator, _StatefulMultiProcessingDataLoaderIter):
            self._iterator._shutdown_workers()
        self._iterator = None

    def _get_iterator(self) -> _StatefulMultiProcessingDataLoaderIter:
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()  # what StatefulDataLoader does, with our iterator class
        held = _WorkerIterator.holders > 0  # frozen by an epoch in progress (e.g. validation within training)
        freeze = self.freeze_gc and self._forks_workers() and (held or gc.get_freeze_count() == 0)
        if freeze:
            gc.freeze()
        try:
            iterator = _WorkerIterator(self, self.next_iter_state, freeze)  # forks the workers
        finally:
            if freeze and not held:
                gc.unfreeze()
        self.next_iter_state = None
        return iterator

    def _forks_workers(self) -> bool:
        context = self.multiprocessing_context
        if context is not None:
            return context.get_start_method() == "fork"
        method = torch.multiprocessing.get_start_method(allow_none=True)
        return (method or torch.multiprocessing.get_all_start_methods()[0]) == "fork"


class _WorkerIterator(_StatefulMultiProcessingDataLoaderIter):
    """torchdata's multi-process iterator, priming its prefetch at the first ``next()`` and
    holding the main process's collector frozen while an epoch is iterated."""

    holders = 0  # iterators in the middle of an epoch, over all loaders

    def __init__(self, loader: VarLenLoader, next_iter_state: dict[str, Any] | None, freeze: bool) -> None:
        self._freeze, self._holds_gc = freeze, False
        super().__init__(loader, next_iter_state)

    def _reset(self, loader, first_iter: bool = False, prime_prefetch: bool = True) -> None:
        self._release_gc()  # a new epoch (persistent workers): hold again from its first batch
        super()._reset(loader, first_iter, prime_prefetch=False)
        self._prime_pending = prime_prefetch

    def _next_data(self):
        if self._freeze and not self._holds_gc:
            self._hold_gc()
        if self._prime_pending:
            self._prime_pending = False
            for _ in range(self._prefetch_factor * self._num_workers):
                self._try_put_index()
        try:
            return super()._next_data()
        except StopIteration:
            self._release_gc()
            raise

    def _shutdown_workers(self) -> None:
        super()._shutdown_workers()
        self._release_gc()

    def _hold_gc(self) -> None:
        if _WorkerIterator.holders == 0 and gc.get_freeze_count() > 0:
            return  # the application froze objects itself: leave its freeze alone
        gc.freeze()
        _WorkerIterator.holders += 1
        self._holds_gc = True

    def _release_gc(self) -> None:
        if getattr(self, "_holds_gc", False) and not sys.is_finalizing():
            self._holds_gc = False
            _WorkerIterator.holders -= 1
            if _WorkerIterator.holders == 0:
                gc.unfreeze()


class SizedSubset(Dataset):
    """A view of some samples of a dataset that keeps the per-sample ``lengths``.

    Samples keep their parent's ``index`` key, so batches always name the samples they hold.
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int] | np.ndarray) -> None:
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.asarray(self.dataset.lengths)[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[int(self.indices[i])]


def stratified_split(labels: Sequence[int] | np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, held out) with ``fraction`` of every class held out (seeded).

    Every class with at least two samples keeps one on each side.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"split fraction must be in (0, 1), got {fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    held: list[np.ndarray] = []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        take = int(round(fraction * len(members)))
        take = min(max(take, 1 if len(members) > 1 else 0), len(members) - 1)
        held.append(members[:take])
    held_out = np.sort(np.concatenate(held)) if held else np.empty(0, np.int64)
    kept = np.setdiff1d(np.arange(len(labels)), held_out)
    return kept, held_out


class VarLenDataModule(pl.LightningDataModule):
    """Base of every varlen DataModule: the loaders, their bucketing sampler and the splits.

    A subclass builds its datasets in ``setup`` into ``self.datasets[split]`` (each with a
    ``lengths`` array and samples that carry an ``index``), sets ``self.collate_fn``, and lists
    its keep-mask keys in ``mask_keys`` (or overrides :meth:`batch_stats`). Everything else,
    the loaders (:class:`VarLenLoader`, resumable through Lightning checkpoints) and the
    :class:`~varlen.batching.BucketBatchSampler` (DDP-safe), comes from here.

    Args:
        batch_size: samples per batch.
        max_tokens: budget per batch on the padded size (or summed size, see ``sampler_cost``);
            one value per size axis for multi-axis sizes. When set, it takes precedence over
            ``batch_size``.
        shuffle: reshuffle training batches every epoch (seeded by ``seed``).
        seed: seed of the batch plan and of the splits.
        num_buckets: size buckets of the sampler (None: automatic).
        pad_to_multiple_of: pad the ragged axis to a multiple of this (8 for tensor cores).
        num_workers: loader worker processes.
        pin_memory: pin batches for fast host-to-GPU copies (None: when CUDA is available).
        persistent_workers: keep workers between epochs (needs ``num_workers > 0``).
        prefetch_factor: batches prefetched per worker (needs ``num_workers > 0``).
    """

    mask_keys: tuple[str, ...] = ()
    sampler_cost: str = "padded"
    #: the sampler rounds sizes up to ``pad_to_multiple_of``; False when ``sampler_lengths``
    #: already holds padded sizes (e.g. products of several padded axes)
    sampler_rounds_sizes: bool = True

    def __init__(
        self,
        batch_size: int | None = 32,
        max_tokens: int | list[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__()
        if max_tokens is not None:
            batch_size = None
        if batch_size is None and max_tokens is None:
            raise ValueError("set batch_size or max_tokens")
        if num_workers == 0 and (persistent_workers or prefetch_factor is not None):
            raise ValueError("persistent_workers and prefetch_factor need num_workers > 0")
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_buckets = num_buckets
        self.pad_to_multiple_of = pad_to_multiple_of
        self.num_workers = num_workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.persistent_workers = persistent_workers
        self.prefetch_factor = prefetch_factor
        self.datasets: dict[str, Dataset] = {}
        self.collate_fn: Any = None

    # -- what subclasses may override -------------------------------------------------------

    def sampler_lengths(self, dataset: Dataset) -> np.ndarray:
        """Per-sample sizes the sampler batches by (default: the dataset's ``lengths``)."""
        return np.asarray(dataset.lengths)

    def sampler_groups(self, dataset: Dataset) -> np.ndarray | None:
        """Optional group id per sample; batches then never mix groups (default: no groups)."""
        return None

    def batch_stats(self, batch: Mapping[str, Any]) -> BatchStats:
        """Samples, real and padded elements of a collated batch (for telemetry)."""
        return mask_stats(batch, self.mask_keys)

    # -- loaders ----------------------------------------------------------------------------

    def dataset(self, split: str) -> Dataset:
        """The dataset of ``split``, with a clear error when ``setup`` did not build it."""
        if split not in self.datasets:
            raise RuntimeError(
                f"{type(self).__name__} has no {split!r} split (built: {sorted(self.datasets)}); "
                "call setup() first or give that split a source"
            )
        return self.datasets[split]

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """The batch sampler class of ``split``; a subclass may carry extra per-batch state."""
        return BucketBatchSampler

    def batch_sampler(
        self, split: str, shuffle: bool, num_replicas: int | None = None, rank: int | None = None
    ) -> BucketBatchSampler:
        """The bucketing batch sampler of ``split`` (ranks default to torch.distributed's)."""
        return self.sampler_class(split)(
            self.sampler_lengths(self.dataset(split)),
            batch_size=self.batch_size,
            max_tokens=self.max_tokens,
            shuffle=shuffle,
            seed=self.seed,
            cost=self.sampler_cost,
            num_buckets=self.num_buckets,
            pad_to_multiple_of=self.pad_to_multiple_of if self.sampler_rounds_sizes else None,
            num_replicas=num_replicas,
            rank=rank,
            groups=self.sampler_groups(self.dataset(split)),
        )

    def loader(self, split: str, shuffle: bool = False) -> VarLenLoader:
        """A resumable loader over ``split``, batched by :meth:`batch_sampler`."""
        extra: dict[str, Any] = {}
        if self.num_workers > 0:
            extra = {"persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor}
        return VarLenLoader(
            self.dataset(split),
            batch_sampler=self.batch_sampler(split, shuffle),
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            **extra,
        )

    def train_dataloader(self) -> VarLenLoader:
        return self.loader("train", shuffle=self.shuffle)

    def val_dataloader(self) -> VarLenLoader:
        return self.loader("val")

    def test_dataloader(self) -> VarLenLoader:
        return self.loader("test")

    def predict_dataloader(self) -> VarLenLoader:
        return self.loader("predict" if "predict" in self.datasets else "test")
