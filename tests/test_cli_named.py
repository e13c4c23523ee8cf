"""Which scenarios a command line names (:mod:`varlen.cli.named`) and which commands are a help to keep
(:mod:`varlen.cli.saved_help`): pure functions of the arguments."""

from __future__ import annotations

from varlen.cli.named import named_scenarios
from varlen.cli.saved_help import is_help

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
