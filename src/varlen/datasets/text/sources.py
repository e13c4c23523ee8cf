"""Where a split's rows come from: a local file, a Hugging Face `Dataset` (in memory, a `save_to_disk`
folder or an `.arrow` file), a split of a Hub dataset, or the synthetic reviews.

A `TextSource` says what identifies its content (for the cache key: a file's SHA-256, a
saved folder's files' hashes, a `Dataset`'s fingerprint, a Hub split's fingerprint, the synthetic
settings), which columns it has, reads only the columns it is asked for (the class list reads the
label column alone, and the split column when there is one), and hands its rows out a slice at a
time, so that tokenising never holds a Python list of the whole corpus. A table that already holds
token ids (an `input_ids` column) is read as ids (see `TextSource.columns`). Rows are
positions from 0 (after a file's header); `TextSource.places` names them in messages.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from varlen.datasets.files import table_suffix
from varlen.datasets.text.column_splits import split_marks
from varlen.datasets.text.hf_tables import (
    dataset_identity,
    folder_identity,
    is_dataset,
    is_saved_dataset,
    load_saved,
    read_arrow,
)
from varlen.datasets.text.hub import HUB_SPLITS, hidden_labels, is_folder, load_hub
from varlen.datasets.text.labels import class_list, column_classes, named_labels
from varlen.datasets.text.places import RowPlaces
from varlen.datasets.text.pretokenised import table_columns
from varlen.datasets.text.readers import (
    TextColumns,
    TextTable,
    check_columns,
    file_places,
    iter_columns,
    read_columns,
    read_schema,
    wanted_columns,
)
from varlen.datasets.text.synthetic import iter_synthetic, synthetic_labels, synthetic_name, synthetic_splits
from varlen.errors import DataError
from varlen.prepare.labels import classlabel_names, named_classes
from varlen.storage.cache import file_hash

__all__ = ["RowSlice", "TextSource", "file_sources", "hub_sources", "synthetic_sources", "table_source"]


class RowSlice(NamedTuple):
    """Consecutive rows of a source, from row `start` on (one list per column; a table of token ids
    gives each row's ids as its text, and its token type ids, when it has them)."""

    start: int
    texts: list[Any]
    pairs: list[Any] | None
    labels: list[Any]
    type_ids: list[Any] | None = None


class TextSource:
    """The rows of one table, read a few columns or a slice at a time (subclasses say how).

    Args:
        name: what messages call it (the file, `"<hub name>[<split>]"`, `"synthetic train"`).
        columns: the columns it is read with (its label may be None: a table to predict on).
        split_column: the column naming each row's split, or None.
        slug: a short file-name-safe label for its cache files.
        label_optional: a table without the label column is read without labels (`predict_file`).
    """

    def __init__(
        self,
        name: str,
        columns: TextColumns,
        split_column: str | None = None,
        slug: str = "table",
        label_optional: bool = False,
    ) -> None:
        self.name, self.given, self.split_column = name, columns, split_column
        self.slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", slug)[:60]
        self.label_optional = label_optional
        self._marks: np.ndarray | None = None

    # -- what a kind of source implements ----------------------------------------------------

    def identify(self) -> list[Any]:
        """What identifies the rows' content (JSON-like values, hashed into cache keys)."""
        raise NotImplementedError

    def schema(self) -> Any:
        """Its columns and their types (a `pyarrow.Schema`)."""
        raise NotImplementedError

    def read(self, names: list[str]) -> Any:
        """The columns `names`, every row, as a `pyarrow.Table` (checked: it has rows and its columns)."""
        raise NotImplementedError

    def batches(self, names: list[str], size: int) -> Iterator[Any]:
        """The columns `names` as record batches (or tables) of at most `size` rows, every row once."""
        return self.read(names).to_batches(max_chunksize=size)

    @cached_property
    def places(self) -> RowPlaces:
        """How messages name its rows (`places`): rows from 1 unless it has lines."""
        return RowPlaces()

    # -- what every source does ---------------------------------------------------------------

    @cached_property
    def identity(self) -> list[Any]:
        """What identifies the rows' content (a file is hashed only when a cache key is needed)."""
        return self.identify()

    @cached_property
    def _schema(self) -> Any:
        """`schema`, read once (a JSON file's costs a parse) for its columns and label names."""
        return self.schema()

    @cached_property
    def _layout(self) -> tuple[TextColumns, str | None]:
        return table_columns(self.given, self._schema, self.name, self.label_optional)

    @property
    def columns(self) -> TextColumns:
        """The columns its rows are read from: those given, or, in a table that holds token ids, its
        `input_ids` column in place of the text (the text columns are then not read); the label None
        when a table to predict on has none."""
        return self._layout[0]

    @property
    def type_ids(self) -> str | None:
        """The token type id column of a table of token ids, or None."""
        return self._layout[1]

    def check(self, table: Any) -> Any:
        """`table` (a `pyarrow.Table` or a `Dataset` of this source), refused when it has no row or the
        source lacks a column it is read with."""
        check_columns(self.schema().names, wanted_columns(self.columns, self.split_column), self.name)
        if table.num_rows == 0:
            raise DataError(f"{self.name}: the table has no rows")
        return table

    def marks(self) -> np.ndarray | None:
        """The split code of each row (see `split_marks`),
        None without a split column. Read once (the split column alone), checked, kept: a byte per row."""
        if self.split_column is None:
            return None
        if self._marks is None:
            column = self.read([self.split_column]).column(self.split_column)
            values = itertools.chain.from_iterable(chunk.to_pylist() for chunk in column.chunks)
            self._marks = split_marks(values, self.name, self.split_column, places=self.places)
        return self._marks

    @cached_property
    def label_names(self) -> list[str] | None:
        """The names of its label column's ids when that is a Hugging Face `ClassLabel` (a `Dataset`, a
        saved folder, or an `.arrow` / Parquet file `datasets` wrote), else None: its rows' labels are
        read as those names."""
        return classlabel_names(self._schema, self.columns.label)

    def classes(self, given: list[str] | None = None) -> list[str]:
        """The classes of its (training) rows' labels: a `ClassLabel`'s names in id order, else the labels
        sorted and checked (see `column_classes`; only the label column
        is read); `given` (`class_names`): those, which must be names of a `ClassLabel`.

        Raises:
            DataError: the labels mix numbers with words or spell one number two ways (naming rows), or
                `given` names a class its `ClassLabel` lacks.
        """
        import pyarrow as pa

        label = self.given.label
        if self.label_names is not None:
            return named_classes(self.label_names, given, self.name, label)[0]
        if given is not None:
            return list(given)
        labels = self.read([label]).column(label)
        marks, rows = self.marks(), None
        if marks is not None:
            labels, rows = labels.filter(pa.array(marks == 0)), np.flatnonzero(marks == 0)
        return column_classes(labels, self.name, label, rows, self.places)

    def slices(self, size: int) -> Iterator[RowSlice]:
        """The rows at most `size` at a time, each slice as lists (a Parquet file, a `Dataset`, is
        read a batch at a time; other sources are read once, in Arrow, then cut)."""
        text, pair, label = self.columns
        names = wanted_columns(self.columns) + ([self.type_ids] if self.type_ids else [])
        start = 0
        for part in self.batches(names, size):
            pairs = part.column(pair).to_pylist() if pair else None
            labels = self._labels(part.column(label).to_pylist()) if label else [None] * part.num_rows
            type_ids = part.column(self.type_ids).to_pylist() if self.type_ids else None
            yield RowSlice(start, part.column(text).to_pylist(), pairs, labels, type_ids)
            start += part.num_rows

    def _labels(self, values: list[Any]) -> list[Any]:
        """Labels as read: a `ClassLabel`'s ids as its names (see `named_labels`)."""
        return values if self.label_names is None else named_labels(values, self.label_names)

    def table(self) -> TextTable:
        """Every row in memory, as read (for a look at the texts, or a DataModule of one's own)."""
        table = self.read(wanted_columns(self.columns, self.split_column))
        text, pair, label = self.columns

        def column(name: str | None) -> list[Any] | None:
            return table.column(name).to_pylist() if name else None

        labels = self._labels(column(label)) if label else [None] * table.num_rows
        return TextTable(self.name, column(text), labels, column(pair), None, column(self.split_column), self.places)


class FileSource(TextSource):
    """A local CSV, TSV, JSON(L) or Parquet file (plain or compressed), read with pyarrow."""

    def __init__(self, path: Path, role: str, columns: TextColumns, split_column: str | None = None, **kwargs):
        super().__init__(str(path), columns, split_column, path.name, **kwargs)
        self.path, self.role = path, role

    def identify(self) -> list[Any]:
        if not self.path.is_file():
            read_schema(self.path, self.given, self.role)  # raises DatasetNotFoundError, naming the argument
        return ["file", table_suffix(self.path), file_hash(self.path)]

    def schema(self) -> Any:
        return read_schema(self.path, self.given, self.role)

    def read(self, names: list[str]) -> Any:
        return read_columns(self.path, self.columns, self.role, self.split_column, include=names)

    def batches(self, names: list[str], size: int) -> Iterator[Any]:
        return iter_columns(self.path, self.columns, self.role, self.split_column, include=names, size=size)

    @cached_property
    def places(self) -> RowPlaces:
        return file_places(self.path)


class ArrowSource(TextSource):
    """An `.arrow` file (Arrow IPC, file or stream format), memory-mapped each time it is read."""

    def __init__(self, path: Path, role: str, columns: TextColumns, split_column: str | None = None, **kwargs):
        super().__init__(str(path), columns, split_column, path.name, **kwargs)
        self.path, self.role = path, role

    def identify(self) -> list[Any]:
        read_arrow(self.path, self.role)  # refuses a missing or unreadable file, naming the argument
        return ["file", ".arrow", file_hash(self.path)]

    def schema(self) -> Any:
        return read_arrow(self.path, self.role).schema

    def read(self, names: list[str]) -> Any:
        return self.check(read_arrow(self.path, self.role)).select(names)


class DatasetSource(TextSource):
    """A `datasets.Dataset`: in memory, loaded from a `save_to_disk` folder, or a Hub split."""

    def __init__(self, name: str, dataset: Any, identity: Any, columns: TextColumns, split_column=None, **kwargs):
        super().__init__(name, columns, split_column, **kwargs)
        self.dataset, self._identify = dataset, identity

    def identify(self) -> list[Any]:
        return self._identify() if callable(self._identify) else self._identify

    def schema(self) -> Any:
        return self.dataset.features.arrow_schema

    def read(self, names: list[str]) -> Any:
        return self.check(self.dataset.select_columns(names).with_format("arrow")[:])

    def batches(self, names: list[str], size: int) -> Iterator[Any]:
        self.check(self.dataset)
        return self.dataset.select_columns(names).with_format("arrow").iter(batch_size=size)


class SyntheticSource(TextSource):
    """One split of the embedded synthetic reviews, generated a slice at a time."""

    def __init__(self, kind: str, split: str, num_samples: int, seed: int) -> None:
        super().__init__(synthetic_name(kind, split), TextColumns("text", None, "label"))
        self.slug = f"synthetic-{kind}-{split}"
        self.kind, self.num_samples, self.seed = kind, num_samples, seed

    def identify(self) -> list[Any]:
        return ["synthetic", self.kind, self.num_samples, self.seed]

    @property
    def columns(self) -> TextColumns:
        return self.given

    @property
    def type_ids(self) -> str | None:
        return None

    label_names = None  # no ClassLabel

    def classes(self, given: list[str] | None = None) -> list[str]:
        if given is not None:
            return list(given)
        return class_list(np.unique(synthetic_labels(self.num_samples, self.seed)).tolist(), self.name)

    def slices(self, size: int) -> Iterator[RowSlice]:
        reviews = iter_synthetic(self.kind, self.num_samples, self.seed)
        for start in range(0, self.num_samples, size):
            texts, labels = zip(*itertools.islice(reviews, size), strict=True)
            yield RowSlice(start, list(texts), None, list(labels))

    def table(self) -> TextTable:
        texts, labels = zip(*iter_synthetic(self.kind, self.num_samples, self.seed), strict=True)
        return TextTable(self.name, list(texts), list(labels))


def table_source(
    value: Any, columns: TextColumns, role: str = "train_file", split_column: str | None = None, **kwargs
) -> TextSource:
    """The source of one table argument (`train_file` & co.): a `datasets.Dataset`, or a path to a
    file (CSV, TSV, JSON(L), Parquet, `.arrow`) or to a `save_to_disk` folder. Nothing is read yet
    but a saved folder's index.

    Raises:
        TypeError: `value` is neither a path nor a `Dataset`.
        DataError: a folder `save_to_disk` did not write, or that holds a `DatasetDict`.
    """
    if is_dataset(value):
        name = f"{role} (datasets.Dataset)"
        return DatasetSource(name, value, dataset_identity(value), columns, split_column, slug=role, **kwargs)
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{role} must be a path or a datasets.Dataset, got {type(value).__name__}")
    path = Path(value).expanduser()
    if path.is_dir():
        if not is_saved_dataset(path) and not is_folder(str(path)):
            raise DataError(
                f"{path}: a folder, but not one Dataset.save_to_disk wrote (no state.json); pass {role} a file, "
                "or save the Dataset with save_to_disk"
            )
        dataset = load_saved(path, role)  # a DatasetDict folder is refused, naming dataset_name
        identity = partial(folder_identity, path)  # hashed only when a cache key is needed
        return DatasetSource(str(path), dataset, identity, columns, split_column, slug=path.name, **kwargs)
    if path.suffix.lower() == ".arrow":
        return ArrowSource(path, role, columns, split_column, **kwargs)
    return FileSource(path, role, columns, split_column, **kwargs)


def file_sources(
    files: Mapping[str, Any], columns: TextColumns, split_column: str | None = None
) -> dict[str, TextSource]:
    """`split -> source` of table arguments (`{"train": path or Dataset, "val": ... or None, ...}`, see
    `table_source`); only the training table carries the split column, and a `predict` table
    may lack the label column."""
    return {
        split: table_source(
            value,
            columns,
            f"{split}_file",
            split_column if split == "train" else None,
            **({"label_optional": True} if split == "predict" else {}),
        )
        for split, value in files.items()
        if value is not None
    }


def hub_sources(
    name: str, config_name: str | None, columns: TextColumns, split_column: str | None = None
) -> dict[str, TextSource]:
    """`split -> source` of a Hub dataset (or a saved `DatasetDict` folder) loaded by `datasets`; a
    test split whose labels are all -1 (GLUE hides them) is left out."""
    import pyarrow.compute as pc

    sources: dict[str, TextSource] = {}
    for split, part in load_hub(name, config_name).items():
        marked = split_column if split == "train" else None
        label = f"{name}[{HUB_SPLITS[split]}]"
        if is_folder(name):  # a saved folder keys by content, as files do
            folder = Path(name).expanduser() / HUB_SPLITS[split]
            identity: Any = partial(folder_identity, folder)
        else:
            identity = ["hub", name, config_name, split, part._fingerprint]
        sources[split] = DatasetSource(label, part, identity, columns, marked, slug=f"{Path(name).name}-{split}")
        sources[split].check(part)
    if "test" in sources:
        labels = sources["test"].read([columns.label]).column(columns.label)
        if hidden_labels(pc.unique(labels).to_pylist()):
            del sources["test"]
    return sources


def synthetic_sources(kind: str, num_samples: int) -> dict[str, TextSource]:
    """`split -> source` of the synthetic reviews (see `synthetic_tables`)."""
    return {split: SyntheticSource(kind, split, n, seed) for split, (n, seed) in synthetic_splits(num_samples).items()}
