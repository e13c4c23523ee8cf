"""`MoleculeRows`: a batch of molecules as the arrays of one graph, before they become a PyG `Batch`.

`MoleculeGraphs.__getitems__`
gathers these from the store at once; `MoleculeRows.from_samples` joins single samples (a
collate called on a list). Both end in `MoleculeRows.join`, which derives everything the
batch needs from the per-molecule counts with a few numpy operations on the whole batch: the
node and edge offsets, the graph of each atom, the keep mask of the targets, and the node
offsets added to `edge_index` in one operation. Nothing here loops over molecules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MoleculeRows"]


def _offsets(counts: np.ndarray) -> np.ndarray:
    """int64 `[B + 1]` running total of `counts` from 0."""
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


@dataclass
class MoleculeRows:
    """Several molecules' graphs back to back, numbered as one graph: what the collate names.

    Attributes:
        x: int64 `[n, 8]` atom features of all molecules, concatenated.
        edge_index: int64 `[2, e]` directed bonds, in the batch's node numbering.
        edge_attr: int64 `[e, 4]` bond features.
        num_nodes / num_edges: int64 `[B]` atoms / directed bonds of each molecule.
        ptr / edge_ptr: int64 `[B + 1]` offsets of each molecule's atoms / edges.
        batch: int64 `[n]` molecule of each atom.
        y: float32 `[B, T]` targets, 0 where missing.
        y_mask: bool `[B, T]`, True where the target is observed (keep convention).
        index: int64 `[B]` positions in the dataset.
        descriptors: float32 `[B, D]` graph-level features, or None.
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    num_nodes: np.ndarray
    num_edges: np.ndarray
    ptr: np.ndarray
    edge_ptr: np.ndarray
    batch: np.ndarray
    y: np.ndarray
    y_mask: np.ndarray
    index: np.ndarray
    descriptors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def join(
        cls,
        x: np.ndarray,
        edge_index: np.ndarray,
        edge_attr: np.ndarray,
        num_nodes: np.ndarray,
        num_edges: np.ndarray,
        y: np.ndarray,
        index: np.ndarray,
        descriptors: np.ndarray | None = None,
    ) -> MoleculeRows:
        """Rows from concatenated molecules whose `edge_index` is local to each molecule, and NaN targets.

        `y` is overwritten (0 where NaN): pass a copy (a gather is one).
        """
        ptr = _offsets(num_nodes)
        y_mask = ~np.isnan(y)
        y[~y_mask] = 0.0
        return cls(
            x=x,
            edge_index=edge_index + np.repeat(ptr[:-1], num_edges),  # each edge's molecule's first atom
            edge_attr=edge_attr,
            num_nodes=num_nodes,
            num_edges=num_edges,
            ptr=ptr,
            edge_ptr=_offsets(num_edges),
            batch=np.repeat(np.arange(len(num_nodes)), num_nodes),
            y=y,
            y_mask=y_mask,
            index=index,
            descriptors=descriptors,
        )

    @classmethod
    def concat(cls, parts: Sequence[MoleculeRows]) -> MoleculeRows:
        """Several fetched batches as one (a batch of a mixture drawn on several sources): the
        graphs back to back, each part's atoms renumbered after the parts before it."""
        nodes = _offsets(np.array([len(p.x) for p in parts]))
        graphs = _offsets(np.array([len(p) for p in parts]))
        num_nodes = np.concatenate([p.num_nodes for p in parts])
        num_edges = np.concatenate([p.num_edges for p in parts])
        with_descriptors = parts[0].descriptors is not None
        return cls(
            x=np.concatenate([p.x for p in parts]),
            edge_index=np.concatenate([p.edge_index + first for p, first in zip(parts, nodes, strict=False)], axis=1),
            edge_attr=np.concatenate([p.edge_attr for p in parts]),
            num_nodes=num_nodes,
            num_edges=num_edges,
            ptr=_offsets(num_nodes),
            edge_ptr=_offsets(num_edges),
            batch=np.concatenate([p.batch + first for p, first in zip(parts, graphs, strict=False)]),
            y=np.concatenate([p.y for p in parts]),
            y_mask=np.concatenate([p.y_mask for p in parts]),
            index=np.concatenate([p.index for p in parts]),
            descriptors=np.concatenate([p.descriptors for p in parts]) if with_descriptors else None,
        )

    @classmethod
    def from_samples(cls, samples: Sequence[Mapping[str, Any]]) -> MoleculeRows:
        """Join single samples (`dataset[i]` dicts): the path for a collate called on a list."""
        count = len(samples)
        return cls.join(
            x=np.concatenate([s["x"] for s in samples]).astype(np.int64, copy=False),
            edge_index=np.concatenate([s["edge_index"] for s in samples], axis=1).astype(np.int64, copy=False),
            edge_attr=np.concatenate([s["edge_attr"] for s in samples]).astype(np.int64, copy=False),
            num_nodes=np.fromiter((len(s["x"]) for s in samples), np.int64, count),
            num_edges=np.fromiter((s["edge_index"].shape[1] for s in samples), np.int64, count),
            y=np.stack([np.asarray(s["y"], dtype=np.float32) for s in samples]),
            index=np.fromiter((s["index"] for s in samples), np.int64, count),
            descriptors=(
                np.stack([s["descriptors"] for s in samples]).astype(np.float32, copy=False)
                if "descriptors" in samples[0]
                else None
            ),
        )
