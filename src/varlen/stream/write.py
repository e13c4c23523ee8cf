"""A DataModule's training split written as LitData chunks, with its size index (`varlen optimize`).

Each item is the sample as `dataset[i]` gives it (a dict of arrays and ints, with its `index`):
what the scenario's collator takes back in a list. `litdata.optimize` writes them with
`keep_data_ordered=True`, so each of its workers writes a contiguous slice of the samples in
order and `index.json` lists the chunks in sample order: the size index is the DataModule's
`sampler_lengths` cut by the chunks' item counts, with no second pass over the data: the chunk list,
read once, feeds every file written beside the chunks (`varlen.stream.sidecars`). A few items are decoded
afterwards to check that order (a LitData that ordered them otherwise is refused).
The DataModule's data state (classes, tokenizer, statistics...) is saved beside the size index, so
that a DataModule of other settings reading the chunks is refused (`written_state`), with what the
writer's report counted of the split as it was written (`WRITTEN`: its samples truncated, which a
reader's report shows, `written_counts`), and so is
what a weighted draw needs (`varlen.stream.draw_index`): each sample's class where the DataModule
has classes, and its weight columns' values (its `sample_weights` column, and any `weight_columns`).

The folder appears whole or not at all: everything is written into a scratch folder beside it
(`varlen.storage.cache.scratch`, swept once its process is gone) and renamed into place at the end. A disk without
room for the estimated size is refused before writing; one that fills up meanwhile is a DataError naming the
folder, its free space and the need; LitData's processes run in a group of their own that is ended whatever
happens (`varlen.stream.writer_group`), so an interrupted or failed write leaves nothing running and
nothing under the final name, and the same command run again writes it (a folder holding only the pieces an
interrupted LitData write leaves, from before, is replaced).
With `compression` (`zstd` or `zstd:LEVEL`) each chunk is compressed inside its file (LitData's
default way), read where it lies and checked as an uncompressed one.
LitData writes quietly; the progress shown is the chunks on disk (`varlen.stream.write_progress`).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import multiprocessing
import multiprocessing.util
import os
import pickle
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from varlen import notices
from varlen.batching.plan import as_size_matrix
from varlen.errors import DataError
from varlen.storage.cache import NO_SPACE, atomic_write, disk_error, scratch, writable_folder
from varlen.stream.chunks import INDEX_JSON, ChunkList, local_folder
from varlen.stream.draw_index import draw_values
from varlen.stream.engine import litdata
from varlen.stream.sidecars import write_sidecars
from varlen.stream.size_index import FOLDER
from varlen.stream.write_progress import ChunkProgress
from varlen.stream.writer_group import WriteFailed, optimize_in_group

__all__ = [
    "DATA_STATE",
    "WRITTEN",
    "SampleItems",
    "Written",
    "check_compression",
    "estimate_bytes",
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
#: samples read to estimate the bytes a split's chunks need
ESTIMATE_SAMPLES = 32
#: free bytes below which a disk counts as having filled up during a write
FULL_BELOW = 2**20
#: what an interrupted LitData write leaves in its output folder (chunks, per-writer index files, varlen's index)
LEFTOVERS = re.compile(r"^(chunk-\d+-\d+\.bin|\d+\.index\.json|\.checkpoints|varlen_sizes)$")
#: the way out of an output folder that cannot be written
ADVICE = "give --output a folder you can write to"
#: the compressions LitData writes: zstd at its default level or at a level from 1 to 22
COMPRESSION = re.compile(r"zstd(:([1-9]|1[0-9]|2[0-2]))?")


def check_compression(compression: str | None) -> None:
    """Refuse a `compression` LitData cannot write here, naming the way out.

    Raises:
        ValueError: not `zstd` / `zstd:LEVEL`, or the zstd package LitData compresses with is missing.
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
    """`litdata.optimize`'s function: sample `i` of a dataset as an item (pickled to LitData's worker
    processes with the dataset, which pickles as its file paths)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._pid = os.getpid()

    def __call__(self, i: int) -> Any:
        if self._pid != os.getpid():  # the first item in a LitData writer process
            self._pid = os.getpid()
            multiprocessing.util.Finalize(None, _end_children, exitpriority=100)
        sample = self.dataset[i]
        if isinstance(sample, Mapping) and sample.get("index", i) != i:
            raise DataError(f"sample {i} of {type(self.dataset).__name__} says it is sample {sample['index']}")
        return sample


@dataclass(frozen=True)
class Written:
    """What `write_split` wrote."""

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
    """Write `split` of a set-up DataModule to the new folder `output` as LitData chunks, and its size index.

    Args:
        chunk_bytes, num_workers, start_method: `litdata.optimize`'s (its writers receive the dataset pickled,
            which carries its file paths, not its data); None: a writer per `SAMPLES_PER_WRITER` samples
            (up to the cores), forked where the platform can (a spawned writer imports torch again).
        weight_columns: weight columns to write beside the size index besides the DataModule's own
            `sample_weights` column (each read by its `weight_column`), for draws by another column.
        compression: `zstd` or `zstd:LEVEL` (None: none): each chunk compressed inside its file.

    Raises:
        ValueError: a `compression` LitData cannot write here (`check_compression`).
        DataError: `output` already holds a dataset or other files, is a file or cannot be written, its disk
            has no room for the chunks (before or while writing), LitData's workers wrote nothing, or the
            chunks do not hold the samples in order.
        WriteFailed: LitData's writers failed otherwise (their error).
    """
    check_compression(compression)
    output = _new_folder(local_folder(output))
    dataset = datamodule.dataset(split)
    if len(dataset) == 0:
        raise DataError(f"{type(datamodule).__name__}: the {split} split is empty, nothing to write")
    sizes = as_size_matrix(datamodule.sampler_lengths(dataset))
    if len(sizes) != len(dataset):
        raise DataError(f"{type(datamodule).__name__}: {len(sizes)} sizes for {len(dataset)} {split} samples")
    labels, weights = draw_values(datamodule, dataset, weight_columns)  # read (and checked) before writing
    need = estimate_bytes(dataset)  # uncompressed: an upper bound of compressed chunks, checked as they fill
    if compression is None and _free(output.parent) < need:
        raise _no_room(output, need)
    settings = _settings(len(dataset), chunk_bytes, num_workers, start_method, compression)
    axes = tuple(datamodule.size_axes)
    build = scratch(output, ".build", folder=True, advice=ADVICE)
    try:
        chunks = _write_chunks(dataset, build, output, need, settings)
        folder = write_sidecars(build, chunks, sizes, axes, labels=labels, weights=weights)
        counted = datamodule.report.splits.get(split)
        written = {"split": split, "samples": len(dataset), "truncated": dict(counted.truncated) if counted else {}}
        state = json.dumps({**datamodule.plain_data_state(), WRITTEN: written}, indent=1, sort_keys=True)
        atomic_write(folder / DATA_STATE, lambda tmp: tmp.write_text(state), advice=ADVICE)
        os.rename(build, output)  # the folder appears whole
    finally:
        shutil.rmtree(build, ignore_errors=True)  # after a failure (renamed: nothing there)
    classes = -1 if labels is None else int(np.max(labels, initial=-1)) + 1
    nbytes = int(chunks.nbytes.sum())
    return Written(output, len(dataset), len(chunks), nbytes, axes, classes, tuple(weights), compression)


def _settings(
    samples: int, chunk_bytes: int | str, num_workers: int | None, start_method: str | None, compression: str | None
) -> dict[str, Any]:
    """`litdata.optimize`'s settings of `write_split` (see there) for `samples` samples."""
    if num_workers is None:  # a writer a SAMPLES_PER_WRITER: each started writer costs seconds (imports)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        num_workers = max(1, min(cores, samples // SAMPLES_PER_WRITER))
    if start_method is None and "fork" in multiprocessing.get_all_start_methods():
        start_method = "fork"  # LitData's default, spawn, imports torch again in every writer
    settings = {"chunk_bytes": chunk_bytes, "num_workers": num_workers, "start_method": start_method}
    if compression:  # inside each file: read in place, checked as written
        settings.update(compression=compression, compression_level="batch")
    return settings


def _write_chunks(dataset: Any, build: Path, output: Path, need: int, settings: dict[str, Any]) -> ChunkList:
    """LitData's chunks of `dataset` written into `build` (its writers in a process group of their own) and
    checked: every sample, in order. A disk that filled up meanwhile is a DataError naming `output`'s folder,
    its free space and `need`."""
    total = None if settings.get("compression") else need  # compressed chunks: their size is not known ahead
    try:
        with ChunkProgress(build, total, settings["num_workers"]) as progress:
            lowest = optimize_in_group(
                build.parent,
                on_poll=progress.poll,
                fn=SampleItems(dataset),
                inputs=list(range(len(dataset))),
                output_dir=str(build),
                keep_data_ordered=True,  # each worker a contiguous slice, in order: the chunks are in sample order
                reorder_files=False,
                verbose=not hasattr(os, "fork") and sys.stderr.isatty(),  # LitData's bar where it runs here
                **settings,
            )
    except WriteFailed as failed:
        if failed.errno in NO_SPACE or _filled(failed.lowest_free):
            shutil.rmtree(build, ignore_errors=True)  # what it wrote is freed before the free space is said
            raise _no_room(output, need) from failed
        raise
    try:
        return _checked(build, output, len(dataset))
    except DataError as error:  # LitData can lose a writer's error (a full disk at its last chunk)
        if _filled(lowest):
            shutil.rmtree(build, ignore_errors=True)
            raise _no_room(output, need) from error
        raise


def _checked(build: Path, output: Path, total: int) -> ChunkList:
    """The chunk list LitData wrote in `build`, checked to hold `total` samples in order (named `output`)."""
    if not (build / INDEX_JSON).is_file():
        raise DataError(f"{output}: LitData's writers wrote no {INDEX_JSON} (they failed: see their errors above)")
    chunks = ChunkList.read(build)
    if int(chunks.samples.sum()) != total:
        raise DataError(
            f"{output}: LitData wrote {int(chunks.samples.sum())} of {total} samples (its workers failed: "
            "see their errors above)"
        )
    check_order(build, total, name=output)
    return chunks


def _new_folder(output: Path) -> Path:
    """`output` checked to be a new folder that can be written: absent, or empty, or holding only the pieces an
    interrupted LitData write left (removed, said in a notice); a DataError otherwise."""
    if (output / INDEX_JSON).exists():
        raise DataError(f"{output} already holds a LitData dataset ({INDEX_JSON}): give a new folder or remove it")
    writable_folder(output, advice=ADVICE)  # its parent: made, and writable (a file in the way is named)
    if output.exists() and not output.is_dir():
        raise DataError(f"--output {output} is a file, not a folder: give a new folder")
    entries = sorted(p.name for p in output.iterdir()) if output.is_dir() else []
    if any(not LEFTOVERS.match(name) for name in entries):
        raise DataError(f"{output} holds other files ({entries[0]}, ...), no LitData dataset: give a new folder")
    if output.is_dir():
        shutil.rmtree(output)
    if entries:
        notices.warn(f"{output}: removed the {len(entries)} pieces an interrupted write left; writing it again")
    return output


def estimate_bytes(dataset: Any) -> int:
    """About the bytes `dataset`'s chunks take, as LitData serialises its samples (arrays as their bytes,
    numbers as 8, other values pickled, 4 bytes of offsets each): `ESTIMATE_SAMPLES` samples spread over
    it, scaled to its length."""
    picks = np.unique(np.linspace(0, len(dataset) - 1, min(len(dataset), ESTIMATE_SAMPLES)).astype(np.int64))
    return int(sum(_nbytes(dataset[int(i)]) for i in picks) / len(picks) * len(dataset))


def _nbytes(value: Any) -> int:
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, str | bytes):
        return len(value) + 4
    if isinstance(value, bool | int | float):
        return 12
    if isinstance(value, np.ndarray):
        return value.nbytes + 4
    if hasattr(value, "element_size") and hasattr(value, "numel"):  # a tensor
        return int(value.element_size() * value.numel()) + 4
    return len(pickle.dumps(value)) + 4  # LitData's serialiser of the rest (numpy scalars too)


def _free(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def _filled(lowest_free: int | None) -> bool:
    """Whether the disk's free space fell to what a full disk leaves while the writers ran."""
    return lowest_free is not None and lowest_free < FULL_BELOW


def _no_room(output: Path, need: int) -> DataError:
    """The DataError of a disk without room for `output`: its folder, the free space, the need."""
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return disk_error(
        output.parent,
        full,
        need,
        advice=f"give --output a folder on a disk with room ({output})",
        needs="the chunks need",
    )


def _end_children() -> None:
    """At a LitData writer's exit, end the processes it started and left waiting (its file remover, after an
    error it does not end): Python's exit would wait for them for good."""
    for child in multiprocessing.active_children():
        child.terminate()
        child.join(1)


def written_state(folder: str | Path) -> dict[str, Any] | None:
    """The data state of the DataModule that wrote the chunks in `folder` (None: written elsewhere)."""
    path = Path(folder) / FOLDER / DATA_STATE
    return json.loads(path.read_text()) if path.is_file() else None


def written_counts(folder: str | Path) -> dict[str, Any] | None:
    """What the writer's report counted of the split in `folder` as it was written (`split`, `samples`,
    `truncated`: item -> count), None for chunks written elsewhere or by an older `varlen optimize`."""
    state = written_state(folder)
    return None if state is None else state.get(WRITTEN)


def check_order(output: Path, total: int, name: str | Path | None = None) -> None:
    """Decode `CHECKED_ITEMS` items spread over the dataset (the first and the last included) and
    check that item `i` is sample `i`: the size index relies on it (`name`: the folder in errors)."""
    dataset = litdata().StreamingDataset(str(output), shuffle=False)
    for position in np.unique(np.linspace(0, total - 1, CHECKED_ITEMS).astype(np.int64)).tolist():
        item = dataset[position]
        found = item.get("index") if isinstance(item, Mapping) else None
        if found is not None and int(found) != position:
            raise DataError(
                f"{name or output}: item {position} of the written chunks is sample {int(found)}: this LitData "
                f"({litdata().__version__}) did not keep the samples in order, so the size index cannot be written"
            )
