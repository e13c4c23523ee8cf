"""A mistyped argument or config key: one line naming the class, the unknown name and the closest valid one,
status 2, no traceback, for every command that reads a config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from varlen.cli import dispatch as cli
from varlen.cli.typos import one_line, unknown_name

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"fit": [], "inspect": [], "tune": [], "optimize": ["--output", "unused"]}


def run(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["varlen", *argv])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    return int(exit_.value.code), capsys.readouterr().err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_mistyped_argument_is_one_line_with_the_closest_name(command, monkeypatch, capsys) -> None:
    args = ["--config", str(ROOT / "configs/text_bert.yaml"), "--data.init_args.max_token", "100"]
    code, err = run(monkeypatch, capsys, command, *args, *COMMANDS[command])
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        "varlen: error: TextClassificationDataModule takes no argument 'max_token': did you mean 'max_tokens'? "
        f"(varlen {command} --data.help TextClassificationDataModule lists them)"
    ]


def test_a_mistyped_config_key_is_one_line_with_the_closest_name(tmp_path, monkeypatch, capsys) -> None:
    config = yaml.safe_load((ROOT / "configs/sequence.yaml").read_text())
    config["data"]["init_args"]["size_feld"] = "values"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(config))
    code, err = run(monkeypatch, capsys, "fit", "--config", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "SequenceDataModule takes no argument 'size_feld': did you mean 'size_field'?" in err


def test_an_unknown_option_names_the_closest_one(monkeypatch, capsys) -> None:
    code, err = run(
        monkeypatch, capsys, "fit", "--config", str(ROOT / "configs/text_bert.yaml"), "--trainer.max_epochz=1"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "takes no option '--trainer.max_epochz': did you mean '--trainer.max_epochs'?" in err


def test_other_errors_keep_jsonargparses_words() -> None:
    assert one_line('Parser key "data": Expected a <class int>', "varlen fit") is None
    assert unknown_name("qqq", ["max_tokens"]) == "'qqq'"  # nothing close: no guess


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (
            "--trainer.max_epochs=x",
            "varlen: error: --trainer.max_epochs: 'x' is not an int or None (varlen fit --help lists the options)",
        ),
        (
            "--data.init_args.layout=squashed",
            "varlen: error: TextClassificationDataModule's layout: 'squashed' is not one of 'padded', 'packed' "
            "(varlen fit --data.help TextClassificationDataModule lists them)",
        ),
        (
            "--data.class_path=Nope",
            "varlen: error: --data: 'Nope' is not a class: give a class's name or its dotted path "
            "(varlen fit --help lists the installed ones)",
        ),
    ],
    ids=["type", "literal", "class"],
)
def test_a_wrong_value_is_one_line_naming_what_is_allowed(given, line, monkeypatch, capsys) -> None:
    code, err = run(monkeypatch, capsys, "fit", "--config", str(ROOT / "configs/text_bert.yaml"), given)
    assert code == 2 and err.strip().splitlines() == [line], err


def test_a_models_mistyped_argument_is_matched_with_those_it_hands_on(monkeypatch, capsys) -> None:
    """SequenceModel hands d_model, nhead... on to PooledEncoder with **kwargs: the hint knows them too."""
    args = ["--config", str(ROOT / "configs/sequence.yaml"), "--model.init_args.d_modl", "16"]
    code, err = run(monkeypatch, capsys, "fit", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "SequenceModel takes no argument 'd_modl': did you mean 'd_model'?" in err
