"""varlen: Lightning DataModules for variable-length data, batched by size, padded by the batch.

Heavy modules (Lightning, transformers, RDKit, PyG) load only when you import the scenario
that needs them: `from varlen.datamodules import TextClassificationDataModule`. The one function
here, `varlen.write_arrays` (your arrays as a Parquet or Arrow file, each field in its dtype),
is imported when first used.
"""

import importlib
from typing import Any

from varlen import _moved

__version__ = "0.1.0"
__all__ = ["__version__", "write_arrays"]

#: names imported when first asked for (`import varlen` stays light), as varlen._lazy does for scenarios
_LAZY = {"write_arrays": "varlen.datasets.sequence.writer"}


_moved.install()  # the old names of moved modules, for one release


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'varlen' has no attribute {name!r}")
