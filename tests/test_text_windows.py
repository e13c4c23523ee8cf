"""Text: splits marked in a column, long documents as overlapping windows, document-level metrics."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from varlen.datamodules import TextClassificationDataModule
from varlen.datasets.text import TextColumns, TextTable, load_tokenizer, read_table, split_by_column
from varlen.datasets.text.column_splits import split_of
from varlen.datasets.text.synthetic import opinion_votes, synthetic_long_reviews
from varlen.errors import DataError
from varlen.models import TextClassifier
from varlen.models.votes import ItemVotes, sum_by_item
from varlen.testing import BadInput, DataModuleContract

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "text"
TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
LONG = {"synthetic": "long_reviews", "overflow": "windows", "max_length": 64, "stride": 16}


def tiny_model(num_classes: int = 2) -> TextClassifier:
    return TextClassifier(num_classes=num_classes, pretrained=False, config_overrides=TINY_BERT)


def write_csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path


class TestTextWindowsContract(DataModuleContract):
    """The whole contract with every sample a window of a long review (DDP: document metrics exact)."""

    start_methods = ("fork",)  # TestTextContract checks the same dataset and collate under spawn

    config = str(ROOT / "configs" / "text_long_reviews.yaml")
    cli_overrides = (
        "--data.init_args.synthetic_samples=16",
        "--data.init_args.max_length=64",
        "--model.init_args.pretrained=false",
        f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
    )

    def make_datamodule(self, **overrides):
        return TextClassificationDataModule(**{**LONG, "synthetic_samples": 30, "batch_size": 16, **overrides})

    def make_model(self, datamodule):
        return tiny_model(datamodule.num_classes)

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        """Bad rows under windows (the file-level cases are the same as in test_text.py)."""
        if case == "empty_sample":
            return BadInput(
                {"train_file": str(DATA / "empty_text.csv")}, r"empty_text\.csv: line 5: empty text", "empty"
            )
        if case == "unknown_label":
            files = {"train_file": str(DATA / "reviews.csv"), "val_file": str(DATA / "val_unknown_label.csv")}
            return BadInput(files, r"val_unknown_label\.csv: line 4 \(label 'neutral'\)", "not one of the")
        return None

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        return [
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--data.init_args.synthetic_samples=20",
            "--data.init_args.max_length=48",
            "--data.init_args.max_tokens=600",
            "--model.init_args.pretrained=false",
            f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
        ]


# -- windows ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def windowed() -> TextClassificationDataModule:
    dm = TextClassificationDataModule(**LONG, synthetic_samples=40, batch_size=None, max_tokens=1024)
    dm.setup("fit")
    return dm


def test_windows_cover_each_document_with_the_stride_shared(windowed: TextClassificationDataModule) -> None:
    """Window k + 1 starts with the last `stride` text tokens of window k; together they are the text."""
    train, tokenizer = windowed.dataset("train"), windowed.tokenizer
    table = windowed.tables["train"]
    assert train.lengths.max() == 64 and len(train) > 2 * train.num_documents  # long texts: several windows each
    assert np.all(np.diff(train.documents) >= 0)  # a document's windows in order
    for doc in (0, 7, int(train.documents[-1])):
        windows = [train[int(i)]["input_ids"][1:-1].tolist() for i in np.flatnonzero(train.documents == doc)]
        for before, after in zip(windows[:-1], windows[1:], strict=True):
            assert before[-16:] == after[:16]
        joined = windows[0] + [t for w in windows[1:] for t in w[16:]]
        row = int(np.flatnonzero(table.rows == train.rows[train.documents == doc][0])[0])
        assert joined == tokenizer(table.texts[row], add_special_tokens=False)["input_ids"]
    labels = {int(d): int(y) for d, y in zip(train.documents, train.labels, strict=True)}
    assert all(labels[int(d)] == y for d, y in zip(train.documents, train.labels, strict=True))


def test_windows_report_no_truncation_and_how_many_windows(windowed: TextClassificationDataModule) -> None:
    report = windowed.report
    assert report.num_truncated == 0
    documents, windows = report.windows["train"]
    assert documents == windowed.dataset("train").num_documents == 40 and windows == len(windowed.dataset("train"))
    assert report.to_dict()["val"]["documents"] == 8 and "40 documents became" in str(report)
    truncated = TextClassificationDataModule(**{**LONG, "overflow": "truncate"}, synthetic_samples=40)
    truncated.setup("fit")
    assert truncated.report.split("train").truncated["text"] >= 35 and not truncated.report.windows


def test_windows_are_bucketed_and_batches_carry_document_ids(windowed: TextClassificationDataModule) -> None:
    real = padded = 0
    seen = []
    for batch in windowed.train_dataloader():
        assert batch["input_ids"].numel() <= 1024 and batch["document_ids"].shape == batch["index"].shape
        assert torch.equal(batch["document_ids"], torch.from_numpy(windowed.dataset("train").documents[batch["index"]]))
        real, padded = real + int(batch["attention_mask"].sum()), padded + batch["attention_mask"].numel()
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(len(windowed.dataset("train")))) and real / padded > 0.95
    train = windowed.dataset("train")
    picks = [3, 0, len(train) - 1]
    fetched = windowed.collate_fn(train.__getitems__(picks))
    single = windowed.collate_fn([train[i] for i in picks])
    assert fetched.keys() == single.keys() and all(torch.equal(fetched[k], single[k]) for k in fetched)


def test_splits_keep_the_windows_of_a_document_together(tmp_path: Path) -> None:
    """Rows are split first (carved validation, a training subset), then cut into windows."""
    texts = synthetic_long_reviews(60, seed=3)
    path = write_csv(tmp_path / "long.csv", [{"text": t, "label": y} for t, y in zip(*texts.values(), strict=True)])
    dm = TextClassificationDataModule(
        train_file=str(path), overflow="windows", max_length=64, stride=8, val_fraction=0.2, max_train_samples=30
    )
    dm.setup("fit")
    train, val = dm.dataset("train"), dm.dataset("val")
    assert set(train.rows).isdisjoint(val.rows) and train.num_documents == 30 and val.num_documents == 12
    for dataset in (train, val):  # one source row per document id, and one document id per row
        pairs = set(zip(dataset.documents.tolist(), dataset.rows.tolist(), strict=True))
        assert len(pairs) == dataset.num_documents == len(set(dataset.rows.tolist()))


def test_windows_refuse_a_stride_without_new_tokens_and_pairs() -> None:
    dm = TextClassificationDataModule(**{**LONG, "stride": 62}, synthetic_samples=10)
    with pytest.raises(ValueError, match=r"stride=62 must be >= 0 and below the 62 text tokens of a window"):
        dm.setup("fit")
    with pytest.raises(ValueError, match="single texts"):
        TextClassificationDataModule(train_file="x.csv", text_pair_column="b", overflow="windows")
    with pytest.raises(ValueError, match="max_length must be >= 2 tokens"):
        TextClassificationDataModule(max_length=0)


def test_truncation_loses_the_signal_of_the_long_synthetic_reviews() -> None:
    """The generator's point: the opinions of a review are mostly beyond its first window."""
    reviews = synthetic_long_reviews(400, seed=1)
    labels = np.asarray(reviews["label"])
    lengths = np.array([len(ids) for ids in load_tokenizer(None)(reviews["text"])["input_ids"]])
    assert 250 < np.median(lengths) < 350 and 0.1 < np.mean(lengths > 512) < 0.3  # IMDB-like
    whole, first = (opinion_votes(reviews["text"], n) == labels for n in (None, 126))
    assert whole.mean() > 0.88 and first.mean() < 0.75
    assert synthetic_long_reviews(5, seed=1) == synthetic_long_reviews(5, seed=1)


# -- document metrics ---------------------------------------------------------------------------


def test_document_votes_sum_window_log_probabilities_in_any_order() -> None:
    log_probs = torch.tensor([[0.0, -3.0], [-2.0, -0.1], [-0.2, -1.0], [-5.0, 0.0], [-0.1, -2.5]]).log_softmax(-1)
    documents = torch.tensor([7, 7, 7, 2, 2])
    labels = torch.tensor([0, 0, 0, 1, 1])
    ids, summed, doc_labels = sum_by_item(log_probs, documents, labels)
    assert ids.tolist() == [2, 7] and doc_labels.tolist() == [1, 0]
    torch.testing.assert_close(summed[1], log_probs[:3].sum(0))
    metric, shuffled = ItemVotes(2), ItemVotes(2)
    metric.update(log_probs, documents, labels)
    for part in (torch.tensor([4, 0]), torch.tensor([3, 2, 1])):  # a document over two batches
        shuffled.update(log_probs[part], documents[part], labels[part])
    first, second = metric.compute(), shuffled.compute()
    assert first.keys() == second.keys() == {"accuracy", "macro_f1"}
    # document 7: summed (-2.3, -4.2) -> 0, right; document 2: (-5.1, -2.5) -> 1, right
    assert float(first["accuracy"]) == float(second["accuracy"]) == 1.0


def test_validation_logs_window_and_document_metrics(windowed: TextClassificationDataModule) -> None:
    import lightning.pytorch as pl

    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    torch.manual_seed(0)
    model = tiny_model()
    trainer.validate(model, datamodule=windowed, verbose=False)
    logged = trainer.callback_metrics
    assert {"val/accuracy", "val/document_accuracy", "val/document_macro_f1"} <= set(logged)
    model.eval()
    with torch.no_grad():
        outputs = [model.predict_step(batch, 0) for batch in windowed.val_dataloader()]
    every = {k: torch.cat([o[k] for o in outputs]) for k in ("index", "document_ids", "log_probs")}
    labels = torch.from_numpy(windowed.dataset("val").labels[every["index"].numpy()])
    _, summed, doc_labels = sum_by_item(every["log_probs"], every["document_ids"], labels)
    assert len(doc_labels) == 8
    expected = (summed.argmax(1) == doc_labels).float().mean()
    assert float(logged["val/document_accuracy"]) == pytest.approx(float(expected))


# -- splits marked in a column ------------------------------------------------------------------


def test_is_valid_column_gives_the_validation_rows() -> None:
    dm = TextClassificationDataModule(train_file=str(DATA / "is_valid.csv"), split_column="is_valid", batch_size=4)
    dm.setup("fit")
    assert dm.dataset("val").rows.tolist() == list(range(0, 24, 3))  # the True rows, nothing carved
    assert dm.dataset("train").rows.tolist() == [r for r in range(24) if r % 3]
    assert dm.dataset("test") is dm.dataset("val")


def test_split_names_in_any_case_and_dev_as_validation() -> None:
    dm = TextClassificationDataModule(train_file=str(DATA / "split_names.jsonl"), split_column="split", batch_size=4)
    dm.setup("fit")
    rows = {split: dm.dataset(split).rows.tolist() for split in ("train", "val", "test")}
    assert rows["train"] == [r for r in range(24) if r % 8 in (0, 1, 2, 4, 6)]
    assert rows["val"] == [r for r in range(24) if r % 8 in (3, 7)]
    assert rows["test"] == [5, 13, 21]
    assert [split_of(v) for v in (" Dev ", "TESTING", True, 0, 1.0, "False", "holdout", None, 2)] == [
        "val",
        "test",
        "val",
        "train",
        "val",
        "train",
        None,
        None,
        None,
    ]


def test_unknown_split_values_name_the_file_column_and_rows(tmp_path: Path) -> None:
    rows = [{"text": f"text {i}", "label": i % 2, "fold": ["train", "holdout", "train", ""][i % 4]} for i in range(12)]
    path = write_csv(tmp_path / "folds.csv", rows)
    dm = TextClassificationDataModule(train_file=str(path), split_column="fold")
    with pytest.raises(
        DataError,
        match=r"folds\.csv: split column 'fold' has values that name no split: "
        r"'holdout' in 3 rows \(lines 3, 7, 11\); an empty cell in 3 rows \(lines 5, 9, 13\); accepted: train",
    ):
        dm.setup("fit")
    missing = TextClassificationDataModule(train_file=str(DATA / "reviews.csv"), split_column="is_valid")
    with pytest.raises(DataError, match=r"reviews\.csv: missing column\(s\) \['is_valid'\]"):
        missing.setup("fit")


def test_a_split_column_without_training_rows_is_an_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "all_valid.csv", [{"text": f"t {i}", "label": i % 2, "v": True} for i in range(8)])
    with pytest.raises(
        DataError,
        match=r"all_valid\.csv: split column 'v' leaves the train split empty "
        r"\(all 8 rows are 8 val: 8 rows \(lines 2, 3, 4, 5, 6, \.\.\.\)\)",
    ):
        TextClassificationDataModule(train_file=str(path), split_column="v").setup("fit")


def test_rows_for_a_split_with_its_own_file_are_counted_unused() -> None:
    dm = TextClassificationDataModule(
        train_file=str(DATA / "split_names.jsonl"),
        val_file=str(DATA / "reviews.csv"),
        split_column="split",
        batch_size=4,
    )
    dm.setup("fit")
    assert len(dm.dataset("val")) == 24 and dm.dataset("test").rows.tolist() == [5, 13, 21]
    assert dm.report.unused("gives them to val, which has its own file") == 6
    assert len(dm.dataset("train")) == 15


def test_a_split_column_without_validation_rows_carves_validation(tmp_path: Path) -> None:
    rows = [{"text": f"t {i}", "label": i % 2, "s": "test" if i >= 30 else "train"} for i in range(40)]
    dm = TextClassificationDataModule(train_file=str(write_csv(tmp_path / "tt.csv", rows)), split_column="s")
    dm.setup("fit")
    assert dm.dataset("test").rows.tolist() == list(range(30, 40))
    assert 2 <= len(dm.dataset("val")) <= 4 and set(dm.dataset("val").rows) < set(range(30))


def test_split_by_column_on_a_table() -> None:
    table = TextTable("t.csv", ["a", "b", "c"], [0, 1, 0], splits=[False, True, False])
    parts = split_by_column(table, "is_valid")
    assert parts["train"].texts == ["a", "c"] and parts["val"].rows.tolist() == [1]
    assert read_table(DATA / "is_valid.csv", TextColumns("text", None, "label"), split_column="is_valid").splits[
        :2
    ] == [
        True,
        False,
    ]
