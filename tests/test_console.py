"""`varlen` and `varlen --help` answer before torch, Lightning or any scenario is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from varlen.cli import dispatch as cli
from varlen.cli.commands import SUMMARIES, TRAINER

HEAVY = ("torch", "lightning", "transformers", "torch_geometric", "litdata", "rdkit", "jsonargparse")
#: `varlen ARGS` in a fresh process: its status and the watched modules it imported (by name, or under a
#: watched package)
PROBE = """
import json, sys
sys.argv = ["varlen", *sys.argv[1:]]
import varlen.cli.console
try:
    varlen.cli.console.main()
except SystemExit as exit_:
    code = exit_.code
watched = set(json.loads(%r))
loaded = sorted({m for m in sys.modules if m in watched or m.split(".")[0] in watched})
print(json.dumps({"code": code, "loaded": loaded}))
"""


def run_probe(args, watched, env=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", PROBE % json.dumps(list(watched)), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env)


def heavy_of(done: subprocess.CompletedProcess) -> tuple[dict, str]:
    """The probe's status and the heavy packages it imported, and what it printed."""
    *printed, result = done.stdout.strip().splitlines()
    found = json.loads(result)
    return {"code": found["code"], "heavy": sorted({m.split(".")[0] for m in found["loaded"]})}, "\n".join(printed)


def probe(*args: str) -> tuple[dict, str]:
    return heavy_of(run_probe(args, HEAVY))


def test_the_help_imports_nothing_heavy_and_lists_every_command() -> None:
    for args, status in ((["--help"], 0), ([], 2)):
        result, out = probe(*args)
        assert result == {"code": status, "heavy": []}, result
        for name, summary in SUMMARIES.items():
            assert f"  {name}" in out and summary in out, name


def test_the_cli_runs_the_commands_the_help_lists() -> None:
    assert list(cli.COMMANDS) == list(SUMMARIES)
    assert [n for n, c in cli.COMMANDS.items() if c.run is None] == list(TRAINER)  # LightningCLI's
    assert [n for n, c in cli.COMMANDS.items() if c.run is not None] == [
        "inspect",
        "optimize",
        "index-sizes",
        "verify",
        "tune",
    ]


def test_a_mistyped_command_gets_the_closest_one_before_any_heavy_import() -> None:
    """`varlen fitt` took 7 s and ended in argparse's "invalid choice" without the hint other typos get."""
    done = run_probe(["fitt", "--config", "x.yaml"], HEAVY)
    result, _ = heavy_of(done)
    assert result == {"code": 2, "heavy": []}, result
    assert done.stderr.strip().splitlines() == [
        "varlen: error: no command 'fitt': did you mean 'fit'? (varlen --help lists the commands)"
    ]


def test_help_into_a_closed_pipe_ends_quietly() -> None:
    """`varlen --help | head -1`: the reader is gone before the help is written; no BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader has already gone: every write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "varlen", "--help"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr == ""


SCENARIO_MODULES = ("varlen.datamodules.text", "varlen.datamodules.molecules", "varlen.datamodules.sequence")


def named_probe(tmp_path, *args: str) -> tuple[dict, str]:
    """`varlen ARGS` in a fresh process with its own cache folder: its status, the watched modules it imported,
    and what it printed."""
    done = run_probe(args, [*HEAVY, *SCENARIO_MODULES], env={**os.environ, "VARLEN_CACHE": str(tmp_path)})
    *printed, result = done.stdout.strip().splitlines()
    return json.loads(result), "\n".join(printed)


def test_a_datamodules_help_imports_its_scenario_only_then_is_printed_from_the_cache(tmp_path) -> None:
    """`--data.help SequenceDataModule` imported every scenario (transformers' tokenizers, PyG and RDKit) and
    took 7 s; it needs its own, and the same help asked again needs neither Lightning nor torch."""
    first, text = named_probe(tmp_path, "fit", "--data.help", "SequenceDataModule")
    assert first["code"] == 0 and "--data.layout {padded,packed}" in text, text[-2000:]
    assert "varlen.datamodules.sequence" in first["loaded"]
    for other in ("varlen.datamodules.text", "varlen.datamodules.molecules", "torch_geometric", "rdkit"):
        assert other not in first["loaded"], first["loaded"]
    again, cached = named_probe(tmp_path, "fit", "--data.help", "SequenceDataModule")
    assert again == {"code": 0, "loaded": []} and cached == text
