"""The ``varlen`` command: Lightning's CLI over every scenario's DataModule and model.

``varlen fit --config configs/text_bert.yaml`` (also ``validate``, ``test``, ``predict``).
Values the model needs from the data (class count, feature sizes, pad id) are linked, not
repeated in the YAML: each name in :data:`LINKED` that the chosen DataModule has is passed to
the model's argument of the same name.
"""

from __future__ import annotations

import logging
import sys

from lightning.pytorch.cli import ArgsType, LightningCLI

import varlen.datamodules
import varlen.models
from varlen.errors import DataError

__all__ = ["LINKED", "VarLenCLI", "console", "main"]

#: DataModule attributes handed to the model argument of the same name, when both exist.
LINKED = (
    "num_classes",
    "num_tasks",
    "task",
    "in_channels",
    "node_features",
    "edge_features",
    "feature_dim",
    "vocab_size",
    "pad_token_id",
    "class_names",
    "num_descriptors",
)


class VarLenCLI(LightningCLI):
    """LightningCLI with the data-to-model links of :data:`LINKED`."""

    def add_arguments_to_parser(self, parser) -> None:
        for name in LINKED:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")


def main(args: ArgsType = None, run: bool = True) -> LightningCLI:
    """Build (and with ``run=True`` run) the CLI; returns it, e.g. for ``cli.datamodule``."""
    varlen.datamodules.import_all()
    varlen.models.import_all()
    return VarLenCLI(
        varlen.models.VarLenModule,
        varlen.datamodules.VarLenDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )


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
    """The ``varlen`` console script: runs the CLI; bad data ends it with its message and status 2.

    A :class:`~varlen.errors.DataError` says which file, row or sample is wrong and what to do:
    its traceback would only bury that, so it is printed alone.
    """
    show_varlen_logs()
    try:
        main()
    except DataError as error:
        print(f"varlen: error: {error}", file=sys.stderr)
        sys.exit(2)
