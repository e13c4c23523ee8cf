"""Your own Trainer as good as `varlen fit`: the data report shown at set-up from Python, once; a model given
no dimensions takes them from the DataModule it trains on (and its checkpoint rebuilds it without one); and
`varlen.callbacks.fit_callbacks()` gives the callbacks `varlen fit` adds."""

from __future__ import annotations

import inspect
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.cli import SaveConfigCallback

import varlen.datamodules
import varlen.models
from varlen.datamodules.base import LINKED
from varlen.datamodules.sequence import SequenceDataModule
from varlen.models.sequence import SequenceModel

ROOT = Path(__file__).resolve().parents[1]
TINY = {"d_model": 8, "nhead": 2, "num_layers": 1, "dim_feedforward": 16}
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def arrays(n: int = 48, seed: int = 0) -> dict[str, list]:
    """`n` signals of 3 to 20 steps of 2 values, and a label each: what a user holds in memory."""
    rng = np.random.default_rng(seed)
    signals = [rng.normal(size=(t, 2)).astype(np.float32) for t in rng.integers(3, 20, n)]
    return {"signal": signals, "label": [int(s[:, 0].mean() > 0) for s in signals]}


REPORT_SCRIPT = """
import lightning.pytorch as pl
from lightning.pytorch.cli import SaveConfigCallback
import numpy as np
from varlen.datamodules import SequenceDataModule
from varlen.models import SequenceModel

rng = np.random.default_rng(0)
signals = [rng.normal(size=(t, 2)).astype(np.float32) for t in rng.integers(3, 20, 40)]
dm = SequenceDataModule(train={"signal": signals, "label": [i % 2 for i in range(40)]}, max_tokens=256)
dm.setup("fit")
model = SequenceModel(num_classes=2, task="classification", input_field="signal", feature_dim=2,
                      d_model=8, nhead=2, num_layers=1, dim_feedforward=16)
trainer = pl.Trainer(max_steps=1, limit_val_batches=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, datamodule=dm)
"""


def test_the_report_is_shown_once_from_python(tmp_path: Path) -> None:
    """`dm.setup()` then `trainer.fit(model, datamodule=dm)` in a plain script (no logging config): the report
    shows on stderr once, through varlen's handler (as Lightning shows its own lines)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", REPORT_SCRIPT], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("data report") == 1, done.stderr


def test_the_report_goes_through_the_users_logging_config(caplog, capsys, monkeypatch) -> None:
    """Where the root logger has a handler (the user's `basicConfig`; here pytest's), the report goes there,
    once, and varlen's handler writes nothing itself."""
    logger = logging.getLogger("varlen")  # as in a fresh process (a `varlen` command run in this one sets its own)
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "propagate", True)
    dm = SequenceDataModule(train=arrays(), max_tokens=256)
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
        dm.setup("validate")
    assert [r.getMessage() for r in caplog.records].count(f"SequenceDataModule: data report\n{dm.report}") == 1
    assert "data report" not in capsys.readouterr().err


def fit_one_step(model: pl.LightningModule, dm: pl.LightningDataModule, folder: Path) -> pl.Trainer:
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, filename="one")
    trainer = pl.Trainer(max_steps=1, limit_val_batches=1, default_root_dir=folder, callbacks=[checkpoint], **QUIET)
    trainer.fit(model, datamodule=dm)
    return trainer


def test_a_model_given_no_dimensions_takes_the_datamodules(tmp_path: Path) -> None:
    dm = SequenceDataModule(train=arrays(), max_tokens=256)
    model = SequenceModel(**TINY)
    fit_one_step(model, dm, tmp_path)
    for name in ("num_classes", "task", "input_field", "feature_dim", "vocab_size", "class_names"):
        assert model.hparams[name] == getattr(dm, name), name
        assert model.hparams_initial[name] == getattr(dm, name), name  # what a logger is given
    assert model.hparams.feature_dim == 2 and model.hparams.input_field == "signal"
    # the checkpoint holds the dimensions taken: it rebuilds the same model without a DataModule
    reloaded = SequenceModel.load_from_checkpoint(tmp_path / "one.ckpt")
    batch = dm.fetch_batch("val", [0, 1, 2])
    torch.testing.assert_close(reloaded.eval()(batch), model.eval()(batch))


def test_no_dimensions_and_no_datamodule_is_a_one_line_error() -> None:
    model = SequenceModel(**TINY)
    dm = SequenceDataModule(train=arrays(), max_tokens=256)
    dm.setup("fit")
    trainer = pl.Trainer(max_steps=1, **QUIET)
    with pytest.raises(ValueError, match=r"SequenceModel needs .*feature_dim.*datamodule=") as info:
        trainer.fit(model, train_dataloaders=dm.train_dataloader())
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"SequenceModel has no layers yet: it needs .*feature_dim"):
        model(dm.fetch_batch("train", [0]))


def test_given_dimensions_build_at_once_and_are_kept() -> None:
    model = SequenceModel(num_classes=4, task="classification", input_field="x", feature_dim=3, **TINY)
    assert model.head.out_features == 4 and model.embed.in_features == 3
    dm = SequenceDataModule(train=arrays(), max_tokens=256)
    model._trainer = SimpleNamespace(datamodule=dm)
    model.setup("fit")  # nothing to take: what was given stays
    assert model.hparams.feature_dim == 3 and model.hparams.input_field == "x"


#: scenario module -> (DataModule, model), as the configs pair them
PAIRS = {
    module: (name, next(m for m, mod in varlen.models.SCENARIOS.items() if mod == module))
    for name, module in varlen.datamodules.SCENARIOS.items()
}
#: small layers where a model's default is large or downloads weights
SMALL = {
    "text": {"pretrained": False, "config_overrides": {"num_hidden_layers": 1, "hidden_size": 32,
             "num_attention_heads": 2, "intermediate_size": 64}},
    "hyperspectral": TINY,
    "sequence": TINY,
    "molecules": {"hidden": 8, "num_layers": 1},
    "video_text": {"d_model": 8, "nhead": 2, "embed_dim": 8},
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PAIRS))
def test_every_model_takes_what_the_cli_links(module: str) -> None:
    """Each reference model, given none of the values the CLI links, takes every one from its DataModule at
    `setup` (Lightning calls it before `configure_optimizers`); each is None by default."""
    data_name, model_name = PAIRS[module]
    model_class = getattr(varlen.models, model_name)
    linked = [name for name in inspect.signature(model_class).parameters if name in LINKED]
    assert set(model_class.linked) == set(linked), "VarLenModule.linked lists the model's linked arguments"
    assert all(inspect.signature(model_class).parameters[name].default is None for name in linked)
    dm = getattr(varlen.datamodules, data_name)()
    model = model_class(**SMALL.get(module, {}))
    assert not list(model.parameters()), "no layer is made before the dimensions are known"
    model._trainer = SimpleNamespace(datamodule=dm)
    model.setup("fit")
    for name in linked:
        assert model.hparams[name] == getattr(dm, name), name
    assert sum(p.numel() for p in model.parameters()) > 0
    model._trainer = None


def test_fit_callbacks_are_what_varlen_fit_adds(tmp_path: Path, monkeypatch) -> None:
    from varlen.callbacks import fit_callbacks
    from varlen.cli.dispatch import main

    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "sequence.yaml"
    built = main(["--config", str(config), f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
                  "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]"], run=False)  # fmt: skip
    lightning_own = (pl.callbacks.ProgressBar, pl.callbacks.ModelSummary, SaveConfigCallback)  # Lightning's own
    cli = [c for c in built.trainer.callbacks if not isinstance(c, lightning_own)]
    mine = pl.Trainer(callbacks=fit_callbacks(progress_bar=False), default_root_dir=tmp_path, **QUIET)
    ours = [c for c in mine.callbacks if not isinstance(c, lightning_own)]  # as the Trainer orders them
    assert [type(c) for c in ours] == [type(c) for c in cli]
    assert [settings(c) for c in ours] == [settings(c) for c in cli]


def test_the_warm_up_and_validation_say_they_run(tmp_path: Path, capsys) -> None:
    """A loaded machine is never silent: the warm-up says when it starts and how long it took, a validation that
    runs long says so once (no progress bar shows it), a short one adds no line, and the epoch line gives its
    time."""
    from varlen.callbacks import fit_callbacks
    from varlen.callbacks.progress import EpochProgress

    dm = SequenceDataModule(train=arrays(), max_tokens=256)
    for after in (0.0, 60.0):  # every validation "long" / none
        callbacks = fit_callbacks(warm_shapes="always", progress_bar=False, checkpointing=False)
        next(c for c in callbacks if isinstance(c, EpochProgress)).say_validation_after = after
        trainer = pl.Trainer(max_epochs=2, enable_checkpointing=False, callbacks=callbacks, **QUIET)
        trainer.fit(SequenceModel(**TINY), datamodule=dm)
        out = capsys.readouterr().out.splitlines()
        warm = next(c for c in trainer.callbacks if type(c).__name__ == "WarmShapes")
        batches = trainer.num_val_batches[0]
        assert out[:2] == [
            f"WarmShapes: running {warm.shapes} batch shapes of epoch 1 through forward and backward on cpu",
            f"WarmShapes: {warm.shapes} batch shapes of epoch 1 run in {warm.seconds:.1f} s",
        ]
        epochs = [line for line in out[2:] if not line.startswith("WarmShapes")]
        if after:
            assert len(epochs) == 2, out
        else:  # once per validation, after its first batch
            assert len(epochs) == 4 and all(
                re.fullmatch(rf"validating epoch {e}/2: 1/{batches} batches in \d+\.\d s", epochs[2 * e - 2])
                for e in (1, 2)
            ), out
        assert epochs[-1].startswith("epoch 2/2: val/accuracy ")
        assert re.search(r"\d s \(validation \d+\.\d s\)$", epochs[-1])


def settings(callback: pl.Callback) -> dict[str, object]:
    """A callback's public plain values: what it was made with."""
    plain = (int, float, str, bool, type(None), list, tuple)
    return {k: v for k, v in vars(callback).items() if not k.startswith("_") and isinstance(v, plain)}
