"""One reference model per scenario, on the shared :class:`VarLenModule` base (imported lazily)."""

from __future__ import annotations

import importlib
import importlib.util

from varlen.models.base import VarLenModule

#: public name -> module of this package that defines it
SCENARIOS = {
    "TextClassifier": "text",
    "BearingClassifier": "bearing",
    "MoleculeGNN": "molecules",
    "VideoTextAligner": "video_text",
    "SpectralTransformer": "hyperspectral",
}

__all__ = ["VarLenModule", "import_all", *SCENARIOS]


def import_all() -> None:
    """Import every scenario module that exists, so the CLI knows every model by name."""
    for module in sorted(set(SCENARIOS.values())):
        if importlib.util.find_spec(f"{__name__}.{module}") is not None:
            importlib.import_module(f"{__name__}.{module}")


def __getattr__(name: str):
    if name in SCENARIOS:
        return getattr(importlib.import_module(f"{__name__}.{SCENARIOS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
