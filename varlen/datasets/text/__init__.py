# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Text classification data: readers for local tables and the Hub, a synthetic default,
tokenised unpadded storage and its collate.

* :mod:`~varlen.datasets.text.readers`: open and check CSV / TSV / JSON(L) / Parquet files or
  a Hub dataset; map labels to classes, bad rows through the report.
* :mod:`~varlen.datasets.text.column_splits`: the splits a table marks in a column (``is_valid``, ``split``).
* :mod:`~varlen.datasets.text.synthetic`: the embedded movie reviews, short and long (offline default).
* :mod:`~varlen.datasets.text.tokens`: tokenizers and tokenising a table once (truncated, or as windows).
* :mod:`~varlen.datasets.text.report`: :class:`TextReport`, the shared report plus documents -> windows.
* :mod:`~varlen.datasets.text.dataset`: :class:`TokenizedTexts`, ids as ``Ragged`` rows, padded
  a whole batch at a time on fetch (:class:`TextBatch`).
* :mod:`~varlen.datasets.text.collate`: :class:`TextCollator`, which names the batch's fields.
"""

from varlen._extras import require

require("text")  # first: names the extra when its packages are missing

from varlen.datasets.text.collate import TextCollator
from varlen.datasets.text.column_splits import SPLIT_SPELLINGS, split_by_column, split_of
from varlen.datasets.text.dataset import TextBatch, TokenizedTexts, pad_texts
from varlen.datasets.text.readers import (
    FILE_TYPES,
    TextColumns,
    TextTable,
    check_classes,
    check_utf8,
    class_list,
    encode_rows,
    label_key,
    read_hub,
    read_table,
)
from varlen.datasets.text.report import TextReport
from varlen.datasets.text.synthetic import (
    SYNTHETIC_KINDS,
    opinion_votes,
    synthetic_long_reviews,
    synthetic_reviews,
    synthetic_tables,
)
from varlen.datasets.text.tokens import (
    OVERFLOW,
    Overflow,
    check_stride,
    default_tokenizer_path,
    load_tokenizer,
    tokenize_table,
)

__all__ = [
    "FILE_TYPES",
    "OVERFLOW",
    "Overflow",
    "SPLIT_SPELLINGS",
    "SYNTHETIC_KINDS",
    "TextCollator",
    "TextColumns",
    "TextBatch",
    "TextReport",
    "TextTable",
    "TokenizedTexts",
    "check_classes",
    "check_stride",
    "check_utf8",
    "class_list",
    "default_tokenizer_path",
    "encode_rows",
    "label_key",
    "load_tokenizer",
    "opinion_votes",
    "pad_texts",
    "read_hub",
    "read_table",
    "split_by_column",
    "split_of",
    "synthetic_long_reviews",
    "synthetic_reviews",
    "synthetic_tables",
    "tokenize_table",
]
