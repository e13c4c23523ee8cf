"""`MoleculeGraphs`: one split of a table's molecules as graph samples over the mapped stores.

A split holds its positions in the table and the two mapped stores (graphs, targets): nothing
of the table is copied per split or per process, and a dataset pickles as the stores' paths plus
its positions (a spawned loader worker maps the files again). The loader's batched fetch
(`__getitems__`) gathers a whole batch as `MoleculeRows` with index arithmetic on the
store's `Ragged` rows: one read per array, node offsets added to
`edge_index` in one operation, no work per molecule. The statistics helpers standardize
targets and descriptors with the train split's values only, so no test information leaks;
descriptors are standardised per batch, on the gathered copy (the store is read-only).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from varlen.batching.ragged import concat_ranges
from varlen.datasets.molecules.graphs import GraphStore
from varlen.datasets.molecules.rows import MoleculeRows
from varlen.datasets.molecules.targets import TargetStore

__all__ = ["MoleculeGraphs", "descriptor_statistics", "standardized_descriptors", "target_statistics"]


def target_statistics(targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std per task over the observed (non-NaN) targets; a task without spread gets std 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a task with no observed train target: mean 0, std 1
        mean, std = np.nanmean(targets, axis=0), np.nanstd(targets, axis=0)
    mean = np.nan_to_num(mean, nan=0.0).astype(np.float32)
    return mean, np.where(np.isfinite(std) & (std > 0), std, 1.0).astype(np.float32)


def descriptor_statistics(descriptors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of each descriptor (over the train split's rows); a constant one gets std 1."""
    mean, std = descriptors.mean(axis=0), descriptors.std(axis=0)
    return mean.astype(np.float32), np.where(std > 0, std, 1.0).astype(np.float32)


def standardized_descriptors(descriptors: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """`descriptors` standardised with (train) `mean` and `std`, clipped to +-10, float32."""
    return np.clip((descriptors - mean) / std, -10.0, 10.0).astype(np.float32)


class MoleculeGraphs(Dataset):
    """Some molecules of a table as graph samples (one split, or the whole table).

    `sample["index"]` is the position within this dataset (what its sampler iterates).

    Args:
        store: the table's graphs (mapped).
        targets: the table's targets and line numbers (mapped): raw targets, NaN = missing.
        positions: which table rows this dataset holds.
        descriptor_stats: (mean, std) float32 `[D]` the graph-level descriptors are
            standardised with (train statistics), or None to leave them out of the samples.

    Attributes:
        lengths: int64 `[N]`, atoms + directed edges per molecule: what a batch's memory
            grows with; computed from the stored counts when first asked (by the sampler, in
            the main process: a loader worker never computes it).
    """

    def __init__(
        self,
        store: GraphStore,
        targets: TargetStore,
        positions: np.ndarray,
        descriptor_stats: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.store = store
        self.target_store = targets
        self.positions = np.asarray(positions, dtype=np.int64)
        self.descriptor_stats = descriptor_stats

    def __getstate__(self) -> dict[str, Any]:
        """The stores (their paths), the positions and the statistics: no array of the table."""
        return {
            "store": self.store,
            "targets": self.target_store,
            "positions": self.positions,
            "descriptor_stats": self.descriptor_stats,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    @property
    def targets(self) -> np.ndarray:
        """float32 `[N_table, T]` raw targets of the whole table (a read-only view)."""
        return self.target_store.targets

    @property
    def rows(self) -> np.ndarray:
        """int64 `[N_table]` the file's line of each table row (a read-only view)."""
        return self.target_store.lines

    @cached_property
    def num_nodes(self) -> np.ndarray:
        return self.store.num_nodes[self.positions]

    @cached_property
    def num_edges(self) -> np.ndarray:
        return self.store.num_edges[self.positions]

    @cached_property
    def lengths(self) -> np.ndarray:
        return self.num_nodes + self.num_edges

    def __len__(self) -> int:
        return len(self.positions)

    def _descriptors(self, positions: np.ndarray | int) -> np.ndarray:
        """The standardised descriptors of table `positions` (a new array)."""
        return standardized_descriptors(np.take(self.store.descriptors, positions, axis=0), *self.descriptor_stats)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One molecule: unpadded int64 `x`, `edge_index`, `edge_attr`; float `y [T]`, `descriptors [D]`."""
        p = int(self.positions[i])
        atoms, bonds, edges = self.store.atoms, self.store.bonds, self.store.edges
        n0, e0 = atoms.starts[p], bonds.starts[p]
        n1, e1 = n0 + atoms.lengths[p], e0 + bonds.lengths[p]
        sample = {
            "index": int(i),
            "row": int(self.rows[p]),
            "x": atoms.values[n0:n1].astype(np.int64),
            "edge_index": np.ascontiguousarray(edges.values[e0:e1].T, dtype=np.int64),
            "edge_attr": bonds.values[e0:e1].astype(np.int64),
            "y": self.targets[p].copy(),
        }
        if self.descriptor_stats is not None:
            sample["descriptors"] = self._descriptors(p)
        return sample

    def __getitems__(self, indices: Sequence[int]) -> MoleculeRows:
        """Several molecules at once, for the loader's batched fetch: one gather per array, no per-molecule work."""
        indices = np.asarray(indices, dtype=np.int64)
        p = self.positions[indices]
        atoms, bonds = self.store.atoms, self.store.bonds
        num_nodes, num_edges = atoms.lengths[p], bonds.lengths[p]
        nodes = concat_ranges(atoms.starts[p], num_nodes)
        edges = concat_ranges(bonds.starts[p], num_edges)  # the atom pairs share the bonds' rows
        pairs = np.take(self.store.edges.values, edges, axis=0)  # [e, 2] local atoms
        # np.take: several times faster than fancy indexing for these small 2-D reads
        return MoleculeRows.join(
            x=np.take(atoms.values, nodes, axis=0).astype(np.int64),
            edge_index=np.ascontiguousarray(pairs.T, dtype=np.int64),
            edge_attr=np.take(bonds.values, edges, axis=0).astype(np.int64),
            num_nodes=num_nodes,
            num_edges=num_edges,
            y=np.take(self.targets, p, axis=0),
            index=indices,
            descriptors=None if self.descriptor_stats is None else self._descriptors(p),
        )
