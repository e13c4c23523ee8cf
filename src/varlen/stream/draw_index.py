"""What a weighted draw needs of a streamed split, beside its size index: each sample's class and weights.

`sample_weights` (`"balanced"` or a weight column) draws a training split's samples by weight. A
streamed split is planned from its size index alone, never from the chunks, so `varlen optimize`
writes what the draw needs beside it, in `<dataset>/varlen_sizes/` (a few bytes a sample), as two
Arrow IPC files (random-access file format, memory-mapped), like `sizes.arrow` and
`histograms.arrow`:

* `draw.arrow`: one record batch per chunk, in `index.json`'s order, one row per item: its class
  id (column `class`, int32, -1 for a sample without a label) where the DataModule has classes
  (`class_labels`), and the value of each weight column written (column `weight:<column>`, float32).
* `draw_totals.arrow`: one record batch, one row per chunk: per size axis and bin of
  `varlen.batching.plan.SIZE_GRID` (the size index's histograms' grid, on every axis: the plan
  chooses its axis), the count of each class (`class_counts`, `[chunks, D, classes, bins]`, the
  size index's histogram dtype), and per weight column the sum of its values (`weight_sums:<column>`,
  `[chunks, D, bins]` float64) and their least (`weight_min:<column>`, `[chunks]` float32: a
  negative value a sum would hide). Samples without a label are the histogram's count less the
  classes'.

Both carry the content key of the chunk list: a sidecar of other chunks than the size index's (the
chunks written again, or the size index rebuilt over other chunks) is refused, naming the command that
writes it again. The size index records both files' checksums each time the sidecar is written
(`record_files`); a sidecar that differs from them, or holds a class id
outside `-1 .. classes - 1` or a weight not finite and >= 0, is refused when it opens, naming the
file, the chunk and item, and that command (`varlen.stream.integrity`: once per node).

`weighted_index` gives a size index with each sample's draw weight for a DataModule's
`sample_weights` (`WeightedSizeIndex`): `"balanced"` is the inverse class frequency over the
whole split (exactly `varlen.datamodules.weighting.balanced_weights`), the class counts summed
from `draw_totals.arrow`; a column, its values (checked when the index is made, from the totals, and
per chunk as it is read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from varlen.batching.plan import SIZE_GRID
from varlen.errors import DataError
from varlen.storage.tables import as_numpy, to_arrow
from varlen.stream.chunks import ChunkList, local_folder
from varlen.stream.integrity import IntegrityError, file_problem
from varlen.stream.size_index import FOLDER, SIDECARS, SizeIndex, per_chunk, record_files, schema_of, write_arrow_file

__all__ = [
    "DRAW",
    "DRAW_TOTALS",
    "REWRITE_DRAW",
    "DrawTable",
    "WeightedSizeIndex",
    "draw_values",
    "weighted_index",
    "write_draw_files",
    "write_draw_table",
]

DRAW, DRAW_TOTALS = SIDECARS
#: `varlen.datamodules.weighting.BALANCED` (not imported: the DataModules import this module)
BALANCED = "balanced"
VERSION = "1"
CLASS = "class"
#: what a message says to do about a missing or stale sidecar
REWRITE_DRAW = (
    "write the chunks again with this configuration (varlen optimize --config CONFIG --output DIR), or, for chunks "
    "written elsewhere, rebuild the index with a label or weight function (varlen index-sizes DIR --size-fn "
    "MODULE:FUNCTION --label-fn MODULE:FUNCTION / --weight-fn COLUMN=MODULE:FUNCTION)"
)


def _weight(column: str) -> str:
    return f"weight:{column}"


def _sums(column: str) -> str:
    return f"weight_sums:{column}"


def _least(column: str) -> str:
    return f"weight_min:{column}"


def draw_values(datamodule: Any, dataset: Any, columns: Sequence[str] = ()) -> tuple[np.ndarray | None, dict]:
    """What a DataModule's split gives the sidecar: its class ids (None: no classes) and the values of
    `columns` plus its configured weight column (`sample_weights` when it names a column), each
    read (and checked, naming the file's row) by its `weight_column`."""
    labels = datamodule.class_labels(dataset)
    configured = getattr(datamodule, "sample_weights", None)
    wanted = list(dict.fromkeys([*columns, *([configured] if configured not in (None, BALANCED) else [])]))
    return labels, {column: datamodule.weight_column(dataset, column) for column in wanted}


def write_draw_table(
    dataset_dir: str | Path,
    sizes: np.ndarray,
    labels: np.ndarray | None,
    weights: Mapping[str, np.ndarray],
    *,
    chunks: ChunkList | None = None,
) -> Path | None:
    """Write the draw sidecar of the LitData dataset in `dataset_dir` (see the module docstring) and record its
    checksums in the size index there; returns its `draw.arrow`, or None (and removes an old sidecar) when there
    is nothing to write. Beside a size index still to be written: `write_draw_files`.

    Args:
        sizes: `[N, D]` sizes of the items in `index.json`'s order (what the size index holds).
        labels: `[N]` class ids (-1: no label), or None.
        weights: column name -> `[N]` values (finite, >= 0: checked by whoever read them).

    Raises:
        DataError: labels or weights not one per item, a class id below -1, or a weight not finite or
            negative (naming the item).
    """
    dataset_dir = local_folder(dataset_dir)
    chunks = chunks if chunks is not None else ChunkList.read(dataset_dir)
    written = write_draw_files(dataset_dir, sizes, labels, weights, chunks)
    record_files(dataset_dir)  # the size index vouches for the sidecar
    return written


def write_draw_files(
    dataset_dir: Path,
    sizes: np.ndarray,
    labels: np.ndarray | None,
    weights: Mapping[str, np.ndarray],
    chunks: ChunkList,
) -> Path | None:
    """`write_draw_table`'s two files, not recorded in a size index: the one written after them records them."""
    folder = dataset_dir / FOLDER
    if labels is None and not weights:
        for name in (DRAW, DRAW_TOTALS):
            (folder / name).unlink(missing_ok=True)
        return None
    per_sample = _per_sample(dataset_dir, int(chunks.samples.sum()), labels, weights)
    labels = per_sample.get(CLASS)
    classes = int(labels.max()) + 1 if labels is not None and len(labels) and labels.max() >= 0 else 0
    metadata = {
        b"varlen.version": VERSION.encode(),
        b"varlen.key": chunks.key.encode(),
        b"varlen.classes": str(classes if labels is not None else -1).encode(),
        b"varlen.columns": json.dumps(list(weights)).encode(),
        b"varlen.grid": json.dumps(SIZE_GRID.tolist()).encode(),
    }
    sizes = np.asarray(sizes).reshape(int(chunks.samples.sum()), -1)
    totals = _totals(chunks, sizes, per_sample, max(classes, 1), list(weights))
    draw_schema = schema_of({name: to_arrow(values[:0]) for name, values in per_sample.items()}, metadata)
    parts = zip(*(per_chunk(values, chunks) for values in per_sample.values()), strict=True)
    write_arrow_file(folder / DRAW, draw_schema, ([to_arrow(part) for part in chunk] for chunk in parts))
    write_arrow_file(folder / DRAW_TOTALS, schema_of(totals, metadata), [list(totals.values())])
    return folder / DRAW


def _per_sample(
    dataset_dir: Path, total: int, labels: np.ndarray | None, weights: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`draw.arrow`'s columns: the class ids (int32) and each weight column's values (float32), checked to be one
    per item of the `total` (a DataError naming `dataset_dir` and the first bad item otherwise)."""
    per_sample: dict[str, np.ndarray] = {}
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (total,):
            raise DataError(f"{dataset_dir}: {labels.shape} class labels for {total} items")
        if len(labels) and (labels.min() < -1 or labels.max() > np.iinfo(np.int32).max):
            row = int(np.flatnonzero((labels < -1) | (labels > np.iinfo(np.int32).max))[0])
            raise DataError(f"{dataset_dir}: item {row} has class {labels[row]}, not a class id >= 0 (or -1: none)")
        per_sample[CLASS] = labels.astype(np.int32)
    for column, values in weights.items():
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (total,):
            raise DataError(f"{dataset_dir}: {values.shape} values of weight column {column!r} for {total} items")
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(f"{dataset_dir}: item {row}'s weight {column!r} is {values[row]:g}, not finite and >= 0")
        per_sample[_weight(column)] = values.astype(np.float32)
    return per_sample


def _totals(
    chunks: ChunkList, sizes: np.ndarray, per_sample: Mapping[str, np.ndarray], classes: int, columns: Sequence[str]
) -> dict[str, pa.Array]:
    """`draw_totals.arrow`'s columns: per chunk, axis and size bin, each class's count and each weight column's
    sum, and each column's least value per chunk (see the module docstring)."""
    chunk_of = np.repeat(np.arange(len(chunks)), chunks.samples)
    bins, dims = len(SIZE_GRID), sizes.shape[1]
    cells = [np.searchsorted(SIZE_GRID, sizes[:, axis], side="left") for axis in range(dims)]
    totals: dict[str, pa.Array] = {}
    if CLASS in per_sample:
        labels = per_sample[CLASS]
        dtype = np.uint16 if not len(chunks) or chunks.samples.max() < 2**16 else np.uint32  # the histograms'
        counts = np.zeros((len(chunks), dims, classes, bins), dtype)
        labelled = labels >= 0
        for axis in range(dims):
            flat = (chunk_of[labelled] * classes + labels[labelled]) * bins + cells[axis][labelled]
            counts[:, axis] = np.bincount(flat, minlength=counts[:, axis].size).reshape(counts[:, axis].shape)
        totals["class_counts"] = to_arrow(counts)
    for column in columns:
        stored = per_sample[_weight(column)]
        sums = np.zeros((len(chunks), dims, bins))
        for axis, cell in enumerate(cells):
            flat = chunk_of * bins + cell
            sums[:, axis] = np.bincount(flat, stored.astype(np.float64), minlength=sums[:, axis].size).reshape(-1, bins)
        least = np.full(len(chunks), np.inf, np.float32)
        np.minimum.at(least, chunk_of, stored)
        totals[_sums(column)] = to_arrow(sums)
        totals[_least(column)] = to_arrow(np.where(chunks.samples > 0, least, 0).astype(np.float32))
    return totals


class DrawTable:
    """The draw sidecar of a local LitData dataset, memory-mapped (see the module docstring).

    Args:
        index: the dataset's size index: the sidecar must be of its chunks and the files it recorded
            (None: neither is checked; class ids and weights are).

    Raises:
        DataError: (when made) the sidecar is missing (written by an older `varlen optimize`, or by
            `varlen index-sizes` without a label or weight function), unreadable, of another format
            version, of other chunks than `index`'s, not the files `index` recorded, or holding a
            class id or weight it cannot hold (naming the chunk and item); each says how to write it again.
    """

    def __init__(self, dataset_dir: str | Path, index: SizeIndex | None = None) -> None:
        self.dataset_dir = Path(dataset_dir)
        self._draw = self._open(DRAW)
        table = self._open(DRAW_TOTALS)
        metadata = table.schema.metadata
        try:
            self.key = metadata[b"varlen.key"].decode()
            #: classes written (-1: none, the DataModule has no classes)
            self.classes = int(metadata[b"varlen.classes"])
            self.columns: tuple[str, ...] = tuple(json.loads(metadata[b"varlen.columns"]))
        except (KeyError, ValueError) as error:  # a damaged file's metadata
            path = self.dataset_dir / FOLDER / DRAW_TOTALS
            raise IntegrityError(path, f"{path} is unreadable (its metadata: {error!r}): {REWRITE_DRAW}") from error
        if self._draw.schema.metadata.get(b"varlen.key") != metadata[b"varlen.key"]:
            self._refuse(f"{DRAW} and {DRAW_TOTALS} were written for different chunk lists")
        if table.num_record_batches != 1:
            self._refuse(f"{DRAW_TOTALS} holds {table.num_record_batches} record batches, not 1")
        self._totals = table.get_batch(0)
        if index is not None and index.key != self.key:
            self._refuse("it was written for other chunks than the size index describes (a stale sidecar)")
        if self._draw.num_record_batches != self._totals.num_rows:
            self._refuse(f"{DRAW} holds {self._draw.num_record_batches} chunks, {DRAW_TOTALS} {self._totals.num_rows}")
        self._verify(index)

    def _open(self, name: str) -> pa.ipc.RecordBatchFileReader:
        path = self.dataset_dir / FOLDER / name
        if not path.is_file():
            raise DataError(
                f"{self.dataset_dir} has no sample classes or weights beside its size index ({path} is missing: "
                f"written by an older varlen optimize, or by varlen index-sizes without a label or weight "
                f"function): {REWRITE_DRAW}"
            )
        try:
            reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        except (OSError, pa.ArrowException) as error:
            said = f"{path} is unreadable ({type(error).__name__}: {error}): {REWRITE_DRAW}"
            raise IntegrityError(path, said) from error
        version = (reader.schema.metadata or {}).get(b"varlen.version", b"").decode()
        if version != VERSION:
            raise DataError(f"{path} is of version {version!r}, this varlen reads {VERSION!r}: {REWRITE_DRAW}")
        return reader

    def _refuse(self, what: str) -> None:
        raise DataError(f"{self.dataset_dir / FOLDER}: {what}; {REWRITE_DRAW}")

    def _verify(self, index: SizeIndex | None) -> None:
        """Both files against the checksums `index` recorded, then the class ids and weights (once per
        node); without a record (an older index, or none given) the values alone, at every open."""
        recorded = None if index is None else index.recorded
        if recorded is None:
            self._check_values(index)
            return
        for name, values in ((DRAW_TOTALS, None), (DRAW, lambda: self._check_values(index))):
            path = self.dataset_dir / FOLDER / name
            problem = file_problem(path, recorded.get(name), values)
            if problem is not None:
                raise IntegrityError(path, f"{path} is {problem}: {REWRITE_DRAW}")

    def _check_values(self, index: SizeIndex | None) -> None:
        """Refuse a class id outside `-1 .. classes - 1` (past the classes: an IndexError at the first batch;
        below -1: another class's weight) or a weight not finite and >= 0, naming the chunk and the item."""
        columns = ([CLASS] if self.classes >= 0 else []) + [_weight(column) for column in self.columns]
        first = 0
        for chunk in range(self._draw.num_record_batches):
            batch = self._draw.get_batch(chunk)
            for column in columns:
                values = as_numpy(batch.column(column))
                if column == CLASS:
                    bad, wanted = (values < -1) | (values >= self.classes), f"a class id from -1 to {self.classes - 1}"
                else:
                    bad, wanted = ~np.isfinite(values) | (values < 0), "finite and >= 0"
                if bad.any():
                    item = int(np.argmax(bad))
                    name = f" ({index.chunks.names[chunk]})" if index is not None else ""
                    raise DataError(
                        f"{self.dataset_dir / FOLDER / DRAW}: chunk {chunk}{name}, item {item} (sample "
                        f"{first + item}): its {column!r} is {values[item]:g}, not {wanted}: {REWRITE_DRAW}"
                    )
            first += batch.num_rows

    def labels(self, chunk: int) -> np.ndarray:
        """Class ids of chunk `chunk`'s items, `[n]` int32 (-1: none; a read-only view)."""
        return as_numpy(self._draw.get_batch(chunk).column(CLASS))

    def values(self, chunk: int, column: str) -> np.ndarray:
        """Values of weight `column` for chunk `chunk`'s items, `[n]` float32 (a read-only view)."""
        return as_numpy(self._draw.get_batch(chunk).column(_weight(column)))

    def class_counts(self, axis: int = 0) -> np.ndarray:
        """`[chunks, classes, bins]` count of each class per chunk and size bin on `axis`."""
        return as_numpy(self._totals.column("class_counts"))[:, axis]

    def weight_sums(self, column: str, axis: int = 0) -> np.ndarray:
        """`[chunks, bins]` float64 sum of `column`'s values per chunk and size bin on `axis`."""
        return as_numpy(self._totals.column(_sums(column)))[:, axis]

    def weight_min(self, column: str) -> np.ndarray:
        """`[chunks]` float32 least value of `column` per chunk."""
        return as_numpy(self._totals.column(_least(column)))


class WeightedSizeIndex(SizeIndex):
    """A size index with each sample's draw weight for `sample_weights` (`"balanced"` or a weight
    column): a `SizeIndex` with `weight_histograms` and `weights`.
    Pickles as `(folder, sample_weights, owner)`: a process that receives it maps both files again. Made by
    `weighted_index`, whose errors it raises."""

    def __init__(self, dataset_dir: str | Path, sample_weights: str, owner: str = "") -> None:
        super().__init__(dataset_dir)
        self.sample_weights = sample_weights
        self.owner = owner
        where = f"{owner + ': ' if owner else ''}{self.dataset_dir}"
        self._where = where
        self.draw = DrawTable(self.dataset_dir, self)
        total = int(self.samples_per_chunk.sum())
        if sample_weights == BALANCED:
            if self.draw.classes < 0:
                raise DataError(
                    f"{where}: sample_weights={BALANCED!r}, but its chunks were written without classes (the "
                    f"DataModule that wrote them has none): {REWRITE_DRAW}"
                )
            counts = self.draw.class_counts(0).sum(axis=(0, 2), dtype=np.int64)
            labelled = int(counts.sum())
            if labelled == 0:
                raise DataError(f"{where}: no sample has a label: sample_weights='balanced' has no class to balance")
            present = int((counts > 0).sum())
            # balanced_weights' formula, term for term: labelled / N / present, then share / count
            share = np.int64(labelled) / total / present
            per_class = np.zeros(len(counts) + 1)
            per_class[:-1][counts > 0] = share / counts[counts > 0]
            per_class[-1] = 1.0 / total  # class -1 (no label) indexes the last entry
            self._per_class = per_class
        else:
            if sample_weights not in self.draw.columns:
                written = ", ".join(map(repr, self.draw.columns)) or "none"
                raise DataError(
                    f"{where}: sample_weights={sample_weights!r}, but its chunks were written without that weight "
                    f"column (written: {written}): {REWRITE_DRAW} with sample_weights={sample_weights!r}"
                )
            sums = self.draw.weight_sums(sample_weights, 0).sum(axis=1)
            bad = ~np.isfinite(sums) | (self.draw.weight_min(sample_weights) < 0)
            for chunk in np.flatnonzero(bad).tolist():
                self.weights(chunk)  # names the sample
            if not sums.sum() > 0:
                raise DataError(
                    f"{where}: sample weight column {sample_weights!r} is 0 on every training sample: there is "
                    "nothing to draw"
                )

    def __reduce__(self) -> tuple[Any, ...]:
        return (WeightedSizeIndex, (str(self.dataset_dir), self.sample_weights, self.owner))

    # -- the draw ----------------------------------------------------------------------------

    def weight_histograms(self, axis: int | str = 0) -> np.ndarray:
        """Per chunk and bin of `edges` on `axis`, the sum of its samples' draw weights:
        `[chunks, bins]` float64."""
        position = self.axes.index(axis) if isinstance(axis, str) else axis
        if self.sample_weights != BALANCED:
            return np.array(self.draw.weight_sums(self.sample_weights, position), dtype=np.float64)
        counts = self.draw.class_counts(position)  # [chunks, classes, bins]
        unlabelled = self.histograms(position).astype(np.int64) - counts.sum(axis=1, dtype=np.int64)
        per_class = self._per_class
        return np.einsum("ckb,k->cb", counts, per_class[: counts.shape[1]]) + unlabelled * per_class[-1]

    def weights(self, chunk: int) -> np.ndarray:
        """The draw weights of chunk `chunk`'s samples, `[n]` float64.

        Raises:
            DataError: a weight column's value that is not finite or negative, naming the chunk and sample.
        """
        if not 0 <= chunk < self.num_chunks:
            raise IndexError(f"chunk {chunk} of a size index of {self.num_chunks} chunks")
        if self.sample_weights == BALANCED:
            labels = self.draw.labels(chunk).astype(np.int64)
            return self._per_class[np.where(labels < 0, -1, labels)]
        values = self.draw.values(chunk, self.sample_weights).astype(np.float64)
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            item = int(np.flatnonzero(bad)[0])
            sample = int(self.samples_per_chunk[:chunk].sum()) + item
            raise DataError(
                f"{self._where}: chunk {chunk} ({self.chunks.names[chunk]}), item {item} (sample {sample}): "
                f"sample weight column {self.sample_weights!r} is {values[item]:g}; weights must be finite and >= 0 "
                f"({int(bad.sum())} such sample(s) in the chunk): {REWRITE_DRAW}"
            )
        return values

    @property
    def index(self) -> SizeIndex:
        """The size index it weights: itself (it held one apart before it became one)."""
        return self


def weighted_index(index_or_folder: SizeIndex | str | Path, sample_weights: str, owner: str = "") -> WeightedSizeIndex:
    """The size index of a streamed split (a `SizeIndex` or its dataset folder) weighted for a
    DataModule's `sample_weights` (`"balanced"` or a weight column); `owner` names the DataModule.

    Raises:
        DataError: no size index; no draw sidecar (written by an older `varlen optimize`: write the
            chunks again); a sidecar of other chunks (stale); `"balanced"` on chunks written without
            classes, or with no labelled sample; a column not written; a column value not finite or
            negative in a chunk (naming the chunk and the sample), or 0 everywhere.
    """
    folder = index_or_folder.dataset_dir if isinstance(index_or_folder, SizeIndex) else index_or_folder
    return WeightedSizeIndex(folder, sample_weights, owner)
