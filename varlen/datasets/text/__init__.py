"""Text classification data: readers for local tables and the Hub, a synthetic default,
tokenised unpadded storage and its collate.

* :mod:`~varlen.datasets.text.readers`: open and check CSV / TSV / JSON(L) / Parquet files or
  a Hub dataset; map labels to classes, bad rows through the report.
* :mod:`~varlen.datasets.text.synthetic`: the embedded movie reviews (offline default).
* :mod:`~varlen.datasets.text.tokens`: tokenizers and tokenising a table once.
* :mod:`~varlen.datasets.text.dataset`: :class:`TokenizedTexts`, ids as ``Ragged`` rows, padded
  a whole batch at a time on fetch (:class:`TextBatch`).
* :mod:`~varlen.datasets.text.collate`: :class:`TextCollator`, which names the batch's fields.
"""

from varlen.datasets.text.collate import TextCollator
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
from varlen.datasets.text.synthetic import synthetic_reviews, synthetic_tables
from varlen.datasets.text.tokens import default_tokenizer_path, load_tokenizer, tokenize_table

__all__ = [
    "FILE_TYPES",
    "TextCollator",
    "TextColumns",
    "TextBatch",
    "TextTable",
    "TokenizedTexts",
    "check_classes",
    "check_utf8",
    "class_list",
    "default_tokenizer_path",
    "encode_rows",
    "label_key",
    "load_tokenizer",
    "pad_texts",
    "read_hub",
    "read_table",
    "synthetic_reviews",
    "synthetic_tables",
    "tokenize_table",
]
