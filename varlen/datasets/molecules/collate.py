"""`MoleculeCollator`: molecule samples to one PyG ``Batch`` (graphs concatenated, nothing padded)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data

__all__ = ["MoleculeCollator"]


class MoleculeCollator:
    """Collate molecule samples into one PyG ``Batch`` (a class, so loader workers can pickle it).

    The batch holds the usual PyG layout (``x``, ``edge_index`` shifted by node offsets,
    ``edge_attr``, ``batch``, ``ptr``) plus ``y`` ``[B, T]`` (0 where missing), ``y_mask``
    ``[B, T]`` (keep convention: True = the target is observed, use it in loss and metrics) and
    ``index`` ``[B]`` (positions in the dataset), and ``descriptors`` ``[B, D]`` when the samples
    carry graph-level descriptors. Nothing is padded: graphs are concatenated.

    Args:
        follow_batch: attributes that also get a ``<name>_batch`` vector (PyG's ``follow_batch``).
    """

    def __init__(self, follow_batch: Sequence[str] | None = None) -> None:
        self.follow_batch = list(follow_batch) if follow_batch else None

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> Batch:
        graphs = [
            Data(
                x=torch.from_numpy(s["x"]),
                edge_index=torch.from_numpy(s["edge_index"]),
                edge_attr=torch.from_numpy(s["edge_attr"]),
                y=torch.from_numpy(np.asarray(s["y"], dtype=np.float32)).view(1, -1),
                num_nodes=len(s["x"]),
            )
            for s in samples
        ]
        batch = Batch.from_data_list(graphs, follow_batch=self.follow_batch)
        observed = ~torch.isnan(batch.y)
        batch.y = torch.where(observed, batch.y, torch.zeros_like(batch.y))
        batch.y_mask = observed
        # set after from_data_list: PyG would shift an "index" attribute by node offsets
        batch.index = torch.tensor([int(s["index"]) for s in samples], dtype=torch.long)
        if samples and "descriptors" in samples[0]:
            batch.descriptors = torch.from_numpy(np.stack([s["descriptors"] for s in samples]).astype(np.float32))
        return batch
