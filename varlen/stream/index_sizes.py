"""``varlen index-sizes``: the size index of a LitData dataset written elsewhere, in one pass.

The items are read once, in ``index.json``'s order (``StreamingDataset`` without shuffling), and a
size function the user names (``module:function``: one item -> an int, or a tuple of ints, one per
budget axis) gives each item's sizes. A function that fails, or a size that is not a whole number
from 0 to 2**31 - 1 with as many axes as the first item's, stops the pass with a DataError naming
the chunk and the item.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from varlen.errors import DataError
from varlen.stream.chunks import ChunkList, local_folder
from varlen.stream.engine import litdata
from varlen.stream.size_index import write_size_index

__all__ = ["index_sizes", "resolve_size_fn"]

_INT32_MAX = np.iinfo(np.int32).max


def resolve_size_fn(spec: str) -> Callable[[Any], Any]:
    """The function named ``module:function`` (``module:Class.method`` too).

    Raises:
        ValueError: the name is malformed, or its module or attribute cannot be found.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--size-fn {spec!r}: give module:function, e.g. mypackage.sizes:tokens")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"--size-fn {spec!r}: {error}") from error
    if not callable(found):
        raise ValueError(f"--size-fn {spec!r} is a {type(found).__name__}, not a function")
    return found


def _as_sizes(value: Any) -> tuple[int, ...] | None:
    """A size function's result as a tuple of ints, or None when it is not ints >= 0 within int32."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    if not values or not all(isinstance(v, (Integral, np.integer)) and not isinstance(v, bool) for v in values):
        return None
    out = tuple(int(v) for v in values)
    return out if all(0 <= v <= _INT32_MAX for v in out) else None


def index_sizes(
    dataset_dir: str | Path, size_fn: Callable[[Any], Any], *, axes: Sequence[str] | None = None, name: str = ""
) -> Path:
    """Read every item of the LitData dataset in ``dataset_dir`` once and write its size index.

    Args:
        dataset_dir: a local LitData dataset folder.
        size_fn: one item -> its size (int) or sizes (tuple of ints, one per axis).
        axes: names of the axes (default ``size``, or ``size0, size1, ...``).
        name: how to name ``size_fn`` in the rebuild command (``module:function``).

    Raises:
        DataError: naming the chunk and the item where ``size_fn`` failed or gave a bad size, or a
            dataset whose items are not those its ``index.json`` lists.
    """
    dataset_dir = local_folder(dataset_dir)
    chunks = ChunkList.read(dataset_dir)
    total = int(chunks.samples.sum())
    if total == 0:
        raise DataError(f"{dataset_dir}: its index.json lists no items")
    chunk_of = np.repeat(np.arange(len(chunks)), chunks.samples)
    first = np.cumsum(chunks.samples) - chunks.samples
    sizes: np.ndarray | None = None
    count = 0
    for count, item in enumerate(litdata().StreamingDataset(str(dataset_dir), shuffle=False)):
        if count >= total:
            raise DataError(f"{dataset_dir}: more items than the {total} its index.json lists")
        chunk = int(chunk_of[count])
        chunk_name = chunks.names[chunk]
        where = f"{dataset_dir}: chunk {chunk} ({chunk_name}), item {count - first[chunk]} (item {count} of all)"
        try:
            value = size_fn(item)
        except Exception as error:
            raise DataError(f"{where}: the size function {name or size_fn!r} failed: {error!r}") from error
        found = _as_sizes(value)
        if sizes is None and found is not None:
            sizes = np.zeros((total, len(found)), np.int32)
        if found is None or len(found) != sizes.shape[1]:
            wanted = "a whole number" if sizes is None or sizes.shape[1] == 1 else f"{sizes.shape[1]} whole numbers"
            raise DataError(f"{where}: the size function gave {value!r}, not {wanted} from 0 to {_INT32_MAX}")
        sizes[count] = found
    read = count + 1 if sizes is not None else 0
    if sizes is None or read != total:
        raise DataError(f"{dataset_dir}: read {read} items, its index.json lists {total}")
    dims = sizes.shape[1]
    axes = tuple(axes) if axes else (("size",) if dims == 1 else tuple(f"size{d}" for d in range(dims)))
    return write_size_index(dataset_dir, sizes, axes, chunks=chunks, size_fn=name or None)
