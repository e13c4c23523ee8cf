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
