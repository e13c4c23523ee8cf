"""Where a text DataModule's rows come from: its sources (files, a Hub dataset or the synthetic reviews), the
tables in memory, the class names and a weight column; the part of
`TextClassificationDataModule` that reads, before anything is tokenised."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from varlen.datamodules.weighting import checked_column
from varlen.datasets.text.column_splits import SPLITS, split_by_column
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.hf_tables import is_dataset
from varlen.datasets.text.labels import check_classes
from varlen.datasets.text.readers import TextTable
from varlen.datasets.text.sources import TextSource, file_sources, hub_sources, synthetic_sources
from varlen.errors import DataError
from varlen.stream.write import written_state

__all__ = ["Table", "TextTables"]

#: a table argument: a path (CSV, TSV, JSON(L), Parquet, .arrow, a save_to_disk folder), from a config or the
#: command line, or, from Python, a `datasets.Dataset`. `Any`, not the class: jsonargparse reads a path
#: given to an argument typed with a class as a config file, and would hand over the file's content.
Table = str | Any


class TextTables:
    """The text DataModule's sources, tables, classes and weight column (see the module docstring); the
    DataModule sets the files, `dataset_name`, `columns`, `split_column`, `synthetic` and the rest."""

    # -- sources (read lazily: the CLI reads num_classes before setup) --------------------------

    @property
    def _files(self) -> dict[str, Any] | None:
        """Each split's table (a path or a Dataset), when tables are the source (without `train_file`, a
        stream serves training)."""
        if self.train_file is None and self.val_file is None:
            return None
        return {"train": self.train_file, "val": self.val_file, "test": self.test_file}

    @cached_property
    def sources(self) -> dict[str, TextSource]:
        """Where each available split's rows come from (nothing is read yet but a Hub dataset's index, or a
        saved folder's)."""
        if self._files:
            sources = file_sources(self._files, self.columns, self.split_column)
        elif self.dataset_name:
            sources = hub_sources(self.dataset_name, self.dataset_config_name, self.columns, self.split_column)
        else:
            sources = synthetic_sources(self.synthetic, self.synthetic_samples)
        if self.predict_file is not None:
            sources |= file_sources({"predict": self.predict_file}, self.columns)
        return sources

    @cached_property
    def tables(self) -> dict[str, TextTable]:
        """The rows of each available split as read, in memory (for a look at the texts: `setup` reads
        the sources a slice at a time instead), the training table already divided by its `split_column`."""
        tables = {split: source.table() for split, source in self.sources.items()}
        if not self.split_column:
            return tables
        parts = split_by_column(tables["train"], self.split_column)
        merged = {**parts, **tables, "train": parts["train"]}  # a split with its own source keeps it
        return {split: merged[split] for split in (*SPLITS, "predict") if split in merged}

    def _describe_tables(self, **tables: Any) -> None:
        """A `Dataset` argument is saved among the hyperparameters (checkpoints, loggers) as its description,
        not its rows: checkpoints hold plain values (`torch.load(weights_only=True)` reads them), stay small."""
        described = {
            name: f"datasets.Dataset(fingerprint={value._fingerprint}, num_rows={value.num_rows})"
            for name, value in tables.items()
            if is_dataset(value)
        }
        if described:
            self.save_hyperparameters(described)  # a mapping: updates them, and the loggers' copy

    @property
    def class_names(self) -> list[str]:
        """Class names in id order (from the config, else a `ClassLabel`'s names, else the sorted training
        labels: the label column alone is read; with no training source, the streamed chunks' data state);
        two at least. Given over a `ClassLabel`, each must be one of its names."""
        if self._class_names is None and "train" not in self.sources:
            self._class_names = self._streamed_class_names()
        if not self._classes_read and "train" in self.sources:
            train, given = self.sources["train"], self._class_names
            classes = train.classes(given)
            self._class_names = classes if given else check_classes(classes, train.name, self.columns.label)
        self._classes_read = True
        return check_classes(self._class_names, "class_names", self.columns.label)

    def _streamed_class_names(self) -> list[str]:
        """The class names the chunks of `stream` were written with (`varlen optimize` saves them)."""
        written = written_state(self.stream.fetched().index_dir)
        if not written or "class_names" not in written:
            raise ValueError(
                f"{self.stream}: its chunks carry no class names (written elsewhere) and there is no train_file "
                "to read them from: give class_names"
            )
        return list(written["class_names"])

    def weight_column(self, dataset: TokenizedTexts, column: str) -> np.ndarray:
        """Each training sample's weight: its row's value in `column` of `train_file` (read alone;
        the windows of a text share its weight)."""
        import pyarrow as pa

        source = self.sources["train"]
        if column not in source.schema().names:
            raise DataError(f"{source.name}: no column {column!r} for sample_weights (the weight of each row)")
        table = source.read([column])
        kind = table.schema.field(column).type  # a word in it makes it a string column; an empty cell a null
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind)):
            raise DataError(f"{source.name}: sample weight column {column!r} holds {kind}, not numbers")
        values = table.column(column).cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls: NaN
        weights = values[dataset.rows]
        return checked_column(weights, column, lambda i: f"{source.name}: {source.places.of(int(dataset.rows[i]))}")
