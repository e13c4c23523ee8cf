"""`varlen tune`: the loader settings and the batch budget that fit this machine, measured.

`tune_command` is the command (the dispatcher in `varlen.cli.dispatch` passes it a `build` of the
config's DataModule and model); `largest_budget` is the memory budget's search on any probe.
"""

from varlen.tune.budget import largest_budget
from varlen.tune.command import tune_command

__all__ = ["largest_budget", "tune_command"]
