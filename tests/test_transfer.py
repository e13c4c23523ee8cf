"""A worker's batch handed to the main process as one shared buffer (`varlen.batching.transfer`): every
tensor equal to the collate's (dtype, shape, values), all of a batch's tensors views of one storage,
the rest of the batch carried as pickle carries it; through a `VarLenLoader` with workers the batches
equal the in-process loader's, for a dict of tensors and for PyG's `Batch`."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest
import torch

from varlen.batching.loader import VarLenLoader
from varlen.batching.transfer import PackedBatch, PackingCollate, pack, unpack

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def handed_over(batch):
    """``batch`` as the main process receives it from a worker: packed, pickled across, unpacked."""
    return unpack(pickle.loads(pickle.dumps(pack(batch))))


def storages(batch) -> set[int]:
    leaves = batch.values() if isinstance(batch, dict) else batch
    return {t.untyped_storage().data_ptr() for t in leaves if isinstance(t, torch.Tensor)}


def test_every_tensor_arrives_equal_as_a_view_of_one_buffer():
    ids = torch.arange(12).view(3, 4)
    batch = {
        "input_ids": ids,
        "again": ids,  # the same tensor twice stays one
        "transposed": ids.t(),  # not contiguous
        "mask": torch.tensor([True, False, True]),
        "half": torch.randn(5).bfloat16(),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.empty(0, 7, dtype=torch.int64),
        "odd": torch.arange(3, dtype=torch.uint8),  # 3 bytes: the next tensor still aligned
        "after": torch.arange(4, dtype=torch.int64),
        "names": ["a", "b", "c"],
        "array": np.arange(3),
    }
    packed = pack(batch)
    assert isinstance(packed, PackedBatch) and len(packed.places) == 8  # "again" is "input_ids"
    out = handed_over(batch)
    assert out.keys() == batch.keys()
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
            assert torch.equal(out[key], value), key
    assert out["names"] == batch["names"] and np.array_equal(out["array"], batch["array"])
    assert out["again"] is out["input_ids"]
    assert len(storages(out)) == 1  # one shared buffer for the whole batch


def test_a_batch_with_fewer_than_two_plain_tensors_is_left_as_it_is():
    one = (torch.zeros(2, 3), 5)
    assert pack(one) is one
    weights = torch.ones(3, requires_grad=True)  # carries grad: pickled as torch pickles it
    batch = {"w": weights, "x": torch.ones(2)}
    assert pack(batch) is batch
    assert pack({"text": "no tensors"}) == {"text": "no tensors"}
    assert unpack(one) is one


def test_a_pyg_batch_arrives_equal_with_its_tensors_in_one_buffer():
    geometric = pytest.importorskip("torch_geometric.data")
    graphs = [
        geometric.Data(x=torch.randn(3, 4), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([1.0])),
        geometric.Data(x=torch.randn(2, 4), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0.0])),
    ]
    batch = geometric.Batch.from_data_list(graphs)
    out = handed_over(batch)
    assert type(out) is type(batch) and out.num_graphs == 2
    for key in ("x", "edge_index", "y", "batch", "ptr"):
        assert torch.equal(out[key], batch[key]), key
    assert len({out[key].untyped_storage().data_ptr() for key in ("x", "edge_index", "y", "batch", "ptr")}) == 1
    assert [g.num_nodes for g in out.to_data_list()] == [3, 2]


class Ragged(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "ids": torch.arange(1 + i % 7)}


def pad(samples: list[dict]) -> dict:
    width = max(len(s["ids"]) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["ids"])] = s["ids"]
    lengths = torch.tensor([len(s["ids"]) for s in samples])
    return {"index": torch.tensor([s["index"] for s in samples]), "ids": ids, "mask": ids > 0, "lengths": lengths}


@pytest.mark.parametrize("packed", [True, False])
def test_a_loader_with_workers_serves_the_in_process_batches(packed, monkeypatch):
    """Batches from 2 workers equal the in-process loader's; packed, each batch's tensors share one storage
    (with ``pack_batches = False``, one each, as torch hands them over)."""
    monkeypatch.setattr(VarLenLoader, "pack_batches", packed)
    here = list(VarLenLoader(Ragged(), batch_size=6, collate_fn=pad))
    loader = VarLenLoader(Ragged(), batch_size=6, collate_fn=pad, num_workers=2, multiprocessing_context=START)
    there = list(loader)
    assert loader.collate_fn is pad  # the packing wraps only what the workers run
    assert len(here) == len(there) == 7
    for a, b in zip(here, there, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
        assert len(storages(b)) == (1 if packed else 4)


def test_packing_collate_pickles_for_spawned_workers():
    collate = pickle.loads(pickle.dumps(PackingCollate(pad)))
    batch = unpack(collate([Ragged()[i] for i in range(3)]))
    assert torch.equal(batch["lengths"], torch.tensor([1, 2, 3]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_a_pinned_batch_is_one_pinned_buffer():
    batch = unpack(pack(pad([Ragged()[i] for i in range(3)])).pin_memory())
    assert all(t.is_pinned() for t in batch.values()) and len(storages(batch)) == 1
