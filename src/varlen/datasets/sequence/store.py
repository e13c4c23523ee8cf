"""A file's or Hugging Face Dataset's served columns, converted once into an Arrow IPC cache table.

`prepare_data` (one process per node) reads the source and writes its served columns, in varlen's
layout (`varlen.storage.tables`), to `<cache_dir>/sequence/<name>-<key>.arrow`; `setup` in every rank
and every loader worker maps it. The key is the source's content (a file's hash, a Dataset's
fingerprint), the columns served and the label column; a file of another key or version is rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from varlen.datasets.sequence.columns import SequenceColumns, table_columns
from varlen.datasets.sequence.fields import FieldSpec
from varlen.datasets.sequence.sources import Source
from varlen.storage.cache import cache_key, default_cache_dir, writable_folder
from varlen.storage.tables import open_table, write_table

__all__ = ["VERSION", "cached_columns", "table_path"]

#: the layout of a sequence cache table (a reader of another rebuilds it)
VERSION = "sequence-1"


def table_path(source: Source, specs: Mapping[str, FieldSpec], label: str | None, cache_dir: str | None) -> Path:
    """Where `source`'s cache table lives, named by its key (see the module docstring)."""
    served = [[name, spec.ragged] for name, spec in specs.items()]
    key = cache_key(source.identity(), served, label, version=VERSION)
    stem = Path(str(source.value)).stem if source.kind == "path" else "huggingface"
    return Path(cache_dir or default_cache_dir()) / "sequence" / f"{stem}-{key[:16]}.arrow"


def cached_columns(
    source: Source, specs: Mapping[str, FieldSpec], label: str | None, cache_dir: str | None
) -> SequenceColumns:
    """`source`'s columns mapped from its cache table, built first when it is missing or stale.

    Raises:
        DataError: the source cannot be read (naming it), or the cache folder cannot be written.
    """
    path = table_path(source, specs, label, cache_dir)
    key = path.stem.rsplit("-", 1)[-1]
    table = open_table(path, version=VERSION, key=key)
    if table is None:
        writable_folder(path)
        columns = table_columns(source.read(), specs, label, source.where)
        write_table(path, columns.arrays(), version=VERSION, key=key)
        table = open_table(path, version=VERSION, key=key)
    return SequenceColumns.mapped(table, label)
