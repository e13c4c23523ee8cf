"""Warnings and log lines said once per job, pointing at the line a user can act on.

Under DDP every rank builds its data, so a notice raised while building would be printed once per
rank; here it is said by rank zero only (Lightning sets the rank before any hook runs; plain
`torchrun` sets `RANK`). A warning raised inside a Lightning hook would otherwise name a line
of Lightning's (`trainer/call.py`); `warn` names the first line outside varlen and the
libraries it runs under (the user's script), or varlen's own line when there is none (the
`varlen` command, whose console prints it as `varlen: warning: ...`).

Their category is `VarLenWarning` (a `UserWarning`): `warnings.filterwarnings("ignore", category=VarLenWarning)`
silences varlen's and nothing else. `quiet_third_party` is the opt-in for a script of your own: it leaves out the
notices of Lightning and torchdata that a varlen user cannot act on (nothing is silenced on `import varlen`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

# Lightning's own rank_zero_only (Lightning sets its .rank), read without importing Lightning
from lightning_utilities.core.rank_zero import rank_zero_only

__all__ = [
    "THIRD_PARTY_NOISE",
    "VarLenWarning",
    "info",
    "is_rank_zero",
    "quiet_third_party",
    "say",
    "show_logs",
    "warn",
]


class VarLenWarning(UserWarning):
    """What varlen warns about: something in your data or settings worth a look (never a deprecation)."""


#: third-party warnings a user of varlen can do nothing about (regular expressions of their messages)
THIRD_PARTY_NOISE = (
    r".*'set_vital' is deprecated.*",  # torchdata's StatefulDataLoader calls torch.set_vital
    r".*isinstance\(treespec, LeafSpec\).*",  # Lightning's CombinedLoader (utilities/_pytree.py) on torch >= 2.9
    r".*LightningCLI's args parameter is intended to run from within Python.*",
    r".*`tensorboardX` has been removed as a dependency.*",  # Lightning's default logger: its CSVLogger fallback
)
#: Lightning's loggers that print its cloud-service tips ("Tip: ... try installing litlogger / litmodels")
CLOUD_TIP_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _NoCloudTips(logging.Filter):
    """Drops Lightning's "Tip: ... try installing litlogger / litmodels" messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.getMessage())


def quiet_third_party() -> None:
    """Leave out what Lightning and torchdata print that a varlen user cannot act on: `THIRD_PARTY_NOISE` (the
    `LeafSpec` deprecation Lightning's own loader code raises on torch >= 2.9, the tensorboardX notice of its
    default logger, torchdata's `set_vital`) and Lightning's litlogger / litmodels tips. Nothing else is
    filtered; call it once, in your script (the `varlen` command does); idempotent."""
    for name in CLOUD_TIP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoCloudTips) for f in logger.filters):
            logger.addFilter(_NoCloudTips())
    for pattern in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=pattern)


_PACKAGES = (
    "varlen",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
    "torch",
    "torchdata",
    "jsonargparse",
    "_pytest",
    "pluggy",
)


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _PACKAGES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(str(Path(module.__file__).resolve().parent))
    return tuple(dirs)


def is_rank_zero() -> bool:
    """Whether this process is the job's rank zero (True outside distributed runs)."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:  # Lightning is not imported in this process (a spawned worker, plain torchrun)
        rank = int(os.environ.get("RANK", 0))
    return rank == 0


def _stacklevel() -> int:
    """The `stacklevel` of the first frame outside varlen and its runners, counted from
    `warn`'s caller; that caller's own line when every frame is inside them."""
    inside = _package_dirs()
    frame = sys._getframe(2)  # the caller of warn()
    level = 2
    while frame is not None:
        path = str(Path(frame.f_code.co_filename).resolve())
        if not path.startswith(inside) and not path.startswith("<"):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def warn(message: str, category: type[Warning] = VarLenWarning) -> None:
    """`warnings.warn` by rank zero only, at the user's line (see the module's docstring)."""
    if is_rank_zero():
        warnings.warn(message, category, stacklevel=_stacklevel())


def info(logger: logging.Logger, message: str, *args: object) -> None:
    """`logger.info` by rank zero only (shown: `show_logs`)."""
    if is_rank_zero():
        show_logs()
        logger.info(message, *args)


def say(line: str, trainer: object = None) -> None:
    """A progress line of a run (an epoch's, the warm-up's, validation's), by rank zero only: above the
    trainer's progress bar where one shows (inside it, the bar would redraw over it), else on stdout at once."""
    if not is_rank_zero():
        return
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is not None and bar.is_enabled:
        bar.print(line)
    else:
        print(line, flush=True)


class _VarlenHandler(logging.StreamHandler):
    """Writes the `varlen` logger's records to `sys.stderr` as it is when a record comes (a later redirection,
    or a test's capture, must not leave it a closed stream); unless `always`, only while the root logger has
    no handler (the user's logging config then shows them: the records propagate there)."""

    def __init__(self, always: bool = False) -> None:
        super().__init__()
        self.always = always
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if self.always or not logging.root.handlers:
            super().emit(record)


def show_logs(always: bool = False) -> None:
    """Show the `varlen` logger's INFO lines (the data report, the warm-up) as Lightning shows its own: the
    logger at INFO (unless a level was set on it) with a handler on stderr that writes while the root logger
    has none; where the user configured logging (`logging.basicConfig`), the lines go through that instead.
    `always` (the `varlen` command): on stderr whatever the root has, and not again through it. Idempotent:
    one handler, never two."""
    logger = logging.getLogger("varlen")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    ours = next((h for h in logger.handlers if isinstance(h, _VarlenHandler)), None)
    if ours is None and logger.handlers:  # a handler the user put on it: theirs shows the lines
        return
    if ours is None:
        ours = _VarlenHandler()
        logger.addHandler(ours)
    if always:
        ours.always, logger.propagate = True, False
