"""The `varlen` command: Lightning's CLI (`varlen.cli.lightning_cli`) over the scenarios' DataModules and
models (those the command line or its config names: `varlen.cli.named`), and varlen's own commands.

Its commands are the rows of `COMMANDS` (`varlen --help` lists them from there):
`varlen fit --config configs/text_bert.yaml` (also `validate`, `test`, `predict`), and
`varlen inspect --config ...` (the batches a config will make, no training:
`inspect_command` builds the DataModule, `varlen.cli.inspection` measures its batches),
`varlen optimize --config ... --output DIR` (the training split as LitData chunks with its size
index: `optimize_command`) and `varlen index-sizes DIR --size-fn module:function` (the size
index of chunks written elsewhere: `index_sizes_command`); both need the `stream` extra.
The CLI keeps its output to what matters: Lightning's cloud-service tips and known third-party deprecation
warnings are silenced (`quiet`), never varlen's own warnings.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.cli import ArgsType, LightningCLI

import varlen.datamodules
import varlen.models
from varlen._extras import MissingExtraError
from varlen.cli.commands import SUMMARIES, TRAINER
from varlen.cli.help import HelpFormatter, main_parser_kwargs, subcommand_parser_kwargs
from varlen.cli.inspection import SplitSummary, plot_summary, summarize
from varlen.cli.lightning_cli import DataOnlyCLI, VarLenCLI, VarLenParser
from varlen.cli.named import named_scenarios
from varlen.cli.output import THIRD_PARTY_NOISE, quiet, show_varlen_logs
from varlen.datamodules.base import LINKED
from varlen.errors import ConfigError, OneLineParser, data_error_in
from varlen.storage.cache import writable_folder
from varlen.storage.paths import with_data_hint

__all__ = [
    "COMMANDS",
    "LINKED",
    "THIRD_PARTY_NOISE",
    "Command",
    "DataOnlyCLI",
    "VarLenCLI",
    "VarLenParser",
    "console",
    "index_sizes_command",
    "inspect_command",
    "main",
    "optimize_command",
    "quiet",
    "tune_command",
    "verify_command",
]


def main(args: ArgsType = None, run: bool = True, cli_class: type[VarLenCLI] = VarLenCLI) -> LightningCLI:
    """Build (and with `run=True` run) the CLI; returns it, e.g. for `cli.datamodule`."""
    quiet()
    argv = sys.argv[1:] if args is None else args
    scenarios = [*varlen.datamodules.SCENARIOS, *varlen.models.SCENARIOS]
    only = named_scenarios(argv, scenarios) if isinstance(argv, list | tuple) else None  # None: every one
    missing = {**varlen.datamodules.import_all(only), **varlen.models.import_all(only)}
    cli = cli_class(
        varlen.models.VarLenModule,
        varlen.datamodules.VarLenDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        parser_class=VarLenParser,
        parser_kwargs={
            **main_parser_kwargs(formatter_class=HelpFormatter),
            **{name: subcommand_parser_kwargs(name, SUMMARIES[name], missing) for name in TRAINER},
        },
    )
    if run and torch.distributed.is_available() and torch.distributed.is_initialized():
        # a DDP run is over: without this, gloo's threads can abort the interpreter at exit
        torch.distributed.destroy_process_group()
    return cli


def _set_up(rest: Sequence[str], stage: str, cli_class: type[VarLenCLI] = DataOnlyCLI) -> LightningCLI:
    """The config parsed as `fit` parses it, its DataModule prepared and set up for `stage` (with
    `DataOnlyCLI`, no model and no trainer are made)."""
    made = main(list(rest), run=False, cli_class=cli_class)
    made.datamodule.prepare_data()
    made.datamodule.setup(stage)
    return made


def _datamodule(rest: Sequence[str], stage: str):
    """The config's DataModule built and set up as `fit` would, with no model and no trainer."""
    return _set_up(rest, stage).datamodule


#: `varlen inspect`'s own options (the rest are `fit`'s), as `add_argument` takes them
INSPECT_OPTIONS = {
    "--split": dict(default="train", help="the split to inspect (default: train)"),
    "--world-size": dict(type=int, default=1, help="ranks to plan the batches for"),
    "--out": dict(default=None, help="folder for the PNG plots (default: none written)"),
    "--max-batches": dict(type=int, default=None, help="collate at most this many batches"),
    "--rate": dict(action="store_true", help="also the training loader's batches/s with the config's own settings"),
}
#: `varlen optimize`'s own options (the rest are `fit`'s)
OPTIMIZE_OPTIONS = {
    "--output": dict(
        default=None,
        help="a new folder for the chunks; a config with streamed sources: a folder for each source's (by name), "
        "else each where the config reads it",
    ),
    "--chunk-bytes": dict(default="64MB", help="bytes per chunk, e.g. 64MB (default) or 1000000"),
    "--num-workers": dict(type=int, default=None, help="LitData writer processes (default: its own)"),
    "--weight-columns": dict(
        default="",
        help="weight columns to write for weighted draws besides the config's "
        "sample_weights column, comma-separated (each sample's value, beside the size index)",
    ),
    "--start-method": dict(
        default=None,
        choices=multiprocessing.get_all_start_methods(),
        help="how LitData starts its writers (default: its own, spawn)",
    ),
    "--compression": dict(
        default=None,
        help="zstd or zstd:LEVEL (1-22): each chunk compressed inside its file, checked as written (needs the zstd "
        "package; default: none)",
    ),
}
#: what each command that reads a config says of itself in its `--help`
DESCRIPTIONS = {
    "inspect": "Set up a config's DataModule (no training) and show what its batches look like. "
    "Every other argument is the one `varlen fit` takes (--config, --data.init_args.*).",
    "optimize": "Write a config's training split as LitData chunks (litdata.optimize) with varlen's size "
    "index beside its index.json. Every other argument is the one `varlen fit` takes (--config, --data.*).",
}


def _own_options(command: str, options: dict[str, dict]) -> argparse.ArgumentParser:
    """The parser of a command's own options; what it does not know, `fit`'s parser reads."""
    parser = OneLineParser(prog=f"varlen {command}", description=DESCRIPTIONS[command])
    for flag, settings in options.items():
        parser.add_argument(flag, **settings)
    return parser


def inspect_command(argv: Sequence[str]) -> SplitSummary:
    """`varlen inspect`: its own options, then the config and `--data.*` arguments `fit` takes.

    The DataModule is built and set up exactly as `varlen fit` would (same YAML, same overrides);
    no model and no trainer are made. Prints the summary (`varlen.cli.inspection.summarize`) and,
    with `--out`, writes its plots there.
    """
    parser = _own_options("inspect", INSPECT_OPTIONS)
    options, rest = parser.parse_known_args(list(argv))
    if options.world_size < 1:
        parser.error("--world-size must be >= 1")
    if options.out:  # a file there, or a read-only folder: said before the DataModule is built
        writable_folder(Path(options.out) / ".probe", advice="give --out a folder you can write to")
    dm = _datamodule(rest, "fit" if options.split in ("train", "val") else options.split)
    try:
        summary = summarize(dm, options.split, options.world_size, options.max_batches)
    except ValueError as error:  # e.g. more ranks than the split has samples: a usage error, no traceback
        parser.error(f"--world-size {options.world_size}, split {options.split!r}: {error}")
    if options.out:
        plot_summary(summary, options.out)
    print("\n".join(summary.lines()), flush=True)
    if options.rate:  # the config's workers started: at most 200 batches or 5 s
        from varlen.batching.loader_rate import loader_rate, loader_settings

        print(loader_rate(dm).line(loader_settings(dm)), flush=True)
    return summary


def optimize_command(argv: Sequence[str]) -> None:
    """`varlen optimize`: a config's training split written as LitData chunks, with its size index."""
    parser = _own_options("optimize", OPTIMIZE_OPTIONS)
    options, rest = parser.parse_known_args(list(argv))
    if options.num_workers is not None and options.num_workers < 1:
        parser.error("--num-workers must be >= 1")
    chunk_bytes = int(options.chunk_bytes) if options.chunk_bytes.isdigit() else options.chunk_bytes
    from varlen.stream.sources import streamed_sources
    from varlen.stream.write import check_compression, write_split
    from varlen.tune.config import command_config

    try:
        check_compression(options.compression)
    except ValueError as error:
        parser.error(f"--compression: {error}")

    sources = streamed_sources(command_config(rest), options.output)
    if not sources and options.output is None:
        parser.error("--output is required: the config streams no source to write where it reads it")
    columns = tuple(c.strip() for c in options.weight_columns.split(",") if c.strip())
    settings = {"chunk_bytes": chunk_bytes, "num_workers": options.num_workers, "weight_columns": columns}
    settings["compression"] = options.compression
    for name, output, alone in sources or [("", options.output, [])]:
        if name:
            print(f"varlen optimize: source {name!r} -> {output}", flush=True)
        dm = _datamodule([*rest, *alone], "fit")
        try:
            written = write_split(dm, output, start_method=options.start_method, **settings)
        except KeyboardInterrupt:  # its writers are ended, nothing is left under the output's name
            print(f"varlen: interrupted; nothing written to {output}: the same command writes it", file=sys.stderr)
            sys.exit(130)
        print("\n".join(written.lines()), flush=True)
    if sources and options.output is not None:
        written = ", ".join(f"{name} -> {where}" for name, where, _ in sources)
        print(f"written: {written} (the config's stream: settings name where each is read)", flush=True)


def index_sizes_command(argv: Sequence[str]) -> None:
    """`varlen index-sizes`: the size index of a LitData dataset made elsewhere, from a size function."""
    from varlen.stream.index_sizes import main as index_sizes

    index_sizes(argv)


def _tune_build(rest: Sequence[str], with_model: bool) -> tuple[Any, Any]:
    """The config's DataModule set up for fitting, and its model when `--with-model` asks (else None)."""
    made = _set_up(rest, "fit", VarLenCLI if with_model else DataOnlyCLI)
    return made.datamodule, (made.model if with_model else None)


def tune_command(argv: Sequence[str]) -> int:
    """`varlen tune`: the loader settings (`--budget`: the largest `max_tokens`) measured on this machine
    (`varlen.tune`); exits with its status."""
    from varlen.tune import tune_command as run

    status = run(argv, _tune_build)
    if status:
        sys.exit(status)
    return status


def verify_command(argv: Sequence[str]) -> int:
    """`varlen verify PATH` (`varlen.cli.scrub`; the console runs it before importing this module); exits with
    its status."""
    from varlen.cli.scrub import main as verify

    status = verify(argv)
    if status:
        sys.exit(status)
    return status


@dataclass(frozen=True)
class Command:
    """A `varlen` command: its line in `varlen --help`, and what runs it (None: LightningCLI runs the
    Trainer method of its name)."""

    summary: str
    run: Callable[[Sequence[str]], object] | None = None


#: what runs each of varlen's own commands (the rest: LightningCLI's Trainer methods)
RUNS = {
    "inspect": inspect_command,
    "optimize": optimize_command,
    "index-sizes": index_sizes_command,
    "tune": tune_command,
    "verify": verify_command,
}
#: every `varlen` command, in the order `varlen --help` lists them (`varlen.cli.commands.SUMMARIES`)
COMMANDS: dict[str, Command] = {name: Command(summary, RUNS.get(name)) for name, summary in SUMMARIES.items()}


def console() -> None:
    """The `varlen` console script: the commands of `COMMANDS` (none given: their list, status
    2); bad data ends it with its message and status 2.

    A `DataError` says which file, row or sample is wrong and what to do:
    its traceback would only bury that, so it is printed alone.
    """
    show_varlen_logs()
    argv = sys.argv[1:]
    command = COMMANDS.get(argv[0]) if argv else None
    try:
        if not argv:
            _print_help()
        elif command is not None and command.run is not None:
            command.run(argv[1:])
        else:
            main()
    except (MissingExtraError, ConfigError) as error:  # a missing extra, a refused argument: the line says it all
        print(f"varlen: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: the status a shell gives it, without a traceback
        print("varlen: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:  # a DataError, also one jsonargparse wrapped while instantiating classes
        data_error = data_error_in(error)
        if data_error is None:
            raise
        print(f"varlen: error: {with_data_hint(data_error)}", file=sys.stderr)
        sys.exit(2)


def _print_help() -> None:
    """`varlen` alone: the commands' list (`varlen --help`), then status 2 (no command ran)."""
    try:
        main(["--help"])
    except SystemExit:
        pass
    sys.exit(2)
