"""`varlen fit` keeps a resumable `last.ckpt`: every few minutes of training as well as at each epoch's end,
renamed into place from its own folder (never a torn file under its name, on any file system), next to a
ModelCheckpoint the config lists without adding a second one; and the folders a fit writes are checked before
it starts (a file or a read-only folder there: one line naming it, status 2). The interruptions themselves
(SIGINT, SIGTERM) are in test_kill_resume."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from varlen.callbacks.resumable import Resumable, Stop, resume_command
from varlen.cli import dispatch as cli

CONFIG = """\
trainer:
  max_epochs: 1
  limit_train_batches: 4
  limit_val_batches: 0
  num_sanity_val_steps: 0
  logger: false
  enable_model_summary: false
{callbacks}model:
  class_path: toy.ToyModel
data:
  class_path: toy.ToyDataModule
  init_args:
    num_samples: 64
"""


@pytest.fixture(autouse=True)
def _config_folder(tmp_path_factory, monkeypatch) -> None:
    monkeypatch.setenv("PYTEST_TMP", str(tmp_path_factory.mktemp("config")))


def run_fit(monkeypatch, capsys, root: Path, *extra: str, callbacks: str = "") -> tuple[int, str]:
    """`varlen fit` of the toy config in this process, into `root`: its status and stderr."""
    config = Path(os.environ["PYTEST_TMP"]) / "toy.yaml"
    config.write_text(CONFIG.format(callbacks=callbacks))
    args = ["fit", "--config", str(config), f"--trainer.default_root_dir={root}", "--warm_shapes=false", *extra]
    monkeypatch.setattr(sys, "argv", ["varlen", *args])
    code = 0
    try:
        cli.console()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


class LastCkptSeen(pl.Callback):
    """Records, at each training batch's start, the global step last.ckpt holds (-1: none yet)."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen = path, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        held = torch.load(self.path, weights_only=False)["global_step"] if self.path.is_file() else -1
        self.seen.append(held)


def test_last_ckpt_is_kept_every_few_minutes_of_training(tmp_path) -> None:
    """Lightning's default saves at an epoch's end only: a run killed mid-epoch had nothing to resume from."""
    seen = LastCkptSeen(tmp_path / "last.ckpt")
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=4, limit_val_batches=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[seen, Resumable(every_min=1e-9), checkpoints],
    )  # fmt: skip
    from toy import ToyDataModule, ToyModel

    trainer.fit(ToyModel(), datamodule=ToyDataModule(num_samples=64))
    assert seen.seen == [-1, 1, 2, 3]  # saved at each step's end (a tiny interval), before the next one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch=0-step=4.ckpt", "last.ckpt"]  # one last.ckpt


def test_varlen_fit_saves_every_checkpoint_from_its_own_folder(tmp_path, monkeypatch, capsys) -> None:
    """Lightning writes a checkpoint into the system's temporary folder and moves it: from another file system a
    move is a copy into place, which a kill leaves torn. Every save here is a rename within the folder."""
    moves, replace, move = [], os.replace, shutil.move
    monkeypatch.setattr(os, "replace", lambda a, b: moves.append((Path(a), Path(b))) or replace(a, b))
    monkeypatch.setattr(shutil, "move", lambda a, b, **k: moves.append((Path(a), Path(b))) or move(a, b, **k))
    code, err = run_fit(monkeypatch, capsys, tmp_path / "run", "--checkpoint_every_min=1e-9")
    assert code == 0, err
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    saved = [(a, b) for a, b in moves if b.suffix == ".ckpt"]
    assert len(saved) >= 5 and all(a.parent == b.parent == folder for a, b in saved), saved  # 4 steps, epoch end


LISTED = """\
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {dirpath: DIR, every_n_epochs: 1, save_top_k: -1, filename: "mine-{step}"}
"""


def test_a_listed_model_checkpoint_keeps_its_settings_and_gets_last_ckpt(tmp_path, monkeypatch, capsys) -> None:
    mine = tmp_path / "mine"
    code, err = run_fit(
        monkeypatch, capsys, tmp_path / "run", "--checkpoint_every_min=1e-9", callbacks=LISTED.replace("DIR", str(mine))
    )
    assert code == 0, err
    assert sorted(p.name for p in mine.iterdir()) == ["last.ckpt", "mine-step=4.ckpt"]
    assert torch.load(mine / "last.ckpt", weights_only=False)["global_step"] == 4
    assert not (tmp_path / "run" / "checkpoints").exists()  # no second ModelCheckpoint of varlen's


def test_a_root_folder_that_is_a_file_is_one_line_before_the_fit(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "run").write_text("not a folder")
    code, err = run_fit(monkeypatch, capsys, tmp_path / "run" / "sub")
    assert code == 2 and err.strip().splitlines() == [
        f"varlen: error: cannot write in {tmp_path}/run/sub ({tmp_path}/run is a file, not a folder): "
        "give --trainer.default_root_dir a folder you can write to"
    ], err


def test_a_read_only_root_folder_is_one_line_before_the_fit(tmp_path, monkeypatch, capsys) -> None:
    """A read-only folder (root ignores permissions, so the file system's answer is made here)."""
    root, mkstemp = tmp_path / "run", tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's name)
        if dir is not None and Path(dir) == root:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    code, err = run_fit(monkeypatch, capsys, root)
    assert code == 2 and err.strip().splitlines() == [
        f"varlen: error: cannot write in {root} (Read-only file system): "
        "give --trainer.default_root_dir a folder you can write to"
    ], err


def test_the_resume_command_replaces_a_ckpt_path_it_had() -> None:
    argv = ["fit", "--config", "my config.yaml", "--ckpt_path=old.ckpt", "--trainer.max_epochs", "3"]
    assert resume_command(argv, "/r/last.ckpt") == (
        "varlen fit --config 'my config.yaml' --trainer.max_epochs 3 --ckpt_path /r/last.ckpt"
    )
    stop = Stop(signal=2, epoch=0, step=0)
    assert stop.status == 130 and stop.line(argv).endswith("no checkpoint saved yet, nothing to resume")


@pytest.mark.parametrize("minutes", [-1.0])
def test_a_negative_interval_is_refused(minutes) -> None:
    with pytest.raises(ValueError, match="every_min=-1.0"):
        Resumable(minutes)
