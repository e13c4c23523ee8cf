"""One shared buffer per batch from a loader worker to the main process.

A worker hands each tensor of a batch to the main process through its own shared-memory file: torch
moves the storage to shared memory, and the main process fetches the file descriptor from a thread
of the worker, which must first get the worker's GIL (the worker is busy collating the next batch).
That costs about 0.7 ms a tensor on 2 cores: a text batch of five tensors spent 2.8 ms in the
hand-over and 0.03 ms in its collate (measured with torch's sharing by file descriptor; VarLenLoader's
workers share by name, `varlen.batching.loader`, where each file costs the worker and the main process
a round trip to torch_shm_manager instead). `PackingCollate` copies a batch's plain CPU tensors into
one shared buffer in the worker and pickles the rest of the batch beside it (with torch's reducers,
so any other tensor still travels in shared memory); `unpack` rebuilds the batch in the main
process. Any structure pickles (dicts, dataclasses, PyG's `Batch`).

In the main process a view of the buffer keeps the whole buffer alive, so only a batch's inputs are
views: a tensor of two dimensions or more that holds at least `VIEW_SHARE` of the buffer (and
`VIEW_BYTES`). Any other is a copy, whatever its size: a 0-D or 1-D tensor (labels, indices,
lengths; the index of a 4,096-sample batch is 32 KiB of a 90 MiB buffer) or a small part of the batch
(multi-task targets), so holding those past the batch (for an epoch's metric) holds nothing else, and
holding a view holds at most four times its bytes. Copying a 1-D input (a packed batch's values) costs
a memory copy, less than the hand-over it saves. Tensors that shared memory in the worker arrive as
separate tensors (one object met twice stays one).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reducers on ForkingPickler)

__all__ = ["VIEW_BYTES", "VIEW_SHARE", "PackingCollate", "SharedBatch", "pack", "unpack"]

#: byte alignment of each tensor in the buffer (any dtype's element size divides it)
_ALIGN = 64
#: a view of the batch's buffer has at least this many bytes (a smaller tensor is copied at no cost)
VIEW_BYTES = 16 * 1024
#: and at least this share of the buffer (keeping a view keeps at most 1 / VIEW_SHARE times its bytes)
VIEW_SHARE = 0.25


class SharedBatch:
    """A batch as one shared `uint8` buffer, each plain tensor's place in it, and the rest pickled."""

    __slots__ = ("buffer", "payload", "places")

    def __init__(self, buffer: torch.Tensor, places: list[tuple[int, torch.dtype, tuple[int, ...]]], payload: bytes):
        self.buffer, self.places, self.payload = buffer, places, payload

    def pin_memory(self, device: Any = None) -> SharedBatch:
        """What the loader's pin-memory thread calls: the buffer pinned, so the tensors packed in it are."""
        buffer = self.buffer.pin_memory() if device is None else self.buffer.pin_memory(device)
        return SharedBatch(buffer, self.places, self.payload)


def _packable(obj: Any) -> bool:
    """A plain dense CPU tensor (no grad, no subclass): its values, dtype and shape say what it is."""
    return (
        type(obj) is torch.Tensor
        and obj.device.type == "cpu"
        and obj.layout == torch.strided
        and not obj.is_nested
        and not obj.requires_grad
        and not obj.is_quantized
    )


class _Collector(ForkingPickler):
    """Pickles a batch with each plain CPU tensor left out, its id the tensor's index in `tensors`;
    other tensors go by torch's reducers (shared memory), as the loader's queue would send them."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.tensors: list[torch.Tensor] = []
        self.seen: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> int | None:
        if not _packable(obj):
            return None
        key = id(obj)
        if key not in self.seen:  # the same tensor twice in a batch stays one tensor
            self.seen[key] = len(self.tensors)
            self.tensors.append(obj)
        return self.seen[key]


def pack(batch: Any) -> Any:
    """`batch` as a `SharedBatch` (its plain tensors copied into one shared buffer), or as it is
    when it holds fewer than two (one tensor already travels in one file)."""
    file = io.BytesIO()
    collector = _Collector(file)
    collector.dump(batch)
    tensors = collector.tensors
    if len(tensors) < 2:
        return batch
    offsets, end = [], 0
    for tensor in tensors:
        offsets.append(end)
        end += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
    buffer = torch.empty(end, dtype=torch.uint8).share_memory_()
    places = []
    for tensor, offset in zip(tensors, offsets, strict=True):
        nbytes = tensor.numel() * tensor.element_size()
        buffer[offset : offset + nbytes].view(tensor.dtype).view(tensor.shape).copy_(tensor)
        places.append((offset, tensor.dtype, tuple(tensor.shape)))
    return SharedBatch(buffer, places, file.getvalue())


def _input(tensor: torch.Tensor, nbytes: int, buffer_bytes: int) -> bool:
    """Whether `tensor` is served as a view of the batch's buffer (see the module docstring)."""
    return tensor.dim() >= 2 and nbytes >= max(VIEW_BYTES, VIEW_SHARE * buffer_bytes)


class _Rebuilder(pickle.Unpickler):
    def __init__(self, shared: SharedBatch) -> None:
        super().__init__(io.BytesIO(shared.payload))
        self.buffer, self.places = shared.buffer, shared.places
        self.tensors: dict[int, torch.Tensor] = {}

    def persistent_load(self, pid: int) -> torch.Tensor:
        if pid not in self.tensors:  # a tensor met twice in the batch is one tensor
            offset, dtype, shape = self.places[pid]
            nbytes = torch.Size(shape).numel() * dtype.itemsize
            view = self.buffer[offset : offset + nbytes].view(dtype).view(shape)
            self.tensors[pid] = view if _input(view, nbytes, len(self.buffer)) else view.clone()
        return self.tensors[pid]


def unpack(data: Any) -> Any:
    """The batch a `SharedBatch` holds (see the module docstring); anything else as it is."""
    return _Rebuilder(data).load() if isinstance(data, SharedBatch) else data


class PackingCollate:
    """`collate_fn` whose batches leave the worker packed (`pack`); it pickles as `collate_fn` does."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        return pack(self.collate_fn(samples))
