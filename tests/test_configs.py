"""Every shipped YAML parses against the real signatures (class paths, argument names, types)."""

from pathlib import Path

import pytest

from varlen.cli import main

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_there_is_a_config_per_scenario() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"text_bert", "bearing_cwru", "video_text", "molecules_esol", "hyperspectral"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_parses(config: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "class_path: varlen." in printed


def test_bad_config_value_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "data:\n  class_path: varlen.datamodules.TextClassificationDataModule\n"
        "  init_args:\n    max_lenght: 12\n"
        "model:\n  class_path: varlen.models.TextClassifier\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(bad), "--print_config"])
    assert exit_info.value.code not in (0, None)
