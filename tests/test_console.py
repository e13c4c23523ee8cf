"""``varlen`` and ``varlen --help`` answer before torch, Lightning or any scenario is imported."""

from __future__ import annotations

import json
import subprocess
import sys

from varlen import cli
from varlen.commands import SUMMARIES

HEAVY = ("torch", "lightning", "transformers", "torch_geometric", "litdata", "rdkit", "jsonargparse")
PROBE = """
import json, sys
sys.argv = ["varlen", *sys.argv[1:]]
import varlen.console
try:
    varlen.console.main()
except SystemExit as exit_:
    code = exit_.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(%r)))
print(json.dumps({"code": code, "heavy": heavy}))
"""


def probe(*args: str) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE % json.dumps(HEAVY), *args], capture_output=True, text=True, check=True
    )
    *printed, result = done.stdout.strip().splitlines()
    return json.loads(result), "\n".join(printed)


def test_the_help_imports_nothing_heavy_and_lists_every_command() -> None:
    for args, status in ((["--help"], 0), ([], 2)):
        result, out = probe(*args)
        assert result == {"code": status, "heavy": []}, result
        for name, summary in SUMMARIES.items():
            assert f"  {name}" in out and summary in out, name


def test_the_cli_runs_the_commands_the_help_lists() -> None:
    assert list(cli.COMMANDS) == list(SUMMARIES)
    assert [n for n, c in cli.COMMANDS.items() if c.run is not None] == [
        "inspect",
        "optimize",
        "index-sizes",
        "verify",
        "tune",
    ]
