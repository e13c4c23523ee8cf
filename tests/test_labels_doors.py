"""Labels through every door (issue item "Labels through the new doors").

Every way labels come in (a Python mapping, a `pyarrow.Table`, a `datasets.Dataset`, a Parquet or
Arrow file, a `save_to_disk` folder, a saved `DatasetDict`, a table of token ids) gets the checks of
`varlen.prepare.labels`: a label column read as text that mixes numbers with words, or spells one number
two ways, is refused naming rows; whole numbers written as floats are not silently a regression task;
a Hugging Face `ClassLabel`'s names are the classes (`class_names`), in id order, in both the
sequence and the text DataModule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import varlen.prepare.labels as label_checks
from varlen.datamodules import SequenceDataModule, TextClassificationDataModule
from varlen.errors import DataError

datasets = pytest.importorskip("datasets")

NAMES = ["negative", "neutral", "positive"]
#: 'two' first met at row 9 (from 0), among 0 / 1 / 2 as text
ODD_WORD = ["0", "1", "2"] * 3 + ["two"] + ["0", "1", "2"]
#: '01' first met at row 4 (from 0): the number 1 spelt a second way
ODD_SPELLING = ["0", "1", "2", "0", "01", "1", "2", "0", "1", "2"]


def sequence_columns(labels: list[Any]) -> dict[str, Any]:
    """One variable-length field (2 to 6 values) per label."""
    return {"values": [np.arange(2 + i % 5, dtype=np.float32) for i in range(len(labels))], "label": list(labels)}


def as_door(columns: dict[str, Any], door: str, tmp_path: Path) -> tuple[Any, str]:
    """`columns` given to SequenceDataModule through `door`, and how its messages name that source."""
    table = pa.table({"values": pa.array(columns["values"]), "label": pa.array(columns["label"])})
    if door == "mapping":
        return columns, r"split 'train' \(in-memory columns\)"
    if door == "table":
        return table, r"split 'train' \(pyarrow table\)"
    if door == "dataset":
        return datasets.Dataset(table), r"split 'train' \(Hugging Face Dataset\)"
    path = tmp_path / f"train.{door}"
    if door == "parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return str(path), str(path).replace(".", r"\.")


SEQUENCE_DOORS = ["mapping", "table", "dataset", "parquet", "arrow"]


# -- the checks of varlen.prepare.labels, on the sequence DataModule's every door ----------------------------


@pytest.mark.parametrize("door", SEQUENCE_DOORS)
def test_sequence_labels_mixing_numbers_with_a_word_are_refused_naming_its_row(door: str, tmp_path: Path) -> None:
    """Before: '0', '1', '2' and 'two' were four classes, without a word."""
    given, where = as_door(sequence_columns(ODD_WORD), door, tmp_path)
    message = (
        where + r": the label column 'label' mixes numbers \('0' \(row 0\), '1' \(row 1\), '2' \(row 2\)\) "
        r"with words \('two' \(row 9\)\).*give class_names"
    )
    with pytest.raises(DataError, match=message):
        SequenceDataModule(train=given, cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("door", SEQUENCE_DOORS)
def test_sequence_labels_spelling_one_number_two_ways_are_refused(door: str, tmp_path: Path) -> None:
    """Before: '1' and '01' were two classes."""
    given, where = as_door(sequence_columns(ODD_SPELLING), door, tmp_path)
    message = where + r": the label column 'label' writes one number several ways \('1' \(row 1\), '01' \(row 4\)\)"
    with pytest.raises(DataError, match=message):
        SequenceDataModule(train=given, cache_dir=str(tmp_path / "cache"))


def test_sequence_class_names_say_which_spellings_are_classes(tmp_path: Path) -> None:
    """The way out the message names: the classes given, other spellings are unknown labels (skipped)."""
    dm = SequenceDataModule(
        train=sequence_columns(ODD_WORD), class_names=["0", "1", "2"], on_bad="skip", test_fraction=0.0
    )
    with pytest.warns(UserWarning, match="unknown label"):
        dm.setup("fit")
    assert dm.class_names == ["0", "1", "2"] and dm.report.skipped("unknown label in column 'label'") == 1


@pytest.mark.parametrize("door", SEQUENCE_DOORS)
def test_sequence_whole_numbers_as_floats_are_no_silent_regression(door: str, tmp_path: Path) -> None:
    """Before: ints mixed with integral floats (1, 2.0, 3) became a float column, hence a regression task.
    Now: refused without `task`, naming rows; `task` says which it is."""
    labels = [1, 2.0, 3] * 4
    given, where = as_door(sequence_columns(labels), door, tmp_path)
    message = (
        where + r": the label column 'label' holds whole numbers as floats \(1\.0 \(row 0\), 2\.0 \(row 1\), "
        r"3\.0 \(row 2\)\).*task='classification'.*task='regression'"
    )
    with pytest.raises(DataError, match=message):
        SequenceDataModule(train=given, cache_dir=str(tmp_path / "cache"))
    classes = SequenceDataModule(train=given, task="classification", test_fraction=0.0, cache_dir=str(tmp_path))
    assert (classes.task, classes.class_names) == ("classification", ["1", "2", "3"])
    classes.prepare_data()
    classes.setup("fit")
    train = classes.dataset("train")
    assert [classes.class_names[k] for k in train.labels] == [str(int(labels[r])) for r in train.positions]
    regression = SequenceDataModule(train=given, task="regression", cache_dir=str(tmp_path / "cache"))
    assert (regression.task, regression.class_names) == ("regression", None)


def test_sequence_floats_that_are_not_whole_numbers_still_regress() -> None:
    dm = SequenceDataModule(train=sequence_columns([1, 2.5, 3] * 4))
    assert dm.task == "regression"


def test_sequence_integral_floats_given_class_names_are_matched_as_numbers() -> None:
    dm = SequenceDataModule(
        train=sequence_columns([1.0, 2.0, 3.0] * 4), task="classification", class_names=["3", "1"], on_bad="skip"
    )
    with pytest.warns(UserWarning, match=r"row 1 \(label 2\.0\): unknown label"):
        dm.setup("fit")
    assert dm.report.skipped("unknown label in column 'label'") == 4  # the 2.0s
    assert dm.class_names == ["3", "1"]


# -- a ClassLabel's names are the classes, on every door --------------------------------------------


def named_dataset(n: int = 30, **extra: Any) -> Any:
    """`n` rows whose `label` is a ClassLabel of `NAMES` (ids 0, 1, 2 in turn, then shuffled)."""
    rng = np.random.default_rng(1)
    ids = rng.permutation([i % 3 for i in range(n)]).tolist()
    columns = {**sequence_columns(ids), **{k: v[:n] for k, v in extra.items()}}
    return datasets.Dataset.from_dict(columns).cast_column("label", datasets.ClassLabel(names=NAMES))


def test_classlabel_names_are_read_from_the_features_datasets_writes_in_a_schema(tmp_path: Path) -> None:
    named = named_dataset()
    named.to_parquet(str(tmp_path / "named.parquet"))
    assert label_checks.classlabel_names(named.features.arrow_schema, "label") == NAMES
    assert label_checks.classlabel_names(pq.read_schema(tmp_path / "named.parquet"), "label") == NAMES
    assert label_checks.classlabel_names(named.data.table.schema, "values") is None  # not a ClassLabel
    assert label_checks.classlabel_names(pa.schema([("label", pa.int64())]), "label") is None  # no features
    assert label_checks.named_classes(NAMES, None, "x", "label") == (NAMES, [0, 1, 2])
    assert label_checks.named_classes(NAMES, ["positive", "negative"], "x", "label") == (
        ["positive", "negative"],
        [2, 0],
    )
    with pytest.raises(DataError, match=r"x: class_names \['0', '1'\] are not names of the ClassLabel of"):
        label_checks.named_classes(NAMES, ["0", "1"], "x", "label")


@pytest.mark.parametrize("door", ["dataset", "parquet", "arrow", "table"])
def test_sequence_keeps_a_classlabels_names_on_every_door(door: str, tmp_path: Path) -> None:
    named = named_dataset()
    given: Any = {"dataset": named, "table": named.data.table}.get(door)
    if door == "parquet":
        named.to_parquet(str(tmp_path / "named.parquet"))
        given = str(tmp_path / "named.parquet")
    elif door == "arrow":
        named.save_to_disk(str(tmp_path / "saved"))
        given = str(tmp_path / "saved" / "data-00000-of-00001.arrow")
    dm = SequenceDataModule(train=given, test_fraction=0.0, cache_dir=str(tmp_path / "cache"))
    assert dm.class_names == NAMES
    dm.prepare_data()
    dm.setup("fit")
    train, ids = dm.dataset("train"), list(named["label"])
    assert [dm.class_names[k] for k in train.labels] == [NAMES[ids[r]] for r in train.positions]


def test_sequence_class_names_given_over_a_classlabel_are_its_names(tmp_path: Path) -> None:
    named = named_dataset()
    dm = SequenceDataModule(train=named, class_names=["positive", "negative"], on_bad="skip", test_fraction=0.0)
    with pytest.warns(UserWarning, match="unknown label"):
        dm.setup("fit")
    assert dm.class_names == ["positive", "negative"] and dm.report.skipped("unknown label in column 'label'") == 10
    train, ids = dm.dataset("train"), list(named["label"])
    assert [dm.class_names[k] for k in train.labels] == [NAMES[ids[r]] for r in train.positions]
    with pytest.raises(DataError, match=r"class_names \['up', 'down'\] are not names of the ClassLabel"):
        SequenceDataModule(train=named, class_names=["up", "down"])


# -- the text DataModule: the same checks, and a ClassLabel's names ----------------------------------


def reviews(labels: list[Any]) -> dict[str, list[Any]]:
    words = "good bad long short dull bright plot actor".split()
    return {"text": [f"{words[i % 8]} {words[(3 * i) % 8]} review {i}" for i in range(len(labels))], "label": labels}


def text_dm(tmp_path: Path, **kwargs: Any) -> TextClassificationDataModule:
    return TextClassificationDataModule(**{"batch_size": 8, "max_length": 16, "cache_dir": str(tmp_path), **kwargs})


def named_reviews(n: int = 30) -> Any:
    rng = np.random.default_rng(2)
    ids = rng.permutation([i % 3 for i in range(n)]).tolist()
    return datasets.Dataset.from_dict(reviews(ids)).cast_column("label", datasets.ClassLabel(names=NAMES))


def assert_served_by_name(dm: TextClassificationDataModule, splits: dict[str, Any]) -> None:
    """Each split's samples carry the class of their row's ClassLabel name."""
    dm.prepare_data()
    dm.setup("fit")
    for split, dataset in splits.items():
        served, ids = dm.dataset(split), list(dataset["label"])
        assert len(served) and [dm.class_names[k] for k in served.labels] == [NAMES[ids[r]] for r in served.rows]


@pytest.mark.parametrize("door", ["dataset", "folder", "arrow", "parquet"])
def test_text_takes_a_classlabels_names_as_class_names(door: str, tmp_path: Path) -> None:
    """Before: classes '0', '1', '2' where the dataset says negative, neutral, positive."""
    train, val = named_reviews(30), named_reviews(12)
    given: dict[str, Any] = {"train": train, "val": val}
    for name, dataset in list(given.items()):
        if door == "folder":
            dataset.save_to_disk(str(tmp_path / name))
            given[name] = str(tmp_path / name)
        elif door == "arrow":
            dataset.save_to_disk(str(tmp_path / name))
            given[name] = str(tmp_path / name / "data-00000-of-00001.arrow")
        elif door == "parquet":
            dataset.to_parquet(str(tmp_path / f"{name}.parquet"))
            given[name] = str(tmp_path / f"{name}.parquet")
    dm = text_dm(tmp_path / "cache", train_file=given["train"], val_file=given["val"])
    assert dm.class_names == NAMES and dm.num_classes == 3
    assert dm.tables["val"].labels == [NAMES[i] for i in val["label"]]  # rows read in memory: names too
    assert_served_by_name(dm, {"train": train, "val": val})


def test_text_takes_a_classlabels_names_from_a_saved_dataset_dict(tmp_path: Path) -> None:
    train, val = named_reviews(30), named_reviews(12)
    datasets.DatasetDict({"train": train, "validation": val}).save_to_disk(str(tmp_path / "dict"))
    dm = text_dm(tmp_path / "cache", dataset_name=str(tmp_path / "dict"))
    assert dm.class_names == NAMES
    assert_served_by_name(dm, {"train": train, "val": val})


def test_text_takes_a_classlabels_names_from_a_table_of_token_ids(tmp_path: Path) -> None:
    from varlen.datasets.text.tokens import load_tokenizer

    named = named_reviews(30)
    ids = load_tokenizer(None)(list(named["text"]))["input_ids"]
    tokens = named.remove_columns("text").add_column("input_ids", ids)
    dm = text_dm(tmp_path / "cache", train_file=tokens)
    assert dm.class_names == NAMES
    assert_served_by_name(dm, {"train": named})


def test_text_reads_classlabel_ids_as_names_and_no_name_matches_an_id_beyond_them() -> None:
    """-1 (what `datasets` stores for no label) is no label; an id beyond the names matches no class."""
    from varlen.datasets.text.labels import named_labels

    read = named_labels([0, 2, -1, None, 3], ["1", "2", "3"])
    assert read[:4] == ["1", "3", None, None] and read[4] not in ("1", "2", "3")


def test_text_class_names_given_over_a_classlabel_are_its_names(tmp_path: Path) -> None:
    named = named_reviews(30)
    dm = text_dm(tmp_path / "cache", train_file=named, class_names=["positive", "negative"], on_bad="skip")
    with pytest.warns(UserWarning, match="label not one of the 2 classes"):
        assert_served_by_name(dm, {"train": named})
    assert dm.class_names == ["positive", "negative"]
    with pytest.raises(DataError, match=r"class_names \['0', '1', '2'\] are not names of the ClassLabel"):
        text_dm(tmp_path / "cache", train_file=named, class_names=["0", "1", "2"]).class_names  # noqa: B018


def test_text_model_names_a_classlabels_classes(tmp_path: Path) -> None:
    """The names reach the model's id2label (the CLI links num_classes and class_names from the DataModule)."""
    from varlen.models.text import TextClassifier

    dm = text_dm(tmp_path / "cache", train_file=named_reviews(30))
    model = TextClassifier(num_classes=dm.num_classes, class_names=dm.class_names, pretrained=False)
    assert model.encoder.config.id2label == dict(enumerate(NAMES))


@pytest.mark.parametrize("labels", [ODD_WORD, ODD_SPELLING], ids=["word", "spelling"])
def test_text_dataset_labels_get_the_checks_naming_rows_from_one(labels: list[str], tmp_path: Path) -> None:
    dm = text_dm(tmp_path, train_file=datasets.Dataset.from_dict(reviews(labels)))
    odd = r"\('two' \(row 10\)\)" if "two" in labels else r"\('1' \(row 2\), '01' \(row 5\)\)"
    with pytest.raises(DataError, match=r"train_file \(datasets\.Dataset\): the label column 'label' .*" + odd):
        dm.class_names  # noqa: B018


def test_text_whole_numbers_as_floats_are_integer_classes(tmp_path: Path) -> None:
    """Text is classification only: 1, 2.0, 3 (a float column) are the classes 1, 2, 3, on every door."""
    labels = [1, 2.0, 3] * 4
    dm = text_dm(tmp_path / "a", train_file=datasets.Dataset.from_dict(reviews(labels)))
    assert dm.class_names == ["1", "2", "3"]
    path = tmp_path / "floats.jsonl"
    datasets.Dataset.from_dict(reviews(labels)).to_json(str(path))
    assert text_dm(tmp_path / "b", train_file=str(path)).class_names == ["1", "2", "3"]


# -- one order of classes: text labels that all spell numbers are ordered by number, on every door --------


@pytest.mark.parametrize("door", SEQUENCE_DOORS)
def test_string_number_labels_are_ordered_by_number_by_text_and_sequence_alike(door: str, tmp_path: Path) -> None:
    """Before: "0".."10" were classes 0, 1, 2, ..., 10 through the text door and 0, 1, 10, 2, ... through the
    sequence door (text order): the same column made other class ids."""
    labels = [str(k) for k in range(11)] * 2
    given, _ = as_door(sequence_columns(labels), door, tmp_path)
    sequence = SequenceDataModule(train=given, cache_dir=str(tmp_path / "cache"))
    text = text_dm(tmp_path / "text", train_file=datasets.Dataset.from_dict(reviews(labels)))
    assert sequence.class_names == text.class_names == [str(k) for k in range(11)]
    assert label_checks.class_order(["b", "a", "10"]) == ["10", "a", "b"]  # words: text order
    assert label_checks.class_order(["2.5", "-1", "10", "0.5"]) == ["-1", "0.5", "2.5", "10"]
