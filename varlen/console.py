"""The ``varlen`` command's entry: ``varlen`` and ``varlen --help`` answer from here, before torch, Lightning or
any scenario is imported (under a second); every other call goes to :func:`varlen.cli.console`."""

from __future__ import annotations

import sys

from varlen.commands import LIGHT, SUMMARIES

__all__ = ["main", "usage"]


def usage() -> str:
    """What ``varlen --help`` prints: the commands, and where each says more."""
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
    """``varlen`` alone (the commands, status 2) and ``varlen --help`` (status 0) here; the rest in varlen.cli."""
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    if argv[0] in LIGHT:  # a scrub: no Lightning, no scenario (varlen.scrub)
        from varlen.scrub import main as verify

        sys.exit(verify(argv[1:]))
    from varlen.cli import console

    console()
