"""Hugging Face `datasets` and Arrow IPC files as text tables: what `train_file` & co. take besides CSV,
TSV, JSON(L) and Parquet.

* a `datasets.Dataset` in memory (from Python only): read through `datasets` (its indices mapping,
  after a `select` or `shuffle`, included), identified by its fingerprint;
* a folder written by `Dataset.save_to_disk`: opened with `datasets.load_from_disk` (memory-mapped in
  place), identified by its files' content; a `DatasetDict` folder is a `dataset_name`;
* an `.arrow` file: the IPC stream format `datasets` writes (its cache files, a saved folder's
  shards) or the IPC file format (`pyarrow.ipc.new_file`, Feather v2), memory-mapped with pyarrow.

`datasets` is imported only when one of them is met: a run on CSV files never pays for it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from varlen.errors import DataError, DatasetNotFoundError
from varlen.storage.cache import file_hash

__all__ = [
    "dataset_identity",
    "folder_identity",
    "is_dataset",
    "is_saved_dataset",
    "is_saved_dict",
    "load_saved",
    "load_saved_dict",
    "read_arrow",
]

#: the files `save_to_disk` marks a saved `Dataset` / `DatasetDict` folder with (`datasets.config`)
DATASET_STATE = "state.json"
DATASET_DICT = "dataset_dict.json"
DATASET_INFO = "dataset_info.json"


def is_dataset(value: Any) -> bool:
    """Whether `value` is a `datasets.Dataset` (False without importing `datasets` when nothing
    has imported it: no such object can exist then)."""
    module = sys.modules.get("datasets")
    return module is not None and isinstance(value, module.Dataset)


def is_saved_dataset(path: Path) -> bool:
    """Whether `path` is a folder `Dataset.save_to_disk` wrote."""
    return path.is_dir() and (path / DATASET_STATE).is_file()


def is_saved_dict(path: Path) -> bool:
    """Whether `path` is a folder `DatasetDict.save_to_disk` wrote."""
    return path.is_dir() and (path / DATASET_DICT).is_file()


def dataset_identity(dataset: Any) -> list[Any]:
    """What identifies an in-memory `Dataset`'s rows: its fingerprint (`datasets` derives it from the
    data and every transform since; equal data and steps, equal fingerprints) and its row count."""
    return ["dataset", dataset._fingerprint, dataset.num_rows]


def folder_identity(path: Path) -> list[Any]:
    """What identifies a saved folder's rows: the content hash of its state, its info and every data file
    its state lists (a folder saved again with other rows is a new identity, the same rows saved elsewhere
    the same one; cache files `map` wrote beside them are no part of it)."""
    state = path / DATASET_STATE
    try:
        listed = [entry["filename"] for entry in json.loads(state.read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataError(f"{state}: not the state file save_to_disk writes ({type(error).__name__}: {error})") from None
    names = [DATASET_STATE, *([DATASET_INFO] if (path / DATASET_INFO).is_file() else []), *listed]
    return ["saved", [[name, file_hash(path / name)] for name in names]]


def load_saved(path: Path, role: str) -> Any:
    """The `Dataset` a `save_to_disk` folder holds, memory-mapped in place.

    Raises:
        DataError: the folder holds a `DatasetDict` (its splits are a `dataset_name`), or
            `datasets` cannot load it.
    """
    if is_saved_dict(path):
        splits = sorted(p.name for p in path.iterdir() if p.is_dir())
        raise DataError(
            f"{path}: a saved DatasetDict (splits {splits}), not one Dataset; pass the folder as dataset_name "
            f"(its train / validation / test splits are used), or one split's folder as {role}"
        )
    import datasets

    try:
        return datasets.load_from_disk(str(path))
    except Exception as error:  # datasets raises FileNotFoundError, ValueError, JSON and Arrow errors
        raise DataError(f"{path}: datasets.load_from_disk cannot load it: {type(error).__name__}: {error}") from None


def load_saved_dict(path: Path) -> Any:
    """The `DatasetDict` a `save_to_disk` folder holds (`dataset_name` given a folder).

    Raises:
        DataError: `datasets` cannot load it, or it holds one `Dataset` (a `train_file`).
    """
    import datasets

    if is_saved_dataset(path):
        raise DataError(f"{path}: a saved Dataset (one split), not a DatasetDict; pass it as train_file")
    try:
        return datasets.load_from_disk(str(path))
    except Exception as error:
        raise DataError(f"{path}: datasets.load_from_disk cannot load it: {type(error).__name__}: {error}") from None


def read_arrow(path: Path, role: str) -> Any:
    """An `.arrow` file as a `pyarrow.Table`, memory-mapped: the IPC file format or the stream format.

    Raises:
        DatasetNotFoundError: no such file.
        DataError: neither format, or a file cut short.
    """
    import pyarrow as pa

    if not path.is_file():
        raise DatasetNotFoundError(
            f"Arrow table ({role})", path.resolve(), f"point {role} at an existing .arrow file (Arrow IPC)"
        )
    try:
        source = pa.memory_map(str(path))
        try:
            return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:  # not the file format: the stream format datasets writes
            source.seek(0)
            return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as error:
        raise DataError(
            f"{path}: cannot read it as Arrow IPC (file or stream format): {type(error).__name__}: {error}"
        ) from None
