"""Items and size functions for tests/test_stream_index.py: importable by module name, as LitData's
writer processes and `varlen index-sizes --size-fn module:function` need."""

from __future__ import annotations

import numpy as np

__all__ = [
    "bad_label",
    "failing_size",
    "item_sizes",
    "label_of",
    "labelled_item",
    "make_item",
    "negative_size",
    "rows_of",
    "sizes_of",
    "weight_of",
]


def rows_of(i: int) -> int:
    return 1 + (i * 7) % 5


def make_item(i: int) -> dict:
    """Item `i`: `3 + (i * 13) % 40` tokens, `rows_of(i)` rows of 2 values."""
    return {
        "index": i,
        "tokens": np.arange(3 + (i * 13) % 40, dtype=np.int32),
        "rows": np.ones((rows_of(i), 2), np.float32),
    }


def item_sizes(item: dict) -> tuple[int, int]:
    return len(item["tokens"]), len(item["rows"])


def failing_size(item: dict) -> int:
    if item["index"] == 13:
        raise KeyError("no such field")
    return len(item["tokens"])


def negative_size(item: dict) -> int:
    return -1 if item["index"] == 13 else len(item["tokens"])


def label_of(item: dict) -> int | None:
    """Item `i`'s class: `i % 3`, none (None) for every seventh item."""
    return None if item["index"] % 7 == 0 else item["index"] % 3


def weight_of(item: dict) -> float:
    return 0.5 + item["index"] % 4


def bad_label(item: dict) -> int:
    return -2 if item["index"] == 13 else 0


def labelled_item(i: int) -> dict:
    """Item `i` with its class `label_of(i)` (-1: none) as its `label`."""
    label = label_of({"index": i})
    return make_item(i) | {"label": -1 if label is None else label}


def sizes_of(samples: list) -> np.ndarray:
    """Decoded items' sizes `[n, 2]` (a `StreamedDataset`'s `sample_sizes`)."""
    return np.array([item_sizes(item) for item in samples], dtype=np.int64).reshape(-1, 2)
