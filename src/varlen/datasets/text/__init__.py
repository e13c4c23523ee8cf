# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Text classification data: readers for local tables and the Hub, a synthetic default,
tokenised unpadded storage and its collate.

Public entry points (what a DataModule of one's own is built from): `read_table` /
`read_hub` (-> `TextTable`, columns named by `TextColumns`),
`split_by_column`, `synthetic_tables`, `encode_rows` (labels -> class ids, bad
rows through the report), `load_tokenizer` and `tokenize_table` (->
`TokenizedTexts`), and `TextCollator`. Helpers stay in their submodules:

* `readers`: open and check CSV / TSV / JSON(L) / Parquet files; map
  labels to classes, bad rows through the report.
* `hf_tables`: a `datasets.Dataset`, a `save_to_disk` folder, an `.arrow` file.
* `hub`: `dataset_name`, the Hub or a saved `DatasetDict` folder.
* `sources`: each kind of source, read a few columns or a slice at a time.
* `memory`: a source's rows in memory (`read_table`, `read_hub`).
* `places`: how messages name rows (a file's line, or a row from 1).
* `pretokenised`: tables that already hold token ids.
* `labels`: a label's class name, the checked class list of a label column.
* `column_splits`: the splits a table marks in a column (`is_valid`, `split`).
* `synthetic`: the embedded movie reviews, short and long (offline default).
* `tokens`: tokenizers and tokenising a table once (truncated, or as windows).
* `report`: `TextReport`, the shared
  report plus documents -> windows.
* `dataset`: `TokenizedTexts`, ids as `Ragged` rows, padded
  a whole batch at a time on fetch (`TextBatch`).
* `collate`: `TextCollator`, which names the batch's fields.
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
