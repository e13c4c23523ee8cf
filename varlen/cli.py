"""The ``varlen`` command: Lightning's CLI over every scenario's DataModule and model.

``varlen fit --config configs/text_bert.yaml`` (also ``validate``, ``test``, ``predict``), and
``varlen inspect --config ...`` (:mod:`varlen.inspect`: the batches a config will make, no
training). Values the model needs from the data (class count, feature sizes, pad id) are linked,
not repeated in the YAML: each name in :data:`LINKED` that the chosen DataModule has is passed to
the model's argument of the same name. The CLI keeps its output to what matters: Lightning's
cloud-service tips and known third-party deprecation warnings are silenced (:func:`quiet`),
never varlen's own warnings.
"""

from __future__ import annotations

import logging
import sys
import warnings

import torch
from jsonargparse import ArgumentParser
from lightning.pytorch.cli import ArgsType, LightningCLI

import varlen.datamodules
import varlen.models
from varlen.datamodules.base import LINKED
from varlen.errors import DataError

__all__ = ["LINKED", "THIRD_PARTY_NOISE", "DataOnlyCLI", "VarLenCLI", "console", "main", "quiet"]

#: third-party deprecation warnings a user of varlen can do nothing about (regular expressions)
THIRD_PARTY_NOISE = (
    r".*'set_vital' is deprecated.*",  # torchdata's StatefulDataLoader calls torch.set_vital
    r".*isinstance\(treespec, LeafSpec\).*",  # Lightning's pytree helper on torch >= 2.9
    r".*LightningCLI's args parameter is intended to run from within Python.*",
    r".*`tensorboardX` has been removed as a dependency.*",  # Lightning's CSVLogger fallback notice
)


class _NoCloudTips(logging.Filter):
    """Drops Lightning's "Tip: ... try installing litlogger / litmodels" messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.getMessage())


def quiet() -> None:
    """Silence Lightning's cloud tips and :data:`THIRD_PARTY_NOISE` (idempotent)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoCloudTips) for f in logger.filters):
            logger.addFilter(_NoCloudTips())
    for pattern in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=pattern)


class VarLenCLI(LightningCLI):
    """LightningCLI with the data-to-model links of :data:`LINKED`."""

    def add_arguments_to_parser(self, parser) -> None:
        for name in LINKED:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")


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
    varlen.datamodules.import_all()
    varlen.models.import_all()
    cli = cli_class(
        varlen.models.VarLenModule,
        varlen.datamodules.VarLenDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )
    if run and torch.distributed.is_available() and torch.distributed.is_initialized():
        # a DDP run is over: without this, gloo's threads can abort the interpreter at exit
        torch.distributed.destroy_process_group()
    return cli


def show_varlen_logs() -> None:
    """Print the ``varlen`` logger's INFO messages (the data report) on stderr, once."""
    logger = logging.getLogger("varlen")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def console() -> None:
    """The ``varlen`` console script (``fit`` / ``validate`` / ``test`` / ``predict`` / ``inspect``);
    bad data ends it with its message and status 2.

    A :class:`~varlen.errors.DataError` says which file, row or sample is wrong and what to do:
    its traceback would only bury that, so it is printed alone.
    """
    show_varlen_logs()
    argv = sys.argv[1:]
    try:
        if argv[:1] == ["inspect"]:
            from varlen.inspect import inspect_main

            inspect_main(argv[1:])
        else:
            main()
    except Exception as error:  # a DataError, also one jsonargparse wrapped while instantiating classes
        data_error = _data_error_in(error)
        if data_error is None:
            raise
        print(f"varlen: error: {data_error}", file=sys.stderr)
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
