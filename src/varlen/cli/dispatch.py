"""The ``varlen`` command: Lightning's CLI over every scenario's DataModule and model.

Its commands are the rows of :data:`COMMANDS` (``varlen --help`` lists them from there):
``varlen fit --config configs/text_bert.yaml`` (also ``validate``, ``test``, ``predict``), and
``varlen inspect --config ...`` (the batches a config will make, no training:
:func:`inspect_command` builds the DataModule, :mod:`varlen.cli.inspection` measures its batches),
``varlen optimize --config ... --output DIR`` (the training split as LitData chunks with its size
index: :func:`optimize_command`) and ``varlen index-sizes DIR --size-fn module:function`` (the size
index of chunks written elsewhere: :func:`index_sizes_command`); both need the ``stream`` extra.
Values the model needs from the data (class count, feature sizes, pad id) are linked, not
repeated in the YAML: each name in :data:`LINKED` that the chosen DataModule has is passed to
the model's argument of the same name. A data path written ``${VARLEN_DATA}/...`` is under
:func:`varlen.storage.paths.data_root`. A fit prints one line per epoch
(:class:`~varlen.callbacks.progress.EpochProgress`;
``--epoch_lines=false``: none), and Lightning's progress bar, which redraws its line, shows on a
terminal only unless asked for. The CLI keeps its output to what matters: Lightning's cloud-service
tips and known third-party deprecation warnings are silenced (:func:`quiet`), never varlen's own warnings.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from jsonargparse import ActionSubCommands, ArgumentParser
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

import varlen.datamodules
import varlen.models
from varlen._extras import MissingExtraError
from varlen.batching.data_wait import DataWait
from varlen.batching.warmup import WarmShapes
from varlen.callbacks.progress import EpochProgress, StepProgress
from varlen.callbacks.resumable import AtomicCheckpointIO, fit_resumably, with_resumable
from varlen.cli.commands import SUMMARIES
from varlen.cli.help import HelpFormatter, main_parser_kwargs, subcommand_parser_kwargs
from varlen.cli.inspection import SplitSummary, plot_summary, summarize
from varlen.cli.named import named_scenarios
from varlen.cli.output import THIRD_PARTY_NOISE, quiet, show_varlen_logs
from varlen.cli.typos import one_line
from varlen.datamodules.base import LINKED
from varlen.errors import DataError
from varlen.storage.cache import writable_folder
from varlen.storage.paths import expand_data_paths, with_data_hint

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


class _Commands(ActionSubCommands):
    """jsonargparse's subcommands, each listed with its line of :data:`COMMANDS` (not the Trainer's docstring)."""

    def add_subcommand(self, name: str, parser: ArgumentParser, **kwargs) -> ArgumentParser:
        kwargs["help"] = COMMANDS[name].summary
        return super().add_subcommand(name, parser, **kwargs)


class VarLenParser(LightningArgumentParser):
    """Lightning's parser whose subcommands are :class:`_Commands`, kept as :attr:`commands` so that
    :class:`VarLenCLI` can list varlen's own commands after Lightning's."""

    commands: ActionSubCommands | None = None

    def error(self, message: str, ex: Exception | None = None):
        """A mistyped name in one line (:mod:`varlen.cli.typos`), status 2; other errors as jsonargparse says them."""
        if self.exit_on_error:
            command = self.prog.replace(" [options]", "")
            named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in COMMANDS else None  # inspect, tune...
            command += f" {named}" if command == "varlen" and named else ""
            line = one_line(message, command, self._option_string_actions)
            if line is not None:
                sys.stderr.write(f"varlen: error: {line}\n")
                sys.exit(2)
        super().error(message, ex)

    def add_subcommands(self, required: bool = True, dest: str = "subcommand", **kwargs) -> ActionSubCommands:
        self.commands = super().add_subcommands(required, dest, action=_Commands, **kwargs)
        return self.commands


class VarLenCLI(LightningCLI):
    """LightningCLI with the commands of :data:`COMMANDS`, the data-to-model links of :data:`LINKED`,
    ``${VARLEN_DATA}`` data paths, and a fit's epoch lines (``--epoch_lines``)."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The Trainer methods of :data:`COMMANDS`, with the arguments Lightning skips for each."""
        lightning = LightningCLI.subcommands()
        return {name: lightning[name] for name, command in COMMANDS.items() if command.run is None}

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands:  # varlen's own commands, listed only: console() runs them before any parsing
            for name, command in COMMANDS.items():
                if command.run is not None:
                    self.parser.commands.add_subcommand(name, ArgumentParser(description=command.summary))

    def add_arguments_to_parser(self, parser) -> None:
        for name in LINKED:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")
        parser.add_argument(
            "--epoch_lines",
            type=bool | list[str],
            default=True,
            help="One line per training epoch: the validation metrics, padding efficiency, samples/s "
            "(varlen.callbacks.progress.EpochProgress). true: every val/ metric; a list: those metrics; "
            "false: no line. "
            "An EpochProgress listed in trainer.callbacks replaces it.",
        )
        parser.add_argument(
            "--checkpoint_every_min",
            type=float,
            default=15.0,
            help="Minutes of training between saves of last.ckpt (varlen.callbacks.resumable.Resumable), besides "
            "each epoch's "
            "end and an interruption (SIGINT, SIGTERM: the fit stops at the step's end, saves it and prints the "
            "command that resumes it). 0: no timed saves. A listed ModelCheckpoint's folder gets it.",
        )
        parser.add_argument(
            "--data_wait",
            type=bool,
            default=True,
            help="Time the training loop's wait for data (varlen.batching.data_wait.DataWait): data/wait_ms per "
            "step, data/wait_share per epoch (also in the epoch line), and one line of advice when the share "
            "passes a tenth of the epoch. false: off. A DataWait listed in trainer.callbacks replaces it.",
        )
        parser.add_argument(
            "--progress_every",
            type=float,
            default=30.0,
            help="Where no progress bar shows (stdout no terminal: a log file, a scheduler), a line every this "
            "many seconds of training: step of total, samples/s, waiting share, time left "
            "(varlen.callbacks.progress.StepProgress). 0: none.",
        )
        parser.add_argument(
            "--warm_shapes",
            type=bool | Literal["always"],
            default=True,
            help="Before the first training step, run each batch shape of the epoch once through the model's "
            "forward and backward, then restore everything (varlen.batching.warmup.WarmShapes): a GPU pays for "
            "each new shape (cuDNN attention plans in bf16) before training, not during it. The run trains bit "
            "for bit as without it. true: where a shape has a first-time cost (not a CPU in eager mode); "
            "always: on a CPU too; false: off. A WarmShapes listed in trainer.callbacks replaces it.",
        )

    def before_instantiate_classes(self) -> None:
        """``${VARLEN_DATA}`` in a data argument becomes the data folder (:func:`varlen.storage.paths.data_root`)."""
        data = self._get(self.config, "data")
        for key, value in list(data.items()) if data is not None else ():
            expanded = expand_data_paths(value)
            if expanded != value:
                data[key] = expanded

    def instantiate_trainer(self, **kwargs) -> pl.Trainer:
        """The Trainer with one :class:`DataWait` (none when ``--data_wait`` is false), one :class:`WarmShapes`
        (none when ``--warm_shapes`` is false), one
        :class:`EpochProgress` (of the metrics ``--epoch_lines`` lists; none when it is false), one
        :class:`~varlen.callbacks.resumable.Resumable` (``--checkpoint_every_min``; with Lightning's
        ModelCheckpoint keeping
        ``last.ckpt`` where none is listed), checkpoints written whole
        (:class:`~varlen.callbacks.resumable.AtomicCheckpointIO`), and without
        Lightning's progress bar when stdout is no terminal, unless ``trainer.enable_progress_bar`` is
        set: its redraws (carriage returns) would fill a log with partial lines."""
        settings = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        callbacks = settings.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]
        if self._get(self.config, "data_wait", default=True) is False:
            callbacks = [c for c in callbacks if not isinstance(c, DataWait)]
        elif not any(isinstance(c, DataWait) for c in callbacks):
            callbacks.append(DataWait())  # before an EpochProgress added below: its line shows the epoch's share
        warm = self._get(self.config, "warm_shapes", default=True)
        if warm is False:
            callbacks = [c for c in callbacks if not isinstance(c, WarmShapes)]
        elif not any(isinstance(c, WarmShapes) for c in callbacks):
            callbacks.append(WarmShapes(when="always" if warm == "always" else "auto"))
        lines = self._get(self.config, "epoch_lines", default=True)
        if lines is False:
            callbacks = [c for c in callbacks if not isinstance(c, EpochProgress)]
        elif not any(isinstance(c, EpochProgress) for c in callbacks):
            callbacks.append(EpochProgress(metrics=None if lines is True else lines))
        minutes = self._get(self.config, "checkpoint_every_min", default=15.0)
        callbacks = with_resumable(callbacks, minutes, settings.get("enable_checkpointing") is not False)
        if settings.get("enable_progress_bar") is None and not sys.stdout.isatty():
            kwargs["enable_progress_bar"] = False
        every = self._get(self.config, "progress_every", default=30.0)
        bar = kwargs.get("enable_progress_bar", settings.get("enable_progress_bar", True))
        if every and bar is False and not any(isinstance(c, StepProgress) for c in callbacks):
            callbacks.append(StepProgress(every))
        trainer = super().instantiate_trainer(**{**kwargs, "callbacks": callbacks})
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's own, not a plugin's
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Lightning's, keeping the command's arguments for the line that resumes an interrupted fit."""
        self.argv = list(sys.argv[1:] if args is None else args) if isinstance(args, list | tuple | None) else None
        super().parse_arguments(parser, args)

    def fit(self, model: pl.LightningModule, **kwargs: Any) -> None:
        """``trainer.fit``, its folders checked first; interrupted, the line that resumes it and status 128 + the
        signal (:func:`varlen.callbacks.resumable.fit_resumably`)."""
        fit_resumably(self.trainer, model, self.argv, **kwargs)


class DataOnlyCLI(VarLenCLI):
    """Parses a config exactly as ``fit`` does (every ``--data.*`` override), but builds its DataModule
    only: ``varlen inspect`` loads (or downloads) no model weights and makes no trainer."""

    def instantiate_classes(self) -> None:
        parser = ArgumentParser()
        parser.add_subclass_arguments(varlen.datamodules.VarLenDataModule, "data", required=True)
        data = parser.parse_object({"data": self.config["data"].as_dict()})
        self.datamodule = parser.instantiate_classes(data)["data"]
        self.model = self.trainer = None


def main(args: ArgsType = None, run: bool = True, cli_class: type[VarLenCLI] = VarLenCLI) -> LightningCLI:
    """Build (and with ``run=True`` run) the CLI; returns it, e.g. for ``cli.datamodule``."""
    quiet()
    argv = sys.argv[1:] if args is None else args
    scenarios = [*varlen.datamodules.SCENARIOS, *varlen.models.SCENARIOS]
    only = named_scenarios(argv, scenarios) if isinstance(argv, list | tuple) else None  # None: every one
    missing = {**varlen.datamodules.import_all(only), **varlen.models.import_all(only)}
    trainer_commands = [name for name, command in COMMANDS.items() if command.run is None]
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
            **{name: subcommand_parser_kwargs(name, COMMANDS[name].summary, missing) for name in trainer_commands},
        },
    )
    if run and torch.distributed.is_available() and torch.distributed.is_initialized():
        # a DDP run is over: without this, gloo's threads can abort the interpreter at exit
        torch.distributed.destroy_process_group()
    return cli


def _set_up(rest: Sequence[str], stage: str, cli_class: type[VarLenCLI] = DataOnlyCLI) -> LightningCLI:
    """The config parsed as ``fit`` parses it, its DataModule prepared and set up for ``stage`` (with
    :class:`DataOnlyCLI`, no model and no trainer are made)."""
    made = main(list(rest), run=False, cli_class=cli_class)
    made.datamodule.prepare_data()
    made.datamodule.setup(stage)
    return made


def _datamodule(rest: Sequence[str], stage: str):
    """The config's DataModule built and set up as ``fit`` would, with no model and no trainer."""
    return _set_up(rest, stage).datamodule


def inspect_command(argv: Sequence[str]) -> SplitSummary:
    """``varlen inspect``: its own options, then the config and ``--data.*`` arguments ``fit`` takes.

    The DataModule is built and set up exactly as ``varlen fit`` would (same YAML, same overrides);
    no model and no trainer are made. Prints the summary (:func:`varlen.cli.inspection.summarize`) and,
    with ``--out``, writes its plots there.
    """
    parser = argparse.ArgumentParser(
        prog="varlen inspect",
        description="Set up a config's DataModule (no training) and show what its batches look like. "
        "Every other argument is the one `varlen fit` takes (--config, --data.init_args.*).",
    )
    parser.add_argument("--split", default="train", help="the split to inspect (default: train)")
    parser.add_argument("--world-size", type=int, default=1, help="ranks to plan the batches for")
    parser.add_argument("--out", default=None, help="folder for the PNG plots (default: none written)")
    parser.add_argument("--max-batches", type=int, default=None, help="collate at most this many batches")
    parser.add_argument(
        "--rate", action="store_true", help="also the training loader's batches/s with the config's own settings"
    )
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
        from varlen.batching.throughput import loader_rate, loader_settings

        print(loader_rate(dm).line(loader_settings(dm)), flush=True)
    return summary


def optimize_command(argv: Sequence[str]) -> None:
    """``varlen optimize``: a config's training split written as LitData chunks, with its size index."""
    parser = argparse.ArgumentParser(
        prog="varlen optimize",
        description="Write a config's training split as LitData chunks (litdata.optimize) with varlen's size "
        "index beside its index.json. Every other argument is the one `varlen fit` takes (--config, --data.*).",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="a new folder for the chunks; a config with streamed sources: a folder for each source's (by name), "
        "else each where the config reads it",
    )
    parser.add_argument("--chunk-bytes", default="64MB", help="bytes per chunk, e.g. 64MB (default) or 1000000")
    parser.add_argument("--num-workers", type=int, default=None, help="LitData writer processes (default: its own)")
    parser.add_argument(
        "--weight-columns",
        default="",
        help="weight columns to write for weighted draws besides the config's "
        "sample_weights column, comma-separated (each sample's value, beside the size index)",
    )
    parser.add_argument(
        "--start-method",
        default=None,
        choices=multiprocessing.get_all_start_methods(),
        help="how LitData starts its writers (default: its own, spawn)",
    )
    parser.add_argument(
        "--compression",
        default=None,
        help="zstd or zstd:LEVEL (1-22): each chunk compressed inside its file, checked as written (needs the zstd "
        "package; default: none)",
    )
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
    """``varlen index-sizes``: the size index of a LitData dataset made elsewhere, from a size function."""
    from varlen.stream.index_sizes import main as index_sizes

    index_sizes(argv)


def _tune_build(rest: Sequence[str], with_model: bool) -> tuple[Any, Any]:
    """The config's DataModule set up for fitting, and its model when ``--with-model`` asks (else None)."""
    made = _set_up(rest, "fit", VarLenCLI if with_model else DataOnlyCLI)
    return made.datamodule, (made.model if with_model else None)


def tune_command(argv: Sequence[str]) -> int:
    """``varlen tune``: the loader settings (``--budget``: the largest ``max_tokens``) measured on this machine
    (:mod:`varlen.tune`); exits with its status."""
    from varlen.tune import tune_command as run

    status = run(argv, _tune_build)
    if status:
        sys.exit(status)
    return status


def verify_command(argv: Sequence[str]) -> int:
    """``varlen verify PATH`` (:mod:`varlen.cli.scrub`; the console runs it before importing this module); exits with
    its status."""
    from varlen.cli.scrub import main as verify

    status = verify(argv)
    if status:
        sys.exit(status)
    return status


@dataclass(frozen=True)
class Command:
    """A ``varlen`` command: its line in ``varlen --help``, and what runs it (None: LightningCLI runs the
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
#: every ``varlen`` command, in the order ``varlen --help`` lists them (:data:`varlen.cli.commands.SUMMARIES`)
COMMANDS: dict[str, Command] = {name: Command(summary, RUNS.get(name)) for name, summary in SUMMARIES.items()}


def console() -> None:
    """The ``varlen`` console script: the commands of :data:`COMMANDS` (none given: their list, status
    2); bad data ends it with its message and status 2.

    A :class:`~varlen.errors.DataError` says which file, row or sample is wrong and what to do:
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
    except MissingExtraError as error:  # e.g. varlen optimize without the stream extra: the install says it all
        print(f"varlen: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: the status a shell gives it, without a traceback
        print("varlen: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:  # a DataError, also one jsonargparse wrapped while instantiating classes
        data_error = _data_error_in(error)
        if data_error is None:
            raise
        print(f"varlen: error: {with_data_hint(data_error)}", file=sys.stderr)
        sys.exit(2)


def _print_help() -> None:
    """``varlen`` alone: the commands' list (``varlen --help``), then status 2 (no command ran)."""
    try:
        main(["--help"])
    except SystemExit:
        pass
    sys.exit(2)


def _data_error_in(error: BaseException | None) -> DataError | None:
    """The :class:`~varlen.errors.DataError` that ``error`` is or was raised from, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, DataError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
