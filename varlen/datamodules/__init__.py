"""One DataModule per scenario, on the shared :class:`VarLenDataModule` base (imported lazily)."""

from __future__ import annotations

import importlib
import importlib.util

from varlen.datamodules.base import SizedSubset, VarLenDataModule, stratified_split

#: public name -> module of this package that defines it
SCENARIOS = {
    "TextClassificationDataModule": "text",
    "BearingDataModule": "bearing",
    "MoleculeDataModule": "molecules",
    "VideoTextDataModule": "video_text",
    "HyperspectralDataModule": "hyperspectral",
}

__all__ = ["SizedSubset", "VarLenDataModule", "import_all", "stratified_split", *SCENARIOS]


def import_all() -> None:
    """Import every scenario module that exists, so the CLI knows every DataModule by name."""
    for module in sorted(set(SCENARIOS.values())):
        if importlib.util.find_spec(f"{__name__}.{module}") is not None:
            importlib.import_module(f"{__name__}.{module}")


def __getattr__(name: str):
    if name in SCENARIOS:
        return getattr(importlib.import_module(f"{__name__}.{SCENARIOS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
