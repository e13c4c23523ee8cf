"""Every shipped YAML parses against the real signatures (class paths, argument names, types), and
builds its DataModule and model with the links applied (as `fit` does, without running it)."""

from pathlib import Path

import pytest
import yaml

from varlen.cli.dispatch import LINKED, main
from varlen.errors import DataError, data_error_in

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
#: configs of files in $VARLEN_DATA (skipped without it), and of the user's own files (MSR-VTT)
SHARED = {
    "bearing_cwru_real",
    "molecules_freesolv",
    "molecules_lipo",
    "text_sst2",
    "text_sst2_packed",
    "video_text_youcook2",
}
USER_FILES = {"video_text_msrvtt"}


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


def test_real_data_paths_are_under_varlen_data_not_the_working_folder() -> None:
    """A clone anywhere runs the configs once VARLEN_DATA is set: no data path relative to the checkout."""
    for config in CONFIGS:
        values = [str(v) for v in yaml.safe_load(config.read_text())["data"]["init_args"].values()]
        assert not any("shared/data" in v for v in values), config.name
        named = any(v.startswith("${VARLEN_DATA}/") for v in values)
        assert named == (config.stem in SHARED | {"hyperspectral_pavia_u"}), config.name


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


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_builds_its_datamodule_and_linked_model(config: Path, tmp_path: Path, monkeypatch, request) -> None:
    """The constructors' checks run, and every linked value reaches the model (a link jsonargparse
    skipped would leave the model's default)."""
    if config.stem in SHARED:
        request.getfixturevalue("shared_data")  # skips without the folder
    monkeypatch.chdir(tmp_path)  # the configs' data paths do not depend on where the command runs
    args = [
        "--config",
        str(config),
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=false",
    ]  # run=False: no subcommand
    if config.stem in USER_FILES:
        with pytest.raises(Exception) as info:  # jsonargparse wraps the DataError while instantiating
            main(args, run=False)
        error = data_error_in(info.value)
        assert isinstance(error, DataError) and "not found" in str(error)
        return
    built = main(args, run=False)
    dm, model = built.datamodule, built.model
    linked = [name for name in LINKED if hasattr(dm, name)]
    assert linked, f"{type(dm).__name__} links nothing to its model"
    for name in linked:
        assert model.hparams[name] == getattr(dm, name), name
