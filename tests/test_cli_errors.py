"""Every error of a command line is one line, status 2, naming what was given, what is allowed (the closest
valid name where one is close) and where to look: answered by the light entry from the saved schema
(`varlen.cli.precheck`, before Lightning is imported), and by the full parse where no schema decides
(`varlen.cli.typos`, `varlen.cli.refusals`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from varlen.cli import dispatch as cli
from varlen.cli.precheck import precheck
from varlen.cli.schema import load_schema, schema_path, type_tree

ROOT = Path(__file__).resolve().parents[1]
TEXT = str(ROOT / "configs/text_bert.yaml")
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
HEAVY = ("torch", "lightning", "transformers", "jsonargparse")


@pytest.fixture(scope="module")
def schema() -> dict:
    """The schema a full parse saves (every scenario imported: `varlen fit --help`), also where a process the
    tests start looks for it."""
    argv = sys.argv
    sys.argv = ["varlen", "fit", "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
            cli.main(["fit", "--help"])
    finally:
        sys.argv = argv
    saved = load_schema()
    assert saved is not None and {"fit", "validate"} <= set(saved["commands"])
    theirs = Path(_python("from varlen.cli.schema import schema_path; print(schema_path())").stdout.strip())
    if theirs != schema_path():  # another sys.path, another key: the same schema there too
        theirs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(schema_path(), theirs)
    return saved


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def varlen(*args: str) -> tuple[int, list[str]]:
    """`python -m varlen ARGS`: its status and the lines of its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "varlen", *args], capture_output=True, text=True, env=env, timeout=300)
    return done.returncode, done.stderr.splitlines()


def written(tmp_path: Path, text: str, name: str = "given.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CASES = {  # id: (extra arguments or a config's text, what the line must say)
    "max_tokens=0": (["--data.init_args.max_tokens=0"], "DataModule's max_tokens: max_tokens must be >= 1, got 0 "),
    "max_tokens=-5": (["--data.init_args.max_tokens=-5"], "max_tokens must be >= 1, got -5 "),
    "trainer key": (
        "trainer:\n  max_epoch: 1\n",
        "takes no key 'trainer.max_epoch': did you mean 'trainer.max_epochs'?",
    ),
    "top key": ("trainr:\n  max_epochs: 1\n", "takes no key 'trainr': did you mean 'trainer'?"),
    "seed key": ("seed_everythin: 1\n", "takes no key 'seed_everythin': did you mean 'seed_everything'?"),
    "type": (["--data.init_args.batch_size=abc"], "batch_size: 'abc' is not an int or None"),
    "literal": (
        ["--data.init_args.layout=pakced"],
        "'pakced' is not one of 'padded', 'packed': did you mean 'packed'?",
    ),
    "class in a config": (
        "data:\n  class_path: varlen.datamodules.TextClassificationDataModul\n",
        "is not a class: did you mean 'TextClassificationDataModule'?",
    ),
    "class on the line": (
        ["--data.class_path=TextClassificationDataModul"],
        "'TextClassificationDataModul' is not a class: did you mean 'TextClassificationDataModule'?",
    ),
    "trainer option": (["--trainer.max_epochz=1"], "'--trainer.max_epochz': did you mean '--trainer.max_epochs'?"),
}


def _args(case: str, tmp_path: Path) -> list[str]:
    given, _ = CASES[case]
    return given if isinstance(given, list) else ["--config", written(tmp_path, given)]


@pytest.mark.parametrize("case", list(CASES))
def test_the_light_entry_answers_in_one_line(case, schema, tmp_path) -> None:
    code, lines = varlen("fit", "--config", TEXT, *_args(case, tmp_path))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("varlen: error: ") and CASES[case][1] in lines[0], lines
    # the light check answered it (the full parse would print the same line, only seconds later)
    assert precheck(["fit", "--config", TEXT, *_args(case, tmp_path)]) == lines[0].removeprefix("varlen: error: ")
    assert "lists" in lines[0]  # where to look


@pytest.mark.parametrize("case", list(CASES))
def test_the_full_parse_answers_in_the_same_line(case, tmp_path, monkeypatch, capsys) -> None:
    """No schema decides (`varlen.cli.dispatch.console`, as a first run after an install): the same line."""
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", TEXT, *_args(case, tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1, lines
    assert CASES[case][1] in lines[0], lines


def test_an_empty_config_is_named(schema, tmp_path, monkeypatch, capsys) -> None:
    for text in ("", "# only a comment\n"):
        path = written(tmp_path, text, "empty.yaml")
        code, lines = varlen("fit", "--config", path)
        assert code == 2 and lines == [
            f"varlen: error: the config {path} is empty: nothing to read "
            "(configs/ has examples: configs/text_bert.yaml)"
        ], lines
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", path])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    assert exit_.value.code == 2 and f"the config {path} is empty" in capsys.readouterr().err


def test_the_light_answer_imports_nothing_heavy(schema) -> None:
    probe = (
        "import json, sys\nimport varlen.cli.console as c\nsys.argv = ['varlen', *sys.argv[1:]]\n"
        "try:\n    c.main()\nexcept SystemExit as e:\n    code = e.code\n"
        f"print(json.dumps([code, sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))]))"
    )
    done = _python(probe, "fit", "--config", TEXT, "--data.init_args.max_tokens=0")
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [2, []], done.stderr


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_passes_the_light_check(config, schema) -> None:
    for command in ("fit", "validate", "inspect", "tune"):
        assert precheck([command, "--config", str(config)]) is None, (command, config.name)
    for section in ("data", "model"):  # its classes are in the schema: a mistyped argument of each is refused
        refused = precheck(["fit", "--config", str(config), f"--{section}.init_args.no_such_argument=1"])
        assert refused is not None and "takes no argument 'no_such_argument'" in refused, refused


@pytest.mark.parametrize(
    "args",
    [
        ["--ckpt_path", "last.ckpt"],
        ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val/loss"],  # `+=`: the full parse's
        ["--trainer.callbacks.monitor=val/loss"],  # without the `+=`, judged here: a nested key of a class option
        ["--trainer.logger.init_args.save_dir=logs", "--trainer.precision=16", "--trainer.precision=bf16-mixed"],
        ["--trainer.max_time=00:01:00:00", "--trainer.devices=auto", "--seed_everything=true"],
        ["--data.init_args.max_tokens=[64, 128]", "--data.init_args.max_tokens=1e3", "--data.max_tokens=256"],
        ["--data.init_args.stream.chunks=x", "--data.dict_kwargs.anything=1", "--model=my.own.Model"],
        ["--data=varlen.datamodules.text.TextClassificationDataModule", "--data.init_args.layout=packed"],
        ["--optimizer=AdamW", "--optimizer.lr=0.1", "--epoch_lines=[val/loss]", "--warm_shapes=always"],
    ],
)
def test_a_valid_but_unusual_command_line_is_not_refused(args, schema) -> None:
    assert precheck(["fit", "--config", TEXT, *args]) is None


def test_a_valid_but_unusual_config_is_not_refused(schema, tmp_path) -> None:
    config = yaml.safe_load(Path(TEXT).read_text())
    config["ckpt_path"] = None
    config["trainer"]["callbacks"] += [{"class_path": "lightning.pytorch.callbacks.EarlyStopping"}]
    config["trainer"]["logger"] = {"class_path": "CSVLogger", "init_args": {"save_dir": "logs"}}
    config["data"]["dict_kwargs"] = {"anything": 1}
    config["optimizer"] = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.001}}
    assert precheck(["fit", "--config", written(tmp_path, yaml.safe_dump(config))]) is None
    again = written(tmp_path, "data:\n  init_args:\n    max_tokens: 256\n", "more.yaml")  # the class from the first
    assert precheck(["fit", "--config", TEXT, "--config", again]) is None


def test_what_the_schema_cannot_judge_falls_through(schema) -> None:
    assert precheck(["fit", "--config", TEXT, "--model=some.package.Model", "--model.init_args.anything=1"]) is None
    assert precheck(["fit", "--help"]) is None and precheck(["verify", "x"]) is None
    assert precheck(["fit", "--config"]) is None  # no file named: the full parse says it
    absent = precheck(["fit", "--config", str(ROOT / "configs/absent.yaml")])
    assert absent is not None and "is not a file (configs/" in absent, absent  # nothing close: no guess


def test_types_are_kept_as_the_light_check_reads_them() -> None:
    from typing import Literal

    assert type_tree(int | None) == {"union": ["int", "none"]}
    assert type_tree(Literal["a", "b"]) == {"literal": ["a", "b"]}
    assert type_tree(list[int]) == {"seq": "int"} and type_tree(dict[str, int]) == "any"


def test_a_class_refusal_names_the_class_and_argument(monkeypatch, capsys) -> None:
    """A DataModule's own ValueError while LightningCLI instantiates it: one line, not jsonargparse's traceback."""
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", TEXT, "--data.init_args.batch_size=0"])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("varlen: error: TextClassificationDataModule's batch_size: "), err
    assert err[0].endswith("(varlen fit --data.help TextClassificationDataModule lists them)"), err


def test_a_missing_config_names_the_closest(schema, monkeypatch, capsys) -> None:
    given = str(ROOT / "configs/text_bert.yml")
    code, lines = varlen("fit", "--config", given)
    assert code == 2 and len(lines) == 1, lines
    assert f"the config {given} is not a file: did you mean '{TEXT}'?" in lines[0], lines
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", given])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and f"did you mean '{TEXT}'?" in err[0], err


def test_any_other_parser_error_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["varlen", "fit", "--config", TEXT, "--trainer.max_epochs"])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err == [
        "varlen: error: argument --trainer.max_epochs: expected one argument (varlen fit --help lists the options)"
    ], err


def test_a_commands_own_option_error_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["varlen", "inspect", "--world-size", "0", "--config", TEXT])
    with pytest.raises(SystemExit) as exit_:
        cli.console()
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        "varlen: error: --world-size must be >= 1 (varlen inspect --help lists the options)"
    ]


def test_a_commands_own_options_are_left_to_it(schema) -> None:
    assert precheck(["inspect", "--config", TEXT, "--split", "val", "--out", "plots", "--rate"]) is None
    assert precheck(["optimize", "--config", TEXT, "--output", "chunks", "--chunk-bytes", "64MB"]) is None
    refused = precheck(["inspect", "--config", TEXT, "--split", "val", "--data.init_args.max_token=5"])
    assert refused is not None and "did you mean 'max_tokens'? (varlen inspect --data.help" in refused, refused


def test_a_class_jsonargparse_cannot_make_keeps_its_words_in_one_line() -> None:
    from varlen.cli.typos import plain_line

    message = (
        'Parser key "model":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
        "    - Problem with given class_path 'varlen.models.MoleculeGNN':\n"
        "        varlen's molecules scenario needs rdkit: pip install 'varlen[molecules]'\n"
        "    - Expected a <class 'NoneType'>\n"
    )
    assert plain_line(message, "varlen fit") == (
        "--model: given class_path 'varlen.models.MoleculeGNN': varlen's molecules scenario needs rdkit: "
        "pip install 'varlen[molecules]' (varlen fit --help lists the installed ones)"
    )
    assert plain_line("argument --x: expected one argument", "varlen fit") == (
        "argument --x: expected one argument (varlen fit --help lists the options)"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tune", "--max-batches=abc"], "argument --max-batches: invalid int value: 'abc'"),
        (["inspect", "--world-size=abc"], "argument --world-size: invalid int value: 'abc'"),
        (["verify"], "the following arguments are required: path"),
        (["index-sizes"], "the following arguments are required: dir, --size-fn"),
    ],
)
def test_a_commands_own_options_are_refused_in_one_line(args, says) -> None:
    """`varlen tune`, `inspect`, `verify` and `index-sizes` parse their own options with argparse: its two-line
    usage-and-error becomes the one line every `varlen` error is, status 2."""
    code, lines = varlen(*args)
    assert code == 2 and lines == [f"varlen: error: {says} (varlen {args[0]} --help lists the options)"], lines
