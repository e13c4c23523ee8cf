"""Where a split's rows come from: a local file, a split of a Hub dataset, or the synthetic reviews.

A :class:`TextSource` says what identifies its content (for the cache key: a file's SHA-256, a
Hub split's fingerprint, the synthetic settings), reads only the columns it is asked for (the
class list reads the label column alone, and the split column when there is one), and hands its
rows out a slice at a time, so that tokenising never holds a Python list of the whole corpus.
Rows are numbered from 0 (after a file's header), as in :class:`~varlen.datasets.text.TextTable`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from varlen.cache import file_hash
from varlen.datasets.files import table_suffix
from varlen.datasets.text.column_splits import split_marks
from varlen.datasets.text.labels import class_list, column_classes
from varlen.datasets.text.readers import (
    HUB_SPLITS,
    TextColumns,
    check_columns,
    hidden_labels,
    iter_columns,
    load_hub,
    read_columns,
    wanted_columns,
)
from varlen.datasets.text.synthetic import iter_synthetic, synthetic_labels, synthetic_name, synthetic_splits

__all__ = ["RowSlice", "TextSource", "file_sources", "hub_sources", "synthetic_sources"]


class RowSlice(NamedTuple):
    """Consecutive rows of a source, from row ``start`` on (one list per column)."""

    start: int
    texts: list[Any]
    pairs: list[Any] | None
    labels: list[Any]


class TextSource:
    """The rows of one table, read a few columns or a slice at a time.

    Args:
        name: what messages call it (the file, ``"<hub name>[<split>]"``, ``"synthetic train"``).
        columns: the columns it is read with.
        identity: what identifies its content (JSON-like values, hashed into cache keys), or a
            function that says it (a file is hashed only when a cache key is needed).
        read: column names -> a ``pyarrow.Table`` of those columns, every row (checked: files are
            refused as :func:`~varlen.datasets.text.readers.read_columns` refuses them).
        split_column: the column naming each row's split, or None.
        slug: a short file-name-safe label for its cache files.
        batches: ``(column names, size)`` -> record batches of at most ``size`` rows, every row once
            (a file read a batch at a time); None: ``read`` cut into slices.
    """

    def __init__(
        self,
        name: str,
        columns: TextColumns,
        identity: list[Any] | Callable[[], list[Any]],
        read: Callable[[list[str]], Any] | None,
        split_column: str | None = None,
        slug: str = "table",
        batches: Callable[[list[str], int], Iterator[Any]] | None = None,
    ) -> None:
        self.name, self.columns, self._identity = name, columns, identity
        self.split_column = split_column
        self.slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", slug)[:60]
        self._read, self._batches = read, batches
        self._marks: np.ndarray | None = None

    @property
    def identity(self) -> list[Any]:
        """What identifies the rows' content."""
        if callable(self._identity):
            self._identity = self._identity()
        return self._identity

    def marks(self) -> np.ndarray | None:
        """The split code of each row (see :func:`~varlen.datasets.text.column_splits.split_marks`),
        None without a split column. Read once (the split column alone), checked, kept: a byte per row."""
        if self.split_column is None:
            return None
        if self._marks is None:
            column = self._read([self.split_column]).column(self.split_column)
            values = itertools.chain.from_iterable(chunk.to_pylist() for chunk in column.chunks)
            self._marks = split_marks(values, self.name, self.split_column)
        return self._marks

    def classes(self) -> list[str]:
        """The classes of its (training) rows' labels, sorted and checked (see
        :func:`~varlen.datasets.text.labels.column_classes`): only the label column is read.

        Raises:
            DataError: the labels mix numbers with words or spell one number two ways (naming rows).
        """
        import pyarrow as pa

        labels = self._read([self.columns.label]).column(self.columns.label)
        marks, rows = self.marks(), None
        if marks is not None:
            labels, rows = labels.filter(pa.array(marks == 0)), np.flatnonzero(marks == 0)
        return column_classes(labels, self.name, self.columns.label, rows)

    def slices(self, size: int) -> Iterator[RowSlice]:
        """The rows at most ``size`` at a time, each slice as lists (a Parquet file is read a batch
        at a time; other sources are read once, in Arrow, then cut)."""
        text, pair, label = self.columns
        names = wanted_columns(self.columns)
        batches = self._batches(names, size) if self._batches else self._read(names).to_batches(max_chunksize=size)
        start = 0
        for part in batches:
            pairs = part.column(pair).to_pylist() if pair else None
            yield RowSlice(start, part.column(text).to_pylist(), pairs, part.column(label).to_pylist())
            start += part.num_rows


class SyntheticSource(TextSource):
    """One split of the embedded synthetic reviews, generated a slice at a time."""

    def __init__(self, kind: str, split: str, num_samples: int, seed: int) -> None:
        columns = TextColumns("text", None, "label")
        super().__init__(synthetic_name(kind, split), columns, ["synthetic", kind, num_samples, seed], None)
        self.slug = f"synthetic-{kind}-{split}"
        self.kind, self.num_samples, self.seed = kind, num_samples, seed

    def classes(self) -> list[str]:
        return class_list(np.unique(synthetic_labels(self.num_samples, self.seed)).tolist(), self.name)

    def slices(self, size: int) -> Iterator[RowSlice]:
        reviews = iter_synthetic(self.kind, self.num_samples, self.seed)
        for start in range(0, self.num_samples, size):
            texts, labels = zip(*itertools.islice(reviews, size), strict=True)
            yield RowSlice(start, list(texts), None, list(labels))


def file_sources(
    files: Mapping[str, str | None], columns: TextColumns, split_column: str | None = None
) -> dict[str, TextSource]:
    """``split -> source`` of local files (``{"train": path, "val": path or None, ...}``); only the
    training file carries the split column. Nothing is read yet but each file's hash."""
    sources = {}
    for split, path in files.items():
        if not path:
            continue
        role, marked = f"{split}_file", split_column if split == "train" else None
        path = Path(path).expanduser()

        def read(names: list[str], path=path, role=role, marked=marked) -> Any:
            return read_columns(path, columns, role, marked, include=names)

        def batches(names: list[str], size: int, path=path, role=role, marked=marked) -> Iterator[Any]:
            return iter_columns(path, columns, role, marked, include=names, size=size)

        def identity(path=path, read=read) -> list[Any]:
            if not path.is_file():
                read([])  # raises DatasetNotFoundError, naming the argument and the path
            return ["file", table_suffix(path), file_hash(path)]

        sources[split] = TextSource(str(path), columns, identity, read, marked, path.name, batches)
    return sources


def hub_sources(
    name: str, config_name: str | None, columns: TextColumns, split_column: str | None = None
) -> dict[str, TextSource]:
    """``split -> source`` of a Hub dataset (or local dataset folder) loaded by ``datasets``; a test
    split whose labels are all -1 (GLUE hides them) is left out."""
    import pyarrow.compute as pc

    sources = {}
    for split, part in load_hub(name, config_name).items():
        marked = split_column if split == "train" else None
        label = f"{name}[{HUB_SPLITS[split]}]"
        check_columns(part.column_names, wanted_columns(columns, marked), label)

        def read(names: list[str], part=part) -> Any:
            return part.select_columns(names).with_format("arrow")[:]

        identity = ["hub", name, config_name, split, part._fingerprint]
        sources[split] = TextSource(label, columns, identity, read, marked, f"{Path(name).name}-{split}")
    if "test" in sources:
        labels = sources["test"]._read([columns.label]).column(columns.label)
        if hidden_labels(pc.unique(labels).to_pylist()):
            del sources["test"]
    return sources


def synthetic_sources(kind: str, num_samples: int) -> dict[str, TextSource]:
    """``split -> source`` of the synthetic reviews (see :func:`~varlen.datasets.text.synthetic_tables`)."""
    return {split: SyntheticSource(kind, split, n, seed) for split, (n, seed) in synthetic_splits(num_samples).items()}
