"""Modules that moved in 0.2 (grouped into `cli`, `callbacks`, `storage` and `prepare`; the streamed
plan's and the schedule's draws renamed): the old dotted names still import, with a `DeprecationWarning`
naming the new one, for one release."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module name -> new module name
MOVED = {
    "varlen.console": "varlen.cli.console",
    "varlen.cli_errors": "varlen.cli.typos",
    "varlen.cli_output": "varlen.cli.output",
    "varlen.cli_help": "varlen.cli.help",
    "varlen.commands": "varlen.cli.commands",
    "varlen.inspection": "varlen.cli.inspection",
    "varlen.scrub": "varlen.cli.scrub",
    "varlen.progress": "varlen.callbacks.progress",
    "varlen.resumable": "varlen.callbacks.resumable",
    **{f"varlen.{name}": f"varlen.storage.{name}" for name in ("cache", "tables", "checksums", "paths")},
    **{f"varlen.{name}": f"varlen.prepare.{name}" for name in ("report", "splits", "labels", "duplicates", "draws")},
    "varlen.batching.throughput": "varlen.batching.loader_rate",
    "varlen.batching.wait_advice": "varlen.batching.data_wait",  # one job: the wait, timed and explained
    "varlen.batching.collate": "varlen.batching.padding",
    "varlen.batching.shapes": "varlen.batching.shape_policy",
    "varlen.stream.shapes": "varlen.stream.shape_policy",
    # the streamed plan's modules named by what they hold (0.2): the layout, a rank's epochs, where pieces end
    "varlen.stream.plan": "varlen.stream.layout",
    "varlen.stream.plan_state": "varlen.stream.epochs",
    "varlen.stream.pieces": "varlen.stream.piece_ends",
    "varlen.stream.mixture": "varlen.stream.mixture_layout",
    "varlen.stream.mixture_state": "varlen.stream.mixture_epochs",
    "varlen.stream.mixture_sampler": "varlen.stream.sampler",
    "varlen.batching.scheduled": "varlen.batching.schedule_draws",
}


class _Alias(importlib.abc.Loader):
    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}: import that", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED[spec.name])
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec  # the import system set the old name's: the module keeps its own


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds an old name's spec whose module is the new one (`varlen.cache is varlen.storage.cache`)."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, _Alias()) if fullname in MOVED else None


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
