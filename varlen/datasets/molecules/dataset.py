"""`MoleculeGraphs`: one split of a table's molecules as graph samples over the shared store.

Samples are views into the store's concatenated arrays (nothing is copied per split), and the
per-sample sizes are computed once from the store's offsets. The loader's batched fetch
(``__getitems__``) gathers a whole batch as :class:`MoleculeRows` with index arithmetic on the
store's :class:`~varlen.batching.ragged.Ragged` rows: one read per array, node offsets added to
``edge_index`` in one operation, no work per molecule. The statistics helpers standardize
targets and descriptors with the train split's values only, so no test information leaks.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from varlen.batching.ragged import concat_ranges
from varlen.datasets.molecules.graphs import GraphStore
from varlen.datasets.molecules.rows import MoleculeRows

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
    """``descriptors`` standardised with (train) ``mean`` and ``std``, clipped to +-10, float32."""
    return np.clip((descriptors - mean) / std, -10.0, 10.0).astype(np.float32)


class MoleculeGraphs(Dataset):
    """Some molecules of a table as graph samples (one split, or the whole table).

    ``sample["index"]`` is the position within this dataset (what its sampler iterates).

    Args:
        store: the table's cached graphs.
        targets: float32 ``[N_table, T]`` targets of the whole table (NaN = missing), already
            standardized if wanted.
        positions: which table rows this dataset holds.
        rows: the file's line numbers of the table's rows (kept in samples for tracing).
        descriptors: float32 ``[N_table, D]`` graph-level features of the whole table (already
            standardized), or None to leave them out of the samples.

    Attributes:
        lengths: int64 ``[N]``, atoms + directed edges per molecule: what a batch's memory
            grows with; computed once from the store's offsets.
    """

    def __init__(
        self,
        store: GraphStore,
        targets: np.ndarray,
        positions: np.ndarray,
        rows: np.ndarray,
        descriptors: np.ndarray | None = None,
    ) -> None:
        self.store = store
        self.descriptors = None if descriptors is None else np.asarray(descriptors, dtype=np.float32)
        self.targets = np.asarray(targets, dtype=np.float32)
        self.positions = np.asarray(positions, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.num_nodes = store.num_nodes[self.positions]
        self.num_edges = store.num_edges[self.positions]
        self.lengths = self.num_nodes + self.num_edges

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One molecule: unpadded int64 ``x``, ``edge_index``, ``edge_attr``; float ``y [T]``, ``descriptors [D]``."""
        p = int(self.positions[i])
        s = self.store
        n0, n1 = s.node_ptr[p], s.node_ptr[p + 1]
        e0, e1 = s.edge_ptr[p], s.edge_ptr[p + 1]
        sample = {
            "index": int(i),
            "row": int(self.rows[p]),
            "x": s.x[n0:n1].astype(np.int64),
            "edge_index": s.edge_index[:, e0:e1],
            "edge_attr": s.edge_attr[e0:e1].astype(np.int64),
            "y": self.targets[p],
        }
        if self.descriptors is not None:
            sample["descriptors"] = self.descriptors[p]
        return sample

    def __getitems__(self, indices: Sequence[int]) -> MoleculeRows:
        """Several molecules at once, for the loader's batched fetch: one gather per array, no per-molecule work."""
        indices = np.asarray(indices, dtype=np.int64)
        p = self.positions[indices]
        atoms, bonds = self.store.atoms, self.store.bonds
        num_nodes, num_edges = atoms.lengths[p], bonds.lengths[p]
        nodes = concat_ranges(atoms.starts[p], num_nodes)
        edges = concat_ranges(bonds.starts[p], num_edges)
        # np.take: several times faster than fancy indexing for these small 2-D reads
        return MoleculeRows.join(
            x=np.take(atoms.values, nodes, axis=0).astype(np.int64),
            edge_index=np.take(self.store.edge_index, edges, axis=1),
            edge_attr=np.take(bonds.values, edges, axis=0).astype(np.int64),
            num_nodes=num_nodes,
            num_edges=num_edges,
            y=np.take(self.targets, p, axis=0),
            index=indices,
            descriptors=None if self.descriptors is None else np.take(self.descriptors, p, axis=0),
        )
