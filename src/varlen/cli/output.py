"""What the `varlen` console prints besides a command's own output: third-party noise left out (deprecations a
user cannot act on, Lightning's cloud tips, terminal codes and progress bars off a terminal) and varlen's own
log lines on stderr."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

from varlen import notices

__all__ = ["THIRD_PARTY_NOISE", "quiet", "show_varlen_logs"]

#: third-party deprecation warnings a user of varlen can do nothing about (regular expressions)
THIRD_PARTY_NOISE = (
    r".*'set_vital' is deprecated.*",  # torchdata's StatefulDataLoader calls torch.set_vital
    r".*isinstance\(treespec, LeafSpec\).*",  # Lightning's pytree helper on torch >= 2.9
    r".*LightningCLI's args parameter is intended to run from within Python.*",
    r".*`tensorboardX` has been removed as a dependency.*",  # Lightning's CSVLogger fallback notice
)


#: Lightning's loggers that print its cloud-service tips
CLOUD_TIP_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _NoCloudTips(logging.Filter):
    """Drops Lightning's "Tip: ... try installing litlogger / litmodels" messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.getMessage())


#: a terminal's colour and style codes, as third-party messages write them
TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")
#: third-party loggers that write terminal codes into a log
STYLED_LOGGERS = ("transformers.modeling_utils",)


class _PlainText(logging.Filter):
    """Strips terminal codes from a record while stderr is no terminal: transformers' load report bolds its
    title whatever the stream (transformers 5)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not sys.stderr.isatty():
            record.msg = TERMINAL_CODES.sub("", record.msg)
        return True


def quiet() -> None:
    """Silence Lightning's cloud tips and `THIRD_PARTY_NOISE`; off a terminal, keep terminal codes
    and Hugging Face's progress bars (redrawn with carriage returns) out of the output (idempotent)."""
    for name, kind in [*((n, _NoCloudTips) for n in CLOUD_TIP_LOGGERS), *((n, _PlainText) for n in STYLED_LOGGERS)]:
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
    for pattern in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read where transformers is imported later
        hugging_face = sys.modules.get("transformers.utils.logging")  # already imported (torchmetrics does)
        if hugging_face is not None:
            hugging_face.disable_progress_bar()  # its own bars (loading weights) and huggingface_hub's


def show_varlen_logs() -> None:
    """Print the `varlen` logger's INFO messages (the data report) on stderr, once (`varlen.notices.show_logs`)."""
    notices.show_logs(always=True)
