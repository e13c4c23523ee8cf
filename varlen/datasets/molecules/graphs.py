"""All molecules of a table as concatenated graph arrays, featurised once and cached as ``.npz``.

The store holds every row's graph as a few concatenated arrays plus offsets (like PyG's
``InMemoryDataset``), so per-sample sizes (atoms + directed bonds) are one vectorised subtraction
and never need a pass over the samples. The cache (:func:`cached_graphs`) is keyed by the file's
SHA-256, the SMILES column and :data:`~.features.FEATURIZER_VERSION` (an edited file or a new
featuriser never reads a stale cache), written atomically, and holds plain arrays only (scaffolds
as a numpy str array, featurisation errors as rows plus messages): reading it runs no code. A
cache that is cut short or from another format is rebuilt with a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path

import numpy as np

import varlen.datasets.molecules.features as features  # FEATURIZER_VERSION read when a key is made
from varlen import notices
from varlen.batching.ragged import Ragged
from varlen.cache import cache_key, default_cache_dir, file_hash, load_arrays, save_arrays
from varlen.datasets.molecules.features import ATOM_FEATURES, BOND_FEATURES, NUM_DESCRIPTORS, Graph, featurize_many
from varlen.datasets.molecules.readers import MoleculeTable
from varlen.report import DataReport

__all__ = ["CACHE_FORMAT", "GraphStore", "cached_graphs", "featurize_all", "graph_cache_path", "usable_positions"]

#: the layout of the cache file; the featuriser's own version is part of the key
CACHE_FORMAT = "molecule-graphs-npz-1"


@dataclass
class GraphStore:
    """All molecules of a table as concatenated arrays with offsets (what is cached on disk).

    Attributes:
        x: int16 ``[total_atoms, 8]`` atom features (shared vocabulary).
        edge_index: int64 ``[2, total_edges]``, node indices local to each molecule.
        edge_attr: int16 ``[total_edges, 4]`` bond features (shared vocabulary).
        node_ptr / edge_ptr: int64 ``[N + 1]`` offsets of each molecule's atoms / edges.
        scaffolds: str ``[N]`` Bemis-Murcko scaffold SMILES ('' when acyclic or invalid).
        descriptors: float32 ``[N, NUM_DESCRIPTORS]`` RDKit descriptors (zeros when invalid).
        error_rows: int64 positions (table rows) RDKit could not use; their graphs are empty.
        error_messages: str, why each of ``error_rows`` failed (``"<reason>[: <detail>]"``).

    :attr:`atoms` and :attr:`bonds` are the same arrays as :class:`~varlen.batching.ragged.Ragged` rows
    (one row per molecule), which is how a batch is gathered.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    scaffolds: np.ndarray
    descriptors: np.ndarray
    error_rows: np.ndarray
    error_messages: np.ndarray

    def __len__(self) -> int:
        return len(self.node_ptr) - 1

    @property
    def num_nodes(self) -> np.ndarray:
        return np.diff(self.node_ptr)

    @property
    def num_edges(self) -> np.ndarray:
        return np.diff(self.edge_ptr)

    @cached_property
    def atoms(self) -> Ragged:
        """Atoms per molecule: ``x`` split by ``node_ptr``."""
        return Ragged.from_offsets(self.x, self.node_ptr)

    @cached_property
    def bonds(self) -> Ragged:
        """Directed edges per molecule: ``edge_attr`` split by ``edge_ptr``; ``edge_index[:, i]`` shares its rows."""
        return Ragged.from_offsets(self.edge_attr, self.edge_ptr)

    @property
    def valid(self) -> np.ndarray:
        """bool ``[N]``: False where featurisation failed."""
        valid = np.ones(len(self), dtype=bool)
        valid[self.error_rows] = False
        return valid

    @classmethod
    def from_results(cls, results: Sequence[Graph | str]) -> GraphStore:
        """Concatenate :func:`~.features.featurize_smiles` results (a string is a failure: an empty graph)."""
        empty: Graph = (
            np.zeros((0, len(ATOM_FEATURES)), np.int16),
            np.zeros((2, 0), np.int64),
            np.zeros((0, len(BOND_FEATURES)), np.int16),
            "",
            np.zeros(NUM_DESCRIPTORS, np.float32),
        )
        failed = [(i, r) for i, r in enumerate(results) if isinstance(r, str)]
        graphs = [empty if isinstance(r, str) else r for r in results]
        # column by column, the empty graph first (so that an empty table concatenates too)
        xs, edges, attrs, scaffolds, descriptors = zip(empty, *graphs, strict=True)
        return cls(
            x=np.concatenate(xs),
            edge_index=np.concatenate(edges, axis=1),
            edge_attr=np.concatenate(attrs),
            node_ptr=np.cumsum([0] + [len(x) for x in xs[1:]]).astype(np.int64),
            edge_ptr=np.cumsum([0] + [e.shape[1] for e in edges[1:]]).astype(np.int64),
            scaffolds=np.asarray(scaffolds[1:], dtype=str),
            descriptors=np.stack(descriptors)[1:].astype(np.float32),
            error_rows=np.asarray([i for i, _ in failed], dtype=np.int64),
            error_messages=np.asarray([m for _, m in failed], dtype=str),
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> GraphStore | None:
        """The store of a loaded cache, or None when an array is missing or the offsets disagree."""
        names = [f.name for f in fields(cls)]
        if any(name not in arrays for name in names):
            return None
        store = cls(**{name: arrays[name] for name in names})
        n = len(store)
        consistent = (
            n >= 0
            and store.edge_ptr.shape == (n + 1,)
            and len(store.scaffolds) == len(store.descriptors) == n
            and int(store.node_ptr[-1]) == len(store.x)
            and int(store.edge_ptr[-1]) == store.edge_index.shape[1] == len(store.edge_attr)
            and len(store.error_rows) == len(store.error_messages)
            and bool(np.all((store.error_rows >= 0) & (store.error_rows < n)))
        )
        return store if consistent else None


def featurize_all(smiles: Sequence[str], num_proc: int = 1, chunk: int = 2000) -> GraphStore:
    """Featurise every SMILES, in ``num_proc`` processes when the table is big enough to pay.

    Process start-up and pickling cost more than featurising a few thousand small molecules,
    so tables under ``2 * chunk`` molecules are done in this process.
    """
    smiles = list(smiles)
    if num_proc > 1 and len(smiles) >= 2 * chunk:
        parts = [smiles[i : i + chunk] for i in range(0, len(smiles), chunk)]
        with ProcessPoolExecutor(max_workers=num_proc) as pool:
            results = [r for part in pool.map(featurize_many, parts) for r in part]
    else:
        results = featurize_many(smiles)
    return GraphStore.from_results(results)


def graph_cache_path(path: str | Path, smiles_column: str, cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>/molecules/<stem>-<key>.npz``, keyed by the file's content, the column and the featuriser."""
    key = cache_key(file_hash(path), smiles_column, features.FEATURIZER_VERSION, version=CACHE_FORMAT)
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return folder / "molecules" / f"{Path(path).stem}-{key}.npz"


def cached_graphs(
    table: MoleculeTable, smiles_column: str, cache_dir: str | Path | None = None, num_proc: int = 1
) -> tuple[GraphStore, Path]:
    """The graphs of ``table``: read from the cache, or featurised and cached when it is absent or unusable.

    Returns:
        The graph store and the cache file's path.
    """
    target = graph_cache_path(table.path, smiles_column, cache_dir)
    arrays = load_arrays(target, CACHE_FORMAT)  # None (with a warning if unreadable): build it
    store = GraphStore.from_arrays(arrays) if arrays is not None else None
    if arrays is not None and (store is None or len(store) != len(table.smiles)):
        notices.warn(f"cache {target} does not match {table.path}; building it again")
        store = None
    if store is None:
        store = featurize_all(table.smiles, num_proc=num_proc)
        save_arrays(target, store.to_arrays(), CACHE_FORMAT)
    return store, target


def usable_positions(table: MoleculeTable, store: GraphStore, report: DataReport | None = None) -> np.ndarray:
    """Positions of the molecules RDKit could use; each other one goes through ``report.bad``.

    The report's reason is the failure's kind (``"RDKit could not parse the SMILES"``...), so
    counts group by kind; the place names the file, line and SMILES, with RDKit's detail.

    Raises:
        DataError: at the first unusable molecule, when ``report`` raises (the default).
    """
    report = report if report is not None else DataReport("raise")
    for position, message in zip(store.error_rows.tolist(), store.error_messages.tolist(), strict=True):
        reason, _, detail = str(message).partition(": ")
        where = f"{table.path}, line {table.rows[position]} {table.smiles[position]!r}"
        report.bad(f"{where} ({detail})" if detail else where, reason, item="molecule")
    return np.flatnonzero(store.valid)
