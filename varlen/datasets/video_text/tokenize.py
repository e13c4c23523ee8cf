"""Caption tokenisation, kept unpadded, and its on-disk cache.

The cache is one ``.npz`` (written atomically by :func:`varlen.cache.save_arrays`, read without
pickles) keyed by the tokenizer's name and vocabulary size, ``max_length``, a hash of the caption
texts and the format version: a changed caption, tokenizer or setting never reads a stale
cache, and a cache that cannot be read is built again (with a warning).
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

from varlen.cache import cache_key, load_arrays, save_arrays
from varlen.datasets.text.tokens import default_tokenizer_path, load_tokenizer

__all__ = ["CACHE_VERSION", "Tokenized", "cache_path", "caption_tokens", "tokenize_captions", "tokenizer"]

#: format of the cached arrays; a new format is a new key, so old files are never misread
CACHE_VERSION = "video-text captions 2"


@functools.lru_cache(maxsize=4)
def tokenizer(name_or_path: str | None = None):
    """:func:`varlen.datasets.text.load_tokenizer` (None: the offline MiniLM), cached per process.

    DataModules built again (CLI subcommands, tests) reuse the same object instead of reading
    the tokenizer files again.
    """
    return load_tokenizer(name_or_path or default_tokenizer_path())


@dataclass
class Tokenized:
    """Unpadded token ids of many captions: caption ``k`` is ``ids[offsets[k]:offsets[k + 1]]``.

    Attributes:
        ids: all token ids, concatenated.
        offsets: ``[N + 1]``.
        truncated: ``[N]`` bool, the captions that were longer than ``max_length`` and were cut.
    """

    ids: np.ndarray
    offsets: np.ndarray
    truncated: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": self.ids, "offsets": self.offsets, "truncated": self.truncated}


def tokenize_captions(texts: Sequence[str], tokenizer, max_length: int = 32) -> Tokenized:
    """Tokenise all captions in batched calls of the tokenizer; keep the ids unpadded.

    Captions are encoded untruncated first so that truncation is known per caption (the
    dataset counts it per split in the report); only the captions over ``max_length`` are
    encoded again with truncation (the tokenizer keeps its special tokens).
    """
    texts = list(texts)
    encoded = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"] if texts else []
    long = [k for k, e in enumerate(encoded) if len(e) > max_length]
    if long:
        cut = tokenizer([texts[k] for k in long], add_special_tokens=True, truncation=True, max_length=max_length)
        for k, ids in zip(long, cut["input_ids"], strict=True):
            encoded[k] = ids
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.fromiter((t for e in encoded for t in e), dtype=np.int64, count=int(offsets[-1]))
    truncated = np.zeros(len(texts), dtype=bool)
    truncated[long] = True
    return Tokenized(ids, offsets, truncated)


def cache_path(cache_dir: str | os.PathLike, texts: Sequence[str], tokenizer, max_length: int) -> Path:
    """Where the tokens of ``texts`` under ``tokenizer`` and ``max_length`` are cached."""
    texts_hash = hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()
    key = cache_key(str(tokenizer.name_or_path), len(tokenizer), int(max_length), texts_hash, version=CACHE_VERSION)
    return Path(cache_dir) / f"captions-{key}.npz"


def caption_tokens(
    texts: Sequence[str], tokenizer, max_length: int = 32, cache_dir: str | os.PathLike | None = None
) -> Tokenized:
    """The tokens of ``texts``: read from the cache in ``cache_dir``, else tokenised (and cached there).

    Without ``cache_dir`` nothing touches the disk. A cache file that is truncated, corrupt or
    from another format version is rebuilt (:func:`varlen.cache.load_arrays` warns).
    """
    if cache_dir is None:
        return tokenize_captions(texts, tokenizer, max_length)
    path = cache_path(cache_dir, texts, tokenizer, max_length)
    cached = load_arrays(path, CACHE_VERSION)
    if cached is not None and {"ids", "offsets", "truncated"} <= set(cached):
        return Tokenized(cached["ids"], cached["offsets"], cached["truncated"].astype(bool))
    tokens = tokenize_captions(texts, tokenizer, max_length)
    save_arrays(path, tokens.arrays(), CACHE_VERSION)
    return tokens
