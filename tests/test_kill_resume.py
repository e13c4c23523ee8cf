"""`kill -9` during training, resumed from the last checkpoint: the uninterrupted run's batches, exactly.

Issue 29's fault run held these; they stay as tests. Each fit runs in a process of its own
(tests/kill_fit.py, forked from one server that has done the imports), records every batch as it
starts (flushed, so a killed process leaves its record) and is killed with SIGKILL where a machine
could die: on the first batch after a checkpoint was written, or on an epoch's first batch. A new
process resumes from the last checkpoint; what it trains from the checkpoint's step on must be the
uninterrupted run's batches from that step on (sample indices, their order, their epoch and, for
hyperspectral, each pixel's band subset of that epoch): no sample lost or repeated. `varlen fit` itself,
sent SIGINT or SIGTERM mid-step, saves last.ckpt at the step's end and prints the command that resumes it
exactly.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent
EVERY = 4  # a checkpoint every 4 steps
STEPS_PER_EPOCH = {"text": 12, "hyperspectral": 17}  # text: the epoch's last step is a checkpoint's


class Fits:
    """tests/kill_fit.py's server: one job a call, in a fresh forked process."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.runs = folder, 0
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        command = [sys.executable, str(HERE / "kill_fit.py"), "serve"]
        self.server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, scenario: str, **job) -> tuple[int, Path]:
        """The job's exit status (-9: killed) and its folder."""
        self.runs += 1
        out = self.folder / f"{self.runs}-{scenario}"
        job = {"scenario": scenario, "out": str(out), "workers": 0, "every": EVERY, "kill": None, **job}
        job["root"] = str(self.folder / "scenes")  # hyperspectral's synthetic cube, built by the first run
        self.server.stdin.write(json.dumps(job) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        assert answer, f"the fit server ended (status {self.server.poll()})"
        return json.loads(answer)["rc"], out

    def close(self) -> None:
        self.server.stdin.close()
        try:
            self.server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "batches.jsonl").read_text().splitlines()]


def log(out: Path) -> str:
    return (out / "log.txt").read_text()[-4000:]


def first_difference(got: list[dict], expected: list[dict]) -> str:
    """Where two batch records part, for the assertion's message."""
    for position, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            parts = [key for key in a if a[key] != b.get(key)]
            shown = {key: (str(a[key])[:80], str(b.get(key))[:80]) for key in parts}
            return f"batch {position} (step {b['step']}) differs in {parts}: (got, expected) {shown}"
    return f"{len(got)} batches against {len(expected)}"


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory):
    server = Fits(tmp_path_factory.mktemp("kill_resume"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def reference(fits: Fits) -> dict[str, tuple[list[dict], Path]]:
    """Each scenario's uninterrupted 2-epoch run (0 workers): its batches and folder, for every kill point."""
    runs = {}
    for scenario in STEPS_PER_EPOCH:
        rc, out = fits.run(scenario)
        assert rc == 0, log(out)
        runs[scenario] = records(out), out
        steps = [r["step"] for r in runs[scenario][0]]
        assert steps == list(range(2 * STEPS_PER_EPOCH[scenario])), steps  # the layout the kill points assume
    return runs


def last_checkpoint(out: Path) -> tuple[int, Path]:
    """The checkpoint of the highest step a killed run left (each one's save ended before the kill)."""
    step, path = max((int(p.stem.split("=")[1]), p) for p in (out / "ckpt").glob("step=*.ckpt"))
    return step, path


KILLS = {  # kill point -> (the job's kill, the step it kills at, the step of the last checkpoint before it)
    "text-after-checkpoint": (["checkpoint", 2], 8, 8),  # mid epoch 0
    "text-epoch-start": (["epoch", 1], 12, 12),  # the checkpoint of epoch 0's last step
    "hyperspectral-after-checkpoint": (["checkpoint", 5], 20, 20),  # mid epoch 1: its band draws
    "hyperspectral-epoch-start": (["epoch", 1], 17, 16),  # one batch of epoch 0 left
}


@pytest.mark.parametrize(
    ("scenario", "workers", "kill"),
    [
        ("text", 0, "after-checkpoint"),
        ("text", 0, "epoch-start"),
        ("text", 2, "after-checkpoint"),
        ("text", 2, "epoch-start"),
        ("hyperspectral", 0, "after-checkpoint"),
        ("hyperspectral", 0, "epoch-start"),
    ],
)
def test_sigkill_then_resume_serves_the_uninterrupted_batches(fits, reference, scenario, workers, kill) -> None:
    """SIGKILL, then a resume from the last checkpoint in a new process: the batches from the checkpoint's
    step on are the uninterrupted run's (0-worker) ones, in order, with their epochs and band subsets."""
    expected, _ = reference[scenario]
    job_kill, kill_step, checkpoint_step = KILLS[f"{scenario}-{kill}"]
    rc, killed = fits.run(scenario, workers=workers, kill=job_kill)
    assert rc == -9, log(killed)
    assert json.loads((killed / "loader.json").read_text()) == {"num_workers": workers}
    before = records(killed)
    assert before == expected[:kill_step], first_difference(before, expected[:kill_step])
    step, checkpoint = last_checkpoint(killed)
    assert step == checkpoint_step
    rc, resumed = fits.run(scenario, workers=workers, resume=str(checkpoint))
    assert rc == 0, log(resumed)
    after = records(resumed)
    assert after == expected[step:], first_difference(after, expected[step:])


def test_hyperspectral_band_subsets_change_per_epoch(reference) -> None:
    """The band comparison has teeth: a pixel's bands in epoch 1 are not its bands in epoch 0, so a resume
    that replayed another epoch's draws would differ."""
    batches, _ = reference["hyperspectral"]
    bands = [{}, {}]
    for batch in batches:
        for index, row in zip(batch["index"], batch["bands"], strict=True):
            bands[batch["epoch"]][index] = [b for b in row if b >= 0]
    assert bands[0].keys() == bands[1].keys()
    changed = sum(bands[0][i] != bands[1][i] for i in bands[0])
    assert changed > 0.9 * len(bands[0]), (changed, len(bands[0]))


def test_without_the_loaders_state_the_resume_differs(fits, reference) -> None:
    """The comparison has teeth: the same mid-epoch checkpoint, its loader state removed, does not
    resume with the uninterrupted run's batches."""
    expected, out = reference["text"]
    rc, resumed = fits.run("text", resume=str(out / "ckpt" / "step=8.ckpt"), drop_loader_state=True)
    assert rc == 0, log(resumed)
    after = records(resumed)
    assert [r["index"] for r in after] != [r["index"] for r in expected[8:]]


RESUME = re.compile(
    r"^varlen: interrupted \((SIG\w+)\) at epoch 1 step (\d+); saved there: (\S+); resume with: (.+)$", re.M
)


@pytest.mark.parametrize(("name", "workers"), [("SIGINT", 0), ("SIGTERM", 2)])
def test_an_interrupted_varlen_fit_saves_last_ckpt_and_its_printed_command_resumes_it(
    fits, reference, name, workers
) -> None:
    """`varlen fit` (its own checkpoints: none every few steps) signalled in the middle of step 5 of epoch 0:
    the step ends, last.ckpt is written, the line names the command that resumes it and the status is 128 +
    the signal (Ctrl-C exited 1 and saved nothing; SIGTERM trained to the epoch's end and exited 0). That
    command, run as printed, trains the uninterrupted run's batches from step 6 on."""
    expected, _ = reference["text"]
    rc, stopped = fits.run("text", cli=True, workers=workers, kill=["signal", name, 5])
    assert rc == 128 + getattr(signal, name), log(stopped)
    found = RESUME.search(log(stopped))
    assert found is not None and found[1] == name and found[2] == "6", log(stopped)
    checkpoint = stopped / "checkpoints" / "last.ckpt"
    assert found[3] == str(checkpoint) and sorted(p.name for p in checkpoint.parent.iterdir()) == ["last.ckpt"]
    assert records(stopped) == expected[:6], first_difference(records(stopped), expected[:6])
    command = shlex.split(found[4])
    assert command[:4] == ["varlen", "fit", "--config", str(stopped / "fit.yaml")]
    assert command[-2:] == ["--ckpt_path", str(checkpoint)]
    rc, resumed = fits.run("text", cli=True, workers=workers, resume=command[1:])  # records into the first folder
    assert rc == 0, log(resumed)
    assert records(stopped) == expected, first_difference(records(stopped), expected)
