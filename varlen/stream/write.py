"""A DataModule's training split written as LitData chunks, with its size index (``varlen optimize``).

Each item is the sample as ``dataset[i]`` gives it (a dict of arrays and ints, with its ``index``):
what the scenario's collator takes back in a list. ``litdata.optimize`` writes them with
``keep_data_ordered=True``, so each of its workers writes a contiguous slice of the samples in
order and ``index.json`` lists the chunks in sample order: the size index is the DataModule's
``sampler_lengths`` cut by the chunks' item counts, with no second pass over the data. A few
items are decoded afterwards to check that order (a LitData that ordered them otherwise is refused).
The DataModule's data state (classes, tokenizer, statistics...) is saved beside the size index, so
that a DataModule of other settings reading the chunks is refused (:func:`written_state`), with what the
writer's report counted of the split as it was written (:data:`WRITTEN`: its samples truncated, which a
reader's report shows, :func:`written_counts`), and so is
what a weighted draw needs (:mod:`varlen.stream.draw_index`): each sample's class where the DataModule
has classes, and its weight columns' values (its ``sample_weights`` column, and any ``weight_columns``).
With ``compression`` (``zstd`` or ``zstd:LEVEL``) each chunk is compressed inside its file (LitData's
default way), read where it lies and checked as an uncompressed one.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from varlen.batching.plan import as_size_matrix
from varlen.cache import atomic_write
from varlen.errors import DataError
from varlen.stream.chunks import INDEX_JSON, ChunkList, local_folder
from varlen.stream.draw_index import draw_values, write_draw_table
from varlen.stream.engine import litdata
from varlen.stream.size_index import FOLDER, write_size_index

__all__ = [
    "DATA_STATE",
    "WRITTEN",
    "SampleItems",
    "Written",
    "check_compression",
    "write_split",
    "written_counts",
    "written_state",
]

#: items decoded after writing to check that the chunks hold the samples in order
CHECKED_ITEMS = 8
#: the writing DataModule's data state, in the size index's folder
DATA_STATE = "data_state.json"
#: the key of the data state holding what the writer's report counted of the written split (not a state key)
WRITTEN = "varlen:written"
#: samples a LitData writer process is worth starting for, when varlen picks the writers' count
SAMPLES_PER_WRITER = 20_000
#: the compressions LitData writes: zstd at its default level or at a level from 1 to 22
COMPRESSION = re.compile(r"zstd(:([1-9]|1[0-9]|2[0-2]))?")


def check_compression(compression: str | None) -> None:
    """Refuse a ``compression`` LitData cannot write here, naming the way out.

    Raises:
        ValueError: not ``zstd`` / ``zstd:LEVEL``, or the zstd package LitData compresses with is missing.
    """
    if compression is None:
        return
    if not COMPRESSION.fullmatch(compression):
        raise ValueError(f"compression {compression!r}: give zstd, or zstd:LEVEL with LEVEL from 1 to 22")
    if sys.version_info < (3, 14) and importlib.util.find_spec("zstd") is None:
        raise ValueError(
            f"compression {compression!r} needs the zstd package, which LitData compresses with: pip install zstd"
        )


class SampleItems:
    """``litdata.optimize``'s function: sample ``i`` of a dataset as an item (pickled to LitData's worker
    processes with the dataset, which pickles as its file paths)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __call__(self, i: int) -> Any:
        sample = self.dataset[i]
        if isinstance(sample, Mapping) and sample.get("index", i) != i:
            raise DataError(f"sample {i} of {type(self.dataset).__name__} says it is sample {sample['index']}")
        return sample


@dataclass(frozen=True)
class Written:
    """What :func:`write_split` wrote."""

    output: Path
    samples: int
    chunks: int
    nbytes: int
    axes: tuple[str, ...]
    #: classes written beside the size index (-1: none, the DataModule has no classes)
    classes: int = -1
    #: weight columns written beside the size index
    weight_columns: tuple[str, ...] = ()
    #: how each chunk is compressed inside its file (None: not)
    compression: str | None = None

    def lines(self) -> list[str]:
        lines = [
            f"wrote {self.samples} samples in {self.chunks} LitData chunks"
            f"{f' ({self.compression})' if self.compression else ''}, {self.nbytes / 2**20:.2f} MiB: "
            f"{self.output / INDEX_JSON}",
            f"size index ({', '.join(self.axes)}; per chunk: sizes, histograms): {self.output / FOLDER}",
        ]
        drawn = ([f"classes ({self.classes})"] if self.classes >= 0 else []) + [
            f"weight column {column!r}" for column in self.weight_columns
        ]
        if drawn:
            lines.append(f"for weighted draws, per sample: {', '.join(drawn)}")
        return lines


def write_split(
    datamodule: Any,
    output: str | Path,
    *,
    split: str = "train",
    chunk_bytes: int | str = "64MB",
    num_workers: int | None = None,
    start_method: str | None = None,
    weight_columns: tuple[str, ...] = (),
    compression: str | None = None,
) -> Written:
    """Write ``split`` of a set-up DataModule to the new folder ``output`` as LitData chunks, and its size index.

    Args:
        chunk_bytes, num_workers, start_method: ``litdata.optimize``'s (its writers receive the dataset pickled,
            which carries its file paths, not its data); None: a writer per :data:`SAMPLES_PER_WRITER` samples
            (up to the cores), forked where the platform can (a spawned writer imports torch again).
        weight_columns: weight columns to write beside the size index besides the DataModule's own
            ``sample_weights`` column (each read by its ``weight_column``), for draws by another column.
        compression: ``zstd`` or ``zstd:LEVEL`` (None: none): each chunk compressed inside its file.

    Raises:
        ValueError: a ``compression`` LitData cannot write here (:func:`check_compression`).
        DataError: ``output`` already holds a dataset, LitData's workers wrote nothing, or the chunks
            do not hold the samples in order.
    """
    output = local_folder(output)
    check_compression(compression)
    if (output / INDEX_JSON).exists():
        raise DataError(f"{output} already holds a LitData dataset ({INDEX_JSON}): give a new folder or remove it")
    dataset = datamodule.dataset(split)
    if len(dataset) == 0:
        raise DataError(f"{type(datamodule).__name__}: the {split} split is empty, nothing to write")
    sizes = as_size_matrix(datamodule.sampler_lengths(dataset))
    if len(sizes) != len(dataset):
        raise DataError(f"{type(datamodule).__name__}: {len(sizes)} sizes for {len(dataset)} {split} samples")
    labels, weights = draw_values(datamodule, dataset, weight_columns)  # read (and checked) before writing
    if num_workers is None:  # a writer a SAMPLES_PER_WRITER: each started writer costs seconds (imports)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        num_workers = max(1, min(cores, len(dataset) // SAMPLES_PER_WRITER))
    if start_method is None and "fork" in multiprocessing.get_all_start_methods():
        start_method = "fork"  # LitData's default, spawn, imports torch again in every writer
    litdata().optimize(
        fn=SampleItems(dataset),
        inputs=list(range(len(dataset))),
        output_dir=str(output),
        chunk_bytes=chunk_bytes,
        num_workers=num_workers,
        keep_data_ordered=True,  # each worker a contiguous slice, in order: the chunks are in sample order
        reorder_files=False,
        verbose=sys.stderr.isatty(),  # LitData's progress bar, on a terminal
        start_method=start_method,
        compression=compression,
        compression_level="batch" if compression else None,  # inside each file: read in place, checked as written
    )
    if not (output / INDEX_JSON).is_file():
        raise DataError(f"{output}: LitData's writers wrote no {INDEX_JSON} (they failed: see their errors above)")
    chunks = ChunkList.read(output)
    if int(chunks.samples.sum()) != len(dataset):
        raise DataError(
            f"{output}: LitData wrote {int(chunks.samples.sum())} of {len(dataset)} samples (its workers failed: "
            "see their errors above)"
        )
    check_order(output, len(dataset))
    axes = tuple(datamodule.size_axes)
    folder = write_size_index(output, sizes, axes, chunks=chunks)
    write_draw_table(output, sizes, labels, weights, chunks=chunks)
    counted = datamodule.report.splits.get(split)
    written = {"split": split, "samples": len(dataset), "truncated": dict(counted.truncated) if counted else {}}
    state = json.dumps({**datamodule.plain_data_state(), WRITTEN: written}, indent=1, sort_keys=True)
    atomic_write(folder / DATA_STATE, lambda tmp: tmp.write_text(state))
    classes = -1 if labels is None else int(np.max(labels, initial=-1)) + 1
    nbytes = int(chunks.nbytes.sum())
    return Written(output, len(dataset), len(chunks), nbytes, axes, classes, tuple(weights), compression)


def written_state(folder: str | Path) -> dict[str, Any] | None:
    """The data state of the DataModule that wrote the chunks in ``folder`` (None: written elsewhere)."""
    path = Path(folder) / FOLDER / DATA_STATE
    return json.loads(path.read_text()) if path.is_file() else None


def written_counts(folder: str | Path) -> dict[str, Any] | None:
    """What the writer's report counted of the split in ``folder`` as it was written (``split``, ``samples``,
    ``truncated``: item -> count), None for chunks written elsewhere or by an older ``varlen optimize``."""
    state = written_state(folder)
    return None if state is None else state.get(WRITTEN)


def check_order(output: Path, total: int) -> None:
    """Decode :data:`CHECKED_ITEMS` items spread over the dataset (the first and the last included) and
    check that item ``i`` is sample ``i``: the size index relies on it."""
    dataset = litdata().StreamingDataset(str(output), shuffle=False)
    for position in np.unique(np.linspace(0, total - 1, CHECKED_ITEMS).astype(np.int64)).tolist():
        item = dataset[position]
        found = item.get("index") if isinstance(item, Mapping) else None
        if found is not None and int(found) != position:
            raise DataError(
                f"{output}: item {position} of the written chunks is sample {int(found)}: this LitData "
                f"({litdata().__version__}) did not keep the samples in order, so the size index cannot be written"
            )
