"""A user's per-sample `transform` of training samples (augmentation), run where the batch is fetched (the
loader's workers), its randomness a function of `(seed, epoch, sample index)` only.

`transform(sample) -> sample` gets `dataset[i]` (`index`, each field's array in its served dtype, each
fixed value, `label`) and returns the sample to batch. Its randomness is drawn from a word of
`varlen.prepare.draws.counter_bits` of `(seed, epoch, index)`: a function with a second required parameter
(or one named `rng`) receives a `numpy.random.Generator` seeded by that word; any other is called with
Python's `random`, numpy's global generator and torch's CPU generator seeded by it, and put back after
the call. So a sample is transformed the same in whatever batch, worker, rank or resumed run it is
fetched, and anew each epoch (training batches carry their epoch: `EpochIndices`).

What a transform may change: values, and a size field's length downwards (a crop: the batch was planned
at the stored length, which a longer sample would break); each field is cast back to its served dtype
(`x + rng.normal(...)` is float64). What it returns is checked as what is read
(`outputs`: every field in its shape, values its dtype holds, finite, a size
field not emptied, the label kept and in range), a `DataError` naming the sample and the
transform whatever `on_bad` says: a transform's bug is no bad row. Spawned and forkserver workers receive it
pickled: a lambda or a function defined inside another is refused when such a loader is made, naming the fix.
"""

from __future__ import annotations

import inspect
import pickle
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching.pad_collate import PadCollate
from varlen.datasets.sequence.outputs import OutputRules, checked_output
from varlen.errors import DataError
from varlen.prepare.draws import counter_bits

__all__ = ["SampleTransform", "transform_name"]

#: the name of the transform's draws (`varlen.prepare.draws.counter_bits`)
DRAWS = "sequence sample transform"


def transform_name(fn: Any) -> str:
    """`module.qualname` of a function or class, else its type's."""
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


def _takes_rng(fn: Callable[..., Any]) -> str | None:
    """How `fn` takes a generator: `"positional"` (a second required parameter), `"keyword"` (one
    named `rng`), or None (one argument: the global generators are seeded instead)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in positional and p.default is inspect.Parameter.empty]
    if len(required) >= 2:
        return "positional"
    return "keyword" if any(p.name == "rng" for p in parameters) else None


class _SeededGlobals:
    """Python's `random`, numpy's global generator and torch's CPU generator seeded by `word` inside
    the block, and put back after it (CUDA's generators are left alone)."""

    def __init__(self, word: int) -> None:
        self.word = word

    def __enter__(self) -> None:
        self.saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        random.seed(self.word)
        np.random.seed([self.word & 0xFFFFFFFF, self.word >> 32])
        torch.default_generator.manual_seed(self.word)

    def __exit__(self, *exc: Any) -> None:
        python, numpy_state, torch_state = self.saved
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)


class SampleTransform:
    """`fn` applied to a training batch's samples, each with its own draws (see the module docstring).

    Args:
        fn: the user's `transform`.
        seed: the DataModule's seed.
        rules: what a returned sample must be (its fields' served dtypes and shapes, the size fields, the
            label's task and classes: `outputs`).
        where: the source, for messages.
    """

    def __init__(self, fn: Callable[..., Any], seed: int, rules: OutputRules, where: str = "") -> None:
        if not callable(fn):
            raise TypeError(f"transform must be a callable sample -> sample, got {type(fn).__name__}")
        self.fn, self.seed, self.where, self.rules = fn, int(seed), where, rules
        self.takes_rng = _takes_rng(fn)

    def words(self, indices: np.ndarray, epoch: int) -> list[int]:
        """Each sample's 64-bit seed in `epoch` (`indices`: positions in the split)."""
        return counter_bits(DRAWS, self.seed, epoch, np.asarray(indices, np.int64), np.array(0)).tolist()

    def one(self, sample: dict[str, Any], word: int) -> dict[str, Any]:
        """`fn` of one sample, with draws from `word`; checked and cast back to the served dtypes.

        Raises:
            DataError: the output cannot be served (`checked_output`),
                naming the split, the sample, the field and the transform.
        """
        stored = {name: len(sample[name]) for name in self.rules.size_fields}
        index, labelled = sample["index"], "label" in sample
        if self.takes_rng == "positional":
            out = self.fn(sample, np.random.default_rng(word))
        elif self.takes_rng == "keyword":
            out = self.fn(sample, rng=np.random.default_rng(word))
        else:
            with _SeededGlobals(word):
                out = self.fn(sample)
        where = f"{self.where}: transform {transform_name(self.fn)} of sample {index}"
        if not isinstance(out, Mapping):
            raise DataError(f"{where} returned {type(out).__name__}: return the sample (a dict)")
        out = checked_output(out, stored, labelled, self.rules, where)
        out["index"] = index
        return out

    def batch(self, samples: Sequence[dict[str, Any]], epoch: int, collate: PadCollate) -> dict[str, Any]:
        """The transformed samples of one batch, padded by `collate` (`label` becomes `labels`)."""
        indices = np.array([s["index"] for s in samples], np.int64)
        batch = collate([self.one(s, w) for s, w in zip(samples, self.words(indices, epoch), strict=True)])
        if "label" in batch:
            batch["labels"] = batch.pop("label")
        return batch

    def check_picklable(self, owner: str, num_workers: int, start_method: str | None) -> None:
        """Refuse a transform that spawned (or forkserver) workers cannot receive.

        Raises:
            DataError: naming the transform, why pickling failed and the fix.
        """
        if num_workers == 0:
            return
        import multiprocessing

        method = start_method or multiprocessing.get_start_method(allow_none=True)
        method = method or multiprocessing.get_context().get_start_method()
        if method == "fork":
            return
        try:
            pickle.dumps(self.fn)
        except Exception as error:  # whatever pickling raises (PicklingError, AttributeError, TypeError...)
            raise DataError(
                f"{owner}: transform {transform_name(self.fn)} cannot be pickled ({type(error).__name__}: {error}), "
                f"and {method} loader workers receive it pickled: define it at the top level of a module (not a "
                "lambda or a function inside another), make it an instance of such a class, or use "
                "multiprocessing_context='fork'"
            ) from error
