"""Streamed sources mixed in a DataModule: two text streams written by `varlen optimize`, served as one
training split by a Lightning fit of two epochs, each source's share served, `per_source` batches from one
source each; a mixture of streamed and in-memory sources refused by name. Needs litdata (skipped without)."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest

pytest.importorskip("litdata")

from ddp_stream_fit import Counting  # noqa: E402
from test_stream_read import MAX_TOKENS, TEXT, Recorder, optimize  # noqa: E402

SMALL = 60


@pytest.fixture(scope="module")
def streams(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mixture")
    big = optimize(root / "big", *TEXT, "--chunk-bytes", "3000")
    small = optimize(root / "small", *TEXT[:2], f"--data.init_args.synthetic_samples={SMALL}", "--chunk-bytes", "3000")
    return big, small


def mixture_dm(streams, **kwargs):
    from varlen.datamodules.text import TextClassificationDataModule

    big, small = streams
    dm = TextClassificationDataModule(
        stream=str(big), synthetic_samples=120, batch_size=None, max_tokens=MAX_TOKENS,
        sources=[{"name": "small", "stream": str(small), "synthetic_samples": SMALL}], **kwargs,
    )  # fmt: skip
    dm.stream_window_batches = 4
    return dm


@pytest.mark.parametrize("mix", ["within_batch", "per_source"])
def test_a_fit_of_two_streamed_sources_serves_their_shares(streams, mix) -> None:
    dm = mixture_dm(streams, source_weights=[0.5, 0.5], mix=mix)
    recorder = Recorder()
    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, callbacks=[recorder], num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Counting(), datamodule=dm)
    assert {epoch for epoch, _ in recorder.batches} == {0, 1}
    for epoch in (0, 1):
        ids = np.concatenate([batch for e, batch in recorder.batches if e == epoch])
        assert len(ids) == 120 + SMALL  # every sample of both a turn, in their shares (0.5 each: 90 each)
        small = ids >= 120
        assert int(small.sum()) == 90
        assert len(np.unique(ids[~small])) == 90  # the big source: without replacement
    if mix == "per_source":
        assert all(len({i >= 120 for i in batch}) == 1 for _, batch in recorder.batches)
    assert dm.report.drawn["train"] == {"main": 90.0, "small": 90.0}  # the report says what each epoch draws


def test_streamed_and_in_memory_sources_are_refused_by_name(streams) -> None:
    from varlen.datamodules.text import TextClassificationDataModule

    big, _ = streams
    with pytest.raises(ValueError, match=r"\['plain'\] do not"):
        TextClassificationDataModule(stream=str(big), synthetic_samples=120, sources=[{"name": "plain"}])
    with pytest.raises(ValueError, match=r"\['streamed'\] stream but the main source does not"):
        TextClassificationDataModule(synthetic_samples=120, sources=[{"name": "streamed", "stream": str(big)}])


def test_a_schedule_of_streamed_sources_serves_each_stages_shares_in_a_fit(streams) -> None:
    """Two stages (3:1 of 180 samples, then 1:3): each epoch its own length (the trainer reloads the loader) and
    each source its stage's count; telemetry logs the scheduled counts beside the served ones."""
    from varlen.batching.telemetry import PaddingTelemetry

    stages = [{"weights": [3, 1], "until_epoch": 1}, {"weights": [1, 3]}]
    dm = mixture_dm(streams, source_weights=stages)
    recorder, telemetry = Recorder(), PaddingTelemetry()
    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, callbacks=[recorder, telemetry], num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(Counting(), datamodule=dm)
    assert trainer.reload_dataloaders_every_n_epochs == 1
    for epoch, small_count in ((0, 45), (1, 135)):
        batches = [batch for e, batch in recorder.batches if e == epoch]
        ids = np.concatenate(batches)
        assert len(ids) == 120 + SMALL and int((ids >= 120).sum()) == small_count  # the stage's shares
        sampler = dm.train_dataloader().batch_sampler
        sampler.set_epoch(epoch)
        assert len(batches) == len(sampler)  # the epoch's own length, none cut off
        assert telemetry.epochs[epoch]["served_small"] == small_count
        assert telemetry.epochs[epoch]["scheduled_small"] == pytest.approx(small_count)
    said = str(dm.report)  # each stage's draw and what its epochs served, against the schedule
    assert "served in stage 1 (epochs 1-1): main 25.0% (scheduled 25.0%), small 75.0% (scheduled 75.0%)" in said
    assert dm.report.drawn_stages["train"] == [{"main": 135.0, "small": 45.0}, {"main": 45.0, "small": 135.0}]
    assert [stage["epochs"] for stage in dm.report.by_stage().values()] == [[0], [1]]


def test_one_optimize_writes_every_streamed_source_of_a_config(tmp_path, monkeypatch) -> None:
    """`varlen optimize --config C` writes the main source and each extra one where C reads them; the
    DataModule of C then serves them both (no per-source command with its three nulls)."""
    import yaml
    from test_stream_read import STARTS

    from varlen.cli.dispatch import console

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "text_mixture_stream.yaml").read_text())
    args = config["data"]["init_args"]
    args |= {"synthetic_samples": 90, "stream": str(tmp_path / "short")}
    args["sources"][0] |= {"stream": str(tmp_path / "long"), "synthetic_samples": 40}
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setattr("sys.argv", ["varlen", "optimize", "--config", str(path), "--chunk-bytes", "3000", *STARTS])
    console()
    counts = {}
    for name in ("short", "long"):
        index = json.loads((tmp_path / name / "index.json").read_text())
        counts[name] = sum(chunk["chunk_size"] for chunk in index["chunks"])
    assert counts == {"short": 90, "long": 40}  # each source's training split
    from varlen.datamodules.text import TextClassificationDataModule

    dm = TextClassificationDataModule(**{k: v for k, v in args.items() if k != "source_weights"})
    dm.setup("fit")
    assert dm.dataset("train").counts() == {"main": 90, "long": 40}
