"""A source's rows in memory, as `TextTable`: for a look at the texts, or a
DataModule of one's own (the text DataModule reads its sources a slice at a time instead)."""

from __future__ import annotations

from typing import Any

from varlen.datasets.text.readers import TextColumns, TextTable
from varlen.datasets.text.sources import hub_sources, table_source

__all__ = ["read_hub", "read_table"]


def read_table(path: Any, columns: TextColumns, role: str = "train_file", split_column: str | None = None) -> TextTable:
    """One table, checked: it exists, is not empty, is UTF-8, parses, has rows and the columns.

    Args:
        path: a `.csv`, `.tsv`, `.json`, `.jsonl` or `.parquet` file (or one of them compressed:
            `.csv.gz`, `.tsv.bz2`, `.jsonl.xz`, `.csv.zst`...), an `.arrow` file, a folder written
            by `Dataset.save_to_disk`, or a `datasets.Dataset`.
        columns: the columns to take (a table of token ids gives its `input_ids` as the texts).
        role: the argument that named the file, for the not-found hint.
        split_column: also take this column (each row's split, see
            `split_by_column`).

    Raises:
        DatasetNotFoundError: there is no such file.
        DataError: the table cannot be used (the message names it, and the line or row where it applies).
    """
    return table_source(path, columns, role, split_column).table()


def read_hub(
    name: str, config_name: str | None, columns: TextColumns, split_column: str | None = None
) -> dict[str, TextTable]:
    """The `train` / `val` / `test` tables of a Hub dataset (or a saved `DatasetDict` folder).

    A test split whose labels are all -1 (GLUE hides its test labels) is left out. A
    `split_column` is read from the `train` split only.

    Raises:
        DatasetNotFoundError: the dataset is neither on the Hub (when online) nor in the local cache.
        DataError: it cannot be loaded, or lacks a column.
    """
    return {split: source.table() for split, source in hub_sources(name, config_name, columns, split_column).items()}
