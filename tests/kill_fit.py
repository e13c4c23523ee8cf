"""Run by test_kill_resume: a short fit that records each trained batch as it goes and may SIGKILL itself.

Usage: `kill_fit.py JOB` runs one job (a JSON object) in this process; `kill_fit.py serve` imports
torch, Lightning and the scenarios once, then reads one job a line from stdin, runs each in a process
forked for it (a fresh process: the kill ends it, not the server) and answers its exit status
(`{"rc": ..}`, -9 for SIGKILL) a line. The imports cost 4-5 s a process on 2 cores, the fits 1-3 s.

A job: `{"scenario": "text" | "hyperspectral", "out": folder, "workers": n, "every": steps,
"epochs": n, "kill": null | ["checkpoint", k] | ["epoch", e], "resume": checkpoint | null,
"drop_loader_state": bool, "root": hyperspectral scene folder, "cli": bool}`. Every `every` steps a checkpoint
goes to OUT/ckpt/step=S.ckpt; the training loader's worker count to OUT/loader.json. Each batch, at
its start, appends a line `{"epoch", "step", "index", "bands"}` (`bands`: the hyperspectral
batch's band subsets, -1 where padded) to OUT/batches.jsonl, flushed, so a killed process leaves its
record. `kill`: SIGKILL at the start of the first batch after the k-th checkpoint was saved (its
file complete: the save runs at the previous batch's end), or at the start of epoch e's first batch;
that batch is not recorded. `kill: ["signal", "SIGINT" | "SIGTERM", s]` sends the signal at the start of
step s's batch, which is recorded (the fit is meant to finish that step). `drop_loader_state`: the
checkpoint's loader state and the DataModule's training position (the sampler's place in the epoch) are removed
before the resume, to show what an exact resume needs. `cli`: the text fit runs as `varlen fit --config
OUT/fit.yaml` (`varlen.cli.dispatch.console`: its own checkpoints, none every `every` steps; `resume`: the
arguments after `varlen`), its exit status the command's. The job's output goes to OUT/log.txt.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

import lightning.pytorch as pl
import torch

import varlen.cli.dispatch
import varlen.datamodules
import varlen.models
from varlen.datamodules import TextClassificationDataModule
from varlen.datamodules.hyperspectral import HyperspectralDataModule
from varlen.models import TextClassifier
from varlen.models.hyperspectral import SpectralTransformer

ALARM_S = 180
TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}


def scenario(job: dict) -> tuple[pl.LightningDataModule, pl.LightningModule]:
    """The scenario's DataModule on its synthetic default, kept small, and a tiny model."""
    if job["scenario"] == "text":
        dm = TextClassificationDataModule(synthetic_samples=96, batch_size=8, num_workers=job["workers"])
        return dm, TextClassifier(num_classes=dm.num_classes, pretrained=False, config_overrides=TINY_BERT)
    dm = HyperspectralDataModule(
        root=job["root"], layout="generated", min_bands=4, max_bands=12, batch_size=512, num_workers=job["workers"]
    )  # per-epoch band draws: 4-12 of the 200 bands per pixel
    return dm, SpectralTransformer(num_classes=dm.num_classes, d_model=16, nhead=2, num_layers=1)


class KillAndRecord(pl.Callback):
    """Appends each batch's record (flushed), after killing the process where the job says."""

    def __init__(self, job: dict) -> None:
        self.job, self.record = job, open(Path(job["out"]) / "batches.jsonl", "a")  # noqa: SIM115

    def on_train_start(self, trainer, pl_module) -> None:
        workers = trainer.train_dataloader.num_workers  # the loader Lightning iterates, as the job asked?
        (Path(self.job["out"]) / "loader.json").write_text(json.dumps({"num_workers": workers}))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        kill, step = self.job["kill"], trainer.global_step
        if kill and kill[0] == "checkpoint" and step == kill[1] * self.job["every"]:
            saved = Path(self.job["out"]) / "ckpt" / f"step={step}.ckpt"
            if not saved.is_file():
                raise RuntimeError(f"{saved} should have been saved before step {step}'s batch")
            os.kill(os.getpid(), signal.SIGKILL)
        if kill and kill[0] == "epoch" and trainer.current_epoch == kill[1] and batch_idx == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if kill and kill[0] == "signal" and step == kill[2]:
            os.kill(os.getpid(), getattr(signal, kill[1]))  # handled in this step; the batch still trains
        bands = batch["bands"].tolist() if "bands" in batch else None
        line = {"epoch": trainer.current_epoch, "step": step, "index": batch["index"].tolist(), "bands": bands}
        self.record.write(json.dumps(line) + "\n")
        self.record.flush()


def without_loader_state(checkpoint: str, out: Path) -> str:
    """A copy of `checkpoint` that holds the sampler's place in the epoch nowhere: neither in the fit loop's
    state of the training loader nor in the DataModule's training position."""
    state = torch.load(checkpoint, weights_only=False)
    loop = state["loops"]["fit_loop"]["state_dict"]
    if not loop.pop("combined_loader", None):
        raise RuntimeError(f"{checkpoint} holds no loader state under loops.fit_loop.state_dict.combined_loader")
    holders = [part for part in state.values() if isinstance(part, dict) and "train_position" in part]
    if len(holders) != 1:
        raise RuntimeError(f"{checkpoint} holds no training position in a DataModule's state")
    del holders[0]["train_position"]
    torch.save(state, out / "no_loader_state.ckpt")
    return str(out / "no_loader_state.ckpt")


def run_cli(job: dict) -> None:
    """The text scenario as `varlen fit --config OUT/fit.yaml` (`job["resume"]`: the arguments after
    `varlen` instead), KillAndRecord listed in the config."""
    out = Path(job["out"])
    model = {"pretrained": False, "config_overrides": TINY_BERT}
    data = {"synthetic_samples": 96, "batch_size": 8, "num_workers": job["workers"]}
    trainer = {
        "accelerator": "cpu", "devices": 1, "max_epochs": job.get("epochs", 2), "limit_val_batches": 0,
        "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
        "default_root_dir": str(out),
        "callbacks": [{"class_path": "kill_fit.KillAndRecord", "init_args": {"job": job}}],
    }  # fmt: skip
    config = {
        "trainer": trainer,
        "model": {"class_path": "varlen.models.TextClassifier", "init_args": model},
        "data": {"class_path": "varlen.datamodules.TextClassificationDataModule", "init_args": data},
    }
    (out / "fit.yaml").write_text(json.dumps(config))
    args = job.get("resume") or ["fit", "--config", str(out / "fit.yaml")]
    sys.argv = ["varlen", *args, "--warm_shapes=false", "--progress_every=0"]
    varlen.cli.dispatch.console()


def run(job: dict) -> None:
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    resume = job.get("resume")
    if resume and job.get("drop_loader_state"):
        resume = without_loader_state(resume, out)
    checkpoints = pl.callbacks.ModelCheckpoint(
        dirpath=out / "ckpt", every_n_train_steps=job["every"], save_top_k=-1, filename="{step}"
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=job.get("epochs", 2),
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[KillAndRecord(job), checkpoints],
    )
    dm, model = scenario(job)
    trainer.fit(model, datamodule=dm, ckpt_path=resume)


def forked(job: dict) -> int:
    """Runs `job` in a forked process, its output in OUT/log.txt; its exit status (-N: signal N)."""
    Path(job["out"]).mkdir(parents=True, exist_ok=True)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            log = os.open(Path(job["out"]) / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            sys.stdin.close()
            signal.alarm(ALARM_S)  # a hung fit ends and the server answers
            run_cli(job) if job.get("cli") else run(job)
            code = 0
        except SystemExit as exit_:  # the varlen command's status
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    if sys.argv[1] != "serve":
        run(json.loads(sys.argv[1]))
    else:
        varlen.datamodules.import_all()  # what each varlen command imports, once for every job
        varlen.models.import_all()
        for request in sys.stdin:
            print(json.dumps({"rc": forked(json.loads(request))}), flush=True)
