"""The base's arguments, written once: their names, how a scenario hands them on, the loader's checked.

A scenario declares only its own arguments and hands the rest to the base with `**kwargs`
(jsonargparse follows them into the base's signature, so `varlen fit --data.help` and the configs
list them with the base's defaults). A base argument a scenario sets itself is passed by name
(`super().__init__(stream=None, **kwargs)`) and listed in its `fixed_arguments`: then neither the
command line nor a Python caller can set it. `handed_on` gives each such class the signature
its callers see, so `inspect.signature` (the typo hints, a source's arguments) lists them all.
"""

from __future__ import annotations

import inspect
import multiprocessing
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "BASE_ARGS",
    "LOADER_TIMEOUT",
    "PredictSplit",
    "StartMethod",
    "base_args",
    "check_loader_arguments",
    "handed_on",
    "keep",
]

#: the arguments of `VarLenDataModule`, which every scenario hands on
BASE_ARGS = (
    "batch_size",
    "max_tokens",
    "shuffle",
    "seed",
    "num_buckets",
    "pad_to_multiple_of",
    "max_shapes",
    "rung_batch_sizes",
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "multiprocessing_context",
    "timeout",
    "predict_split",
    "on_bad",
    "sources",
    "source_weights",
    "mix",
    "stream",
)
#: the split `predict` runs on, unless the DataModule built a `predict` split of its own
PredictSplit = Literal["train", "val", "test"]
#: how loader workers start (None: the platform's default)
StartMethod = Literal["fork", "spawn", "forkserver"] | None
#: seconds a loader worker's batch may take (`timeout`): far above any normal batch, a stuck worker's bound
LOADER_TIMEOUT = 600.0


def base_args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The base's arguments among a subclass's own (`super().__init__(**base_args(locals()))`), for a
    subclass that lists every argument itself rather than handing them on with `**kwargs`."""
    return {name: arguments[name] for name in BASE_ARGS if name in arguments}


def handed_on(cls: type, parent: type, fixed: tuple[str, ...]) -> inspect.Signature | None:
    """The signature callers of `cls` see: its own arguments, then `parent`'s it hands on through
    `**kwargs` (keyword-only, `fixed` left out); None where `cls.__init__` takes no `**kwargs`."""
    own = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return None
    names = {p.name for p in own} | set(fixed)
    rest = [p for p in inspect.signature(parent).parameters.values() if p.name not in names]
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in rest if p.kind is not p.VAR_KEYWORD]
    return inspect.Signature(own[:-1] + keyword, return_annotation=None)


def keep(obj: object, arguments: Mapping[str, Any], names: str) -> None:
    """Each of `names` (separated by spaces) an attribute of `obj` holding the argument as given:
    `keep(self, locals(), "root download cache_dir")`."""
    for name in names.split():
        setattr(obj, name, arguments[name])


def check_loader_arguments(given: Mapping[str, Any]) -> None:
    """Refuse loader settings (`given`: the base's `__init__`'s locals) the loader would refuse later, at
    the first epoch or in a worker."""
    num_workers, context, timeout = given["num_workers"], given["multiprocessing_context"], given["timeout"]
    if num_workers == 0 and (given["persistent_workers"] or given["prefetch_factor"] is not None):
        raise ValueError("persistent_workers and prefetch_factor need num_workers > 0")
    methods = multiprocessing.get_all_start_methods()
    if context is not None and context not in methods:
        raise ValueError(f"multiprocessing_context must be one of {methods} here, got {context!r}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be seconds >= 0 (0: wait forever), got {timeout!r}")
    if given["predict_split"] not in ("train", "val", "test"):
        raise ValueError(f"predict_split must be train, val or test, got {given['predict_split']!r}")
