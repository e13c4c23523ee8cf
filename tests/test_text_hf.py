"""Hugging Face datasets and Arrow tables as text sources (issue 26): a `Dataset` in memory, its
`save_to_disk` folder and its `.arrow` file serve what a CSV of the same rows serves; tables of token
ids; caches keyed by fingerprint or content; `max_train_samples` tokenising only what it keeps; one
row-numbering convention in every text reader's messages; `predict_file`."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import varlen.datasets.text.store as store
from varlen.datamodules import TextClassificationDataModule
from varlen.datasets.text.tokens import load_tokenizer
from varlen.errors import DataError
from varlen.prepare.splits import stratified_split

datasets = pytest.importorskip("datasets")
WORDS = "the movie was good bad long short plot actor scene music dull bright".split()


def rows(n: int, seed: int = 0) -> list[dict]:
    """`n` reviews of 3 to 30 words, labels `neg` / `pos` (two in three `neg`)."""
    rng = np.random.default_rng(seed)
    return [
        {"text": " ".join(rng.choice(WORDS, int(rng.integers(3, 30)))), "label": ["neg", "pos"][i % 3 == 0]}
        for i in range(n)
    ]


def make(cache: Path, **kwargs) -> TextClassificationDataModule:
    dm = TextClassificationDataModule(**{"batch_size": 8, "max_length": 24, "cache_dir": str(cache), **kwargs})
    dm.prepare_data()
    dm.setup("fit")
    return dm


def batches(dm: TextClassificationDataModule, splits=("train", "val", "test")) -> dict[str, list[dict]]:
    return {split: list(dm.loader(split)) for split in splits}


def assert_same_batches(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> None:
    assert a.keys() == b.keys()
    for split in a:
        assert len(a[split]) == len(b[split]) > 0, split
        for x, y in zip(a[split], b[split], strict=True):
            assert x.keys() == y.keys()
            for key in ("input_ids", "labels", "index"):
                assert torch.equal(x[key], y[key]), (split, key)


def write_arrow_file(table, path: Path) -> Path:
    """`table` in the Arrow IPC *file* format (`datasets` writes the stream format)."""
    import pyarrow as pa

    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


@pytest.fixture
def builds(monkeypatch) -> dict[str, list[str]]:
    """Every token table built in this test (`sources`: their names) and every text tokenised (`texts`)."""
    made: dict[str, list[str]] = {"sources": [], "texts": []}
    build, encode = store.build_tokens, store.encode_texts

    def counted_build(folder, source, *args, **kwargs):
        made["sources"].append(source.name)
        return build(folder, source, *args, **kwargs)

    def counted_encode(tokenizer, texts, *args, **kwargs):
        made["texts"] += list(texts)
        return encode(tokenizer, texts, *args, **kwargs)

    monkeypatch.setattr(store, "build_tokens", counted_build)
    monkeypatch.setattr(store, "encode_texts", counted_encode)
    return made


# -- the acceptance test: four ways to hand over the same rows -----------------------------------


def test_a_dataset_its_saved_folder_and_its_arrow_files_serve_the_csv_batches(tmp_path: Path) -> None:
    train, val = rows(60), rows(20, seed=1)
    memory = {name: datasets.Dataset.from_pandas(pd.DataFrame(part)) for name, part in (("train", train), ("val", val))}
    for name, dataset in memory.items():
        dataset.save_to_disk(str(tmp_path / name))
    stream = {name: tmp_path / name / "data-00000-of-00001.arrow" for name in memory}  # what save_to_disk wrote
    files = {name: write_arrow_file(dataset.data.table, tmp_path / f"{name}.arrow") for name, dataset in memory.items()}
    csv = {name: tmp_path / f"{name}.csv" for name in memory}
    for name, part in (("train", train), ("val", val)):
        pd.DataFrame(part).to_csv(csv[name], index=False)
    kinds = {
        "memory": memory,
        "folder": {name: str(tmp_path / name) for name in memory},
        "stream": {name: str(path) for name, path in stream.items()},
        "file": {name: str(path) for name, path in files.items()},
        "csv": {name: str(path) for name, path in csv.items()},
    }
    served = {
        kind: batches(make(tmp_path / f"cache-{kind}", train_file=given["train"], val_file=given["val"], seed=3))
        for kind, given in kinds.items()
    }
    for kind in ("folder", "stream", "file", "csv"):
        assert_same_batches(served["memory"], served[kind])


def test_a_dataset_keys_by_its_fingerprint(tmp_path: Path, builds) -> None:
    dataset = datasets.Dataset.from_pandas(pd.DataFrame(rows(30)))
    first = make(tmp_path / "cache", train_file=dataset)
    assert len(builds["sources"]) == 1
    again = make(tmp_path / "cache", train_file=dataset)  # a new DataModule over the same Dataset
    assert len(builds["sources"]) == 1  # the second setup builds nothing: it maps the first's tables
    assert_same_batches(batches(first, ("train", "val")), batches(again, ("train", "val")))
    make(tmp_path / "cache", train_file=dataset.select(range(29)))  # other rows, another fingerprint
    assert len(builds["sources"]) == 2


def test_a_saved_dataset_dict_is_a_dataset_name_keyed_by_its_content(tmp_path: Path, builds) -> None:
    dataset = datasets.Dataset.from_pandas(pd.DataFrame(rows(30)))
    folder = str(tmp_path / "saved")
    for held_out in (10, 10, 9):  # saved again with the same rows (new files), then other validation rows
        datasets.DatasetDict({"train": dataset, "validation": dataset.select(range(held_out))}).save_to_disk(folder)
        assert len(make(tmp_path / "cache", dataset_name=folder).dataset("val")) == held_out
    assert len(builds["sources"]) == 3  # both splits once, then the changed validation split only


def test_a_dataset_is_saved_among_the_hyperparameters_as_plain_text(tmp_path: Path) -> None:
    """A checkpoint holds plain values: `torch.load(weights_only=True)` reads it, and it holds no rows."""
    dataset = datasets.Dataset.from_pandas(pd.DataFrame(rows(30)))
    dm = TextClassificationDataModule(train_file=dataset, cache_dir=str(tmp_path))
    buffer = io.BytesIO()
    torch.save(dict(dm.hparams), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    assert dataset._fingerprint in saved["train_file"] and dm.train_file is dataset
    assert dm.hparams_initial["train_file"] == saved["train_file"]  # what loggers are given
    assert saved["max_length"] == 128 and "num_classes" not in saved  # the others as before


# -- tables of token ids ---------------------------------------------------------------------------


def test_a_table_of_token_ids_is_used_as_it_is(tmp_path: Path, builds) -> None:
    tokenizer = load_tokenizer(None)
    train = rows(40)
    encoded = tokenizer([r["text"] for r in train])
    ids = pd.DataFrame(
        {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "label": [r["label"] for r in train],
        }
    )
    ids["text"] = "not read"  # a text column is not tokenised when the ids are there
    from_ids = make(tmp_path / "a", train_file=datasets.Dataset.from_pandas(ids), max_length=12)
    assert builds["texts"] == []  # nothing was tokenised
    from_texts = make(tmp_path / "b", train_file=datasets.Dataset.from_pandas(pd.DataFrame(train)), max_length=12)
    assert_same_batches(batches(from_texts, ("train", "val")), batches(from_ids, ("train", "val")))
    long = sum(len(i) > 12 for i in encoded["input_ids"])
    assert long and from_ids.report.num_truncated == from_texts.report.num_truncated == long

    ids.loc[7, "input_ids"] = [101, len(tokenizer) + 3, 102]  # row 8, counted from 1
    outside = TextClassificationDataModule(train_file=datasets.Dataset.from_pandas(ids), cache_dir=str(tmp_path))
    message = rf"train_file \(datasets\.Dataset\): row 8: token id {len(tokenizer) + 3} is outside the tokenizer's "
    with pytest.raises(DataError, match=message + rf"vocabulary of {len(tokenizer):,} ids"):
        outside.prepare_data()


def test_token_ids_in_a_csv_cell_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    pd.DataFrame({"input_ids": ["[101, 2000, 102]"] * 4, "label": [0, 1, 0, 1]}).to_csv(path, index=False)
    dm = TextClassificationDataModule(train_file=str(path), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"ids\.csv: column 'input_ids' holds string, not lists of integer token ids"):
        dm.prepare_data()


# -- max_train_samples reads only what it keeps ------------------------------------------------------


def test_max_train_samples_tokenises_only_the_rows_it_keeps(tmp_path: Path, builds) -> None:
    train = rows(300)
    path = tmp_path / "train.csv"
    pd.DataFrame(train).to_csv(path, index=False)
    dm = make(tmp_path / "cache", train_file=str(path), max_train_samples=40, val_fraction=0.1, seed=5)
    served = np.concatenate([dm.dataset(split).rows for split in ("train", "val")])
    assert sorted(builds["texts"]) == sorted(train[r]["text"] for r in served)  # the kept rows and validation only
    assert len(builds["texts"]) == 40 + len(dm.dataset("val")) < 100
    # the selection is the stratified, seeded one over the labels of the rows left after validation
    labels = np.array([r["label"] == "pos" for r in train], np.int64)
    rest = np.setdiff1d(np.arange(300), dm.dataset("val").rows)
    share = 40 / len(rest)
    kept = stratified_split(labels[rest], {"kept": share, "rest": 1 - share}, 5, "training subset")["kept"]
    assert dm.dataset("train").rows.tolist() == rest[kept].tolist()


# -- one row-numbering convention ---------------------------------------------------------------------


def test_messages_name_a_files_line_or_a_tables_row_from_one(tmp_path: Path) -> None:
    """CSV / TSV / JSON Lines: the file's line (header = line 1; blank lines and quoted newlines count);
    Parquet, Arrow, a JSON array, a Dataset: the row counted from 1."""
    table = pd.DataFrame(rows(12))
    table.loc[4, "text"] = "a review\nover two lines"
    table.loc[6, "text"] = ""  # row 6: the bad one
    csv = tmp_path / "t.csv"
    text = table.to_csv(index=False).replace("\n", "\n\n", 1)  # a blank line after the header
    csv.write_text(text)
    tsv, jsonl, array = tmp_path / "t.tsv", tmp_path / "t.jsonl", tmp_path / "t.json"
    table.assign(text=table.text.str.replace("\n", " ")).to_csv(tsv, sep="\t", index=False)
    table.to_json(jsonl, orient="records", lines=True)
    table.to_json(array, orient="records")
    parquet = tmp_path / "t.parquet"
    table.to_parquet(parquet)
    expected = {
        csv: "line 10",  # header, blank line, rows 0-3, row 4 on two lines, row 5, then row 6
        tsv: "line 8",
        jsonl: "line 7",
        array: "row 7",
        parquet: "row 7",
    }
    for path, place in expected.items():
        dm = TextClassificationDataModule(train_file=str(path), cache_dir=str(tmp_path / "cache"))
        with pytest.raises(DataError, match=rf"{path.name}: {place}: empty text in column 'text'"):
            dm.setup("fit")


# -- predict_file ------------------------------------------------------------------------------------


def test_predict_file_is_a_predict_split_of_every_row_labels_optional(tmp_path: Path) -> None:
    predict = pd.DataFrame({"text": [r["text"] for r in rows(13, seed=2)]})  # no label column
    dm = make(tmp_path / "cache", synthetic_samples=60, predict_file=datasets.Dataset.from_pandas(predict))
    served = list(dm.predict_dataloader())
    assert sorted(torch.cat([b["index"] for b in served]).tolist()) == list(range(13))
    assert all((b["labels"] == -1).all() for b in served)
    assert sorted(dm.dataset("predict").rows.tolist()) == list(range(13))
