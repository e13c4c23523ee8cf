"""One DataModule per scenario, on the shared :class:`VarLenDataModule` base (imported lazily)."""

from __future__ import annotations

from varlen._lazy import lazy_scenarios
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


import_all, __getattr__ = lazy_scenarios(__name__, SCENARIOS)
