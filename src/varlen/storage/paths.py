"""Where the real data files lie, from one place: `$VARLEN_DATA`, else `shared/data` beside the checkout.

Shipped configs write a data path as `${VARLEN_DATA}/text/sst2_train.tsv` and the CLI expands it
(`expand_data_paths`); the scripts and the tests' skip conditions ask `data_root`. So a
clone anywhere runs them once `VARLEN_DATA` names the folder, and a file of it that is not there
is an error that says which variable to set (`with_data_hint`), never a path relative to where
the command happened to start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from varlen.errors import DataError

__all__ = ["DATA_VARIABLE", "PLACEHOLDER", "data_root", "expand_data_paths", "missing_data_hint", "with_data_hint"]

#: the environment variable that names the folder of real data files
DATA_VARIABLE = "VARLEN_DATA"
#: how a config's value refers to that folder
PLACEHOLDER = "${" + DATA_VARIABLE + "}"


def data_root() -> Path:
    """`$VARLEN_DATA`, else the `shared/data` folder beside the checkout varlen runs from (the
    layout `<folder>/<checkout>/varlen` and `<folder>/shared/data`)."""
    value = os.environ.get(DATA_VARIABLE)
    if value:
        return Path(value).expanduser()
    return Path(__file__).resolve().parents[4] / "shared" / "data"


def missing_data_hint() -> str:
    """What `VARLEN_DATA` is now and how to set it, for a message about a data file not found."""
    if os.environ.get(DATA_VARIABLE):
        now = f"{DATA_VARIABLE}={os.environ[DATA_VARIABLE]}"
    else:
        now = f"{DATA_VARIABLE} is not set: the shared/data folder beside the checkout, {data_root()}"
    return f"{now}; set it to your data folder: export {DATA_VARIABLE}=/path/to/data"


def expand_data_paths(value: Any) -> Any:
    """`value` (a config's section: mappings, lists and strings) with `PLACEHOLDER` replaced by
    `data_root` in every string. Whether a file is there is its reader's to say (a download may be
    about to create it); `with_data_hint` adds the variable to a not-found error."""
    if isinstance(value, str):
        return value.replace(PLACEHOLDER, str(data_root()))
    if isinstance(value, Mapping):
        return {key: expand_data_paths(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(expand_data_paths(item) for item in value)
    return value


def with_data_hint(error: DataError) -> str:
    """`error`'s message, and where it names a file of the data folder that was not found (or the folder
    is absent), what `VARLEN_DATA` is and how to set it."""
    root = data_root()
    message = str(error)
    if str(root) in message and (isinstance(error, FileNotFoundError) or not root.is_dir()):
        return f"{message}\n{missing_data_hint()}"
    return message
