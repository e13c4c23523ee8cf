"""`TextCollator`: names the fields of a padded text batch (the dataset's fetch has padded it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.indices import PadsToWidths, pad_to
from varlen.batching.ragged import Ragged
from varlen.datasets.text.dataset import TextBatch, pack_texts, pad_texts

__all__ = ["TextCollator"]


class TextCollator(PadsToWidths):
    """The model's fields of a text batch: `input_ids`, `attention_mask` (1 = real token),
    `token_type_ids` (when the model takes them), `labels`, `index`, and `document_ids`
    when the samples are windows of longer texts. Packed (`packing`), the texts lie end to end in
    one row `[1, T]` and the batch adds `cu_seqlens` `[B + 1]` int32, `position_ids` `[1, T]`
    (restarting at each text), `max_seqlen` (the longest text) and `packed_tokens` (the row's real tokens,
    `cu_seqlens[-1]`), both ints.

    A `TextBatch` (the loader's batched fetch, padded by
    `TokenizedTexts`) is only named; a list of `dataset[i]` dicts is
    padded here first, with the same one-gather path.

    Args:
        pad_token_id: the tokenizer's `pad_token_id` (never assume 0), for lists of samples.
        with_token_type_ids: also return `token_type_ids` (zeros for single texts).
        pad_to_multiple_of: round the padded length up (8 suits tensor cores), for lists of samples (that
            carry no padded length: `pad_to`).
        packing: `(T, position offset)`: lists of samples are packed in one row of `T` tokens, positions
            from the offset (2 for RoBERTa-family encoders); None: padded.
    """

    def __init__(
        self,
        pad_token_id: int,
        with_token_type_ids: bool = False,
        pad_to_multiple_of: int | None = None,
        packing: tuple[int, int] | None = None,
    ):
        if pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
        self.pad_token_id = int(pad_token_id)
        self.with_token_type_ids = with_token_type_ids
        self.pad_to_multiple_of = pad_to_multiple_of
        self.packing = packing

    def __call__(self, samples: TextBatch | Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Name a fetched batch's fields, or pad a list of samples first."""
        texts = samples if isinstance(samples, TextBatch) else self.pad_samples(samples)
        batch = {
            "index": texts.index,
            "input_ids": texts.ids,
            "attention_mask": texts.mask.long(),
            "labels": texts.labels,
        }
        if self.with_token_type_ids:
            batch["token_type_ids"] = texts.type_ids if texts.type_ids is not None else torch.zeros_like(texts.ids)
        if texts.documents is not None:
            batch["document_ids"] = texts.documents
        if texts.cu_seqlens is not None:  # packed: one row, each text's offset and positions
            batch |= {
                "cu_seqlens": texts.cu_seqlens,
                "position_ids": texts.position_ids,
                "max_seqlen": texts.max_seqlen,
                "packed_tokens": int(texts.cu_seqlens[-1]),  # the real tokens: a model slices without a sync
            }
        return batch

    def pad_samples(self, samples: Sequence[dict[str, Any]]) -> TextBatch:
        """Single samples (`dataset[i]` dicts) joined once into rows and padded like a fetched batch."""
        ids = Ragged.from_arrays([np.asarray(s["input_ids"]) for s in samples])
        type_ids = None
        if "token_type_ids" in samples[0]:
            type_ids = Ragged.from_arrays([np.asarray(s["token_type_ids"]) for s in samples])
        labels = np.fromiter((s["label"] for s in samples), np.int64, len(samples))
        rows = np.arange(len(samples))
        if self.packing is not None:
            texts = pack_texts(ids, type_ids, labels, rows, self.pad_token_id, *self.packing)
        else:
            texts = pad_texts(ids, type_ids, labels, rows, self.pad_token_id, pad_to(samples, self.pad_to_multiple_of))
        texts.index = torch.from_numpy(np.fromiter((s["index"] for s in samples), np.int64, len(samples)))
        if "document_id" in samples[0]:
            texts.documents = torch.from_numpy(np.fromiter((s["document_id"] for s in samples), np.int64, len(samples)))
        return texts
