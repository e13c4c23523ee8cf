"""Caption tokenisation, kept unpadded, in batches; an optional cache.

`tokenize_captions` encodes a few thousand captions per tokenizer call and keeps only numpy
arrays between calls (never a Python list of the whole corpus). A cache key says of a
tokenizer its identity, `varlen.storage.cache.tokenizer_identity`.

`caption_tokens` can cache the tokens of a list of captions as one Arrow table (the same
mechanism as the DataModule's split tables, `varlen.storage.tables`): written atomically, keyed by
the tokenizer, `max_length`, a hash of the caption texts and the format version, rebuilt with a
warning when it is cut short, of another version, changed since (its checksum) or holds an id
outside the tokenizer's vocabulary (one the tokenizer gives is a DataError when it is built). The
DataModule does not use it: its split tables (`.served`) hold the tokens already.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.tokens import default_tokenizer_path, load_tokenizer
from varlen.errors import DataError
from varlen.storage.cache import cache_key, tokenizer_identity
from varlen.storage.tables import MappedTable, ids_outside, open_table, write_table

__all__ = [
    "BATCH",
    "CACHE_VERSION",
    "Tokenized",
    "cache_path",
    "caption_tokens",
    "ids_problem",
    "tokenize_captions",
    "tokenizer",
]

#: format of the cached table; a new format is a new key, so old files are never misread
CACHE_VERSION = "video-text captions 3"
#: captions encoded per tokenizer call
BATCH = 4096


@functools.lru_cache(maxsize=4)
def tokenizer(name_or_path: str | None = None):
    """`varlen.datasets.text.load_tokenizer` (None: the offline MiniLM), cached per process.

    DataModules built again (CLI subcommands, tests) reuse the same object instead of reading
    the tokenizer files again.
    """
    return load_tokenizer(name_or_path or default_tokenizer_path())


@dataclass
class Tokenized:
    """Unpadded token ids of many captions: caption `k` is `ids[offsets[k]:offsets[k + 1]]`.

    Attributes:
        ids: all token ids, concatenated (int64).
        offsets: `[N + 1]`.
        truncated: `[N]` bool, the captions that were longer than `max_length` and were cut.
    """

    ids: np.ndarray
    offsets: np.ndarray
    truncated: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": self.ids, "offsets": self.offsets, "truncated": self.truncated}


def _encode(texts: list[str], tokenizer, max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(ids, lengths, truncated)` of one batch of captions."""
    encoded = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"] if texts else []
    long = [k for k, e in enumerate(encoded) if len(e) > max_length]
    if long:
        cut = tokenizer([texts[k] for k in long], add_special_tokens=True, truncation=True, max_length=max_length)
        for k, ids in zip(long, cut["input_ids"], strict=True):
            encoded[k] = ids
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    ids = np.fromiter((t for e in encoded for t in e), dtype=np.int64, count=int(lengths.sum()))
    truncated = np.zeros(len(texts), dtype=bool)
    truncated[long] = True
    return ids, lengths, truncated


def tokenize_captions(texts: Sequence[str], tokenizer, max_length: int = 32, batch: int = BATCH) -> Tokenized:
    """Tokenise all captions, `batch` per tokenizer call; keep the ids unpadded.

    Captions are encoded untruncated first so that truncation is known per caption (the
    dataset counts it per split in the report); only the captions over `max_length` are
    encoded again with truncation (the tokenizer keeps its special tokens). Between calls only
    numpy arrays are kept: memory holds one batch's Python lists, never the corpus's.
    """
    parts = [_encode(list(texts[a : a + batch]), tokenizer, max_length) for a in range(0, len(texts), batch)]
    if not parts:
        return Tokenized(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, bool))
    ids, lengths, truncated = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
    tokens = Tokenized(ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), truncated)
    if (found := ids_outside(Ragged.from_offsets(tokens.ids, tokens.offsets), len(tokenizer))) is not None:
        caption, token = found
        raise DataError(
            f"caption {caption} ({texts[caption]!r}): the tokenizer gave token id {token}, "
            f"outside its {len(tokenizer):,} ids"
        )
    return tokens


def ids_problem(table: MappedTable, column: str, vocabulary: int) -> str | None:
    """A caption token id of a mapped table's list column outside the tokenizer's `vocabulary` ids
    (an embedding would fail on it), or None: what `varlen.storage.tables.open_table`'s check says."""
    found = ids_outside(table.ragged(column), vocabulary)
    if found is None:
        return None
    return f"holding token id {found[1]} in caption {found[0]}, outside the tokenizer's {vocabulary:,} ids"


def cache_path(cache_dir: str | os.PathLike, texts: Sequence[str], tokenizer, max_length: int) -> Path:
    """Where the tokens of `texts` under `tokenizer` and `max_length` are cached."""
    return Path(cache_dir) / f"captions-{_key(texts, tokenizer, max_length)}.arrow"


def _key(texts: Sequence[str], tokenizer, max_length: int) -> str:
    texts_hash = hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()
    return cache_key(tokenizer_identity(tokenizer), int(max_length), texts_hash, version=CACHE_VERSION)


def caption_tokens(
    texts: Sequence[str], tokenizer, max_length: int = 32, cache_dir: str | os.PathLike | None = None
) -> Tokenized:
    """The tokens of `texts`: read from the cache in `cache_dir`, else tokenised (and cached there).

    Without `cache_dir` nothing touches the disk. A cache file that is cut short, corrupt or
    from another format version is rebuilt (`varlen.storage.tables.open_table` warns). Read from
    the cache, the arrays are read-only views of the mapped file.
    """
    if cache_dir is None:
        return tokenize_captions(texts, tokenizer, max_length)
    path, key = cache_path(cache_dir, texts, tokenizer, max_length), _key(texts, tokenizer, max_length)
    table = open_table(path, version=CACHE_VERSION, key=key, check=lambda t: ids_problem(t, "ids", len(tokenizer)))
    if table is None:
        tokens = tokenize_captions(texts, tokenizer, max_length)
        ids = Ragged.from_offsets(tokens.ids, tokens.offsets)
        write_table(path, {"ids": ids, "truncated": tokens.truncated.astype(np.uint8)}, version=CACHE_VERSION, key=key)
        return tokens
    column = table.batch.column("ids")  # views of the mapped file: the flat ids and their offsets
    ids, offsets = column.values.to_numpy(zero_copy_only=True), column.offsets.to_numpy(zero_copy_only=True)
    return Tokenized(ids, offsets, table.numpy("truncated").astype(bool))
