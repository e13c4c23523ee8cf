"""Tokenised texts over unpadded storage: token ids as `Ragged` rows.

A sample is a view into one flat id array (the DataModule's: a memory-mapped cache file, see
`TokenizedTexts.mapped`); nothing is padded until a batch is fetched. The
loader's batched fetch (`__getitems__`) pads a whole batch in one gather (pad id and
`pad_to_multiple_of` included), so the collate only names the fields. A sample may be one
window of a longer document (`overflow="windows"`): it then carries its document id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.ragged import Ragged
from varlen.batching.shape_policy import PadTo, pad_length
from varlen.datasets.mixture import join_padded
from varlen.storage.tables import MappedTable

__all__ = ["TextBatch", "TokenizedTexts", "pack_texts", "pad_texts"]


@dataclass
class TextBatch:
    """A batch of texts, as gathered: what `TextCollator` names. Padded, a row per
    text; packed (`pack_texts`), the texts end to end in one row of `T` tokens.

    Attributes:
        index: `[B]` int64 dataset index of each text.
        ids: `[B, L]` int64 token ids, the pad id after each text (packed: `[1, T]`, the pad id after
            the last text).
        mask: `[B, L]` bool keep mask (True = real token); packed `[1, T]`.
        labels: `[B]` int64 class ids.
        type_ids: `[B, L]` int64 token type ids (0 where padded), or None; packed `[1, T]`.
        documents: `[B]` int64 document id of each window (texts cut into windows), or None.
        cu_seqlens: packed only: `[B + 1]` int32 offset of each text in the row (the last: the real tokens).
        position_ids: packed only: `[1, T]` int64, each text's positions from `position_offset` (0 after the
            last text).
        max_seqlen: packed only: the longest text's tokens.
    """

    index: torch.Tensor
    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    type_ids: torch.Tensor | None = None
    documents: torch.Tensor | None = None
    cu_seqlens: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    max_seqlen: int | None = None

    @classmethod
    def concat(cls, parts: Sequence[TextBatch]) -> TextBatch:
        """A mixture's parts (one fetch per source) as one batch: padded, each field padded to the parts'
        longest and stacked; packed, the texts of every part end to end in one row as long as theirs."""
        if parts[0].cu_seqlens is None:
            return join_padded(parts)
        lengths = np.concatenate([np.diff(p.cu_seqlens.numpy()) for p in parts])
        width = int(parts[0].ids.shape[1])
        real = [p.mask[0] for p in parts]
        ids = torch.cat([p.ids[0][m] for p, m in zip(parts, real, strict=True)])
        pad_id = int(parts[0].ids[0, -1])  # with another part after it, the first part's row ends in padding
        types = None
        if parts[0].type_ids is not None:
            types = torch.cat([p.type_ids[0][m] for p, m in zip(parts, real, strict=True)]).numpy()
        offset = int(parts[0].position_ids[0, 0])
        documents = None if parts[0].documents is None else torch.cat([p.documents for p in parts])
        index, labels = torch.cat([p.index for p in parts]), torch.cat([p.labels for p in parts])
        return _packed_batch(ids.numpy(), types, lengths, width, pad_id, offset, index, labels, documents)


def pad_texts(
    ids: Ragged,
    type_ids: Ragged | None,
    labels: np.ndarray,
    indices: Sequence[int] | np.ndarray,
    pad_token_id: int,
    pad_to_multiple_of: PadTo = None,
) -> TextBatch:
    """The texts `indices` padded with `pad_token_id`: one gather per field, no per-text work.

    Equal to `ids.pad(indices, pad_token_id, pad_to_multiple_of, torch.long)` (a test checks it).
    Text batches are small (a few dozen numpy calls, little data), so the calls are what costs:
    one `[B, L]` grid of positions serves the ids and the type ids, read with
    `take(mode="clip")` (a text's tail may read its neighbours' tokens, or the last token, and is
    overwritten with the pad id) instead of a masked `where`.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) == 0:
        raise ValueError("cannot pad an empty batch")
    if len(ids.values) == 0:  # nothing to read from: the core's general path
        padded = ids.pad(indices, pad_token_id, pad_to_multiple_of, torch.long)
        return TextBatch(torch.from_numpy(indices), padded.values, padded.mask, torch.from_numpy(labels[indices]))
    lengths = ids.lengths[indices]
    cols = np.arange(pad_length(max(lengths.tolist()), pad_to_multiple_of))
    pad = cols >= lengths[:, None]  # [B, L], True = padding
    tokens = _read(ids, indices, cols, pad, pad_token_id)
    types = None if type_ids is None else torch.from_numpy(_read(type_ids, indices, cols, pad, 0))
    return TextBatch(
        torch.from_numpy(indices),
        torch.from_numpy(tokens),
        torch.from_numpy(~pad),
        torch.from_numpy(labels[indices]),
        types,
    )


def _read(rows: Ragged, indices: np.ndarray, cols: np.ndarray, pad: np.ndarray, pad_value: int) -> np.ndarray:
    """`[B, L]` int64: the first `L` values of each row, `pad_value` where `pad`."""
    out = rows.values.take(rows.starts[indices][:, None] + cols, mode="clip").astype(np.int64)
    out[pad] = pad_value
    return out


def pack_texts(
    ids: Ragged,
    type_ids: Ragged | None,
    labels: np.ndarray,
    indices: Sequence[int] | np.ndarray,
    pad_token_id: int,
    width: int,
    position_offset: int = 0,
) -> TextBatch:
    """The texts `indices` end to end in one row of `width` tokens (the pad id after them), with their
    offsets and positions: one gather per field. A row too short for them is a `ValueError` (the plan's
    budget is the row: a DataModule makes it at least as long as its longest text)."""
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) == 0:
        raise ValueError("cannot pack an empty batch")
    packed = ids.pack(indices)
    lengths = ids.lengths[indices].astype(np.int64)
    types = None if type_ids is None else type_ids.pack(indices).values.numpy()
    return _packed_batch(packed.values.numpy(), types, lengths, width, pad_token_id, position_offset,
                         torch.from_numpy(indices), torch.from_numpy(labels[indices]))  # fmt: skip


def _packed_batch(values, types, lengths, width, pad_token_id, offset, index, labels, documents=None) -> TextBatch:
    """A packed `TextBatch` of the texts' `values` (end to end, `lengths` each) in a row of `width`."""
    total = int(lengths.sum())
    if total > width:
        raise ValueError(f"{len(lengths)} texts of {total} tokens do not fit a packed row of {width}")
    ids = np.full((1, width), pad_token_id, dtype=np.int64)
    ids[0, :total] = values
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    positions = np.zeros((1, width), dtype=np.int64)
    positions[0, :total] = np.arange(total) - np.repeat(cu[:-1], lengths) + offset
    mask = np.zeros((1, width), dtype=bool)
    mask[0, :total] = True
    type_ids = None
    if types is not None:
        type_ids = np.zeros((1, width), dtype=np.int64)
        type_ids[0, :total] = types
    return TextBatch(
        index, torch.from_numpy(ids), torch.from_numpy(mask), labels,
        None if type_ids is None else torch.from_numpy(type_ids), documents, torch.from_numpy(cu),
        torch.from_numpy(positions), int(lengths.max()) if len(lengths) else 0,
    )  # fmt: skip


@dataclass
class TokenizedTexts(PadsToWidths, torch.utils.data.Dataset):
    """Unpadded token ids of many texts, their labels and source rows; batches padded on fetch.

    Attributes:
        ids: token ids, one row per sample (a text, or a window of one).
        labels: `[N]` int64 class id per sample.
        rows: row of each sample's text in its source table (to map predictions back to the file).
        type_ids: token type ids with the same rows as `ids` (pairs), or None.
        pad_token_id: the tokenizer's pad id, written after each text of a fetched batch.
        pad_to_multiple_of: round a fetched batch's length up to this multiple (8 for tensor cores); a batch
            that carries its padded length pads to it (`pad_to`).
        documents: `[N]` int64 document id of each window (texts cut into windows: the text's
            position in its split, the windows of a text in order), or None (one sample per text).
        packing: `(T, position offset)`: fetched batches are packed in one row of `T` tokens
            (`pack_texts`); None: padded.
    """

    ids: Ragged
    labels: np.ndarray
    rows: np.ndarray
    type_ids: Ragged | None = None
    pad_token_id: int = 0
    pad_to_multiple_of: int | None = None
    documents: np.ndarray | None = None
    packing: tuple[int, int] | None = None

    @classmethod
    def mapped(
        cls,
        samples: MappedTable,
        selection: MappedTable | None = None,
        pad_token_id: int = 0,
        pad_to_multiple_of: int | None = None,
        packing: tuple[int, int] | None = None,
        keep: np.ndarray | None = None,
    ) -> TokenizedTexts:
        """The texts of a tokenised table (`varlen.datasets.text.store`), every array a read-only
        view of the mapped files: all its rows, or the rows a `selection` table lists; with `keep`, only
        those positions of them (the texts a packed row holds: the DataModule counted the others).

        Such a dataset pickles as the two tables' paths and its settings (a spawned loader
        worker maps the files again), never as its arrays.
        """
        per_sample = selection if selection is not None else samples
        picked = slice(None) if keep is None else np.asarray(keep, dtype=np.int64)
        lengths = per_sample.numpy("length")[picked]
        ids = samples.ragged("input_ids", lengths=samples.numpy("length"))
        starts = (ids.starts if selection is None else selection.numpy("start"))[picked]
        type_ids = None
        if "token_type_ids" in samples.columns:
            type_ids = Ragged(samples.ragged("token_type_ids", lengths=ids.lengths).values, starts, lengths)
        dataset = cls(
            Ragged(ids.values, starts, lengths),
            per_sample.numpy("label")[picked],
            per_sample.numpy("row")[picked],
            type_ids,
            pad_token_id,
            pad_to_multiple_of,
            per_sample.numpy("document")[picked] if "document" in per_sample.columns else None,
            packing,
        )
        dataset._tables = (samples, selection, keep)
        return dataset

    def __reduce_ex__(self, protocol: int) -> Any:
        tables = getattr(self, "_tables", None)
        if tables is None:  # built in memory: its arrays travel
            return super().__reduce_ex__(protocol)
        samples, selection, keep = tables
        settings = (self.pad_token_id, self.pad_to_multiple_of, self.packing, keep)
        return (TokenizedTexts.mapped, (samples, selection, *settings))

    def __post_init__(self) -> None:
        self.labels = np.asarray(self.labels, dtype=np.int64)
        if self.type_ids is not None and not np.array_equal(self.type_ids.lengths, self.ids.lengths):
            raise ValueError("type_ids must have the same rows as ids")
        if self.documents is not None:
            self.documents = np.asarray(self.documents, dtype=np.int64)
            if len(self.documents) != len(self.labels):
                raise ValueError(f"{len(self.documents)} document ids for {len(self.labels)} samples")
        self.lengths = self.ids.lengths  # the sampler reads it every epoch: kept, never recomputed

    @property
    def num_documents(self) -> int:
        """Texts behind the samples (as many as samples without windows)."""
        return len(self) if self.documents is None else len(np.unique(self.documents))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        start, end = self.ids.starts[i], self.ids.starts[i] + self.ids.lengths[i]
        sample = {"index": i, "input_ids": self.ids.values[start:end], "label": int(self.labels[i])}
        if self.type_ids is not None:
            start = self.type_ids.starts[i]
            sample["token_type_ids"] = self.type_ids.values[start : start + self.ids.lengths[i]]
        if self.documents is not None:
            sample["document_id"] = int(self.documents[i])
        return sample

    def __getitems__(self, indices: Sequence[int]) -> TextBatch:
        """A whole batch at once, padded, or packed in one row (the loader's batched fetch)."""
        if self.packing is not None:
            width, offset = self.packing
            batch = pack_texts(self.ids, self.type_ids, self.labels, indices, self.pad_token_id, width, offset)
        else:
            padding = pad_to(indices, self.pad_to_multiple_of)
            batch = pad_texts(self.ids, self.type_ids, self.labels, indices, self.pad_token_id, padding)
        if self.documents is not None:
            batch.documents = torch.from_numpy(self.documents[np.asarray(indices, dtype=np.int64)])
        return batch
