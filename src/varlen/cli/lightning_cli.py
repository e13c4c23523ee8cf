"""LightningCLI as `varlen` runs it: its parser lists varlen's commands beside Lightning's and says a mistyped
name in one line (`VarLenParser`); `VarLenCLI` links the data's values to the model
(`LINKED`), expands `${VARLEN_DATA}` in data paths and adds a fit's callbacks
(epoch lines, data wait, shape warm-up, timed and interrupted saves, the model in one line, where the
checkpoints are) and keeps a run's console to what a user reads (`varlen.cli.output.ConsoleRun`; `--verbose`:
Lightning's and transformers' own output); `DataOnlyCLI` builds a config's DataModule alone.
`varlen.cli.dispatch` builds and runs them."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from jsonargparse import ActionSubCommands, ArgumentParser
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

import varlen.datamodules
from varlen import notices
from varlen.callbacks.fit import fit_callbacks, one_of_kind
from varlen.callbacks.resumable import AtomicCheckpointIO, fit_resumably
from varlen.callbacks.summary import ModelLine
from varlen.cli.commands import SUMMARIES, TRAINER
from varlen.cli.output import VERBOSE_ENV, ConsoleRun, head_reports, is_verbose
from varlen.cli.refusals import refusals
from varlen.cli.schema import record_schema
from varlen.cli.typos import known_options, one_line, plain_line
from varlen.datamodules.base import LINKED
from varlen.storage.paths import expand_data_paths

__all__ = ["DataOnlyCLI", "VarLenCLI", "VarLenParser", "checkpoint_line"]

#: the options of a fit's callbacks: `varlen.callbacks.fit_callbacks`' arguments of the same names
FIT_OPTIONS = ("data_wait", "warm_shapes", "epoch_lines", "checkpoint_every_min", "progress_every")


class _Commands(ActionSubCommands):
    """jsonargparse's subcommands, each listed with its line of `varlen --help` (not the Trainer's docstring)."""

    def add_subcommand(self, name: str, parser: ArgumentParser, **kwargs) -> ArgumentParser:
        kwargs["help"] = SUMMARIES[name]
        return super().add_subcommand(name, parser, **kwargs)


class VarLenParser(LightningArgumentParser):
    """Lightning's parser whose subcommands are `_Commands`, kept as `commands` so that
    `VarLenCLI` can list varlen's own commands after Lightning's."""

    commands: ActionSubCommands | None = None

    def error(self, message: str, ex: Exception | None = None):
        """Every error in one line (`varlen.cli.typos`: a mistyped name with the closest), status 2."""
        if self.exit_on_error:
            command = self.prog.replace(" [options]", "")
            named = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in SUMMARIES else None  # inspect, tune...
            command += f" {named}" if command == "varlen" and named else ""
            line = one_line(message, command, known_options(self, message)) or plain_line(message, command)
            sys.stderr.write(f"varlen: error: {line}\n")
            sys.exit(2)
        super().error(message, ex)

    def add_subcommands(self, required: bool = True, dest: str = "subcommand", **kwargs) -> ActionSubCommands:
        self.commands = super().add_subcommands(required, dest, action=_Commands, **kwargs)
        return self.commands


class VarLenCLI(LightningCLI):
    """LightningCLI with varlen's commands (`varlen.cli.commands`), the data-to-model links of `LINKED`,
    `${VARLEN_DATA}` data paths, a fit's epoch lines (`--epoch_lines`), and a quiet console (`--verbose`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with ConsoleRun() as self.console_run:  # quieted once `--verbose` is parsed; put back when the run ends
            super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The Trainer methods varlen runs (`TRAINER`), with the arguments Lightning skips
        for each, and their `verbose` (the results table of `validate` and `test` stays on)."""
        lightning = LightningCLI.subcommands()  # a method's `verbose` (validate's, test's): `--verbose` is varlen's
        return {name: lightning[name] | {"verbose"} for name in TRAINER}

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict, subparser_kwargs: dict) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands:  # varlen's own commands, listed only: console() runs them before any parsing
            for name, summary in SUMMARIES.items():
                if name not in TRAINER:
                    self.parser.commands.add_subcommand(name, ArgumentParser(description=summary))

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
            "--verbose",
            type=bool,
            default=False,
            help="Lightning's and transformers' own output besides varlen's lines: the devices, the seed, the "
            "model table, the load report of a newly initialised head, the full path of their warnings "
            f"(varlen.cli.output). {VERBOSE_ENV}=1 does the same for every command.",
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
        """`${VARLEN_DATA}` in a data argument becomes the data folder (`varlen.storage.paths.data_root`)."""
        data = self._get(self.config, "data")
        for key, value in list(data.items()) if data is not None else ():
            expanded = expand_data_paths(value)
            if expanded != value:
                data[key] = expanded

    def instantiate_classes(self) -> None:
        """Lightning's, a class's refusal of its arguments in one line (`varlen.cli.refusals`), and transformers'
        report of a classifier head the load initialises left out (`varlen.cli.output.head_reports`)."""
        with refusals(), head_reports():
            super().instantiate_classes()

    def instantiate_trainer(self, **kwargs) -> pl.Trainer:
        """The Trainer with `varlen.callbacks.fit_callbacks` of the options: one `DataWait`, one `WarmShapes` and
        one `EpochProgress` (of the metrics `--epoch_lines` lists), each left out where its option is false, one
        `Resumable` (`--checkpoint_every_min`; with Lightning's ModelCheckpoint keeping `last.ckpt` where none is
        listed), checkpoints written whole (`AtomicCheckpointIO`), and without Lightning's progress bar when stdout
        is no terminal, unless `trainer.enable_progress_bar` is set: its redraws (carriage returns) would fill a
        log with partial lines."""
        settings = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if settings.get("enable_progress_bar") is None and not sys.stdout.isatty():
            kwargs["enable_progress_bar"] = False
        defaults = inspect.signature(fit_callbacks).parameters
        options = {name: self._get(self.config, name, default=defaults[name].default) for name in FIT_OPTIONS}
        callbacks = fit_callbacks(
            settings.get("callbacks"),
            **options,
            checkpointing=settings.get("enable_checkpointing") is not False,
            progress_bar=kwargs.get("enable_progress_bar", settings.get("enable_progress_bar", True)),
        )
        if settings.get("enable_model_summary") is None and not is_verbose():  # its table: --verbose, or asked
            callbacks = one_of_kind(callbacks, ModelSummary, True, ModelLine)
        trainer = super().instantiate_trainer(**{**kwargs, "callbacks": callbacks})
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's own, not a plugin's
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Lightning's, keeping the command's arguments for the line that resumes an interrupted fit."""
        self.argv = list(sys.argv[1:] if args is None else args) if isinstance(args, list | tuple | None) else None
        record_schema(parser)  # what the light entry checks a next command line against (varlen.cli.schema)
        super().parse_arguments(parser, args)
        command = self.config.get("subcommand")
        self.console_run.quiet(bool((self.config.get(command) if command else self.config).get("verbose")))

    def fit(self, model: pl.LightningModule, **kwargs: Any) -> None:
        """`trainer.fit`, its folders checked first; interrupted, the line that resumes it and status 128 + the
        signal (`varlen.callbacks.resumable.fit_resumably`)."""
        fit_resumably(self.trainer, model, self.argv, **kwargs)
        line = checkpoint_line(self.trainer)
        if line:
            notices.say(line, self.trainer)


def checkpoint_line(trainer: pl.Trainer) -> str | None:
    """`checkpoints: lightning_logs/version_0/checkpoints/ (last.ckpt, epoch=0-step=5.ckpt)`: where a fit left
    its checkpoints (relative to the current folder where under it); None where it saved none."""
    callback = trainer.checkpoint_callback
    if not isinstance(callback, ModelCheckpoint):
        return None
    files = [Path(p) for p in dict.fromkeys((callback.last_model_path, callback.best_model_path)) if p]
    files = [f for f in files if f.exists()]
    if not files:
        return None
    folder = files[0].parent
    shown = os.path.relpath(folder) if folder.resolve().is_relative_to(Path.cwd()) else str(folder)
    names = ", ".join(f.name if f.parent == folder else str(f) for f in files)
    return f"checkpoints: {shown}{os.sep} ({names})"


class DataOnlyCLI(VarLenCLI):
    """Parses a config exactly as `fit` does (every `--data.*` override), but builds its DataModule
    only: `varlen inspect` loads (or downloads) no model weights and makes no trainer."""

    def instantiate_classes(self) -> None:
        parser = ArgumentParser()
        parser.add_subclass_arguments(varlen.datamodules.VarLenDataModule, "data", required=True)
        data = parser.parse_object({"data": self.config["data"].as_dict()})
        with refusals():
            self.datamodule = parser.instantiate_classes(data)["data"]
        self.model = self.trainer = None
