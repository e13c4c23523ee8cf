"""`dataset_name`: a dataset of the Hugging Face Hub (online, or in the `datasets` cache) or a
`DatasetDict` folder written by `save_to_disk` (opened with `datasets.load_from_disk`, in place).

Its `train` / `validation` / `test` splits become the DataModule's `train` / `val` /
`test`; a test split whose labels are all -1 (GLUE hides its test labels so) is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from varlen.datasets.text.hf_tables import is_saved_dataset, is_saved_dict, load_saved_dict
from varlen.datasets.text.labels import label_key
from varlen.errors import DataError, DatasetNotFoundError

__all__ = ["HUB_SPLITS", "hidden_labels", "is_folder", "load_hub"]

#: our split -> the Hub's name for it
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}


def is_folder(name: str) -> bool:
    """Whether `dataset_name` names a folder `save_to_disk` wrote (else: a Hub name)."""
    path = Path(name).expanduser()
    return is_saved_dict(path) or is_saved_dataset(path)


def load_hub(name: str, config_name: str | None) -> dict[str, Any]:
    """The `train` / `val` / `test` splits of a Hub dataset (or a saved `DatasetDict` folder) as
    `datasets.Dataset` objects (Arrow tables on disk: the `datasets` cache, or the folder).

    Raises:
        DatasetNotFoundError: the dataset is neither on the Hub (when online) nor in the local cache.
        DataError: it cannot be loaded, or has no `train` split.
    """
    import datasets

    try:
        hub = load_saved_dict(Path(name).expanduser()) if is_folder(name) else datasets.load_dataset(name, config_name)
    except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as error:
        raise DatasetNotFoundError(
            f"dataset {name!r}" + (f" (configuration {config_name!r})" if config_name else ""),
            ["the Hugging Face Hub", datasets.config.HF_DATASETS_CACHE],
            "run once online (without HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) so that datasets caches it, "
            "or save its splits with DatasetDict.save_to_disk and pass that folder as dataset_name, or as files "
            f"and pass train_file / val_file ({type(error).__name__}: {error})",
        ) from None
    except DataError:
        raise
    except Exception as error:  # datasets wraps builder and parser failures in several types
        cause = error.__cause__ or error
        raise DataError(f"dataset {name!r}: cannot load it: {type(cause).__name__}: {cause}") from None
    if "train" not in hub:
        raise DataError(f"dataset {name!r} has no 'train' split (it has {sorted(hub)})")
    return {split: hub[hub_split] for split, hub_split in HUB_SPLITS.items() if hub_split in hub}


def hidden_labels(labels: Sequence[Any]) -> bool:
    """Whether every label is -1 (GLUE hides its test labels so): such a split is left out."""
    return all(label_key(v) == "-1" for v in labels)
