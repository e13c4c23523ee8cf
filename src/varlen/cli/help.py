"""What `varlen --help` and `varlen fit --help` say first: the parser arguments (LightningCLI's
`parser_kwargs`) that name the commands, where a DataModule's and a model's arguments are
(`--data.help CLASS`), the classes installed, the epoch lines and the data folder.

Without them `varlen fit --help` opens with some 70 lines of Trainer usage and never names a
DataModule. The classes are read from the scenario tables of `varlen.datamodules` and
`varlen.models`, so a scenario added there is listed here too.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping

from jsonargparse import DefaultHelpFormatter

import varlen.datamodules
import varlen.models
from varlen.storage.paths import DATA_VARIABLE, PLACEHOLDER, data_root

__all__ = ["HelpFormatter", "installed", "main_parser_kwargs", "subcommand_parser_kwargs"]

WIDTH = 100


class HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, with descriptions and epilogs printed as written (their lines are laid out)."""


def installed(table: Mapping[str, str], missing: Mapping[str, Exception]) -> list[str]:
    """The names of `table` (a package's `SCENARIOS`) whose scenario module imported."""
    return [name for name, module in table.items() if module not in missing]


def main_parser_kwargs(**kwargs) -> dict:
    """The `varlen` parser's arguments: its name, what it is, and how to go on."""
    return {
        "prog": "varlen",
        "description": "PyTorch Lightning DataModules for variable-length data: Lightning's CLI over every\n"
        "installed DataModule and model (fit, validate, test, predict), and varlen's data tools.",
        "epilog": "A command's own options: varlen COMMAND --help (e.g. varlen fit --help).\n"
        "Start with: varlen fit --config configs/text_bert.yaml",
        **kwargs,
    }


def subcommand_parser_kwargs(name: str, summary: str, missing: Mapping[str, Exception]) -> dict:
    """A Lightning subcommand's parser arguments: a short usage line, then where the arguments are."""
    usage = "%(prog)s [-h] [-c CONFIG] [--data.help CLASS] [--model.help CLASS] [--NAME VALUE ...]"
    return {"usage": usage, "description": _description(name, summary, missing)}


def _listed(label: str, names: list[str]) -> str:
    return textwrap.fill(", ".join(names), WIDTH, initial_indent=f"  {label}", subsequent_indent=" " * 20)


def _description(name: str, summary: str, missing: Mapping[str, Exception]) -> str:
    datamodules = installed(varlen.datamodules.SCENARIOS, missing)
    models = installed(varlen.models.SCENARIOS, missing)
    lines = [
        summary,
        f"  varlen {name} --config configs/text_bert.yaml [--data.init_args.NAME=VALUE] [--trainer.NAME=VALUE]",
        "",
        "A DataModule's or a model's arguments, with their defaults:",
        f"  varlen {name} --data.help CLASS     (e.g. --data.help {datamodules[0] if datamodules else 'CLASS'})",
        f"  varlen {name} --model.help CLASS    (e.g. --model.help {models[0] if models else 'CLASS'})",
        _listed("DataModules:      ", datamodules),
        _listed("models:           ", models),
    ]
    lines += [f"  not installed: {error}" for error in dict.fromkeys(str(e) for e in missing.values())]
    lines += [
        "",
        "fit prints one line per epoch: validation metrics, padding, samples/s (--epoch_lines=false: none;",
        "--epoch_lines='[val/loss, val/accuracy]': those metrics).",
        "Lightning's progress bar shows on a terminal only, unless --trainer.enable_progress_bar is given.",
        f"{PLACEHOLDER} in a data path is ${DATA_VARIABLE}, else the shared/data folder beside the checkout",
        f"(now {data_root()}).",
        "",
        "Every option follows; the Trainer's are --trainer.NAME.",
    ]
    return "\n".join(lines)
