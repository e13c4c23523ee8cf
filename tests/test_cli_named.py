"""Which scenarios a command line names (`varlen.cli.named`) and which commands are a help to keep
(`varlen.cli.saved_help`): pure functions of the arguments."""

from __future__ import annotations

import sys

import pytest

from varlen.cli.named import named_scenarios
from varlen.cli.saved_help import is_help, printed, recorded

CLASSES = ["TextClassificationDataModule", "MoleculeDataModule", "TextClassifier", "MoleculeGNN"]


def test_a_config_names_its_scenario(tmp_path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "model:\n  class_path: varlen.models.TextClassifier\ndata:\n  class_path: TextClassificationDataModule\n"
    )
    assert named_scenarios(["fit", "--config", str(config)], CLASSES) == {
        "TextClassifier",
        "TextClassificationDataModule",
    }
    assert named_scenarios(["fit", f"--config={config}", "--trainer.max_epochs=x"], CLASSES) == {
        "TextClassifier",
        "TextClassificationDataModule",
    }


def test_a_class_help_names_its_scenario_and_a_full_help_or_no_name_wants_every_one() -> None:
    assert named_scenarios(["fit", "--data.help", "MoleculeDataModule"], CLASSES) == {"MoleculeDataModule"}
    assert named_scenarios(["fit", "--data.help=varlen.datamodules.MoleculeDataModule"], CLASSES) == {
        "MoleculeDataModule"
    }
    assert named_scenarios(["fit", "--data.help", "MoleculeDataModule", "--help"], CLASSES) is None
    assert named_scenarios(["fit", "--data.class_path=Nope"], CLASSES) is None
    assert named_scenarios(["fit", "--data.help", "MoleculeDataModules"], CLASSES) is None  # not a whole name


def test_only_a_help_and_nothing_else_is_kept() -> None:
    for argv in (["fit", "--help"], ["test", "-h"], ["fit", "--data.help", "X"], ["fit", "--model.help=X"]):
        assert is_help(argv), argv
    for argv in (
        ["fit"],
        ["--help"],
        ["verify", "--help"],
        ["fitt", "--help"],
        ["fit", "--config", "c.yaml", "--help"],
        ["fit", "--data.help"],
        ["fit", "--data.help", "X", "--trainer.max_epochs=1"],
        ["fit", "--data", "X"],
    ):
        assert not is_help(argv), argv


def test_a_help_that_ended_with_status_0_is_printed_again_and_no_other(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("VARLEN_CACHE", str(tmp_path))
    for argv, status in ((["fit", "--help"], 0), (["fit", "--data.help", "Nope"], 2)):
        assert not printed(argv)
        with pytest.raises(SystemExit), recorded(argv):
            print(f"the help of {argv}")
            sys.exit(status)
    assert capsys.readouterr().out.count("the help of") == 2  # written through as it was printed
    assert printed(["fit", "--help"]) and capsys.readouterr().out == "the help of ['fit', '--help']\n"
    assert not printed(["fit", "--data.help", "Nope"])
    monkeypatch.setenv("COLUMNS", "61")  # another width: another help
    assert not printed(["fit", "--help"])
