"""What the `varlen` command shows: every command in its help, where a DataModule's arguments are,
one line per epoch (plain text when stdout is no terminal), and data paths under `VARLEN_DATA`."""

import logging
import re
import sys
from pathlib import Path

import pytest

import varlen.datamodules
import varlen.models
from varlen.batching.data_wait import DataWait
from varlen.batching.warmup import WarmShapes
from varlen.callbacks.progress import EpochProgress
from varlen.cli import dispatch as cli
from varlen.errors import DatasetNotFoundError
from varlen.storage.paths import expand_data_paths, with_data_hint

ROOT = Path(__file__).resolve().parents[1]
EPOCH_LINE = re.compile(r"^(\w+ )?epoch \d+/\d+: .*val/loss .*samples/s", re.M)


def run_console(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`varlen ARGS` in this process: exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["varlen", *args])
    code = 0
    try:
        cli.console()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("args", [["--help"], []], ids=["--help", "no arguments"])
def test_the_help_lists_every_command_on_one_line(args, monkeypatch, capsys) -> None:
    code, out, _ = run_console(monkeypatch, capsys, *args)
    assert code == (0 if args else 2)
    assert {"fit", "validate", "test", "predict", "inspect", "optimize", "index-sizes", "tune"} <= set(cli.COMMANDS)
    for name, command in cli.COMMANDS.items():
        assert re.search(rf"^ +{re.escape(name)} +{re.escape(command.summary)}$", out, re.M), name


def test_tune_budget_without_a_device_says_so_and_exits_0(monkeypatch, capsys) -> None:
    from varlen.tune.budget import NO_DEVICE

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    code, out, _ = run_console(
        monkeypatch, capsys, "tune", "--budget", "--config", str(ROOT / "configs" / "text_bert.yaml")
    )
    assert code == 0
    assert NO_DEVICE.split(";")[0] in out


def test_fit_help_opens_with_where_the_arguments_are(monkeypatch, capsys) -> None:
    """Within its first lines: --data.help / --model.help, every DataModule and model the scenario tables
    name (one added there is listed too) and the epoch-lines switch; not the Trainer's 70 lines of usage."""
    monkeypatch.setitem(varlen.datamodules.SCENARIOS, "AddedLaterDataModule", "base")
    code, out, _ = run_console(monkeypatch, capsys, "fit", "--help")
    assert code == 0
    head = "\n".join(out.splitlines()[:25])
    assert "--data.help CLASS" in head and "--model.help CLASS" in head and "--epoch_lines=false" in head
    for name in [*varlen.datamodules.SCENARIOS, *varlen.models.SCENARIOS]:
        assert name in head, name
    assert "--trainer.max_epochs" not in head


def fit(tmp_path: Path, *extra: str, callbacks: str = "", run: bool = True) -> cli.LightningCLI:
    config = tmp_path / "toy.yaml"
    config.write_text(
        "trainer:\n  max_epochs: 2\n  limit_train_batches: 2\n  limit_val_batches: 1\n  logger: false\n"
        f"  enable_checkpointing: false\n  enable_model_summary: false\n{callbacks}"
        "model:\n  class_path: toy.ToyModel\n"
        "data:\n  class_path: toy.ToyDataModule\n  init_args:\n    num_samples: 64\n"
    )
    args = ["--config", str(config), f"--trainer.default_root_dir={tmp_path}", *extra]
    return cli.main(["fit", *args] if run else args, run=run)


LISTED = (
    "  callbacks:\n    - class_path: varlen.callbacks.progress.EpochProgress\n      init_args:\n        name: toy\n"
)


@pytest.mark.parametrize(
    ("extra", "callbacks", "lines"),
    [
        ((), "", ["", ""]),
        ((), LISTED, ["toy ", "toy "]),  # the config's own, not a second one
        (("--epoch_lines=false",), LISTED, []),
        (("--trainer.enable_progress_bar=true",), "", ["", ""]),
    ],
    ids=["default", "listed in the config", "off", "progress bar asked for"],
)
def test_fit_prints_one_line_per_epoch(extra, callbacks, lines, tmp_path, capsys) -> None:
    """Captured stdout is no terminal: no progress bar (no carriage returns, no terminal codes) unless asked
    for, and then each epoch line still stands on a line of its own."""
    trainer = fit(tmp_path, *extra, callbacks=callbacks).trainer
    captured = capsys.readouterr()
    assert [m.group(1) or "" for m in EPOCH_LINE.finditer(captured.out)] == lines
    assert "\x1b" not in captured.out + captured.err
    asked = "--trainer.enable_progress_bar=true" in extra
    assert (trainer.progress_bar_callback is not None) == asked
    assert asked or "\r" not in captured.out


def inspect_sst2(monkeypatch, capsys, data: Path) -> tuple[int, str, str]:
    """`varlen inspect --config configs/text_sst2.yaml` with VARLEN_DATA=data, started in `data`."""
    monkeypatch.setenv("VARLEN_DATA", str(data))
    monkeypatch.chdir(data)  # not the checkout: the config's paths do not depend on where it runs
    return run_console(monkeypatch, capsys, "inspect", "--config", str(ROOT / "configs" / "text_sst2.yaml"))


def test_a_shipped_config_reads_its_files_under_varlen_data(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "text").mkdir()
    rows = [f"{'a good film' if k % 2 else 'a dull plot'} number {k}\t{k % 2}" for k in range(40)]
    (tmp_path / "text" / "sst2_train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    (tmp_path / "text" / "sst2_dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows[:10]) + "\n")
    built, main = [], cli.main
    monkeypatch.setattr(cli, "main", lambda *a, **k: built.append(main(*a, **k)) or built[-1])
    code, out, err = inspect_sst2(monkeypatch, capsys, tmp_path)
    assert code == 0, err
    dm = built[0].datamodule
    assert dm.train_file == str(tmp_path / "text" / "sst2_train.tsv")
    assert dm.val_file == str(tmp_path / "text" / "sst2_dev.tsv")
    assert "samples 40" in out


def test_a_missing_data_file_names_varlen_data_and_how_to_set_it(tmp_path, monkeypatch, capsys) -> None:
    code, _, err = inspect_sst2(monkeypatch, capsys, tmp_path)
    assert code == 2 and "Traceback" not in err
    assert f"not found (looked in: {tmp_path}/text/sst2_train.tsv)" in err
    assert f"VARLEN_DATA={tmp_path}" in err and "export VARLEN_DATA=" in err


def test_without_varlen_data_the_folder_beside_the_checkout_is_used(monkeypatch) -> None:
    monkeypatch.delenv("VARLEN_DATA", raising=False)
    beside = ROOT.parent / "shared" / "data"
    config = {"files": ["${VARLEN_DATA}/text/a.tsv"], "other": "${HOME}/a.tsv"}
    assert expand_data_paths(config) == {"files": [f"{beside}/text/a.tsv"], "other": "${HOME}/a.tsv"}
    hint = with_data_hint(DatasetNotFoundError("a table", beside / "text" / "a.tsv", "fetch it"))
    assert hint.endswith(
        f"VARLEN_DATA is not set: the shared/data folder beside the checkout, {beside}; "
        "set it to your data folder: export VARLEN_DATA=/path/to/data"
    )
    elsewhere = DatasetNotFoundError("a table", "/elsewhere/a.tsv", "fetch it")  # not the data folder's: no hint
    assert with_data_hint(elsewhere) == str(elsewhere)


@pytest.mark.parametrize("off", [False, True], ids=["default", "--data_wait=false"])
def test_fit_times_the_wait_for_data_unless_told_not_to(off, tmp_path, capsys) -> None:
    trainer = fit(tmp_path, *(["--data_wait=false"] if off else [])).trainer
    waits = [c for c in trainer.callbacks if isinstance(c, DataWait)]
    lines = [m.group(0) for m in re.finditer(r"^epoch \d+/2: .*$", capsys.readouterr().out, re.M)]
    assert len(lines) == 2
    if off:
        assert not waits and not any("waiting" in line for line in lines)
        return
    (wait,) = waits
    assert [e["epoch"] for e in wait.epochs] == [0, 1]
    for line, epoch in zip(lines, wait.epochs, strict=True):  # the line shows the epoch's own share
        assert f"waiting {epoch['wait_share']:.1%}" in line
    assert "data/wait_share" in trainer.callback_metrics


@pytest.mark.parametrize("arg", ["default", "--warm_shapes=always", "--warm_shapes=false"])
def test_fit_warms_the_batch_shapes_where_they_cost_unless_told_not_to(arg, tmp_path, caplog, capsys) -> None:
    """`varlen fit` runs each batch shape of the first epoch through the model before training where a new
    shape has a first-time cost; on this CPU in eager mode it says in one line why it skips them;
    `--warm_shapes=always` warms them there too (a progress line when it starts, one when done),
    `--warm_shapes=false` leaves it out."""
    with caplog.at_level(logging.INFO, logger="varlen"):
        trainer = fit(tmp_path, *([] if arg == "default" else [arg])).trainer
    warms = [c for c in trainer.callbacks if isinstance(c, WarmShapes)]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("WarmShapes: ")]
    if arg == "--warm_shapes=false":
        assert not warms and not said  # (DataWait's shape advice may name it)
        return
    (warm,) = warms
    if arg == "default":
        assert warm.when == "auto" and warm.shapes == 0
        assert said == ["WarmShapes: skipped: on a CPU in eager mode a new batch shape costs nothing extra "
                        "(--warm_shapes=always, WarmShapes(when='always'): warm anyway)"]  # fmt: skip
        return
    assert warm.when == "always" and warm.shapes >= 1
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("WarmShapes: ")]
    assert not said and printed == [
        f"WarmShapes: running {warm.shapes} batch shapes of epoch 1 through forward and backward on cpu",
        f"WarmShapes: {warm.shapes} batch shapes of epoch 1 run in {warm.seconds:.1f} s",
    ]


def test_a_config_chooses_the_metrics_of_its_epoch_lines(tmp_path) -> None:
    trainer = fit(tmp_path, "--epoch_lines=[val/loss, val/accuracy]", run=False).trainer
    assert [c.metrics for c in trainer.callbacks if isinstance(c, EpochProgress)] == [["val/loss", "val/accuracy"]]


def test_third_party_terminal_codes_stay_out_of_a_log() -> None:
    """Off a terminal (pytest captures stderr): transformers' bold load-report title comes plain, and Hugging
    Face's progress bars (carriage-return redraws) are off."""
    transformers_logging = pytest.importorskip("transformers.utils.logging")
    transformers_logging.enable_progress_bar()
    cli.quiet()
    assert not transformers_logging.is_progress_bar_enabled()
    logger = logging.getLogger("transformers.modeling_utils")
    styled = "\x1b[1mBertForSequenceClassification LOAD REPORT\x1b[0m from: here"
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, styled, (), None)
    assert logger.filter(record) and record.getMessage() == "BertForSequenceClassification LOAD REPORT from: here"
