"""A worker's batch handed to the main process as one shared buffer (`varlen.batching.transfer`): every
tensor equal to the collate's (dtype, shape, values), the inputs views of one storage and the rest (1-D, or
a small share of the batch) copies of their own, the rest of the batch carried as the loader's queue
carries it (tensors with grad, nested tensors); through a `VarLenLoader` with workers the batches equal
the in-process loader's, for a dict of tensors and for PyG's `Batch`; a loader state of another number
of workers is refused."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

from varlen.batching.loader import VarLenLoader
from varlen.batching.transfer import VIEW_BYTES, PackingCollate, SharedBatch, pack, unpack

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def handed_over(batch):
    """`batch` as the main process receives it from a worker: packed, pickled across, unpacked."""
    return unpack(ForkingPickler.loads(ForkingPickler.dumps(pack(batch))))


def storages(batch, least: int = 0) -> set[int]:
    """The storages of `batch`'s tensors of at least `least` bytes."""
    leaves = batch.values() if isinstance(batch, dict) else batch
    big = [t for t in leaves if isinstance(t, torch.Tensor) and t.numel() * t.element_size() >= least]
    return {t.untyped_storage().data_ptr() for t in big}


def test_every_tensor_arrives_equal_the_large_ones_views_of_one_buffer():
    ids = torch.arange(4096).view(64, 64)  # 32 KiB: at least VIEW_BYTES
    batch = {
        "input_ids": ids,
        "again": ids,  # the same tensor twice stays one
        "transposed": ids.t(),  # not contiguous
        "mask": torch.ones(64, 512, dtype=torch.bool),
        "half": torch.randn(5).bfloat16(),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.empty(0, 7, dtype=torch.int64),
        "odd": torch.arange(3, dtype=torch.uint8),  # 3 bytes: the next tensor still aligned
        "labels": torch.arange(64, dtype=torch.int64),
        "names": ["a", "b", "c"],
        "array": np.arange(3),
    }
    packed = pack(batch)
    assert isinstance(packed, SharedBatch) and len(packed.places) == 8  # "again" is "input_ids"
    out = handed_over(batch)
    assert out.keys() == batch.keys()
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
            assert torch.equal(out[key], value), key
    assert out["names"] == batch["names"] and np.array_equal(out["array"], batch["array"])
    assert out["again"] is out["input_ids"]
    assert len(storages(out, least=VIEW_BYTES)) == 1  # the inputs: views of the batch's one buffer
    labels = out["labels"]  # small: a copy, so holding it past the batch holds nothing else
    assert labels.untyped_storage().nbytes() == labels.numel() * labels.element_size()


def outside(tensor: torch.Tensor, buffer: torch.Tensor) -> bool:
    """Whether `tensor` holds storage of its own, none of `buffer`'s: keeping it keeps none of the batch."""
    start, storage = buffer.untyped_storage().data_ptr(), tensor.untyped_storage()
    inside = start <= storage.data_ptr() < start + buffer.untyped_storage().nbytes()
    return not inside and storage.nbytes() == tensor.numel() * tensor.element_size()


def test_keeping_a_large_batchs_index_or_targets_keeps_none_of_its_buffer():
    """A 4,096-sample batch: its 1-D tensors (the index is 32 KiB; a packed sequence, 2 MiB) and a 2-D
    tensor that is a small share of the batch (multi-task targets, the mask) arrive as copies; the
    inputs, each at least a quarter of the batch, as views of its one buffer."""
    n = 4096
    batch = {
        "index": torch.arange(n),
        "labels": torch.randint(0, 2, (n,)),
        "packed": torch.arange(n * 64),
        "targets": torch.randn(n, 12),
        "mask": torch.ones(n, 256, dtype=torch.bool),
        "ids": torch.randint(0, 1000, (n, 256)),
        "type_ids": torch.zeros(n, 256, dtype=torch.int64),
    }
    out = handed_over(batch)
    assert all(torch.equal(out[k], batch[k]) for k in batch)
    assert out["ids"].untyped_storage().data_ptr() == out["type_ids"].untyped_storage().data_ptr()
    for key in ("index", "labels", "packed", "targets", "mask"):
        assert outside(out[key], out["ids"]), key


def test_tensors_that_cannot_be_packed_travel_as_the_queue_carries_them():
    weights = torch.linspace(0, 1, 5).requires_grad_()
    nested = torch.nested.nested_tensor([torch.ones(2), torch.arange(3.0)])
    out = handed_over({"ids": torch.ones(2, 3), "lengths": torch.tensor([3, 3]), "w": weights, "nested": nested})
    assert out["w"].requires_grad and torch.equal(out["w"].detach(), weights.detach())
    assert out["nested"].is_nested and [t.tolist() for t in out["nested"].unbind()] == [[1.0, 1.0], [0.0, 1.0, 2.0]]
    assert torch.equal(out["ids"], torch.ones(2, 3))


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
        geometric.Data(x=torch.randn(300, 16), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([1.0])),
        geometric.Data(x=torch.randn(200, 16), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0.0])),
    ]
    batch = geometric.Batch.from_data_list(graphs)
    out = handed_over(batch)
    assert type(out) is type(batch) and out.num_graphs == 2
    for key in ("x", "edge_index", "y", "batch", "ptr"):
        assert torch.equal(out[key], batch[key]), key
    assert out.x.untyped_storage().nbytes() > out.x.numel() * 4  # a view of the one buffer
    assert [g.num_nodes for g in out.to_data_list()] == [300, 200]


class Ragged(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "ids": torch.arange(1 + i % 7).repeat_interleave(800)}


def pad(samples: list[dict]) -> dict:
    width = max(len(s["ids"]) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s["ids"])] = s["ids"]
    lengths = torch.tensor([len(s["ids"]) for s in samples])
    grad = torch.ones(2, requires_grad=True)  # not packable: sent by torch's reducers
    index = torch.tensor([s["index"] for s in samples])
    return {"index": index, "ids": ids, "mask": (ids > 0).int(), "lengths": lengths, "grad": grad}


@pytest.mark.parametrize("packed", [True, False])
def test_a_loader_with_workers_serves_the_in_process_batches(packed, monkeypatch):
    """Batches from 2 workers equal the in-process loader's; packed, a batch's large tensors share one
    storage (with `pack_batches = False`, one each, as torch hands them over)."""
    monkeypatch.setattr(VarLenLoader, "pack_batches", packed)
    here = list(VarLenLoader(Ragged(), batch_size=6, collate_fn=pad))
    loader = VarLenLoader(Ragged(), batch_size=6, collate_fn=pad, num_workers=2, multiprocessing_context=START)
    there = list(loader)
    assert loader.collate_fn is pad  # the packing wraps only what the workers run
    assert len(here) == len(there) == 7
    for a, b in zip(here, there, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
        assert b["grad"].requires_grad
        assert len(storages(b, least=VIEW_BYTES)) == (1 if packed else 2)  # ids and mask


def test_packing_collate_pickles_for_spawned_workers():
    collate = pickle.loads(pickle.dumps(PackingCollate(pad)))
    batch = unpack(collate([Ragged()[i] for i in range(3)]))
    assert torch.equal(batch["lengths"], torch.tensor([800, 1600, 2400]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_a_pinned_batch_is_one_pinned_buffer():
    batch = unpack(pack(pad([Ragged()[i] for i in range(3)])).pin_memory())
    assert batch["ids"].is_pinned() and batch["mask"].is_pinned()


@pytest.mark.parametrize(("saved", "resumed"), [(2, 1), (0, 2), (2, 0)])
def test_a_loader_state_of_another_number_of_workers_is_refused_by_name(saved, resumed):
    def loader(workers: int) -> VarLenLoader:
        extra = {"multiprocessing_context": START} if workers else {}
        return VarLenLoader(Ragged(), batch_size=6, collate_fn=pad, num_workers=workers, **extra)

    first = loader(saved)
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    with pytest.raises(ValueError, match=f"saved with num_workers={saved}, this loader has {resumed}"):
        loader(resumed).load_state_dict(state)
    again = loader(saved)
    again.load_state_dict(state)  # the same number of workers resumes
    assert torch.equal(next(iter(again))["index"], torch.arange(6, 12))
