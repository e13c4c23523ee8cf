"""`varlen index-sizes`: the size index of a LitData dataset written elsewhere, in one pass.

The items are read once, in `index.json`'s order (`StreamingDataset` without shuffling), and a
size function the user names (`module:function`: one item -> an int, or a tuple of ints, one per
budget axis) gives each item's sizes. A function that fails, or a size that is not a whole number
from 0 to 2**31 - 1 with as many axes as the first item's, stops the pass with a DataError naming
the chunk and the item.

Optionally, what a weighted draw needs is written beside it in the same pass
(`varlen.stream.draw_index`): a label function (one item -> its class id, an int >= 0, or -1 /
None for no label) for `sample_weights: balanced`, and weight functions (one item -> a number
>= 0), one per weight column they are named by. Without them no draw sidecar is written (an old one
is removed), and a weighted streamed split is refused naming these options.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from varlen.errors import DataError, OneLineParser
from varlen.stream.chunks import ChunkList, local_folder, read_index_json, refuse_whole_file_compression
from varlen.stream.engine import litdata
from varlen.stream.sidecars import write_sidecars

__all__ = ["index_sizes", "main", "resolve_size_fn"]

_INT32_MAX = np.iinfo(np.int32).max
DESCRIPTION = (
    "Read a LitData dataset's items once, in order, and write varlen's size index beside its index.json from a size "
    "function (one item -> an int, or a tuple of ints: one per budget axis)."
)
LABEL_HELP = (
    "module:function giving one item's class id (-1 or None: no label), for sample_weights: balanced on these chunks"
)
WEIGHT_HELP = "a weight column for sample_weights: COLUMN on these chunks, from one item's weight (repeatable)"


def resolve_size_fn(spec: str, option: str = "--size-fn") -> Callable[[Any], Any]:
    """The function named `module:function` (`module:Class.method` too).

    Raises:
        ValueError: the name is malformed, or its module or attribute cannot be found.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{option} {spec!r}: give module:function, e.g. mypackage.sizes:tokens")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{option} {spec!r}: {error}") from error
    if not callable(found):
        raise ValueError(f"{option} {spec!r} is a {type(found).__name__}, not a function")
    return found


def _as_sizes(value: Any) -> tuple[int, ...] | None:
    """A size function's result as a tuple of ints, or None when it is not ints >= 0 within int32."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    if not values or not all(isinstance(v, (Integral, np.integer)) and not isinstance(v, bool) for v in values):
        return None
    out = tuple(int(v) for v in values)
    return out if all(0 <= v <= _INT32_MAX for v in out) else None


def _as_label(value: Any) -> int | None:
    """A label function's result as a class id (-1: none), or None when it is not one."""
    if value is None:
        return -1
    if isinstance(value, (Integral, np.integer)) and not isinstance(value, bool) and -1 <= int(value) <= _INT32_MAX:
        return int(value)
    return None


def _as_weight(value: Any) -> float | None:
    """A weight function's result as a float, or None when it is not a finite number >= 0."""
    if isinstance(value, (Real, np.number)) and not isinstance(value, bool) and np.isfinite(value) and value >= 0:
        return float(value)
    return None


def index_sizes(
    dataset_dir: str | Path,
    size_fn: Callable[[Any], Any],
    *,
    axes: Sequence[str] | None = None,
    name: str = "",
    label_fn: Callable[[Any], Any] | None = None,
    weight_fns: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Path:
    """Read every item of the LitData dataset in `dataset_dir` once and write its size index.

    Args:
        dataset_dir: a local LitData dataset folder.
        size_fn: one item -> its size (int) or sizes (tuple of ints, one per axis).
        axes: names of the axes (default `size`, or `size0, size1, ...`).
        name: how to name `size_fn` in the rebuild command (`module:function`).
        label_fn: one item -> its class id (int >= 0; -1 or None: no label), for `balanced` draws.
        weight_fns: weight column name -> one item -> its weight (a finite number >= 0).

    Raises:
        DataError: naming the chunk and the item where `size_fn`, `label_fn` or a weight function
            failed or gave a bad value, a dataset whose items are not those its `index.json` lists, or
            chunks compressed whole (`refuse_whole_file_compression`).
    """
    dataset_dir = local_folder(dataset_dir)
    listed = read_index_json(dataset_dir)
    refuse_whole_file_compression(listed, dataset_dir)  # before LitData decompresses them (and removes them)
    chunks = ChunkList.from_index(listed, dataset_dir)
    if int(chunks.samples.sum()) == 0:
        raise DataError(f"{dataset_dir}: its index.json lists no items")
    weight_fns = dict(weight_fns or {})
    sizes, labels, weights = _read_items(dataset_dir, chunks, size_fn, name, label_fn, weight_fns)
    dims = sizes.shape[1]
    axes = tuple(axes) if axes else (("size",) if dims == 1 else tuple(f"size{d}" for d in range(dims)))
    return write_sidecars(dataset_dir, chunks, sizes, axes, labels=labels, weights=weights, size_fn=name or None)


def _read_items(
    dataset_dir: Path,
    chunks: ChunkList,
    size_fn: Callable[[Any], Any],
    name: str,
    label_fn: Callable[[Any], Any] | None,
    weight_fns: Mapping[str, Callable[[Any], Any]],
) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """Every item of the dataset read once, in order: `[N, D]` sizes, class ids (None: no `label_fn`) and
    each weight column's values; a DataError naming the chunk and item where a function failed or gave a bad
    value, or where the items are not those `chunks` lists."""
    total = int(chunks.samples.sum())
    chunk_of = np.repeat(np.arange(len(chunks)), chunks.samples)
    first = np.cumsum(chunks.samples) - chunks.samples
    sizes: np.ndarray | None = None
    labels = np.full(total, -1, np.int64) if label_fn is not None else None
    weights = {column: np.zeros(total) for column in weight_fns}
    count = 0
    for count, item in enumerate(litdata().StreamingDataset(str(dataset_dir), shuffle=False)):
        if count >= total:
            raise DataError(f"{dataset_dir}: more items than the {total} its index.json lists")
        chunk = int(chunk_of[count])
        where = (
            f"{dataset_dir}: chunk {chunk} ({chunks.names[chunk]}), item {count - first[chunk]} (item {count} of all)"
        )
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
        if label_fn is not None:
            labels[count] = _drawn(where, "label function", label_fn, item, _as_label, "a class id >= 0 or -1 / None")
        for column, weight_fn in weight_fns.items():
            weights[column][count] = _drawn(
                where, f"weight function of {column!r}", weight_fn, item, _as_weight, "a finite number >= 0"
            )
    read = count + 1 if sizes is not None else 0
    if sizes is None or read != total:
        raise DataError(f"{dataset_dir}: read {read} items, its index.json lists {total}")
    return sizes, labels, weights


def _drawn(where: str, what: str, fn: Callable[[Any], Any], item: Any, parse: Callable[[Any], Any], wanted: str) -> Any:
    """`fn(item)` parsed, or a DataError naming `where` (the chunk and item) and `what` failed."""
    try:
        value = fn(item)
    except Exception as error:
        raise DataError(f"{where}: the {what} failed: {error!r}") from error
    found = parse(value)
    if found is None:
        raise DataError(f"{where}: the {what} gave {value!r}, not {wanted}")
    return found


def main(argv: Sequence[str]) -> None:
    """`varlen index-sizes`: the size index of a LitData dataset made elsewhere, from a size function."""
    parser = _parser()
    options = parser.parse_args(list(argv))
    try:
        size_fn = resolve_size_fn(options.size_fn)
        label_fn = resolve_size_fn(options.label_fn, "--label-fn") if options.label_fn else None
        weight_fns = dict(_weight_fn(spec) for spec in options.weight_fn)
    except ValueError as error:
        parser.error(str(error))
    axes = [a.strip() for a in options.axes.split(",")] if options.axes else None
    folder = index_sizes(
        options.dir, size_fn, axes=axes, name=options.size_fn, label_fn=label_fn, weight_fns=weight_fns
    )
    print(f"size index written: {folder}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="varlen index-sizes", description=DESCRIPTION)
    add = parser.add_argument
    add("dir", help="the LitData dataset folder (holds index.json)")
    add("--size-fn", required=True, help="module:function giving one item's size(s)")
    add("--axes", help="names of the size axes, comma-separated (default: size)")
    add("--label-fn", help=LABEL_HELP)
    add("--weight-fn", action="append", default=[], metavar="COLUMN=MODULE:FUNCTION", help=WEIGHT_HELP)
    return parser


def _weight_fn(spec: str) -> tuple[str, Callable[[Any], Any]]:
    """`--weight-fn COLUMN=module:function` as its column and function (a ValueError naming `spec`)."""
    column, _, function = spec.partition("=")
    if not column or not function:
        raise ValueError(f"--weight-fn {spec!r}: give COLUMN=module:function")
    return column, resolve_size_fn(function, "--weight-fn")
