"""One DataModule per scenario, and one for any ragged data, on the shared `VarLenDataModule` base (imported
lazily)."""

from __future__ import annotations

from varlen._lazy import lazy_scenarios
from varlen.datamodules.base import VarLenDataModule, base_args

#: public name -> module of this package that defines it
SCENARIOS = {
    "TextClassificationDataModule": "text",
    "BearingDataModule": "bearing",
    "MoleculeDataModule": "molecules",
    "VideoTextDataModule": "video_text",
    "HyperspectralDataModule": "hyperspectral",
    "SequenceDataModule": "sequence",
}

__all__ = ["VarLenDataModule", "base_args", "import_all", *SCENARIOS]


import_all, __getattr__ = lazy_scenarios(__name__, SCENARIOS)
