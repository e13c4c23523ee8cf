"""`varlen inspect` through the real console entry point, on every shipped config."""

import re
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from test_configs import SHARED  # configs whose data lie in $VARLEN_DATA (they skip without it)
from toy import ToyDataModule

from varlen.batching import BucketBatchSampler
from varlen.batching.indices import Samples
from varlen.cli import dispatch as cli
from varlen.cli.inspection import summarize

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DOWNLOAD = {"hyperspectral_pavia_u"}
#: configs of data only the user has (MSR-VTT files and features): a clear "not found", status 2
USER_FILES = {"video_text_msrvtt", "text_mixture_stream"}  # the latter: chunks the README's commands write


def run_inspect(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["varlen", "inspect", *args])
    code = 0
    try:
        cli.console()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def served(dm, split: str, world_size: int) -> list[list[list[int]]]:
    """Each rank's batches of epoch 0, as the DataModule's own sampler serves them on `world_size` ranks."""
    shuffle = split == "train" and dm.shuffle
    return [list(dm.batch_sampler(split, shuffle, num_replicas=world_size, rank=r)) for r in range(world_size)]


def padding(dm, dataset, batches: list[list[int]]) -> tuple[int, int]:
    """Real and allocated elements of `batches`, fetched one sample at a time and collated to the padded
    lengths each batch carries from its sampler (the shape policy's rungs)."""
    real = allocated = 0
    for indices in batches:
        samples = Samples([dataset[int(i)] for i in indices], getattr(indices, "widths", None))
        stats = dm.batch_stats(dm.collate_fn(samples))
        real, allocated = real + stats.real, allocated + stats.padded
    return real, allocated


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_inspect_every_shipped_config(config: Path, tmp_path: Path, monkeypatch, capsys, request) -> None:
    """The printed numbers are those of the DataModule the command built, computed here from its own
    dataset and sampler on 3 ranks (not by the code that prints them)."""
    if config.stem in SHARED:
        request.getfixturevalue("shared_data")  # skips without the folder
    monkeypatch.chdir(tmp_path)  # relative cache folders of the configs land here
    args = ["--config", str(config), "--out", str(tmp_path / "plots"), "--world-size", "3", "--max-batches", "40"]
    if config.stem in DOWNLOAD:  # offline: the download fails, clearly, with status 2
        code, _, err = run_inspect(monkeypatch, capsys, *args)
        assert code == 2 and "varlen: error: downloading https://" in err and "Traceback" not in err
        return
    if config.stem in USER_FILES:
        code, _, err = run_inspect(monkeypatch, capsys, *args)
        assert code == 2 and "varlen: error:" in err and "not found" in err and "Traceback" not in err
        return
    built, main = [], cli.main
    monkeypatch.setattr(cli, "main", lambda *a, **k: built.append(main(*a, **k)) or built[-1])
    code, out, _ = run_inspect(monkeypatch, capsys, *args)
    assert code == 0, out
    lines = out.strip().splitlines()
    summary = lines[lines.index(next(line for line in lines if line.startswith("varlen inspect:"))) :]
    text = "\n".join(summary)
    assert "sizes (size)" not in text and "sizes (axis" not in text  # every DataModule names what it counts
    assert max(len(line) for line in summary if "plots in" not in line) <= 100  # fits a terminal

    dm = built[0].datamodule
    dataset = dm.dataset("train")
    ranks = served(dm, "train", 3)
    batches = [b for rank in ranks for b in rank]
    spb = [len(b) for b in batches]
    assert len(ranks[0]) == len(ranks[1]) == len(ranks[2]) and sum(spb) == len(dataset)
    assert f"  samples {len(dataset):,};" in text
    assert (
        f"batches per epoch {len(batches):,} ({len(ranks[0]):,} per rank on 3); "
        f"samples per batch min {min(spb)} / median {np.median(spb):g} / max {max(spb)}"
    ) in text
    sizes = np.asarray(dm.sampler_lengths(dataset)).reshape(len(dataset), -1)
    printed = re.findall(r"sizes \((.+?)\): min ([\d,]+) .* max ([\d,]+)", text)
    assert [(a, int(lo.replace(",", "")), int(hi.replace(",", ""))) for a, lo, hi in printed] == [
        (axis, sizes[:, d].min(), sizes[:, d].max()) for d, axis in enumerate(dm.size_axes[: sizes.shape[1]])
    ]
    first = [ranks[k % 3][k // 3] for k in range(min(40, len(batches)))]  # rank r serves batches r, r + 3, ...
    real, allocated = padding(dm, dataset, first)
    assert f"padding efficiency {real / allocated:.4f} " in text
    spec = dm.batch_sampler("train", dm.shuffle, num_replicas=3, rank=0).spec
    if spec.max_tokens is None:
        budget = f"batch_size={spec.batch_size}"
    else:  # as a config writes it: one axis a number, several a tuple
        budget = f"max_tokens={spec.max_tokens[0] if len(spec.max_tokens) == 1 else tuple(spec.max_tokens)} ("
    assert re.search(r"budget use mean [\d.]+ / max [\d.]+ of " + re.escape(budget), text), text
    for name in ("train_sizes.png", "train_padding.png", "train_batches.png"):
        image = matplotlib.image.imread(tmp_path / "plots" / name)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and np.ptp(image) > 0


def test_the_summary_is_the_plan_that_world_size_ranks_are_served() -> None:
    """50 toy samples in batches of 16: one rank gets 2 + 16 + 16 + 16; three ranks get the two largest
    batches halved (2, 8, 8, 8, 8, 16), two per rank. Every count and measure is of those batches."""
    dm = ToyDataModule(num_samples=50, batch_size=16)
    dm.setup("fit")
    lengths = dm.dataset("train").lengths
    one, three = summarize(dm, "train", 1), summarize(dm, "train", 3)
    assert (one.batches, one.batches_per_rank, sorted(one.samples_per_batch)) == (4, 4, [2, 16, 16, 16])
    assert (three.batches, three.batches_per_rank, sorted(three.samples_per_batch)) == (6, 2, [2, 8, 8, 8, 8, 16])
    assert "batches per epoch 6 (2 per rank on 3); samples per batch min 2 / median 8 / max 16" in three.lines()[3]
    for summary, world_size in ((one, 1), (three, 3)):
        ranks = [
            list(BucketBatchSampler(lengths, batch_size=16, seed=0, num_replicas=world_size, rank=r))
            for r in range(world_size)
        ]
        assert summary.batches == sum(len(rank) for rank in ranks) == world_size * summary.batches_per_rank
        assert sorted(i for rank in ranks for b in rank for i in b) == list(range(50))  # each sample once
        for r, rank in enumerate(ranks):  # serving order: rank r gets batches r, r + W, ...
            assert summary.samples_per_batch[r::world_size].tolist() == [len(b) for b in rank]
            assert summary.padded_size[r::world_size].tolist() == [lengths[b].max() for b in rank]
            efficiency = [lengths[b].sum() / (len(b) * lengths[b].max()) for b in rank]
            assert summary.efficiency[r::world_size] == pytest.approx(efficiency)
        batches = [b for rank in ranks for b in rank]
        allocated = sum(len(b) * int(lengths[b].max()) for b in batches)  # the toy pads to the longest
        assert (summary.real, summary.allocated) == (int(lengths.sum()), allocated)
        assert summary.budget_use.mean() == pytest.approx(50 / len(batches) / 16) and summary.budget == "batch_size=16"
    assert three.allocated < one.allocated  # halved batches pad less: the 3-rank plan, not the 1-rank one


def test_inspect_counts_batches_per_rank_and_budget_use(tmp_path: Path) -> None:
    """A token budget over recordings' windows (batches never mix recordings): counts are the sampler's."""
    from varlen.datamodules import BearingDataModule

    dm = BearingDataModule(simulated_per_class=1, simulated_seconds=(1.0, 2.0), batch_size=None, max_tokens=8192)
    dm.setup("fit")
    dataset = dm.dataset("train")
    one, four = summarize(dm, "train", 1), summarize(dm, "train", 4)
    assert one.batches_per_rank == one.batches == len(dm.train_dataloader())
    assert one.batches % 4 != 0  # so four ranks are served a plan of their own, with batches split
    ranks = served(dm, "train", 4)
    assert four.batches_per_rank == len(ranks[0]) == len(ranks[1]) == len(ranks[2]) == len(ranks[3])
    assert four.batches == sum(len(rank) for rank in ranks) == 4 * four.batches_per_rank
    assert sorted(four.samples_per_batch) == sorted(len(b) for rank in ranks for b in rank)
    for summary in (one, four):
        assert summary.samples_per_batch.sum() == summary.samples == len(dataset)
        assert summary.real == int(np.sum(dataset.lengths))  # every window once, each element real once
        assert 0 < summary.budget_use.max() <= 1.0 and summary.budget.startswith("max_tokens=8192 (")
    real, allocated = padding(dm, dataset, [b for rank in ranks for b in rank])
    assert (four.real, four.allocated) == (real, allocated)


def test_inspect_bad_data_exits_2_with_the_message(tmp_path: Path, monkeypatch, capsys) -> None:
    missing = tmp_path / "nowhere"
    code, _, err = run_inspect(
        monkeypatch, capsys, "--config", str(ROOT / "configs" / "bearing_cwru.yaml"), f"--data.init_args.root={missing}"
    )
    assert code == 2 and str(missing) in err and "Traceback" not in err


def test_a_plot_folder_that_is_a_file_is_one_line_before_any_work(tmp_path: Path, monkeypatch, capsys) -> None:
    """`--out` a file: a raw FileExistsError once the DataModule was built and summarised."""
    (tmp_path / "plots").write_text("a file")
    config = str(ROOT / "configs" / "sequence.yaml")
    code, _, err = run_inspect(monkeypatch, capsys, "--config", config, "--out", str(tmp_path / "plots" / "run"))
    assert code == 2 and err.strip().splitlines() == [
        f"varlen: error: cannot write in {tmp_path}/plots/run ({tmp_path}/plots is a file, not a folder): "
        "give --out a folder you can write to"
    ], err


def test_more_ranks_than_samples_is_a_usage_error(monkeypatch, capsys) -> None:
    config = str(ROOT / "configs" / "molecules_esol.yaml")
    code, _, err = run_inspect(monkeypatch, capsys, "--config", config, "--split", "val", "--world-size", "100000")
    assert code == 2 and "--world-size 100000, split 'val'" in err and "cannot fill" in err and "Traceback" not in err


def test_a_data_error_raised_while_the_cli_builds_the_datamodule_exits_2(tmp_path, monkeypatch, capsys) -> None:
    """jsonargparse wraps errors raised in `__init__`; the CLI still finds the DataError in the chain."""
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
    overrides = ["--data.init_args.batch_size=16", "--data.init_args.max_tokens=null"]
    code, out, err = run_inspect(monkeypatch, capsys, "--config", config, *overrides)
    assert code == 0, err
    assert "batches per epoch 75 (75 per rank on 1)" in out  # the override reached the DataModule: 1,200 / 16


def test_the_size_histogram_shows_a_tiny_tail(monkeypatch, tmp_path: Path) -> None:
    """30,000 samples of one size and 5 shorter ones (as bearing windows cut at a recording's end): every
    short one is drawn in a bar of its own, apart from the mass, of a visible height (the log count axis)."""
    import dataclasses

    import matplotlib.pyplot as plt

    from varlen.cli.inspection import plot_summary

    dm = ToyDataModule(num_samples=50, batch_size=16)
    dm.setup("fit")
    tail = np.array([1039, 1200, 1500, 1800, 1950])
    sizes = np.concatenate([np.full(30_000, 2048), tail])[:, None]
    summary = dataclasses.replace(summarize(dm), sizes=sizes, bucket_edges=[np.array([2048])])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figures plot_summary draws
    plot_summary(summary, tmp_path)
    ax = figures[0].axes[0]
    bars = [(p.get_x(), p.get_x() + p.get_width(), p.get_height()) for p in ax.patches]
    to_axes = ax.transData + ax.transAxes.inverted()  # data -> fraction of the plot's height
    for size in [*tail, 2048]:
        lo, hi, height = next(bar for bar in bars if bar[0] <= size < bar[1])
        assert height == np.count_nonzero((sizes >= lo) & (sizes < hi))  # the bar counts its sizes
        assert size == 2048 or not lo <= 2048 < hi  # a tail size is not lumped with the mass
        assert to_axes.transform((size, height))[1] >= 0.05, (size, height)  # at least 5% of the height
    monkeypatch.undo()
    for figure in figures:
        plt.close(figure)
