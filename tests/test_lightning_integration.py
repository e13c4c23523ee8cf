"""The core inside Lightning: checkpoint resume mid-epoch, DDP injection, torchrun, workers."""

import gc
import inspect
import json
import os
import re
import signal
import socket
import subprocess
import sys
import weakref
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from aborting import AbortsAtExit
from stuck_worker import two_tensors
from toy import ToyDataModule, ToyModel, ToySequences

from varlen.batching import BucketBatchSampler
from varlen.batching.loader import VarLenLoader

HERE = Path(__file__).parent


class Recorder(pl.Callback):
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append((trainer.current_epoch, batch["index"].tolist()))


def fit(tmp_path: Path, ckpt_path=None, checkpoint_every=None, max_epochs=2, num_workers=0):
    recorder = Recorder()
    callbacks = [recorder]
    if checkpoint_every:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=tmp_path / "ckpt", every_n_train_steps=checkpoint_every, save_top_k=-1, filename="{step}"
            )
        )
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=bool(checkpoint_every),
        callbacks=callbacks,
        num_sanity_val_steps=0,
    )
    dm = ToyDataModule(num_samples=200, batch_size=None, max_tokens=128, num_workers=num_workers)
    trainer.fit(ToyModel(), datamodule=dm, ckpt_path=ckpt_path)
    return recorder.batches


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_from_mid_epoch_checkpoint_is_exact(tmp_path: Path, num_workers: int) -> None:
    full = fit(tmp_path, checkpoint_every=7, num_workers=num_workers)
    steps_per_epoch = len(full) // 2
    assert steps_per_epoch > 7
    step = 7 * (steps_per_epoch // 7 + 1)  # a checkpoint inside the second epoch
    assert step % steps_per_epoch != 0
    resumed = fit(tmp_path / "again", ckpt_path=tmp_path / "ckpt" / f"step={step}.ckpt", num_workers=num_workers)
    assert resumed == full[step:]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_an_epoch_boundary_is_exact(tmp_path: Path, num_workers: int) -> None:
    """From the step checkpoint of an epoch's last batch, and from the epoch-end `last.ckpt`:
    the next epoch's plan, not a replay or an empty epoch. With workers, Lightning creates the
    first iterator before `set_epoch`, so this needs the loader's deferred prefetch."""
    full = fit(tmp_path, checkpoint_every=1, num_workers=num_workers)
    steps_per_epoch = len(full) // 2
    resumed = fit(
        tmp_path / "step", ckpt_path=tmp_path / "ckpt" / f"step={steps_per_epoch}.ckpt", num_workers=num_workers
    )
    assert resumed == full[steps_per_epoch:]

    def one_run(root: Path, max_epochs: int, ckpt_path=None):
        recorder = Recorder()
        trainer = pl.Trainer(
            max_epochs=max_epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
            callbacks=[recorder, pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True)], num_sanity_val_steps=0,
        )  # fmt: skip
        dm = ToyDataModule(num_samples=200, batch_size=None, max_tokens=128, num_workers=num_workers)
        trainer.fit(ToyModel(), datamodule=dm, ckpt_path=ckpt_path)
        return recorder.batches

    one_run(tmp_path / "first", 1)
    assert one_run(tmp_path / "second", 2, ckpt_path=tmp_path / "first" / "last.ckpt") == full[steps_per_epoch:]


def test_epochs_reshuffle_inside_lightning(tmp_path: Path) -> None:
    batches = fit(tmp_path)
    first = [b for e, b in batches if e == 0]
    second = [b for e, b in batches if e == 1]
    assert len(first) == len(second)
    assert first != second
    assert sorted(i for b in first for i in b) == sorted(i for b in second for i in b) == list(range(200))


def _toy_env() -> dict[str, str]:
    return {
        "OMP_NUM_THREADS": "1",
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture(scope="module")
def ddp_toy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One 2-process fit of two epochs with default flags, a checkpoint every 5 steps: its folder and stderr."""
    out = tmp_path_factory.mktemp("ddp_toy")
    command = [sys.executable, str(HERE / "ddp_toy_fit.py"), str(out), "120", "5"]
    run = subprocess.run(command, check=True, env=_toy_env(), timeout=600, capture_output=True, text=True)
    return out, run.stderr


def test_lightning_ddp_with_default_flags(ddp_toy_run: tuple[Path, str]) -> None:
    tmp_path, stderr = ddp_toy_run
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] > 0
    assert ranks[0]["batches"] == ranks[1]["batches"] == 2 * ranks[0]["num_training_batches"]
    served = np.bincount(ranks[0]["indices"] + ranks[1]["indices"], minlength=301)
    assert (served == 2).all()  # two epochs, every sample exactly once per epoch
    # the report is said once per job (once per setup: fit sets up once), not once per rank
    assert stderr.count("ToyDataModule: data report") == 1, stderr[-3000:]
    # telemetry: every rank reports the same epoch summary, over both ranks' batches
    telemetry = [json.loads((tmp_path / f"telemetry{r}.json").read_text()) for r in range(2)]
    assert telemetry[0] == telemetry[1] and len(telemetry[0]) == 2
    lengths = ToySequences(301, 1).lengths
    for epoch, summary in enumerate(telemetry[0]):
        batches = [b for r in range(2) for b in _rank_batches(tmp_path, r)[epoch]]
        real = sum(int(lengths[b].sum()) for b in batches)
        padded = sum(len(b) * int(lengths[b].max()) for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(301))
        assert summary["padding_efficiency"] == pytest.approx(real / padded)


def _rank_batches(out: Path, rank: int) -> list[list[list[int]]]:
    """One rank's batches, per epoch (both epochs have the same count)."""
    batches = json.loads((out / f"batches{rank}.json").read_text())
    half = len(batches) // 2
    return [batches[:half], batches[half:]]


def test_ddp_checkpoint_resumes_exactly_on_every_rank(ddp_toy_run: tuple[Path, str], tmp_path: Path) -> None:
    """A 2-process fit resumed from a mid-epoch checkpoint trains each rank on exactly the batches
    the uninterrupted run trained it on after that step (the state is rank-independent)."""
    out, _ = ddp_toy_run
    full = [json.loads((out / f"batches{r}.json").read_text()) for r in range(2)]
    per_epoch = len(full[0]) // 2
    step = 5 * (per_epoch // 5 + 1)  # a checkpoint inside the second epoch
    assert step % per_epoch and step < len(full[0])
    checkpoint = str(out / "ckpt" / f"step={step}.ckpt")
    command = [sys.executable, str(HERE / "ddp_toy_fit.py"), str(tmp_path), "120", "5", checkpoint]
    subprocess.run(command, check=True, env=_toy_env(), timeout=600)
    resumed = [json.loads((tmp_path / f"batches{r}.json").read_text()) for r in range(2)]
    assert resumed[0] == full[0][step:] and resumed[1] == full[1][step:]


def test_a_checkpoint_of_one_process_resumes_on_two_early_or_with_one_sample_left(tmp_path: Path) -> None:
    """Saved on 1 rank mid-epoch, resumed on 2 through Lightning: the rest of the epoch is served exactly
    once, both ranks get as many batches (more per rank than a fresh 2-rank epoch: the resumed epoch counts
    the batches served before), and the next epoch is a whole one. Saved with one sample left (batches of
    75: the last holds 1), the fit does not hang: the sample is repeated for the rank the rest cannot feed."""
    env = _toy_env()

    def run(out: Path, devices: int, resume: str = "-", epochs: int = 2) -> list[tuple[list[list[int]], list[int]]]:
        out.mkdir(parents=True, exist_ok=True)
        script = str(HERE / "ddp_toy_fit.py")
        command = [sys.executable, script, str(out), "b75", "2", resume, str(devices), str(epochs)]
        subprocess.run(command, check=True, env=env, timeout=600, capture_output=True)
        return [
            (json.loads((out / f"batches{r}.json").read_text()), json.loads((out / f"epochs{r}.json").read_text()))
            for r in range(devices)
        ]

    ((single, _),) = run(tmp_path / "one", 1, epochs=1)
    assert [len(b) for b in single] == [75, 75, 75, 75, 1]  # checkpoints at steps 2 and 4
    for step, repeated in ((2, 0), (4, 1)):
        resumed = run(tmp_path / f"two{step}", 2, str(tmp_path / "one" / "ckpt" / f"step={step}.ckpt"))
        for epoch in (0, 1):
            counts = [sum(e == epoch for e in epochs) for _, epochs in resumed]
            assert counts[0] == counts[1] > 0
            served = Counter(
                i for batches, epochs in resumed for b, e in zip(batches, epochs, strict=True) if e == epoch for i in b
            )
            before = Counter(i for b in single[:step] for i in b) if epoch == 0 else Counter()
            assert set(before + served) == set(range(301))
            assert sum((before + served).values()) - 301 == (repeated if epoch == 0 else 0)
        if step == 4:
            assert [sum(e == 0 for e in epochs) for _, epochs in resumed] == [1, 1]


def _torchrun_worker(rank: int, world_size: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    lengths = np.random.default_rng(0).integers(1, 50, 101)
    sampler = BucketBatchSampler(lengths, max_tokens=100)  # ranks come from torch.distributed
    loader = torch.utils.data.DataLoader(range(101), batch_sampler=sampler)
    mine = [b.tolist() for b in loader]
    gathered = [None] * world_size
    dist.all_gather_object(gathered, (sampler.rank, sampler.num_replicas, mine))
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def free_port() -> int:
    """A port nothing listens on now (a fixed one collides with another run on the same machine)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_plain_torch_distributed_without_lightning(tmp_path: Path) -> None:
    out = tmp_path / "gathered.json"
    mp.spawn(_torchrun_worker, args=(3, free_port(), str(out)), nprocs=3)
    gathered = json.loads(out.read_text())
    assert [g[:2] for g in gathered] == [[0, 3], [1, 3], [2, 3]]
    assert len({len(g[2]) for g in gathered}) == 1
    assert sorted(i for g in gathered for b in g[2] for i in b) == list(range(101))


class CountingToy(ToyDataModule):
    """Counts calls of batch_stats, and whether the trainer was past the batch's transfer."""

    def batch_stats(self, batch):
        self.calls = getattr(self, "calls", 0) + 1
        return super().batch_stats(batch)


def test_padding_telemetry_logs_and_summarises(tmp_path: Path, capsys) -> None:
    """Per step and per epoch; each training batch is counted once, on the host, for both
    PaddingTelemetry and EpochProgress (counting a batch on the device waits for the device)."""
    from varlen.batching.telemetry import PaddingTelemetry
    from varlen.callbacks.progress import EpochProgress

    telemetry = PaddingTelemetry()
    recorder = Recorder()
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=pl.loggers.CSVLogger(tmp_path),
        enable_progress_bar=False,
        enable_checkpointing=False,
        callbacks=[telemetry, recorder, EpochProgress(metrics=["val/loss"], name="toy")],
        log_every_n_steps=1,
        limit_val_batches=0,
    )
    dm = CountingToy(num_samples=120, batch_size=None, max_tokens=200)
    trainer.fit(ToyModel(), datamodule=dm)
    assert dm.calls == len(recorder.batches)  # once per training batch, before its transfer
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("toy epoch")]
    assert [line.split(":")[0] for line in progress] == ["toy epoch 1/2", "toy epoch 2/2"]
    for line, summary in zip(progress, telemetry.epochs, strict=True):
        assert f"padding {summary['padding_efficiency']:.3f}" in line
    lengths = dm.dataset("train").lengths
    batches = [b for _, b in recorder.batches]
    for epoch, summary in enumerate(telemetry.epochs):
        of_epoch = [b for e, b in recorder.batches if e == epoch]
        real = sum(int(lengths[b].sum()) for b in of_epoch)
        padded = sum(len(b) * int(lengths[b].max()) for b in of_epoch)
        assert summary["padding_efficiency"] == pytest.approx(real / padded)
        assert summary["samples_per_s"] > 0 and summary["real_per_s"] > 0
    import csv

    rows = list(csv.DictReader((Path(trainer.logger.log_dir) / "metrics.csv").open()))
    steps = [r for r in rows if r.get("telemetry/padding_efficiency")]
    assert len(steps) == len(batches)
    for row, batch in zip(steps, batches, strict=True):  # each logged value is its batch's
        assert float(row["telemetry/padding_efficiency"]) == pytest.approx(
            lengths[batch].sum() / (len(batch) * lengths[batch].max())
        )
        assert float(row["telemetry/batch_size"]) == len(batch)
    rates = [float(r["telemetry/real_per_s"]) for r in steps if r.get("telemetry/real_per_s")]
    assert len(rates) == len(batches) - 2 and min(rates) > 0  # an epoch's first batch has no predecessor
    import yaml

    logged = yaml.safe_load((Path(trainer.logger.log_dir) / "hparams.yaml").read_text())
    assert logged["max_tokens"] == 200 and logged["num_samples"] == 120  # the DataModule's own arguments
    epoch_rows = [r for r in rows if r.get("telemetry/epoch_padding_efficiency")]
    assert [float(r["telemetry/epoch_padding_efficiency"]) for r in epoch_rows] == pytest.approx(
        [e["padding_efficiency"] for e in telemetry.epochs]
    )


class FreezeProbe(torch.utils.data.Dataset):
    """Each sample reports how many objects are frozen in the process that loads it."""

    lengths = np.full(64, 3)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        return {"index": i, "frozen": gc.get_freeze_count()}


def frozen_in_workers(loader: VarLenLoader) -> list[int]:
    return [s["frozen"] for batch in loader for s in batch]


class FreezeRecorder(pl.Callback):
    def __init__(self) -> None:
        self.counts: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.counts.append(gc.get_freeze_count())


def test_gc_frozen_in_workers_always_and_in_the_main_process_only_during_epochs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers never walk what they inherited (their GC would copy it); the main process is frozen
    from an epoch's first batch to its end, so nothing stays uncollectable between epochs, after
    a fit, or for an iterator that is never iterated; an application's own freeze is left alone."""
    loader = VarLenLoader(
        FreezeProbe(), batch_sampler=BucketBatchSampler(FreezeProbe.lengths, batch_size=8), num_workers=2,
        collate_fn=list,
    )  # fmt: skip
    if not loader._forks_workers():
        pytest.skip("workers are not forked on this platform")
    gc.unfreeze()
    try:
        in_main, in_workers = [], []
        for batch in loader:
            in_main.append(gc.get_freeze_count())
            in_workers += [sample["frozen"] for sample in batch]
        assert min(in_workers) > 0 and min(in_main) > 0
        assert gc.get_freeze_count() == 0  # the epoch ended

        iter(loader)  # e.g. torchdata creating an iterator to read its state: forks, never iterated
        assert gc.get_freeze_count() == 0
        for _ in loader:
            break  # a loop of one's own that leaves an epoch early
        assert gc.get_freeze_count() > 0
        loader.shutdown_workers()
        assert gc.get_freeze_count() == 0

        persistent = VarLenLoader(
            FreezeProbe(), batch_sampler=BucketBatchSampler(FreezeProbe.lengths, batch_size=8), num_workers=2,
            collate_fn=list, persistent_workers=True,
        )  # fmt: skip
        for _ in range(2):
            assert min(frozen_in_workers(persistent)) > 0 and gc.get_freeze_count() == 0

        recorder = FreezeRecorder()
        trainer = pl.Trainer(
            max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
            callbacks=[recorder], limit_train_batches=3, limit_val_batches=2,
        )  # fmt: skip
        dm = ToyDataModule(num_workers=2)
        dm.persistent_workers = True
        trainer.fit(ToyModel(), datamodule=dm)
        assert len(recorder.counts) == 6 and min(recorder.counts) > 0
        assert gc.get_freeze_count() == 0

        gc.freeze()  # the application's own freeze
        mine = gc.get_freeze_count()
        frozen_in_workers(loader)
        assert gc.get_freeze_count() > mine // 2  # not undone (some frozen objects were freed meanwhile)
        gc.unfreeze()

        monkeypatch.setattr(VarLenLoader, "freeze_gc", False)
        assert max(frozen_in_workers(loader)) == 0
        loader.multiprocessing_context = "spawn"
        assert not loader._forks_workers()
    finally:
        gc.unfreeze()


class CorruptAt(torch.utils.data.Dataset):
    """Sample `bad` raises in the worker that reads it, as a corrupt file would."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return i


class Model:
    """Stands for a model dropped after a failed epoch: a reference cycle only the collector frees."""

    def __init__(self) -> None:
        self.me = self


def test_a_worker_error_releases_the_collector_as_an_epochs_end_does() -> None:
    """After a worker raises, nothing stays frozen (an object dropped then is collected); an epoch
    of an enclosing loader keeps its own hold, and a loop that goes on after the error holds again."""
    failing = VarLenLoader(CorruptAt(9), batch_size=4, num_workers=2)
    if not failing._forks_workers():
        pytest.skip("workers are not forked on this platform")
    gc.unfreeze()
    try:
        model = Model()
        alive = weakref.ref(model)
        epoch = iter(failing)
        with pytest.raises(ValueError, match="sample 9 is corrupt"):
            list(epoch)
        assert gc.get_freeze_count() == 0
        del model
        gc.collect()
        assert alive() is None  # frozen, it would stay until the workers stop
        assert len(list(epoch)) == 13  # going on: the rest of the epoch, held and released
        assert gc.get_freeze_count() == 0

        outer = VarLenLoader(FreezeProbe(), batch_size=8, num_workers=2, collate_fn=list)
        training = iter(outer)
        next(training)  # validation within a training epoch
        with pytest.raises(ValueError, match="sample 9 is corrupt"):
            list(failing)
        assert gc.get_freeze_count() > 0  # the training epoch still holds it
        assert len(list(training)) == 7 and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_an_epoch_left_unfinished_at_exit_prints_nothing() -> None:
    """A script that leaves a 2-worker epoch in the middle exits without an 'Exception ignored' line
    (its iterator is collected while the interpreter empties the modules)."""
    code = (
        "from varlen.batching.loader import VarLenLoader\n"
        "loader = VarLenLoader(list(range(64)), batch_size=4, num_workers=2)\n"
        "epoch = iter(loader)\n"
        "next(epoch)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Exception ignored" not in done.stderr, done.stderr


def test_a_spawned_worker_ends_without_the_interpreters_finalisation() -> None:
    """A spawned worker exits like a forked one, after its loop: what a library does while the
    interpreter finalises cannot kill it after its last batch (the main process may then raise
    'DataLoader worker ... is killed by signal: Aborted', depending on when the signal comes)."""
    loader = VarLenLoader(AbortsAtExit(), batch_size=4, num_workers=1, multiprocessing_context="spawn")
    epoch = iter(loader)
    assert [batch.tolist() for batch in epoch] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # its end joins the worker
    assert [worker.exitcode for worker in epoch._workers] == [0]  # -6 (SIGABRT) when it finalises
    assert loader.worker_init_fn is None  # the loader's own setting is left as it was


@pytest.mark.parametrize("case", ["before_put", "after_put"])
def test_a_stuck_worker_ends_the_epoch_with_an_error_naming_it_within_the_timeout(case: str) -> None:
    """A stopped worker blocked the loop forever: before its batch reached the result pipe, or after (the main
    process then asked the stopped worker for the batch's shared memory, with no timeout). With the loader's
    timeout the epoch ends with an error that names the worker, its pid and the setting; the shutdown ends the
    stopped worker (it ignores SIGTERM), and so does the process's exit when the error goes uncaught
    (multiprocessing joined it forever). 20 rounds in a row, each meeting its case whatever the timing
    (tests/stuck_worker.py)."""
    rounds = 20
    script = [sys.executable, str(HERE / "stuck_worker.py"), case, str(rounds)]
    try:
        done = subprocess.run(script, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as hung:  # end the stopped workers it printed, then fail
        for line in (hung.stdout or b"").decode().splitlines():
            if line.startswith("stuck ") and Path(f"/proc/{line.split()[1]}").exists():
                os.kill(int(line.split()[1]), signal.SIGKILL)
        raise
    lines = done.stdout.splitlines()
    assert len(lines) == 2 * rounds - 1, done.stderr
    for number, (stuck, ended) in enumerate(zip(lines[:-1:2], lines[1::2], strict=True), 1):
        assert stuck.startswith("stuck ") and ended.startswith(f"round {number} "), done.stderr
        assert float(ended.split()[2]) < 4, lines  # no 5 s join of the stopped worker
    assert done.returncode == 1, done.stderr
    assert re.search(r"RuntimeError: loader worker \d \(pid \d+\) gave no batch in 0.1 s", done.stderr), done.stderr
    for line in lines[::2]:  # no stopped worker is left behind, by a round or by the exit
        assert _process_state(int(line.split()[1])) in (None, "Z"), line


def test_an_epoch_left_early_leaves_no_shared_memory_file_behind() -> None:
    """Workers share batches by name (against the stuck-worker hang): a batch prefetched and never read kept
    its /dev/shm file until the process ended, where a file descriptor went with the workers. The
    shutdown reads and drops what is left in the pipe; an exiting worker writes what it had put."""
    loader = VarLenLoader(
        list(range(64)), batch_size=4, num_workers=2, collate_fn=two_tensors, multiprocessing_context="fork"
    )
    workers = set()
    for _ in range(4):
        epoch = iter(loader)
        assert next(epoch)["index"].tolist() == [0, 1, 2, 3]
        workers |= {str(worker.pid) for worker in epoch._workers}
        loader.shutdown_workers()
    del epoch
    assert [name for name in os.listdir("/dev/shm") if name.split("_")[1:2] in ([pid] for pid in workers)] == []


def _process_state(pid: int) -> str | None:
    """Process `pid`'s state letter (T: stopped, Z: a zombie), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_every_datamodule_passes_its_timeout_to_the_loader() -> None:
    from varlen.datamodules.base import LOADER_TIMEOUT, VarLenDataModule

    assert inspect.signature(VarLenDataModule).parameters["timeout"].default == LOADER_TIMEOUT
    import varlen.datamodules as datamodules

    for name in datamodules.SCENARIOS:
        assert inspect.signature(getattr(datamodules, name)).parameters["timeout"].default == LOADER_TIMEOUT, name
    dm = ToyDataModule(num_workers=1)
    dm.timeout = 7.0
    dm.setup("fit")
    assert dm.train_dataloader().timeout == 7.0 and ToyDataModule().timeout == LOADER_TIMEOUT
    with pytest.raises(ValueError, match="timeout must be seconds >= 0"):
        VarLenDataModule(timeout=-1)
