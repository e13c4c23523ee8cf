"""Training data from several sources (``sources``, ``source_weights``, ``mix``), checked here.

A DataModule's own arguments describe its first source, named :data:`MAIN`; each entry of
``sources`` is another, written as the arguments that differ (``{"name": "noisy", "train_file":
"noisy.csv"}``). The base builds a DataModule of the same class from them (so the same classes,
tokenizer and batching), takes its training split, and serves the training splits as one
:class:`~varlen.datasets.mixture.SourceMixture`. ``source_weights`` are the sources' shares of
every epoch (by default, as many as they hold); ``mix`` says whether sources share batches
(``within_batch``) or each batch comes from one source (``per_source``, as lhotse's and LitData's
per-stream batching).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["MAIN", "MIX_MODES", "Mix", "check_mix", "check_source_weights", "check_sources", "proportions"]

#: the name of the source the DataModule's own arguments describe
MAIN = "main"
Mix = Literal["within_batch", "per_source"]
MIX_MODES = ("within_batch", "per_source")
#: arguments a source entry may not set: they describe the mixture itself
MIXTURE_ARGS = ("sources", "source_weights", "mix")


def check_mix(mix: str, owner: str) -> str:
    if mix not in MIX_MODES:
        raise ValueError(f"{owner}: mix must be one of {MIX_MODES}, got {mix!r}")
    return mix


def check_sources(sources: Sequence[Mapping[str, Any]] | None, owner: str) -> list[tuple[str, dict[str, Any]]]:
    """``(name, arguments)`` of each extra source, in order (names default to ``source1``, ...).

    Raises:
        ValueError: an entry that is not a mapping, sets a mixture argument, or repeats a name.
    """
    checked: list[tuple[str, dict[str, Any]]] = []
    for number, entry in enumerate(sources or (), 1):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{owner}: sources[{number - 1}] must be a mapping of arguments, got {entry!r}")
        arguments = dict(entry)
        name = str(arguments.pop("name", f"source{number}"))
        nested = sorted(set(arguments) & set(MIXTURE_ARGS))
        if nested:
            raise ValueError(f"{owner}: source {name!r} sets {nested}: a source cannot be a mixture itself")
        if name in {MAIN, *(n for n, _ in checked)}:
            raise ValueError(f"{owner}: two sources are named {name!r} (the first source is {MAIN!r})")
        checked.append((name, arguments))
    return checked


def check_source_weights(weights: Sequence[float] | Mapping[str, float] | None, owner: str) -> Any:
    """``weights`` as floats (a list, or a mapping by source name), each finite and >= 0, not all 0."""
    if weights is None:
        return None
    items = weights.items() if isinstance(weights, Mapping) else enumerate(weights)
    values = {}
    for key, value in items:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{owner}: source_weights[{key!r}] must be a finite number >= 0, got {value!r}")
        values[key] = number
    if not any(values.values()):
        raise ValueError(f"{owner}: source_weights are all zero ({len(values)} sources): there is nothing to draw")
    return values if isinstance(weights, Mapping) else list(values.values())


def proportions(weights: Sequence[float] | Mapping[str, float], names: Sequence[str], owner: str) -> list[float]:
    """``weights`` in the order of ``names``, checked against them (one per source).

    Raises:
        ValueError: a list of another length (both lengths named), or names missing or unknown.
    """
    if isinstance(weights, Mapping):
        missing, unknown = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
        if missing or unknown:
            problems = [f"{what}: {these}" for what, these in (("missing", missing), ("unknown", unknown)) if these]
            raise ValueError(
                f"{owner}: source_weights name {sorted(weights)}, the sources are {list(names)} ({'; '.join(problems)})"
            )
        return [float(weights[name]) for name in names]
    if len(weights) != len(names):
        raise ValueError(
            f"{owner}: source_weights has {len(weights)} values but there are {len(names)} sources {list(names)}"
        )
    return [float(w) for w in weights]
