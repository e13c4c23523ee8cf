"""The console of a run says only what a user reads; `--verbose` (or `VARLEN_VERBOSE=1`) gives back Lightning's and
transformers' own output; varlen's warnings read `varlen: warning: ...`, once."""

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
from toy import ToyDataModule, ToyModel

from varlen import notices
from varlen.batching.sampler import BucketBatchSampler
from varlen.callbacks.summary import ModelLine
from varlen.cli import output

ROOT = Path(__file__).resolve().parents[1]
#: the issue's run (text_bert.yaml, 5 batches) made small: 64 reviews of at most 32 tokens, a batch of each split
SHORT_FIT = [
    "fit", "--config", str(ROOT / "configs" / "text_bert.yaml"), "--trainer.limit_train_batches=1",
    "--trainer.limit_val_batches=1", "--data.init_args.synthetic_samples=64", "--data.init_args.max_length=32",
    "--data.init_args.max_tokens=64",
]  # fmt: skip
#: both runs through the console's entry (what the `varlen` script calls), in one process: the quiet one's
#: settings must not outlive it
TWO_RUNS = """
import sys
from varlen.cli.console import main
args = sys.argv[1:]
for extra in ([], ["--verbose=true"]):
    sys.argv = ["varlen", *args, *extra]
    main()
    sys.stderr.flush()
    print("=== the run ends ===", flush=True)
"""
#: what only Lightning's and transformers' own output prints
THEIRS = {
    "the model table": re.compile(r"Trainable params|Total FLOPs|┃ Name"),
    "the load report": re.compile(r"LOAD REPORT|newly initialized"),
    "the devices": re.compile(r"GPU available|TPU available"),
    "a site-packages path": re.compile(r"site-packages"),
}


def test_a_short_fit_says_what_a_user_reads_and_verbose_gives_back_the_rest(tmp_path) -> None:
    """Before: 37 lines for 5 batches (an 8-line load report, the devices, a 17-line table with a FLOPs column
    of 0, a warning naming Lightning's file); at most 15 now, each a user reads."""
    args = [*SHORT_FIT, f"--data.init_args.cache_dir={tmp_path / 'cache'}", f"--trainer.default_root_dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    env.pop(output.VERBOSE_ENV, None)
    done = subprocess.run(
        [sys.executable, "-u", "-c", TWO_RUNS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    quiet, verbose, _ = done.stdout.split("=== the run ends ===")
    lines = quiet.strip().splitlines()  # a first run's 3 lines of tokenising included
    assert len(lines) <= 15, quiet
    for what, pattern in THEIRS.items():
        assert not any(pattern.search(line) for line in lines), f"{what} in:\n{quiet}"
    assert any(
        re.fullmatch(r"model: TextClassifier \(BertForSequenceClassification\) \| .*trainable.*", x) for x in lines
    )
    assert any(line.startswith("epoch 1/1: val/accuracy") for line in lines), quiet
    assert any(re.fullmatch(r"checkpoints: lightning_logs/version_0/checkpoints/ \(last\.ckpt, .*\)", x) for x in lines)
    assert sum("data report" in line for line in lines) == 1, quiet
    for what, pattern in THEIRS.items():
        assert pattern.search(verbose), f"--verbose printed no {what}:\n{verbose}"


def test_varlens_warnings_read_varlen_warning_once(capsys) -> None:
    with warnings.catch_warnings():
        output.show_varlen_logs()
        for _ in range(2):
            notices.warn("cache x is cut short; building it again")
        warnings.warn_explicit("a notice", UserWarning, "/venv/lib/python3.11/site-packages/lightning/x.py", 3)
    said = capsys.readouterr().err.splitlines()
    assert said == ["varlen: warning: cache x is cut short; building it again", "lightning: warning: a notice"]


def test_verbose_keeps_the_path_of_a_third_party_warning(monkeypatch) -> None:
    where = "/venv/lib/python3.11/site-packages/lightning/x.py"
    assert output.one_line_warning("a notice", UserWarning, where) == "lightning: warning: a notice"
    monkeypatch.setenv(output.VERBOSE_ENV, "1")
    assert output.one_line_warning("a notice", UserWarning, where) is None  # Python's own, with the path
    assert output.one_line_warning("mine", notices.VarLenWarning, "/bin/varlen") == "varlen: warning: mine"


def test_a_run_puts_lightnings_logging_back_when_it_ends() -> None:
    logger = logging.getLogger("lightning.pytorch")
    before = logger.level
    with output.ConsoleRun() as run:
        run.quiet(verbose=False)
        assert not logger.isEnabledFor(logging.INFO)
    assert logger.level == before


def _report(keys: dict[str, str]) -> logging.LogRecord:
    rows = "\n".join(f"{key} | {status} | " for key, status in keys.items())
    text = f"\x1b[1mBertForSequenceClassification LOAD REPORT\x1b[0m from: x\nKey | Status | \n----+---\n{rows}\n"
    return logging.LogRecord("transformers.modeling_utils", logging.WARNING, "", 0, text, (), None)


def test_only_the_report_of_a_new_classifier_head_is_left_out() -> None:
    drop = output._NoHeadReport()
    assert not drop.filter(_report({"classifier.weight": "MISSING", "classifier.bias": "MISSING"}))
    assert drop.filter(_report({"classifier.weight": "MISSING", "bert.pooler.dense.weight": "MISSING"}))
    assert drop.filter(_report({"classifier.weight": "UNEXPECTED"}))


def test_a_real_load_of_a_new_head_says_nothing(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    tiny = transformers.BertConfig(
        vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
    )
    transformers.BertModel(tiny).save_pretrained(tmp_path)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addHandler(handler)
    try:
        with output.head_reports():
            transformers.BertForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
        assert not [r for r in records if "LOAD REPORT" in str(r.msg)]
        transformers.BertForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
        assert [r for r in records if "LOAD REPORT" in str(r.msg)]  # outside a run: transformers' own
    finally:
        logger.removeHandler(handler)


def test_the_model_line_says_class_parameters_and_trainable(tmp_path, capsys) -> None:
    line = ModelLine()
    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=0, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, callbacks=[line], default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(ToyModel(), datamodule=ToyDataModule(num_samples=40))
    (said,) = line.lines
    assert re.fullmatch(
        r"model: ToyModel( \(\w+\))? \| [\d.]+ \w* ?parameters, all trainable \| [\d.,]+ MB \| on cpu", said
    )
    assert "Trainable params" not in capsys.readouterr().out  # in place of Lightning's table


def test_a_budget_is_shown_as_a_config_writes_it() -> None:
    with pytest.warns(notices.VarLenWarning, match=r"1 samples exceed max_tokens=64 on their own"):
        BucketBatchSampler(np.array([10, 200, 12, 30]), max_tokens=64)


def _fit_records(tmp_path, quieted: bool) -> tuple[list[str], list[str]]:
    """The warnings and Lightning's INFO messages of a toy fit on a plain Trainer (its default logger)."""
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    tips = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    tips.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if quieted:
                notices.quiet_third_party()
            trainer = pl.Trainer(
                max_epochs=1, limit_train_batches=1, limit_val_batches=1, accelerator="cpu",
                enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
            )  # fmt: skip
            trainer.fit(ToyModel(), datamodule=ToyDataModule(num_samples=40))
    finally:
        tips.removeHandler(handler)
    return [str(w.message) for w in caught], said


def test_quiet_third_party_leaves_out_what_an_own_trainer_cannot_act_on(tmp_path) -> None:
    """An own-Trainer script printed two `LeafSpec` deprecations (Lightning's CombinedLoader on torch >= 2.9),
    the tensorboardX notice of Lightning's default logger, and the litlogger / litmodels tips; `import varlen`
    leaves them (a library does not silence warnings on import), `quiet_third_party()` leaves them out."""
    noise = re.compile(r"LeafSpec|tensorboardX|Tip:")
    caught, said = _fit_records(tmp_path / "plain", quieted=False)
    assert any(noise.search(m) for m in caught + said)  # what the helper is for, still there after import varlen
    caught, said = _fit_records(tmp_path / "quiet", quieted=True)
    assert not [m for m in caught + said if noise.search(m)]


def test_verbose_from_the_environment_keeps_lightnings_lines(monkeypatch) -> None:
    monkeypatch.setenv(output.VERBOSE_ENV, "1")
    with output.ConsoleRun() as run:
        run.quiet(verbose=False)
        assert logging.getLogger("lightning.pytorch").isEnabledFor(logging.INFO)


def test_importing_varlen_silences_nothing() -> None:
    """Filters and the one-line format are the console's, set when it runs: a library's import leaves them."""
    code = (
        "import warnings; filters = list(warnings.filters); shown = warnings.showwarning\n"
        "import varlen, varlen.notices, varlen.cli.output\n"
        "assert warnings.filters == filters and warnings.showwarning is shown"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
