"""Checkpoints written at eab78fa (before the src/ layout and issue 41's round) resume to the same batches.

tests/data/eab78fa/ holds what that commit's own code wrote (tests/data/make_eab78fa_checkpoint.py says how):
for each case, SequenceDataModule's synthetic set under a token budget (bucketed, padded to the shape policy's
rungs; `mixture`: two sources drawn half and half, balanced sample weights; `cli`: run by `varlen fit`)
saved at step 7 of a 2-epoch fit, and every batch of the uninterrupted run. The current code, given the same
arguments, resumes each checkpoint (through a Trainer; `cli`'s also through `varlen fit --ckpt_path`) and
must serve the batches from step 7 on: the same samples in the same order, in the same epochs, padded to the
same shapes.

A checkpoint of a model built outside LightningCLI (`bucketed`, `mixture`) holds no class path in its
hyperparameters, and LightningCLI's `--ckpt_path` then fails to parse them (at eab78fa as now): such a one is
resumed through a Trainer only.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from varlen.datamodules import SequenceDataModule
from varlen.models import SequenceModel

FIXTURE = Path(__file__).parent / "data" / "eab78fa"
# the maker's arguments and recorder, read from its file (tests/data on sys.path would shadow other modules)
_spec = importlib.util.spec_from_file_location("make_eab78fa_checkpoint", FIXTURE.parent / "make_eab78fa_checkpoint.py")
maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maker)
CASES, LINKED, MODEL, TRAINER, Served = maker.CASES, maker.LINKED, maker.MODEL, maker.TRAINER, maker.Served


class ServedTo(Served):
    """`Served`, its record written to `path` (JSON) when training ends: for `varlen fit`'s config."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def on_train_end(self, trainer, pl_module) -> None:
        Path(self.path).write_text(json.dumps(self.batches))


def first_difference(got: list[dict], expected: list[dict]) -> str:
    """Where two batch records part, for the assertion's message."""
    for a, b in zip(got, expected, strict=False):
        if a != b:
            parts = {key: (str(a.get(key))[:90], str(b[key])[:90]) for key in b if a.get(key) != b[key]}
            return f"step {b['step']} differs (got, recorded at eab78fa): {parts}"
    return f"{len(got)} batches served against {len(expected)} recorded"


@pytest.fixture
def one_thread():
    """One torch thread: on a busy machine a tiny model's steps run 5-10 times faster than with one per core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def recorded(case: str) -> tuple[list[dict], int]:
    """The case's batches from the checkpoint's step on, as eab78fa served them, and the steps of its run."""
    record = json.loads((FIXTURE / "batches.json").read_text())
    batches = record["cases"][case]["batches"]
    assert (record["cases"][case]["data"], record["model"]) == (CASES[case], MODEL)  # the maker's, the fixture's
    return [batch for batch in batches if batch["step"] >= record["checkpoint_step"]], batches[-1]["step"] + 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_eab78fa_checkpoint_resumes_to_its_batches(case, tmp_path, one_thread) -> None:
    """Resumed mid epoch 0 from eab78fa's checkpoint: the rest of epoch 0 and all of epoch 1 as that commit
    served them (sample indices, order, epoch, padded shape)."""
    expected, steps = recorded(case)
    dm = SequenceDataModule(**CASES[case])
    dm.prepare_data()
    dm.setup("fit")
    model = SequenceModel(**{name: getattr(dm, name) for name in LINKED}, **MODEL)
    served = Served()
    trainer = pl.Trainer(**TRAINER, callbacks=[served], default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm, ckpt_path=FIXTURE / f"{case}.ckpt")
    assert served.batches == expected, first_difference(served.batches, expected)
    assert trainer.global_step == steps


def test_varlen_fit_resumes_an_eab78fa_checkpoint_to_its_batches(tmp_path, one_thread) -> None:
    """`varlen fit --config ... --ckpt_path` on the checkpoint eab78fa's `varlen fit` wrote (its model's
    hyperparameters read back by LightningCLI, the command's own callbacks added): the batches that commit served."""
    from varlen.cli.dispatch import main

    expected, steps = recorded("cli")
    served = tmp_path / "served.json"
    recorder = {"class_path": "test_old_checkpoint.ServedTo", "init_args": {"path": str(served)}}
    (tmp_path / "fit.yaml").write_text(json.dumps(maker.cli_config(CASES["cli"], tmp_path, [recorder])))
    args = ["fit", "--config", str(tmp_path / "fit.yaml"), "--ckpt_path", str(FIXTURE / "cli.ckpt")]
    cli = main([*args, "--warm_shapes=false", "--progress_every=0"])
    got = json.loads(served.read_text())
    assert got == expected, first_difference(got, expected)
    assert cli.trainer.global_step == steps
