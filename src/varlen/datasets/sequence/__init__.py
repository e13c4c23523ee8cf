"""Any ragged data (Parquet, Arrow IPC, CSV, JSON Lines, Hugging Face Datasets, pyarrow Tables, in-memory arrays):
read, checked and served padded, for `SequenceDataModule`. Needs no extra."""

from varlen.datasets.sequence.collate import SequenceCollator
from varlen.datasets.sequence.columns import SequenceColumns, table_columns
from varlen.datasets.sequence.dataset import SequenceBatch, SequenceDataset
from varlen.datasets.sequence.fields import FieldSpec, field_specs
from varlen.datasets.sequence.sources import Source, mapping_table, source_of
from varlen.datasets.sequence.store import cached_columns
from varlen.datasets.sequence.synthetic import synthetic_sequences
from varlen.datasets.sequence.writer import write_arrays

__all__ = [
    "FieldSpec",
    "SequenceBatch",
    "SequenceCollator",
    "SequenceColumns",
    "SequenceDataset",
    "Source",
    "cached_columns",
    "field_specs",
    "mapping_table",
    "source_of",
    "synthetic_sequences",
    "table_columns",
    "write_arrays",
]
