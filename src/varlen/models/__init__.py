"""One reference model per scenario, and one for any ragged data, on the shared `VarLenModule` base (imported
lazily)."""

from __future__ import annotations

from varlen._lazy import lazy_scenarios
from varlen.models.base import VarLenModule

#: public name -> module of this package that defines it
SCENARIOS = {
    "TextClassifier": "text",
    "BearingClassifier": "bearing",
    "MoleculeGNN": "molecules",
    "VideoTextAligner": "video_text",
    "SpectralTransformer": "hyperspectral",
    "SequenceModel": "sequence",
}

__all__ = ["VarLenModule", "import_all", *SCENARIOS]


import_all, __getattr__ = lazy_scenarios(__name__, SCENARIOS)
