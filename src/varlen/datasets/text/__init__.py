# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Text classification data: readers for local tables and the Hub, a synthetic default,
tokenised unpadded storage and its collate.

Public entry points (what a DataModule of one's own is built from): :func:`read_table` /
:func:`read_hub` (-> :class:`TextTable`, columns named by :class:`TextColumns`),
:func:`split_by_column`, :func:`synthetic_tables`, :func:`encode_rows` (labels -> class ids, bad
rows through the report), :func:`load_tokenizer` and :func:`tokenize_table` (->
:class:`TokenizedTexts`), and :class:`TextCollator`. Helpers stay in their submodules:

* :mod:`~varlen.datasets.text.readers`: open and check CSV / TSV / JSON(L) / Parquet files; map
  labels to classes, bad rows through the report.
* :mod:`~varlen.datasets.text.hf_tables`: a ``datasets.Dataset``, a ``save_to_disk`` folder, an ``.arrow`` file.
* :mod:`~varlen.datasets.text.hub`: ``dataset_name``, the Hub or a saved ``DatasetDict`` folder.
* :mod:`~varlen.datasets.text.sources`: each kind of source, read a few columns or a slice at a time.
* :mod:`~varlen.datasets.text.memory`: a source's rows in memory (:func:`read_table`, :func:`read_hub`).
* :mod:`~varlen.datasets.text.places`: how messages name rows (a file's line, or a row from 1).
* :mod:`~varlen.datasets.text.pretokenised`: tables that already hold token ids.
* :mod:`~varlen.datasets.text.labels`: a label's class name, the checked class list of a label column.
* :mod:`~varlen.datasets.text.column_splits`: the splits a table marks in a column (``is_valid``, ``split``).
* :mod:`~varlen.datasets.text.synthetic`: the embedded movie reviews, short and long (offline default).
* :mod:`~varlen.datasets.text.tokens`: tokenizers and tokenising a table once (truncated, or as windows).
* :mod:`~varlen.datasets.text.report`: :class:`~varlen.datasets.text.report.TextReport`, the shared
  report plus documents -> windows.
* :mod:`~varlen.datasets.text.dataset`: :class:`TokenizedTexts`, ids as ``Ragged`` rows, padded
  a whole batch at a time on fetch (:class:`~varlen.datasets.text.dataset.TextBatch`).
* :mod:`~varlen.datasets.text.collate`: :class:`TextCollator`, which names the batch's fields.
"""

from varlen._extras import require

require("text")  # first: names the extra when its packages are missing

from varlen.datasets.text.collate import TextCollator
from varlen.datasets.text.column_splits import split_by_column
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.memory import read_hub, read_table
from varlen.datasets.text.readers import TextColumns, TextTable, encode_rows
from varlen.datasets.text.synthetic import synthetic_tables
from varlen.datasets.text.tokens import load_tokenizer, tokenize_table

__all__ = [
    "TextCollator",
    "TextColumns",
    "TextTable",
    "TokenizedTexts",
    "encode_rows",
    "load_tokenizer",
    "read_hub",
    "read_table",
    "split_by_column",
    "synthetic_tables",
    "tokenize_table",
]
