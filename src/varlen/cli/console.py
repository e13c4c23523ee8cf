"""The `varlen` command's entry: `varlen`, `varlen --help`, a mistyped command (`varlen fitt`) and a
command's help seen before (`varlen.cli.saved_help`) and a command line the saved schema refuses
(`varlen.cli.precheck`: a mistyped key, a wrong value, an empty config) answer from here, before torch,
Lightning or any scenario is imported (under a second); every other call goes to `varlen.cli.dispatch.console`.
Output into a pipe whose reader has gone (`varlen --help | head -1`) ends quietly."""

from __future__ import annotations

import contextlib
import os
import sys

from varlen.cli.commands import LIGHT, SUMMARIES
from varlen.cli.precheck import precheck
from varlen.cli.saved_help import is_help, printed, recorded
from varlen.cli.typos import unknown_name

__all__ = ["main", "usage"]


def usage() -> str:
    """What `varlen --help` prints: the commands, and where each says more."""
    width = max(map(len, SUMMARIES))
    lines = [
        "usage: varlen COMMAND [--config CONFIG] [--NAME VALUE ...]",
        "",
        "PyTorch Lightning DataModules for variable-length data: Lightning's CLI over every installed DataModule",
        "and model (fit, validate, test, predict), and varlen's data tools.",
        "",
        "commands:",
        *(f"  {name.ljust(width)}  {summary}" for name, summary in SUMMARIES.items()),
        "",
        "varlen COMMAND --help: a command's options; varlen fit --data.help CLASS: a DataModule's arguments.",
        "A first run: varlen fit --config configs/text_bert.yaml",
    ]
    return "\n".join(lines)


def main() -> None:
    """`varlen` alone (the commands, status 2), `varlen --help` (status 0) and an unknown command (its closest,
    status 2) here; the rest in varlen.cli.dispatch."""
    try:
        try:
            _dispatch(sys.argv[1:])
        finally:  # also after a command's sys.exit: here a closed pipe can be caught, not at the interpreter's exit
            sys.stdout.flush()
    except BrokenPipeError:  # the reader has gone (| head): the Python docs' recipe, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit writes nowhere instead of failing again
        sys.exit(1)


def _dispatch(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    if not argv[0].startswith("-") and argv[0] not in SUMMARIES:
        sys.stderr.write(
            f"varlen: error: no command {unknown_name(argv[0], SUMMARIES)} (varlen --help lists the commands)\n"
        )
        sys.exit(2)
    if argv[0] in LIGHT:  # a scrub: no Lightning, no scenario (varlen.cli.scrub)
        from varlen.cli.scrub import main as verify

        sys.exit(verify(argv[1:]))
    help_ = is_help(argv)
    if help_ and printed(argv):  # a command's help, seen before with these packages (varlen.cli.saved_help)
        sys.exit(0)
    refused = None if help_ else precheck(argv)  # a mistyped key or a wrong value: the saved schema says it
    if refused is not None:
        sys.stderr.write(f"varlen: error: {refused}\n")
        sys.exit(2)
    from varlen.cli.dispatch import console

    with recorded(argv) if help_ else contextlib.nullcontext():  # a help: saved for the next time
        console()
