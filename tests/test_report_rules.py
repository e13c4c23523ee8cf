"""Reports name what they count, and splits follow one rule (issue 37, item 7): a test split not given is the
validation split, said in the report, in every DataModule; one padding figure per variable-length field; an
unserved column named; a streamed split's truncations counted when it was written."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from toy import ToyDataModule

from varlen.batching.telemetry import PaddingTelemetry
from varlen.callbacks.progress import EpochProgress
from varlen.cli.inspection import summarize
from varlen.datamodules.sequence import SequenceDataModule


def two_fields(rows: int = 60, seed: int = 0) -> dict:
    """Two variable-length fields of unrelated lengths (their paddings differ), a string column, labels."""
    rng = np.random.default_rng(seed)
    return {
        "a": [rng.normal(size=(n, 2)).astype(np.float32) for n in rng.integers(1, 60, rows)],
        "b": [rng.normal(size=n).astype(np.float32) for n in rng.integers(1, 8, rows)],
        "name": [f"sample {i}" for i in range(rows)],
        "label": [i % 2 for i in range(rows)],
    }


# -- one rule for a split not given -------------------------------------------------------------------------


def test_the_rule_stands_the_validation_split_in_for_a_missing_test_split() -> None:
    from varlen.prepare.splits import STANDS_IN, stand_ins

    val = object()
    assert STANDS_IN == {"test": "val"}
    assert stand_ins({"train": 1, "val": val}) == {"test": "val"}
    assert stand_ins({"train": 1, "val": val, "test": val}) == {"test": "val"}  # built so (text's)
    assert stand_ins({"train": 1, "val": val, "test": object()}) == {} and stand_ins({"train": 1}) == {}


def test_given_train_and_val_nothing_is_carved_and_test_is_the_validation_split() -> None:
    train, val = two_fields(60), two_fields(20, seed=1)
    dm = SequenceDataModule(train=train, val=val, batch_size=8)
    dm.setup("fit")
    assert len(dm.dataset("train")) == 60  # every training row trains: no test split carved out of them
    assert dm.dataset("test") is dm.dataset("val")
    assert dm.report.to_dict()["test"]["same_as"] == "val"
    assert "test             20        0         0  = val (no test data given: the val split stands in)" in str(
        dm.report
    )
    carved = SequenceDataModule(train=train, test_fraction=0.2, batch_size=8)  # asked for: carved
    carved.setup("fit")
    assert carved.dataset("test") is not carved.dataset("val") and "same_as" not in carved.report.to_dict()["test"]


class TrainAndVal(ToyDataModule):
    """A DataModule of the user's whose build gives no test split."""

    def build(self, stage: str | None) -> dict:
        built = super().build(stage)
        return {"train": built["train"], "val": built["val"]}


def test_every_datamodule_follows_the_rule_and_says_so() -> None:
    dm = TrainAndVal(num_samples=40)
    dm.setup("fit")
    assert dm.dataset("test") is dm.dataset("val") and dm.report.stand_ins == {"test": "val"}
    assert "= val (no test data given" in str(dm.report)
    given = ToyDataModule(num_samples=40)  # its build makes test the validation set itself: said the same way
    given.setup("fit")
    assert given.report.to_dict()["test"]["same_as"] == "val"


# -- the report names what it counts ------------------------------------------------------------------------


def test_an_unserved_column_is_named_with_why() -> None:
    dm = SequenceDataModule(train=two_fields(), fields=["a", "b"], batch_size=8)
    dm.setup("fit")
    unused = dm.report.to_dict()["source"]["unused"]
    assert unused == {"column: 'name' not served: string values": 1}
    assert "1 column ('name' not served: string values)" in str(dm.report)
    narrowed = SequenceDataModule(train=two_fields(), fields=["a"], batch_size=8)
    narrowed.setup("fit")
    assert "column: 'b' not served: not in fields" in narrowed.report.to_dict()["source"]["unused"]


def by_hand(dm: SequenceDataModule, batches: list[list[int]]) -> dict[str, float]:
    """Each field's real over allocated elements of `batches`, from the padded batches' own masks."""
    dataset, counts = dm.dataset("train"), {"a": [0, 0], "b": [0, 0]}
    for indices in batches:
        batch = dm.collate_fn(dataset.__getitems__(indices))
        for name in counts:
            counts[name][0] += int(batch[f"{name}_mask"].sum())
            counts[name][1] += batch[f"{name}_mask"].numel()
    return {name: real / padded for name, (real, padded) in counts.items()}


def test_each_variable_length_field_gets_its_own_padding_figure(tmp_path: Path, capsys) -> None:
    dm = SequenceDataModule(train=two_fields(), size_field=["a", "b"], max_tokens=[200, 40], val_fraction=0.1)
    dm.setup("fit")
    summary = summarize(dm, "train")
    sampler = dm.batch_sampler("train", dm.shuffle, num_replicas=1, rank=0)
    plan = sampler.global_plan(0)  # each batch as served: carrying the padded widths of its rungs
    expected = by_hand(dm, [sampler.batch_of(plan.order[a:b].tolist(), 0) for a, b in plan.bounds.tolist()])
    assert [name for name, _ in summary.fields] == ["a", "b"]
    assert dict(summary.fields) == pytest.approx(expected) and abs(expected["a"] - expected["b"]) > 0.05
    assert f"    per field: a {expected['a']:.4f}, b {expected['b']:.4f}" in summary.lines()

    class Mean(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(2, 2)

        def training_step(self, batch, batch_idx):
            keep = batch["a_mask"].unsqueeze(-1)
            return torch.nn.functional.cross_entropy(self.head((batch["a"] * keep).sum(1)), batch["labels"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    telemetry = PaddingTelemetry()
    trainer = pl.Trainer(
        max_epochs=1, limit_val_batches=0, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        callbacks=[telemetry, EpochProgress()],
    )  # fmt: skip
    trainer.fit(Mean(), datamodule=dm)
    epoch = telemetry.epochs[0]
    line = next(line for line in capsys.readouterr().out.splitlines() if "padding" in line)
    figures = f"(a {epoch['padding_efficiency_a']:.3f}, b {epoch['padding_efficiency_b']:.3f})"
    assert f"padding {epoch['padding_efficiency']:.3f} {figures}" in line, line
    assert epoch["padding_efficiency_a"] == pytest.approx(expected["a"], abs=0.05)


# -- a streamed split's truncations -------------------------------------------------------------------------


def test_a_streamed_split_reports_the_truncations_made_when_it_was_written(tmp_path: Path) -> None:
    pytest.importorskip("litdata")
    pytest.importorskip("transformers")
    from varlen.datamodules.text import TextClassificationDataModule
    from varlen.stream.write import write_split

    settings = {"synthetic": "long_reviews", "synthetic_samples": 40, "max_length": 32, "batch_size": 8}
    settings["cache_dir"] = str(tmp_path / "cache")
    writer = TextClassificationDataModule(**settings)
    writer.prepare_data()
    writer.setup("fit")
    cut = sum(writer.report.splits["train"].truncated.values())
    assert cut > 0
    write_split(writer, tmp_path / "chunks", num_workers=1)
    reader = TextClassificationDataModule(stream=str(tmp_path / "chunks"), **settings)
    reader.prepare_data()
    reader.setup("fit")
    assert sum(reader.report.splits["train"].truncated.values()) == cut
    assert f"{cut:,} truncated when the chunks were written" in str(reader.report)
