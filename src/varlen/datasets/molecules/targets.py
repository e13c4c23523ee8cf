"""A table's targets and line numbers, stored once per node beside its graphs and mapped by every process.

The graphs are keyed by the SMILES alone (featurising is what costs); the targets depend on the
target columns and the task too, so they are a table of their own (`TARGETS_FORMAT`):
`targets` (float32 `[N, T]`, NaN where missing) and `line` (the file's line of each row),
written from a table `read_table` has checked. Once it exists, a process needs
neither the CSV nor pandas: `setup` maps it, and a dataset pickles it as its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from varlen.datasets.molecules.readers import MoleculeTable
from varlen.storage.cache import cache_key, default_cache_dir, file_hash
from varlen.storage.tables import MappedTable, open_table, write_table

__all__ = [
    "TARGETS_FORMAT",
    "TargetStore",
    "cached_targets",
    "open_targets",
    "targets_cache_path",
    "targets_key",
    "write_targets",
]

#: the layout of the targets table
TARGETS_FORMAT = "molecule-targets-arrow-1"


class TargetStore:
    """A table's targets mapped (read-only views of the cache file); pickles as its path.

    Attributes:
        targets: float32 `[N, T]`, NaN where a value is missing.
        lines: int64 `[N]` the file's line of each row (1 = the header).
    """

    def __init__(self, table: MappedTable) -> None:
        self.table = table
        self.targets = table.numpy("targets")
        self.lines = table.numpy("line")

    def __reduce__(self) -> tuple[Any, ...]:
        return (TargetStore, (self.table,))

    def __len__(self) -> int:
        return len(self.table)


def targets_key(path: str | Path, smiles_column: str, target_columns: Sequence[str], task: str) -> str:
    """The content key of a table's targets: the file's SHA-256 and how it is read."""
    return cache_key(file_hash(path), smiles_column, list(target_columns), task, version=TARGETS_FORMAT)


def targets_cache_path(
    path: str | Path, smiles_column: str, target_columns: Sequence[str], task: str, cache_dir: str | Path | None = None
) -> Path:
    """`<cache_dir>/molecules/<stem>-targets-<key>.arrow`: see `targets_key`."""
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    key = targets_key(path, smiles_column, target_columns, task)
    return folder / "molecules" / f"{Path(path).stem}-targets-{key}.arrow"


def open_targets(
    path: str | Path, smiles_column: str, target_columns: Sequence[str], task: str, cache_dir: str | Path | None = None
) -> TargetStore | None:
    """The cached targets of the table at `path` mapped, or None (with a warning if unusable): write them."""
    key = targets_key(path, smiles_column, target_columns, task)
    target = targets_cache_path(path, smiles_column, target_columns, task, cache_dir)
    table = open_table(target, version=TARGETS_FORMAT, key=key)
    return None if table is None else TargetStore(table)


def write_targets(
    table: MoleculeTable, smiles_column: str, task: str, cache_dir: str | Path | None = None
) -> TargetStore:
    """Write the targets of a read `table` to their cache file (replacing whatever is there); mapped."""
    target = targets_cache_path(table.path, smiles_column, table.target_columns, task, cache_dir)
    key = targets_key(table.path, smiles_column, table.target_columns, task)
    columns = {"targets": np.asarray(table.targets, np.float32), "line": np.asarray(table.rows, np.int64)}
    return TargetStore(MappedTable(write_table(target, columns, version=TARGETS_FORMAT, key=key)))


def cached_targets(
    table: MoleculeTable, smiles_column: str, task: str, cache_dir: str | Path | None = None
) -> TargetStore:
    """The targets of a read `table`: mapped from the cache, or written to it first."""
    found = open_targets(table.path, smiles_column, table.target_columns, task, cache_dir)
    return found if found is not None else write_targets(table, smiles_column, task, cache_dir)
