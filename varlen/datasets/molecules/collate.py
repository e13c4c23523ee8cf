"""`MoleculeCollator`: gathered molecule rows to one PyG ``Batch`` (graphs concatenated, nothing padded).

The batch is built straight from the arrays :meth:`MoleculeGraphs.__getitems__
<varlen.datasets.molecules.MoleculeGraphs.__getitems__>` gathered, not from one ``Data`` per
molecule: the collator names the fields and writes the bookkeeping ``Batch.from_data_list`` would
write (per-field slices and increments, atoms per graph, the number of graphs), so PyG layers,
``batch.to_data_list()`` and ``batch.get_example(i)`` work as on a batch PyG collated itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from varlen.datasets.molecules.rows import MoleculeRows

__all__ = ["GRAPH_FIELDS", "MoleculeCollator", "graph_batch"]

#: the batch's per-graph fields in their order, as ``Batch.from_data_list`` slices them (``descriptors`` only
#: when the dataset serves them); ``batch``, ``ptr`` and ``index`` follow
GRAPH_FIELDS = ("x", "edge_index", "edge_attr", "y", "y_mask", "descriptors")

#: PyG's batch class of ``Data`` graphs (what ``Batch.from_data_list`` returns), resolved once:
#: ``Batch(_base_cls=Data)`` builds a metaclass and reads a signature on every call (a third of
#: this collate's time)
_DATA_BATCH = type(Batch(_base_cls=Data))


def _empty_batch() -> Batch:
    """A new empty ``DataBatch``: what ``Batch(_base_cls=Data)`` makes, without resolving the class again."""
    batch = _DATA_BATCH.__new__(_DATA_BATCH)
    batch.__init__()
    return batch


def graph_batch(rows: MoleculeRows, follow_batch: Sequence[str] = ()) -> Batch:
    """The PyG ``Batch`` of ``rows``: tensor-equal to ``Batch.from_data_list`` over one ``Data`` per molecule.

    Each field of :data:`GRAPH_FIELDS` gets the slices (where each graph's part starts) and
    increments (what was added to each graph's part: its first atom for ``edge_index``, else 0)
    that ``Batch.get_example`` / ``to_data_list`` read to give a molecule back. ``index`` (the
    dataset positions) is set outside them, as before: PyG shifts any field whose name contains
    "index" by node counts when it batches, so a molecule from ``to_data_list`` has no ``index``
    that a later ``Batch.from_data_list`` could corrupt.

    Args:
        rows: the gathered molecules.
        follow_batch: fields that also get ``<name>_batch`` (graph of each element) and
            ``<name>_ptr`` (offsets), as PyG's ``follow_batch``.
    """
    count = len(rows)
    graphs, zeros = np.arange(count + 1), np.zeros(count, np.int64)
    fields = {  # name: (value, slices, increments), all numpy; one torch.from_numpy each below
        "x": (rows.x, rows.ptr, zeros),
        "edge_index": (rows.edge_index, rows.edge_ptr, rows.ptr[:-1]),
        "edge_attr": (rows.edge_attr, rows.edge_ptr, zeros),
        "y": (rows.y, graphs, zeros),
        "y_mask": (rows.y_mask, graphs, zeros),
        "descriptors": (rows.descriptors, graphs, zeros),
    }
    tensor = torch.from_numpy
    batch = _empty_batch()
    slice_dict, inc_dict = {}, {}
    for name, (value, slices, increments) in fields.items():
        if value is None:
            continue
        batch[name] = tensor(value)
        slice_dict[name], inc_dict[name] = tensor(slices.copy()), tensor(increments.copy())
        if name in follow_batch:
            batch[f"{name}_batch"] = tensor(np.repeat(graphs[:-1], np.diff(slices)))
            batch[f"{name}_ptr"] = tensor(slices.copy())
    batch.num_nodes = int(rows.ptr[-1])
    batch.batch = tensor(rows.batch)
    batch.ptr = tensor(rows.ptr)
    batch.index = tensor(rows.index)
    # what Batch.from_data_list records for get_example / to_data_list (PyG's collate writes the same)
    batch._num_nodes = rows.num_nodes.tolist()
    batch._num_graphs = count
    batch._slice_dict = slice_dict
    batch._inc_dict = inc_dict
    return batch


class MoleculeCollator:
    """Collate molecules into one PyG ``Batch`` (a class, so loader workers can pickle it).

    The batch holds the usual PyG layout (``x``, ``edge_index`` shifted by node offsets,
    ``edge_attr``, ``batch``, ``ptr``) plus ``y`` ``[B, T]`` (0 where missing), ``y_mask``
    ``[B, T]`` (keep convention: True = the target is observed, use it in loss and metrics) and
    ``index`` ``[B]`` (positions in the dataset), and ``descriptors`` ``[B, D]`` when the samples
    carry graph-level descriptors. Nothing is padded: graphs are concatenated.

    Args:
        follow_batch: fields (of :data:`GRAPH_FIELDS`) that also get a ``<name>_batch`` vector
            and ``<name>_ptr`` offsets (PyG's ``follow_batch``).

    Raises:
        ValueError: for a ``follow_batch`` name that is not a field of the batch.
    """

    def __init__(self, follow_batch: Sequence[str] | None = None) -> None:
        unknown = sorted(set(follow_batch or ()) - set(GRAPH_FIELDS))
        if unknown:
            raise ValueError(f"follow_batch {unknown}: not a field of the batch; fields: {list(GRAPH_FIELDS)}")
        self.follow_batch = list(follow_batch) if follow_batch else None

    def __call__(self, samples: MoleculeRows | Sequence[Mapping[str, Any]]) -> Batch:
        """A batch of :class:`MoleculeRows` (the loader's batched fetch) or of a list of ``dataset[i]`` samples."""
        rows = samples if isinstance(samples, MoleculeRows) else MoleculeRows.from_samples(samples)
        return graph_batch(rows, self.follow_batch or ())
