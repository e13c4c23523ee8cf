"""`MoleculeCollator`: gathered molecule rows to one PyG `Batch` (graphs concatenated, nothing padded).

The batch is built straight from the arrays `MoleculeGraphs.__getitems__` gathered, not from one `Data` per
molecule: the collator names the fields and writes the bookkeeping `Batch.from_data_list` would
write (per-field slices and increments, atoms per graph, the number of graphs), so PyG layers,
`batch.to_data_list()` and `batch.get_example(i)` work as on a batch PyG collated itself.

That bookkeeping is PyG's private API (`_slice_dict`, `_inc_dict`, `_num_graphs`,
`_num_nodes`), which any release may change: pyproject caps torch-geometric below the next
minor release after the newest tested (`TESTED_TORCH_GEOMETRIC`), and
`check_torch_geometric` (run on the first batch, and by the test suite) compares what
`Batch.from_data_list` writes for two small graphs with what `graph_batch` writes, and
refuses a PyG that differs with a message naming the attribute, instead of batches whose
`get_example` is wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from varlen.datasets.molecules.rows import MoleculeRows

__all__ = ["GRAPH_FIELDS", "TESTED_TORCH_GEOMETRIC", "MoleculeCollator", "check_torch_geometric", "graph_batch"]

#: torch-geometric releases whose private `Batch` bookkeeping `graph_batch` writes was tested against
TESTED_TORCH_GEOMETRIC = ("2.5", "2.6", "2.7", "2.8")

#: the batch's per-graph fields in their order, as `Batch.from_data_list` slices them (`descriptors` only
#: when the dataset serves them); `batch`, `ptr` and `index` follow
GRAPH_FIELDS = ("x", "edge_index", "edge_attr", "y", "y_mask", "descriptors")

#: PyG's batch class of `Data` graphs (what `Batch.from_data_list` returns), resolved once:
#: `Batch(_base_cls=Data)` builds a metaclass and reads a signature on every call (a third of
#: this collate's time)
_DATA_BATCH = type(Batch(_base_cls=Data))


def _empty_batch() -> Batch:
    """A new empty `DataBatch`: what `Batch(_base_cls=Data)` makes, without resolving the class again."""
    batch = _DATA_BATCH.__new__(_DATA_BATCH)
    batch.__init__()
    return batch


def _plain(value: Any) -> Any:
    """Tensors as lists, recursively in dicts and lists: PyG's bookkeeping in a comparable form."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


@functools.cache
def check_torch_geometric() -> None:
    """Refuse a torch-geometric whose `Batch.from_data_list` bookkeeping differs from `graph_batch`'s.

    Raises:
        RuntimeError: naming the PyG version, the attribute (missing, or both values) and the
            versions tested.
    """
    import torch_geometric

    samples = [  # two molecules: 2 atoms and one bond (2 directed edges), 3 atoms and two bonds
        {"x": np.zeros((2, 1), np.int64), "edge_index": np.array([[0, 1], [1, 0]]), "y": np.zeros(1, np.float32)},
        {"x": np.ones((3, 1), np.int64), "edge_index": np.array([[0, 1, 1, 2], [1, 0, 2, 1]]), "y": np.ones(1)},
    ]
    for i, sample in enumerate(samples):
        sample.update(edge_attr=np.full((sample["edge_index"].shape[1], 1), i), index=i)
    graphs = [
        Data(**{k: torch.as_tensor(s[k]) for k in ("x", "edge_index", "edge_attr")}, num_nodes=len(s["x"]))
        for s in samples
    ]
    for graph, sample in zip(graphs, samples, strict=True):
        graph.y, graph.y_mask = torch.as_tensor(sample["y"]).view(1, -1).float(), torch.ones(1, 1, dtype=torch.bool)
    reference, ours = Batch.from_data_list(graphs), graph_batch(MoleculeRows.from_samples(samples))
    for name in ("_num_graphs", "_slice_dict", "_inc_dict", "_num_nodes"):
        missing = object()
        wanted, found = _plain(getattr(ours, name)), _plain(getattr(reference, name, missing))
        if found != wanted:
            what = "no longer writes it" if found is missing else f"writes {found}, graph_batch {wanted}"
            raise RuntimeError(
                f"torch_geometric {torch_geometric.__version__}: Batch.from_data_list's private {name} changed "
                f"({what}); MoleculeCollator writes it itself (tested with torch-geometric "
                f"{', '.join(TESTED_TORCH_GEOMETRIC)}). Install a tested one (pip install 'torch-geometric>=2.5,<2.9') "
                "or update varlen.datasets.molecules.collate."
            )


def graph_batch(rows: MoleculeRows, follow_batch: Sequence[str] = ()) -> Batch:
    """The PyG `Batch` of `rows`: tensor-equal to `Batch.from_data_list` over one `Data` per molecule.

    Each field of `GRAPH_FIELDS` gets the slices (where each graph's part starts) and
    increments (what was added to each graph's part: its first atom for `edge_index`, else 0)
    that `Batch.get_example` / `to_data_list` read to give a molecule back. `index` (the
    dataset positions) is set outside them, as before: PyG shifts any field whose name contains
    "index" by node counts when it batches, so a molecule from `to_data_list` has no `index`
    that a later `Batch.from_data_list` could corrupt.

    Args:
        rows: the gathered molecules.
        follow_batch: fields that also get `<name>_batch` (graph of each element) and
            `<name>_ptr` (offsets), as PyG's `follow_batch`.
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
    """Collate molecules into one PyG `Batch` (a class, so loader workers can pickle it).

    The batch holds the usual PyG layout (`x`, `edge_index` shifted by node offsets,
    `edge_attr`, `batch`, `ptr`) plus `y` `[B, T]` (0 where missing), `y_mask`
    `[B, T]` (keep convention: True = the target is observed, use it in loss and metrics) and
    `index` `[B]` (positions in the dataset), and `descriptors` `[B, D]` when the samples
    carry graph-level descriptors. Nothing is padded: graphs are concatenated.

    Args:
        follow_batch: fields (of `GRAPH_FIELDS`) that also get a `<name>_batch` vector
            and `<name>_ptr` offsets (PyG's `follow_batch`).

    Raises:
        ValueError: for a `follow_batch` name that is not a field of the batch.
    """

    def __init__(self, follow_batch: Sequence[str] | None = None) -> None:
        unknown = sorted(set(follow_batch or ()) - set(GRAPH_FIELDS))
        if unknown:
            raise ValueError(f"follow_batch {unknown}: not a field of the batch; fields: {list(GRAPH_FIELDS)}")
        self.follow_batch = list(follow_batch) if follow_batch else None

    def __call__(self, samples: MoleculeRows | Sequence[Mapping[str, Any]]) -> Batch:
        """A batch of `MoleculeRows` (the loader's batched fetch) or of a list of `dataset[i]` samples."""
        check_torch_geometric()  # once per process
        rows = samples if isinstance(samples, MoleculeRows) else MoleculeRows.from_samples(samples)
        return graph_batch(rows, self.follow_batch or ())
