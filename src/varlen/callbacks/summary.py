"""`ModelLine`: the model in one line when a fit starts, in place of Lightning's table.

Lightning's `ModelSummary` prints a table of the model's direct children: for a fine-tuned encoder, one row holds
every parameter and the rest are metric collections with none (some the run never uses), with a FLOPs column
that stays 0 unless the model defines `example_input_array`. What a user checks when a fit starts is the
model's class, its size, how much of it trains and where. `varlen fit` adds this one (`--verbose`: Lightning's table).
Being a `ModelSummary`, it takes the place of Lightning's own in any Trainer.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities.model_summary import get_human_readable_count
from torch.nn.parameter import UninitializedParameter

from varlen import notices

__all__ = ["ModelLine"]


class ModelLine(ModelSummary):
    """Prints `model: TextClassifier (BertForSequenceClassification) | 22.7 M parameters, all trainable | 90.9 MB |
    on cpu` once, when a fit starts (rank zero).

    Args:
        name: a prefix naming the run.
    """

    def __init__(self, name: str = "") -> None:
        super().__init__(max_depth=0)
        self.name = name
        self.lines: list[str] = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        params = [p for p in pl_module.parameters() if not isinstance(p, UninitializedParameter)]
        total = sum(p.numel() for p in params)  # counted here: Lightning's summary runs an example_input_array
        trainable = sum(p.numel() for p in params if p.requires_grad)
        share = (
            "all trainable" if trainable == total else
            "none trainable" if trainable == 0 else
            f"{get_human_readable_count(trainable).strip()} trainable"
        )  # fmt: skip
        inner = [type(child).__name__ for child in pl_module.children() if _holds(child, total)]
        kind = type(pl_module).__name__ + (f" ({inner[0]})" if inner else "")
        size = f"{sum(p.numel() * p.element_size() for p in params) / 1e6:,.1f} MB"
        count = get_human_readable_count(total).strip()
        line = (f"{self.name} " if self.name else "") + f"model: {kind} | {count} parameters, {share} | {size}"
        line += f" | {_where(trainer)}"
        if trainer.is_global_zero:
            self.lines.append(line)
        notices.say(line, trainer)


def _where(trainer: pl.Trainer) -> str:
    """`on cpu`, `on 2 cuda, bf16-mixed`: the devices (Lightning's "GPU available" lines are left out) and a
    precision other than 32-bit."""
    devices = f"{trainer.num_devices} {trainer.strategy.root_device.type}"
    precision = str(getattr(trainer, "precision", "32-true"))
    return f"on {devices.removeprefix('1 ')}" + ("" if precision in ("32-true", "32") else f", {precision}")


def _holds(module, total: int) -> bool:
    """Whether `module` holds most of the model's parameters (the encoder a task model wraps)."""
    held = sum(p.numel() for p in module.parameters() if not isinstance(p, UninitializedParameter))
    return total > 0 and held >= 0.9 * total
