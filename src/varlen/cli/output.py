"""What the `varlen` console prints besides a command's own output.

Every process of the command (`quiet`, `show_varlen_logs`): the third-party notices a user cannot act on left
out (`varlen.notices.quiet_third_party`), terminal codes and Hugging Face's progress bars off a terminal,
varlen's log lines (the data report) on stderr, and each of varlen's warnings once, as `varlen: warning: ...`
(no path: the command has no line of the user's to name).

For one run of a Trainer command (`ConsoleRun`, entered by `varlen.cli.lightning_cli.VarLenCLI`): Lightning's
INFO lines (the devices, the seed, why a fit stopped) and its logging-interval warning left out, any other
third-party warning in one line without its file's path, and transformers' load report of a classifier head
that a fine-tune initialises (`head_reports`) left out. `--verbose` (or `VARLEN_VERBOSE=1`) keeps all of
Lightning's and transformers' own output; all is put back when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from varlen import notices
from varlen.notices import THIRD_PARTY_NOISE, VarLenWarning, quiet_third_party

__all__ = [
    "THIRD_PARTY_NOISE",
    "VERBOSE_ENV",
    "ConsoleRun",
    "head_reports",
    "is_verbose",
    "one_line_warning",
    "quiet",
    "show_varlen_logs",
]

#: the environment variable that makes every command verbose, as `--verbose` makes one
VERBOSE_ENV = "VARLEN_VERBOSE"
#: Lightning's loggers whose INFO lines a run leaves out ("GPU available", "Seed set to 0", "`Trainer.fit`
#: stopped"); their warnings stay
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
#: Lightning's warnings a run leaves out: a short run (`limit_train_batches`) says it logs less than it could
LIGHTNING_NOISE = (r".*is smaller than the logging interval.*",)
#: a terminal's colour and style codes, as third-party messages write them
TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")
#: third-party loggers that write terminal codes into a log, and transformers' load report
STYLED_LOGGERS = ("transformers.modeling_utils",)
#: the first part of a parameter's name in the task heads a fine-tune initialises (transformers' names)
HEADS = ("classifier", "pre_classifier", "score", "qa_outputs")

_state = {"verbose": False}


def is_verbose() -> bool:
    """Whether this run keeps Lightning's and transformers' own output (`--verbose`, `VARLEN_VERBOSE=1`)."""
    return _state["verbose"] or os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


class _PlainText(logging.Filter):
    """Strips terminal codes from a record while stderr is no terminal: transformers' load report bolds its
    title whatever the stream (transformers 5)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not sys.stderr.isatty():
            record.msg = TERMINAL_CODES.sub("", record.msg)
        return True


def quiet() -> None:
    """Silence `THIRD_PARTY_NOISE` and Lightning's cloud tips; off a terminal, keep terminal codes
    and Hugging Face's progress bars (redrawn with carriage returns) out of the output (idempotent)."""
    quiet_third_party()
    for name in STYLED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _PlainText) for f in logger.filters):
            logger.addFilter(_PlainText())
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read where transformers is imported later
        hugging_face = sys.modules.get("transformers.utils.logging")  # already imported (torchmetrics does)
        if hugging_face is not None:
            hugging_face.disable_progress_bar()  # its own bars (loading weights) and huggingface_hub's


def show_varlen_logs() -> None:
    """Print the `varlen` logger's INFO messages (the data report) on stderr, and each of varlen's warnings once
    as `varlen: warning: ...` (`one_line_warning`), for the rest of this process: the console's (once)."""
    notices.show_logs(always=True)
    if warnings.showwarning is not _show:
        _show.shown_before = warnings.showwarning
        warnings.showwarning = _show
        warnings.filterwarnings("once", category=VarLenWarning)


def _package(filename: str) -> str | None:
    """The installed package a file belongs to (`lightning`, `torch`), None for varlen's and a script's."""
    parts = Path(filename).parts
    for folder in ("site-packages", "dist-packages"):
        if folder in parts and parts.index(folder) + 1 < len(parts):
            name = parts[parts.index(folder) + 1].removesuffix(".py")
            return None if name == "varlen" else name
    return None


def one_line_warning(message: Warning | str, category: type[Warning], filename: str) -> str | None:
    """How the console prints a warning: varlen's `varlen: warning: ...`; another package's (unless verbose)
    `lightning: warning: ...`; None: as Python prints it (a verbose run's third-party warnings, a script's)."""
    text = str(message).strip()
    if issubclass(category, VarLenWarning) or f"{os.sep}varlen{os.sep}" in filename:
        return f"varlen: warning: {text}"
    package = _package(filename)
    if package is None or is_verbose():
        return None
    return f"{package}: warning: {text}"


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` while the console runs: `one_line_warning`, else Python's own."""
    said = one_line_warning(message, category, filename)
    if said is None:
        _show.shown_before(message, category, filename, lineno, file, line)
        return
    stream = file if file is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError):  # a closed stream: nowhere to say it, as Python's own
        stream.write(said + "\n")


_show.shown_before = warnings.showwarning


class ConsoleRun(contextlib.ExitStack):
    """One Trainer command's output (the module's docstring); `quiet(verbose)` once its options are parsed."""

    def __enter__(self) -> ConsoleRun:
        super().__enter__()
        self.enter_context(warnings.catch_warnings())  # the filters put back when the run ends
        before = _state["verbose"]
        self.callback(_state.__setitem__, "verbose", before)
        return self

    def quiet(self, verbose: bool) -> None:
        """`verbose` (or `VARLEN_VERBOSE=1`): Lightning's and transformers' own output; else the run's quiet."""
        _state["verbose"] = bool(verbose) or is_verbose()
        if _state["verbose"]:
            return
        for name in LIGHTNING_LOGGERS:
            logger = logging.getLogger(name)
            self.callback(logger.setLevel, logger.level)
            logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
        for pattern in LIGHTNING_NOISE:
            warnings.filterwarnings("ignore", message=pattern)


class _NoHeadReport(logging.Filter):
    """Drops transformers' load report when every key it lists is a task head's, missing from the checkpoint
    (`HEADS`): what every fine-tune of a pretrained encoder initialises. A report of anything else stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = TERMINAL_CODES.sub("", str(record.msg))
        if "LOAD REPORT" not in text:
            return True
        rows = [line.split("|") for line in text.splitlines() if line.count("|") >= 2]
        keyed = [(cells[0].strip(), cells[1].strip()) for cells in rows[1:] if cells[0].strip() != "Key"]
        keyed = [(key, status) for key, status in keyed if key and not set(key) <= set("-+")]
        heads = all(status == "MISSING" and key.split(".")[0] in HEADS for key, status in keyed)
        return not (keyed and heads)


@contextlib.contextmanager
def head_reports() -> Iterator[None]:
    """While a model loads: transformers' report of a newly initialised head left out (`_NoHeadReport`), unless
    the run is verbose."""
    if is_verbose():
        yield
        return
    loggers = [logging.getLogger(name) for name in STYLED_LOGGERS]
    drop = _NoHeadReport()
    for logger in loggers:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)
