"""Exact duplicates: which items repeat an earlier one, and how many each split holds (for `dm.report`).

An item's *key* is its identity as the scenario defines it (a molecule's canonical SMILES, a
text's exact characters, as a digest). Splits keep every copy of a key together
(`varlen.prepare.splits.keyed_split`); `deduplicate` keeps the first copy (`repeats`); and
`count_duplicates` says in the report how many copies each split still holds, and how many
of a held-out split's items are in `train` too (files given per split cannot be regrouped).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from varlen.prepare.report import DataReport

__all__ = ["count_duplicates", "repeats", "text_digests"]


def repeats(keys: Sequence | np.ndarray) -> np.ndarray:
    """bool `[N]`: True where the key is one an earlier item has (every copy but the first)."""
    keys = np.asarray(keys)
    out = np.ones(len(keys), dtype=bool)
    out[np.unique(keys, return_index=True)[1]] = False
    return out


def text_digests(texts: Sequence[object], pairs: Sequence[object] | None = None) -> np.ndarray:
    """int64 `[N]` an 8-byte BLAKE2b digest of each text (and its pair): equal texts, equal digests
    (a collision among 2 M distinct texts has odds of about 1e-7)."""
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        parts = [str(text)] if pairs is None else [str(text), str(pairs[i])]
        data = "\x00".join(f"{len(p)}:{p}" for p in parts).encode("utf-8", "surrogatepass")
        out[i] = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)
    return out


def count_duplicates(
    report: DataReport, keys: Mapping[str, np.ndarray], unit: str, reference: str | None = "train"
) -> None:
    """Put in `report` each split's items that repeat an earlier item of the split, and (for the
    other splits) those whose key is in the `reference` split too."""
    known = keys.get(reference) if reference is not None else None
    for split, split_keys in keys.items():
        split_keys = np.asarray(split_keys)
        repeated = len(split_keys) - len(np.unique(split_keys))
        shared = 0 if known is None or split == reference else int(np.isin(split_keys, known).sum())
        report.duplicate(split, repeated, shared, unit)
