"""Odd text input that used to become a wrong result without a word (issue 29, item 3).

A label column of mixed spellings, a text the tokenizer leaves empty, and duplicate texts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from varlen.datamodules import TextClassificationDataModule
from varlen.errors import DataError


def write_csv(path: Path, rows: list[dict]) -> str:
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def reviews(n: int, start: int = 0) -> list[dict]:
    """`n` distinct texts labelled 0 / 1 in turn."""
    return [{"text": f"review number {i} is {'good' if i % 2 else 'bad'}", "label": i % 2} for i in range(start, n)]


# -- label columns that mix spellings ----------------------------------------------------------


def mixed_labels(tmp_path: Path, labels: list) -> str:
    rows = [{"text": f"text {i}", "label": label} for i, label in enumerate(labels)]
    return write_csv(tmp_path / "mixed.csv", rows * 4)


def test_a_label_column_mixing_numbers_and_words_is_refused_naming_rows(tmp_path: Path) -> None:
    """Before: `0, 1, 1.0, true, positive` became the five classes ['0', '1', '1.0', 'positive', 'true']."""
    path = mixed_labels(tmp_path, ["0", "1", "1.0", "true", "positive"])
    dm = TextClassificationDataModule(train_file=path)
    message = (
        r"mixed\.csv: the label column 'label' mixes numbers \('0' \(line 2\), '1' \(line 3\), '1\.0' \(line 4\)\) "
        r"with words \('true' \(line 5\), 'positive' \(line 6\)\).*give class_names"
    )
    with pytest.raises(DataError, match=message):
        dm.num_classes  # noqa: B018  (what the CLI reads first)


def test_a_number_spelt_two_ways_is_refused(tmp_path: Path) -> None:
    """Labels written as strings (JSON, Parquet, the Hub) keep their spelling: `1` and `1.0`, two classes."""
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate(["0", "1", "1.0", "0.0", "2"] * 3)]
    path = tmp_path / "spelt.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    message = (
        r"spelt\.jsonl: the label column 'label' writes one number several ways \('0' \(line 1\), '0\.0' \(line 4\); "
        r"1 more number\(s\) too\).*give class_names"
    )
    with pytest.raises(DataError, match=message):
        TextClassificationDataModule(train_file=str(path)).class_names  # noqa: B018


def test_class_names_say_which_spellings_are_classes(tmp_path: Path) -> None:
    """The way out the message names: the classes given, other spellings are unknown labels (skipped)."""
    path = mixed_labels(tmp_path, ["0", "1", "1.0", "true", "positive"] + ["0", "1"] * 10)
    dm = TextClassificationDataModule(train_file=path, class_names=["0", "1"], on_bad="skip")
    with pytest.warns(UserWarning, match="label not one of the 2 classes"):
        dm.setup("fit")
    assert dm.report.skipped("label not one of the 2 classes") == 12  # 1.0, true, positive: 4 times each
    assert dm.class_names == ["0", "1"]


def test_a_numeric_label_column_is_still_read_as_numbers(tmp_path: Path) -> None:
    rows = [{"text": f"text {i}", "label": [0, 1, 1.0][i % 3]} for i in range(30)]  # a float column: 0.0 / 1.0
    assert TextClassificationDataModule(train_file=write_csv(tmp_path / "floats.csv", rows)).class_names == ["0", "1"]


# -- texts the tokenizer leaves empty ------------------------------------------------------------


def test_a_text_of_nul_bytes_is_refused_as_an_empty_text(tmp_path: Path) -> None:
    """Before: it was kept as `[CLS] [SEP]`, though an empty text is refused."""
    rows = reviews(20)
    rows[3]["text"] = "\x00\x00\x00"
    rows[7]["text"] = "\u200b\u200b"  # zero-width spaces: the tokenizer drops them too
    path = write_csv(tmp_path / "nul.csv", rows)
    message = r"nul\.csv: line 5 \('\\x00\\x00\\x00': no token but the special ones once tokenised\): empty text"
    with pytest.raises(DataError, match=message):
        TextClassificationDataModule(train_file=path).setup("fit")
    dm = TextClassificationDataModule(train_file=path, on_bad="skip")
    with pytest.warns(UserWarning, match="empty text in column 'text'"):
        dm.setup("fit")
    assert dm.report.skipped("empty text in column 'text'") == 2
    served = np.concatenate([dm.dataset(split).rows for split in ("train", "val")])
    assert sorted(served.tolist()) == [i for i in range(20) if i not in (3, 7)]
    assert min(int(dm.dataset(split).lengths.min()) for split in ("train", "val")) > 2


def test_an_emptied_pair_or_window_text_is_refused_too(tmp_path: Path) -> None:
    rows = [{"a": f"premise {i}", "b": f"hypothesis {i}", "label": i % 2} for i in range(20)]
    rows[5]["b"] = "\x00"
    path = write_csv(tmp_path / "pairs.csv", rows)
    dm = TextClassificationDataModule(train_file=path, text_column="a", text_pair_column="b", on_bad="skip")
    with pytest.warns(UserWarning, match="empty text in column 'a' or 'b'"):
        dm.setup("fit")
    assert dm.report.skipped("empty text") == 1
    rows = reviews(20)
    rows[4]["text"] = "\x00 \x00"
    path = write_csv(tmp_path / "long.csv", rows)
    windows = TextClassificationDataModule(train_file=path, overflow="windows", max_length=8, stride=2)
    with pytest.raises(DataError, match=r"long\.csv: line 6 .*empty text in column 'text'"):
        windows.setup("fit")


# -- duplicates ----------------------------------------------------------------------------------


def with_copies(tmp_path: Path) -> str:
    """100 distinct reviews, then 51 copies of the first 51."""
    rows = reviews(100)
    return write_csv(tmp_path / "copies.csv", rows + rows[:51])


def test_copies_of_a_text_stay_on_one_side_of_the_carved_validation_and_are_counted(tmp_path: Path) -> None:
    """Before: copies were dealt like any row, straddling train and validation, and nothing said so."""
    dm = TextClassificationDataModule(train_file=with_copies(tmp_path), val_fraction=0.3)
    dm.setup("fit")
    train, val = dm.dataset("train"), dm.dataset("val")
    texts = [r % 100 for r in range(151)]  # row r holds the text of row r % 100
    assert not {texts[r] for r in train.rows} & {texts[r] for r in val.rows}
    assert len(train) + len(val) == 151 and abs(len(val) - 45) <= 6
    duplicates = dm.report.duplicates
    assert duplicates["train"].repeated + duplicates["val"].repeated == 51
    assert duplicates["val"].in_train == 0 and duplicates["train"].unit == "row"
    assert dm.report.to_dict()["val"]["duplicates"]["repeated"] == duplicates["val"].repeated
    assert f"duplicates in train: {duplicates['train'].repeated} row(s) repeat an earlier one" in str(dm.report)


def test_deduplicate_keeps_the_first_row_of_each_text(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(train_file=with_copies(tmp_path), val_fraction=0.3, deduplicate=True)
    dm.setup("fit")
    served = np.concatenate([dm.dataset("train").rows, dm.dataset("val").rows])
    assert sorted(served.tolist()) == list(range(100))
    assert dm.report.unused("deduplicate=True") == 51
    assert "51 row (copy of an earlier row's text, deduplicate=True)" in str(dm.report)
    assert all(d.repeated == 0 and d.in_train == 0 for d in dm.report.duplicates.values())


def test_a_validation_file_sharing_texts_with_train_is_counted_and_can_be_deduplicated(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "train.csv", reviews(60))
    val = write_csv(tmp_path / "val.csv", reviews(20) + reviews(80, 70) + reviews(2))  # 22 of train's texts
    dm = TextClassificationDataModule(train_file=train, val_file=val)
    dm.setup("fit")
    assert dm.report.duplicates["val"] == (2, 22, "row") and dm.report.duplicates["train"].repeated == 0
    assert "duplicates in val: 2 row(s) repeat an earlier one of val; 22 also in train" in str(dm.report)
    clean = TextClassificationDataModule(train_file=train, val_file=val, deduplicate=True)
    clean.setup("fit")
    assert sorted(clean.dataset("val").rows.tolist()) == list(range(20, 30))
    assert clean.report.unused("deduplicate=True") == 22
