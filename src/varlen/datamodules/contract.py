"""The dataset contract of a DataModule, checked where it is first relied on, and how a DataModule shows itself.

A split's dataset must be map-style (`len` and `dataset[i]`), give one size per sample (`lengths`
`[N]`, or `[N, D]` with one column per `size_axes`,
whole numbers >= 0), and its collated batches must carry `index` (each sample's position in its
split). `check_split` checks the sizes when `setup` records the split; `CheckedCollate`
checks `index` on the first batch a process collates, and turns a collate that stacks tensors of
unequal sizes into a `DataError` naming the field. Every message says how to
supply what is missing. `with_stand_ins` applies the one rule for a split `build` did not give
(`varlen.prepare.splits.STANDS_IN`: test is the validation split) and says it in the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.plan import as_size_matrix
from varlen.batching.telemetry import BatchStats, mask_stats
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.prepare.splits import stand_ins

__all__ = ["CheckedCollate", "batch_stats_of", "check_split", "describe", "with_stand_ins"]

#: what torch says when a collate stacks tensors (or lists) of unequal sizes
UNEQUAL = ("stack expects each tensor to be equal size", "each element in list of batch should be of equal size")


def with_stand_ins(built: Mapping[str, Any], report: DataReport) -> dict[str, Any]:
    """`build`'s datasets with each missing held-out split stood in for (test: the validation split), every
    split that is another recorded in `report` (`stand_in`)."""
    datasets = dict(built)
    for split, other in stand_ins(datasets).items():
        datasets[split] = datasets[other]
        report.stand_in(split, other)
    return datasets


def check_split(dm: Any, split: str, dataset: Any) -> None:
    """Refuse a split's dataset that breaks the contract (see the module docstring).

    Raises:
        TypeError: the dataset is not map-style (no `len`).
        DataError: no `lengths`, or lengths of the wrong shape, count or values; each message names
            the DataModule, the split, what is wrong and how to give it.
    """
    owner, kind = type(dm).__name__, type(dataset).__name__
    where = f"{owner}: split {split!r} ({kind})"
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TypeError(
            f"{where}: build() must return map-style datasets (with __len__ and __getitem__, e.g. a "
            "torch.utils.data.Dataset) by split"
        )
    try:
        raw = dm.of_each_source(dataset, "sampler_lengths")
    except AttributeError as error:
        if "lengths" not in str(error):
            raise
        raise DataError(
            f"{where} has no `lengths`: give the dataset one size per sample, computed once in its __init__ "
            "(e.g. `self.lengths = np.array([len(x) for x in sequences])`; [N, D] for several size axes): the "
            f"sampler batches by it. Or override {owner}.sampler_lengths(dataset)"
        ) from error
    _check_sizes(where, np.asarray(raw), len(dataset), tuple(dm.size_axes))


def _check_sizes(where: str, sizes: np.ndarray, count: int, axes: tuple[str, ...]) -> None:
    columns = 1 if sizes.ndim == 1 else sizes.shape[-1]
    if sizes.ndim not in (1, 2) or len(sizes) != count or columns != len(axes):
        raise DataError(
            f"{where}: its lengths have shape {sizes.shape}, the dataset holds {count} samples and the DataModule "
            f"budgets {len(axes)} size axes {list(axes)}: give lengths as [N] (one size per sample) or [N, D] with "
            "one column per size axis (name them in the DataModule's size_axes)"
        )
    if sizes.dtype.kind not in "iuf":
        raise DataError(f"{where}: its lengths are of dtype {sizes.dtype}: give whole numbers (element counts)")
    try:
        as_size_matrix(sizes)
    except ValueError as error:
        raise DataError(f"{where}: {error}: lengths count each sample's elements, whole numbers >= 0") from error


def _index_of(batch: Any) -> Any:
    if isinstance(batch, Mapping):
        return batch.get("index")
    return getattr(batch, "index", None)


def _unequal_field(fetched: Any) -> str:
    """Which key of a list of dict samples has arrays of more than one shape, said with two samples."""
    if not isinstance(fetched, Sequence) or not fetched or not isinstance(fetched[0], Mapping):
        return "its samples hold tensors of unequal sizes"
    for key in fetched[0]:
        shapes = [tuple(np.shape(s.get(key))) for s in fetched]
        other = next((i for i, shape in enumerate(shapes) if shape != shapes[0]), None)
        if other is not None:
            return f"field {key!r} has shape {shapes[0]} in one sample and {shapes[other]} in another"
    return "its samples hold tensors of unequal sizes"


class CheckedCollate:
    """A DataModule's collate as its loaders run it (pickled to workers with it).

    The first batch each process collates is checked for `index` and for a field left as a list of
    arrays of unequal sizes; a collate that stacks tensors of unequal sizes (torch's `stack expects
    each tensor to be equal size`) is a `DataError` naming the field and the fix.
    """

    def __init__(self, collate: Callable[[Any], Any], owner: str, split: str) -> None:
        self.collate, self.owner, self.split = collate, owner, split
        self.checked = False

    def __call__(self, fetched: Any) -> Any:
        try:
            batch = self.collate(fetched)
        except RuntimeError as error:
            if not any(text in str(error) for text in UNEQUAL):
                raise
            raise DataError(
                f"{self.owner}: split {self.split!r}: the collate stacked tensors of unequal sizes: "
                f"{_unequal_field(fetched)}. Leave collate_fn None (varlen's default collate pads each "
                "variable-length field and adds <field>_mask and <field>_lengths), or pad it in your collate "
                "(varlen.batching.pad_sequences)"
            ) from error
        if not self.checked:
            self._check_index(batch)
            self._check_joined(batch)
            self.checked = True
        return batch

    def _check_joined(self, batch: Any) -> None:
        """A field left as a list of arrays of unequal sizes (a model cannot take it as one tensor)."""
        for key, value in batch.items() if isinstance(batch, Mapping) else ():
            if not isinstance(value, (list, tuple)):
                continue
            shapes = {tuple(v.shape) for v in value if torch.is_tensor(v) or isinstance(v, np.ndarray)}
            if len(shapes) > 1:
                raise DataError(
                    f"{self.owner}: split {self.split!r}: the collate returned {key!r} as a list of {len(value)} "
                    f"arrays of unequal sizes ({sorted(shapes)[:2]}...): pad them into one tensor with a mask "
                    "(varlen.batching.pad_sequences), or leave collate_fn None (varlen's default collate does)"
                )

    def _check_index(self, batch: Any) -> None:
        index = _index_of(batch)
        if index is None:
            keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise DataError(
                f"{self.owner}: split {self.split!r}: the collated batch has no 'index' ({keys}): each sample "
                "must carry its position in the split, which resume, DDP and predictions rely on. Return "
                "{'index': i, ...} from the dataset's __getitem__ (the default collate makes it a tensor), or "
                "set batch['index'] in your collate_fn"
            )
        if not torch.is_tensor(index) or index.ndim != 1 or index.is_floating_point():
            raise DataError(
                f"{self.owner}: split {self.split!r}: the batch's 'index' is {type(index).__name__} "
                f"{getattr(index, 'shape', '')}: it must be a 1-D integer tensor, one dataset index per sample"
            )


def batch_stats_of(batch: Any, mask_keys: Sequence[str]) -> BatchStats:
    """Samples, real and allocated elements of a batch by its keep masks: `mask_keys`, else every
    `<field>_mask` of the default collate; a batch without masks pads nothing."""
    keys = list(mask_keys) or [k for k in batch if isinstance(k, str) and k.endswith("_mask")]
    if keys:
        return mask_stats(batch, keys)
    samples = len(_index_of(batch))
    return BatchStats(samples, samples, samples)


def _count(n: int) -> str:
    return f"{n:,}"


def describe(dm: Any) -> str:
    """`Name(train=1,200 val=240 test=240 | max_tokens=2048, batch_size=None, shuffle=True)`."""
    if dm.datasets:
        order = ["train", "val", "test", "predict"]
        splits = sorted(dm.datasets, key=lambda s: (order.index(s) if s in order else len(order), s))
        sizes = " ".join(
            f"{split}=val" if split == "test" and dm.datasets[split] is dm.datasets.get("val") else
            f"{split}={_count(len(dm.datasets[split]))}"
            for split in splits
        )  # fmt: skip
    else:
        sizes = "not set up"
    max_tokens = list(dm.max_tokens) if isinstance(dm.max_tokens, tuple) else dm.max_tokens
    return f"{type(dm).__name__}({sizes} | max_tokens={max_tokens}, batch_size={dm.batch_size}, shuffle={dm.shuffle})"
