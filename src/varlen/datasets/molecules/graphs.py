"""All molecules of a table as one Arrow table of graphs: featurised once per node, mapped by every process.

The table (`CACHE_FORMAT`, written through `varlen.storage.tables`) holds one row per table
row: its SMILES, its atoms (`[n, 8]` int16 categories) and directed bonds (`[e, 4]` int16
categories, and `[e, 2]` atom pairs local to the molecule) as list columns, the atom and edge
counts, the canonical SMILES (the molecule's identity: duplicates share it), the RDKit
descriptors, and `error` (why the molecule cannot be used: RDKit rejects it, or it has more
than `max_atoms` atoms; '' when it can, else its graph is empty). It is keyed by the file's
SHA-256, the SMILES column, `max_atoms` and `FEATURIZER_VERSION` (an edited
file or a new featuriser never reads a stale cache), built a chunk of molecules at a time (memory
holds one chunk, never the table's graphs) and written atomically; a file cut short, of another
format, built from other inputs, whose data changed since, or with a bond whose atom is not its
molecule's (PyG would join it to another molecule, or index past the batch) is rebuilt with a
warning (`varlen.storage.tables.open_table`). Scaffolds are not in it: `.scaffolds` computes
them for the splits that need them.

`GraphStore` maps it: every array is a read-only view of the file, so per-sample sizes are
views too, and the store pickles as its path (a spawned worker maps the file again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import varlen.datasets.molecules.features as features  # FEATURIZER_VERSION read when a key is made
from varlen.datasets.molecules.features import (
    ATOM_FEATURES,
    BOND_FEATURES,
    MAX_ATOMS,
    NUM_DESCRIPTORS,
    Graph,
    featurize_many,
)
from varlen.datasets.molecules.readers import MoleculeTable
from varlen.errors import DataError
from varlen.prepare.report import DataReport
from varlen.storage.cache import cache_key, default_cache_dir, file_hash
from varlen.storage.tables import MappedTable, TableBuilder, first_outside, open_table

__all__ = [
    "CACHE_FORMAT",
    "COLUMNS",
    "GraphStore",
    "build_graphs",
    "cached_graphs",
    "edge_problem",
    "featurize_all",
    "graph_cache_path",
    "graph_key",
    "map_chunks",
    "open_graphs",
    "shown_smiles",
    "usable_positions",
]

#: the layout of the cache table; the featuriser's own version is part of the key
CACHE_FORMAT = "molecule-graphs-arrow-2"
#: the table's columns
COLUMNS = ("smiles", "atoms", "bonds", "edges", "num_atoms", "num_edges", "canonical", "descriptors", "error")
#: ragged columns: (dtype, trailing shape). Atom pairs are int32: local to one molecule, half of int64's bytes
RAGGED = {
    "atoms": (np.int16, (len(ATOM_FEATURES),)),
    "bonds": (np.int16, (len(BOND_FEATURES),)),
    "edges": (np.int32, (2,)),
}
#: what a molecule RDKit could not use stores: an empty graph
EMPTY: Graph = (
    np.zeros((0, len(ATOM_FEATURES)), np.int16),
    np.zeros((2, 0), np.int64),
    np.zeros((0, len(BOND_FEATURES)), np.int16),
    "",
    np.zeros(NUM_DESCRIPTORS, np.float32),
)


class GraphStore:
    """A table's graphs, mapped: every array is a read-only view of the cache file.

    Pickles as the file's path: a process that receives it maps the file again.

    Attributes:
        table: the mapped `MappedTable`.
        atoms: `Ragged` int16 `[atoms, 8]` atom categories per molecule.
        bonds: int16 `[edges, 4]` bond categories per molecule (both directions of each bond).
        edges: int32 `[edges, 2]` (source, target) atoms of each directed bond, local to its
            molecule; same rows as `bonds`.
        num_nodes / num_edges: int64 `[N]` atoms / directed bonds per molecule (stored columns).
        descriptors: float32 `[N, NUM_DESCRIPTORS]` RDKit descriptors (zeros when invalid).
    """

    def __init__(self, table: MappedTable) -> None:
        self.table = table
        self.num_nodes = table.numpy("num_atoms")
        self.num_edges = table.numpy("num_edges")
        self.atoms = table.ragged("atoms", self.num_nodes)
        self.bonds = table.ragged("bonds", self.num_edges)
        self.edges = table.ragged("edges", self.num_edges)
        self.descriptors = table.numpy("descriptors")

    def __reduce__(self) -> tuple[Any, ...]:
        return (GraphStore, (self.table,))

    def __len__(self) -> int:
        return len(self.table)

    @cached_property
    def canonical(self) -> np.ndarray:
        """str `[N]` canonical SMILES ('' where unusable): a copy, for splitting and finding duplicates."""
        return self.table.numpy("canonical")

    @cached_property
    def smiles(self) -> list[str]:
        """The SMILES of every row (a copy, made when asked)."""
        return self.table.batch.column("smiles").to_pylist()

    @cached_property
    def error_rows(self) -> np.ndarray:
        """int64 positions RDKit could not use (their graphs are empty)."""
        return np.flatnonzero(pc.binary_length(self.table.batch.column("error")).to_numpy()).astype(np.int64)

    def errors(self) -> tuple[np.ndarray, list[str], list[str]]:
        """`error_rows`, why each failed (`"<reason>[: <detail>]"`) and its SMILES."""
        rows = pa.array(self.error_rows)
        column = self.table.batch.column
        return self.error_rows, column("error").take(rows).to_pylist(), column("smiles").take(rows).to_pylist()

    @property
    def valid(self) -> np.ndarray:
        """bool `[N]`: False where featurisation failed."""
        valid = np.ones(len(self), dtype=bool)
        valid[self.error_rows] = False
        return valid


def map_chunks(
    function: Callable[[Sequence[str]], list[Any]], smiles: Sequence[str], num_proc: int, chunk: int
) -> Iterator[tuple[Sequence[str], list[Any]]]:
    """Each chunk of `smiles` with `function` of it, in order (in `num_proc` processes if it pays:
    `function` must then pickle, a top-level function or a `partial` of one)."""
    parts = [smiles[i : i + chunk] for i in range(0, len(smiles), chunk)]
    if num_proc > 1 and len(smiles) >= 2 * chunk:
        with ProcessPoolExecutor(max_workers=num_proc) as pool:
            yield from zip(parts, pool.map(function, parts), strict=True)
    else:
        yield from ((part, function(part)) for part in parts)


def _strings(values: Sequence[str]) -> np.ndarray:
    """An object array of `str`: Arrow writes it as a string column, without numpy's fixed-width padding."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def featurize_all(
    smiles: Sequence[str],
    path: str | Path,
    *,
    key: str,
    num_proc: int = 1,
    chunk: int = 2000,
    max_atoms: int | None = MAX_ATOMS,
) -> GraphStore:
    """Featurise every SMILES into the graph table at `path` (keyed `key`), a chunk at a time; mapped.

    A molecule over `max_atoms` atoms (None: no limit) is refused unfeaturised (its `error`: see
    `featurize_smiles`).
    Process start-up and pickling cost more than featurising a few thousand small molecules,
    so tables under `2 * chunk` molecules are done in this process.

    Raises:
        DataError: the folder cannot be written or fills up (no scratch is left), or a bond's atom is
            not its molecule's (`edge_problem`).
    """
    smiles = list(smiles)
    featurize = partial(featurize_many, max_atoms=max_atoms)
    with TableBuilder(path, version=CACHE_FORMAT, key=key, ragged=RAGGED, rows=len(smiles)) as builder:
        for part, results in map_chunks(featurize, smiles, num_proc, chunk):
            graphs = [EMPTY if isinstance(r, str) else r for r in results]
            builder.append(
                smiles=_strings(part),
                atoms=[g[0] for g in graphs],
                bonds=[g[2] for g in graphs],
                edges=[g[1].T for g in graphs],
                num_atoms=np.fromiter((len(g[0]) for g in graphs), np.int64, len(graphs)),
                num_edges=np.fromiter((g[1].shape[1] for g in graphs), np.int64, len(graphs)),
                canonical=_strings([g[3] for g in graphs]),
                descriptors=np.stack([g[4] for g in graphs]).astype(np.float32),
                error=_strings([r if isinstance(r, str) else "" for r in results]),
            )
        store = GraphStore(MappedTable(builder.finish()))
    if (problem := edge_problem(store.table)) is not None:
        raise DataError(f"{path}: featurising wrote {problem}")
    return store


def edge_problem(table: MappedTable) -> str | None:
    """What is wrong with a graph table's bonds, or None: the first molecule with a bond whose atom is
    not one of its own (local atom numbers: `0 <= atom < num_atoms`), or whose counts disagree with
    its lists (`ragged` raises then). One vectorised pass over the edges."""
    num_atoms, num_edges = table.numpy("num_atoms"), table.numpy("num_edges")
    edges = table.ragged("edges", num_edges)
    table.ragged("atoms", num_atoms)
    outside = first_outside(edges.values, 0, np.repeat(num_atoms, num_edges))
    if outside is None:
        return None
    row = int(np.searchsorted(edges.starts + num_edges, outside, side="right"))
    pair = edges.values[outside].tolist()
    return f"a bond between atoms {pair} in row {row}, which has {int(num_atoms[row])} atoms"


def graph_key(path: str | Path, smiles_column: str, max_atoms: int | None = MAX_ATOMS) -> str:
    """The content key of a table's graphs: the file's SHA-256, the column, `max_atoms` and the
    featuriser's version."""
    return cache_key(file_hash(path), smiles_column, max_atoms, features.FEATURIZER_VERSION, version=CACHE_FORMAT)


def graph_cache_path(
    path: str | Path, smiles_column: str, cache_dir: str | Path | None = None, max_atoms: int | None = MAX_ATOMS
) -> Path:
    """`<cache_dir>/molecules/<stem>-<key>.arrow`: see `graph_key`."""
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return folder / "molecules" / f"{Path(path).stem}-{graph_key(path, smiles_column, max_atoms)}.arrow"


def open_graphs(
    path: str | Path, smiles_column: str, cache_dir: str | Path | None = None, max_atoms: int | None = MAX_ATOMS
) -> GraphStore | None:
    """The cached graphs of the table at `path` mapped, or None (with a warning if unusable): build them."""
    target = graph_cache_path(path, smiles_column, cache_dir, max_atoms)
    key = graph_key(path, smiles_column, max_atoms)
    table = open_table(target, version=CACHE_FORMAT, key=key, check=_graph_problem)
    return None if table is None else GraphStore(table)


def _graph_problem(table: MappedTable) -> str | None:
    """What makes a mapped graph table unusable: other columns, or a bond outside its molecule."""
    if sorted(table.columns) != sorted(COLUMNS):
        return f"holding columns {table.columns}, expected {list(COLUMNS)}"
    problem = edge_problem(table)
    return None if problem is None else f"holding {problem}"


def build_graphs(
    table: MoleculeTable,
    smiles_column: str,
    cache_dir: str | Path | None = None,
    num_proc: int = 1,
    max_atoms: int | None = MAX_ATOMS,
) -> GraphStore:
    """Featurise a read `table` into its cache file (replacing whatever is there); mapped."""
    target = graph_cache_path(table.path, smiles_column, cache_dir, max_atoms)
    key = graph_key(table.path, smiles_column, max_atoms)
    return featurize_all(table.smiles, target, key=key, num_proc=num_proc, max_atoms=max_atoms)


def cached_graphs(
    table: MoleculeTable,
    smiles_column: str,
    cache_dir: str | Path | None = None,
    num_proc: int = 1,
    max_atoms: int | None = MAX_ATOMS,
) -> tuple[GraphStore, Path]:
    """The graphs of `table`: mapped from the cache, or featurised into it when it is absent or unusable.

    Returns:
        The graph store and the cache file's path.
    """
    store = open_graphs(table.path, smiles_column, cache_dir, max_atoms)
    if store is None:
        store = build_graphs(table, smiles_column, cache_dir, num_proc, max_atoms)
    return store, graph_cache_path(table.path, smiles_column, cache_dir, max_atoms)


def shown_smiles(smiles: str, limit: int = 80) -> str:
    """`repr(smiles)`, a long one cut to its first characters and its length (messages stay readable)."""
    if len(smiles) <= limit:
        return repr(smiles)
    return f"{smiles[: limit - 20]!r}... ({len(smiles):,} characters)"


def usable_positions(
    path: str | Path, store: GraphStore, lines: np.ndarray, report: DataReport | None = None
) -> np.ndarray:
    """Positions of the molecules RDKit could use; each other one goes through `report.bad`.

    The report's reason is the failure's kind (`"RDKit could not parse the SMILES"`, `"more
    atoms than max_atoms"`...), so counts group by kind; the place names the file (`path`), the
    line (`lines`: the file's line of each row) and the SMILES (a long one shortened), with the
    detail (RDKit's, or the atom count).

    Raises:
        DataError: at the first unusable molecule, when `report` raises (the default).
    """
    report = report if report is not None else DataReport("raise")
    for position, message, smiles in zip(*store.errors(), strict=True):
        reason, _, detail = message.partition(": ")
        where = f"{path}, line {lines[position]} {shown_smiles(smiles)}"
        report.bad(f"{where} ({detail})" if detail else where, reason, item="molecule")
    return np.flatnonzero(store.valid)
