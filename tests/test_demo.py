"""The main job's script: every scenario it runs has a config, and bad names are refused."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)


def test_every_scenario_has_its_config() -> None:
    assert set(demo.SCENARIOS) == {"text", "bearing", "video_text", "molecules", "hyperspectral"}
    for config, metrics in demo.SCENARIOS.values():
        assert (ROOT / config).is_file()
        assert all(m.startswith("val/") for m in metrics)


def test_unknown_scenario_is_refused(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["nope"])
    assert exit_info.value.code == 2
    assert "unknown scenario" in capsys.readouterr().err


def test_the_demo_runs_every_scenario_end_to_end(capsys: pytest.CaptureFixture, monkeypatch, tmp_path) -> None:
    """The main job's own code path, on two batches of one epoch: a progress line per scenario, and a
    table row each with its metrics, padding efficiency and data wait."""
    monkeypatch.chdir(tmp_path)  # the configs' relative data folders land here
    demo.main(["--max-epochs", "1", "--max-batches", "2"])
    out = capsys.readouterr().out
    for name, (_, metrics) in demo.SCENARIOS.items():
        (line,) = [line for line in out.splitlines() if line.startswith(f"{name} epoch 1/1:")]
        assert all(m in line for m in metrics), line
        (row,) = [r for r in out.splitlines() if r.startswith(f"| {name} |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert "missing" not in cells[1] and 0 < float(cells[2]) <= 1 and float(cells[3]) > 0, row
        assert cells[4].endswith("%") and 0 <= float(cells[4].rstrip("%")) <= 100, row  # the data wait share
    # the last line: where the installed `varlen` is, which the user's shell has not activated
    last = out.strip().splitlines()[-1]
    assert last.startswith("next: `source ") and "varlen --help" in last, last
    command = Path(last.split("or `")[1].split(" --help")[0])
    assert (command if command.is_absolute() else tmp_path / command).exists(), last


def test_the_readme_says_how_to_reach_the_installed_command() -> None:
    readme = (ROOT / "README.md").read_text()
    two_commands = readme.split("## Two commands")[1].split("\n## ")[0]
    assert "source .venv/bin/activate" in two_commands and "varlen --help" in two_commands
