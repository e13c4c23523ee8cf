"""`varlen inspect` through the real console entry point, on every shipped config."""

import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from varlen import cli

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
#: configs whose data lie in ../shared/data (they skip without it) or need a download
SHARED = {"bearing_cwru_real", "molecules_freesolv", "molecules_lipo", "text_sst2", "video_text_youcook2"}
DOWNLOAD = {"hyperspectral_pavia_u"}
#: configs of data only the user has (MSR-VTT files and features): a clear "not found", status 2
USER_FILES = {"video_text_msrvtt"}


def run_inspect(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["varlen", "inspect", *args])
    code = 0
    try:
        cli.console()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_inspect_every_shipped_config(config: Path, tmp_path: Path, monkeypatch, capsys, request) -> None:
    if config.stem in SHARED:
        shared = request.getfixturevalue("shared_data")
        (tmp_path / "shared").symlink_to(shared.parent)  # the configs name ../shared/data
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")  # relative data / cache folders of the configs land here
    args = ["--config", str(config), "--out", str(tmp_path / "plots"), "--world-size", "2", "--max-batches", "40"]
    if config.stem in DOWNLOAD:  # offline: the download fails, clearly, with status 2
        code, _, err = run_inspect(monkeypatch, capsys, *args)
        assert code == 2 and "varlen: error: downloading https://" in err and "Traceback" not in err
        return
    if config.stem in USER_FILES:
        code, _, err = run_inspect(monkeypatch, capsys, *args)
        assert code == 2 and "varlen: error:" in err and "not found" in err and "Traceback" not in err
        return
    code, out, _ = run_inspect(monkeypatch, capsys, *args)
    assert code == 0, out
    lines = out.strip().splitlines()
    summary = lines[lines.index(next(line for line in lines if line.startswith("varlen inspect:"))) :]
    text = "\n".join(summary)
    for part in ("samples", "sizes (", "batches per epoch", "per rank on 2", "padding efficiency", "budget use"):
        assert part in text, (part, text)
    assert "sizes (size)" not in text and "sizes (axis" not in text  # every DataModule names what it counts
    assert max(len(line) for line in summary if "plots in" not in line) <= 100  # fits a terminal
    for name in ("train_sizes.png", "train_padding.png", "train_batches.png"):
        image = matplotlib.image.imread(tmp_path / "plots" / name)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and np.ptp(image) > 0


def test_inspect_counts_batches_per_rank_and_budget_use(tmp_path: Path) -> None:
    from varlen.datamodules import BearingDataModule
    from varlen.inspect import summarize

    dm = BearingDataModule(simulated_per_class=1, simulated_seconds=(1.0, 2.0), batch_size=None, max_tokens=8192)
    dm.setup("fit")
    one, three = summarize(dm, "train", 1), summarize(dm, "train", 3)
    assert one.batches_per_rank == one.batches == len(dm.train_dataloader())
    assert three.batches_per_rank == len(dm.batch_sampler("train", True, num_replicas=3, rank=0))
    assert three.batches >= one.batches
    assert one.samples_per_batch.sum() == one.samples == len(dm.dataset("train"))
    assert 0 < one.budget_use.max() <= 1.0 and one.budget.startswith("max_tokens=[8192]")
    assert one.real / one.allocated == pytest.approx(float(np.sum(dm.dataset("train").lengths)) / one.allocated)


def test_inspect_bad_data_exits_2_with_the_message(tmp_path: Path, monkeypatch, capsys) -> None:
    missing = tmp_path / "nowhere"
    code, _, err = run_inspect(
        monkeypatch, capsys, "--config", str(ROOT / "configs" / "bearing_cwru.yaml"), f"--data.init_args.root={missing}"
    )
    assert code == 2 and str(missing) in err and "Traceback" not in err


def test_a_data_error_raised_while_the_cli_builds_the_datamodule_exits_2(tmp_path, monkeypatch, capsys) -> None:
    """jsonargparse wraps errors raised in ``__init__``; the CLI still finds the DataError in the chain."""
    missing = tmp_path / "no_features.npz"
    config = str(ROOT / "configs" / "video_text.yaml")
    code, _, err = run_inspect(monkeypatch, capsys, "--config", config, "--data.init_args.source=jsonl",
                               f"--data.init_args.annotations={ROOT / 'tests/data/video_text/captions.jsonl'}",
                               f"--data.init_args.features={missing}")  # fmt: skip
    assert code == 2 and "not found" in err and str(missing) in err and "Traceback" not in err


def test_inspect_builds_the_datamodule_only(monkeypatch, capsys) -> None:
    """No model is built (a Hub model would be downloaded just to look at batches), no trainer either."""
    import functools

    import lightning.pytorch as pl

    from varlen.models import TextClassifier

    for cls in (TextClassifier, pl.Trainer):  # the signature stays, so the config still parses

        @functools.wraps(cls.__init__)
        def refuse(*args, _name=cls.__name__, **kwargs):
            raise AssertionError(f"varlen inspect built a {_name}")

        monkeypatch.setattr(cls, "__init__", refuse)
    config = str(ROOT / "configs" / "text_bert.yaml")
    code, out, err = run_inspect(monkeypatch, capsys, "--config", config, "--data.init_args.batch_size=16")
    assert code == 0, err
    assert "batches per epoch 75 (75 per rank on 1)" in out  # the override reached the DataModule: 1,200 / 16
