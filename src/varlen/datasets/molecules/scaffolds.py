"""Bemis-Murcko scaffolds of a table's molecules: computed only for a split that needs them, once per node.

RDKit's scaffold grows about cubically with a chain's length (a 4,000-atom alkane takes 90 s), so
the graph table does not hold it: a random split never computes one. A scaffold split asks
`cached_scaffolds`, which maps the table `<graphs>.scaffolds.arrow` beside the graph table
(keyed by the graph table's key: the same molecules, the same `max_atoms`) or builds it first,
from the canonical SMILES of the usable molecules only (a molecule over `max_atoms` never gets
here). Unusable molecules have the scaffold ''.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from varlen.datasets.molecules.features import scaffold_many
from varlen.datasets.molecules.graphs import GraphStore, map_chunks
from varlen.storage.cache import cache_key
from varlen.storage.tables import MappedTable, open_table, write_table

__all__ = ["SCAFFOLDS_FORMAT", "cached_scaffolds", "scaffolds_path"]

#: the layout of the scaffold table
SCAFFOLDS_FORMAT = "molecule-scaffolds-arrow-1"


def scaffolds_path(store: GraphStore) -> Path:
    """`<graph table>.scaffolds.arrow`, beside the graph table it is computed from."""
    return store.table.path.with_suffix(".scaffolds.arrow")


def _key(store: GraphStore) -> str:
    return cache_key(store.table.key, version=SCAFFOLDS_FORMAT)


def cached_scaffolds(store: GraphStore, num_proc: int = 1, chunk: int = 2000) -> np.ndarray:
    """str `[N]` the scaffold of each molecule of `store` ('' when acyclic or unusable), mapped
    from its table, built first (`num_proc` processes for a big table) when absent or unusable."""
    path, key = scaffolds_path(store), _key(store)
    table = open_table(path, version=SCAFFOLDS_FORMAT, key=key)
    if table is None:
        scaffolds = np.empty(len(store), dtype=object)
        start = 0
        for part, found in map_chunks(scaffold_many, store.canonical.tolist(), num_proc, chunk):
            scaffolds[start : start + len(part)] = found
            start += len(part)
        table = MappedTable(write_table(path, {"scaffold": scaffolds}, version=SCAFFOLDS_FORMAT, key=key))
    return table.numpy("scaffold")
