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
    """``n`` distinct texts labelled 0 / 1 in turn."""
    return [{"text": f"review number {i} is {'good' if i % 2 else 'bad'}", "label": i % 2} for i in range(start, n)]


# -- label columns that mix spellings ----------------------------------------------------------


def mixed_labels(tmp_path: Path, labels: list) -> str:
    rows = [{"text": f"text {i}", "label": label} for i, label in enumerate(labels)]
    return write_csv(tmp_path / "mixed.csv", rows * 4)


def test_a_label_column_mixing_numbers_and_words_is_refused_naming_rows(tmp_path: Path) -> None:
    """Before: ``0, 1, 1.0, true, positive`` became the five classes ['0', '1', '1.0', 'positive', 'true']."""
    path = mixed_labels(tmp_path, ["0", "1", "1.0", "true", "positive"])
    dm = TextClassificationDataModule(train_file=path)
    message = (
        r"mixed\.csv: the label column 'label' mixes numbers \('0' \(row 0\), '1' \(row 1\), '1\.0' \(row 2\)\) "
        r"with words \('true' \(row 3\), 'positive' \(row 4\)\).*give class_names"
    )
    with pytest.raises(DataError, match=message):
        dm.num_classes  # noqa: B018  (what the CLI reads first)


def test_a_number_spelt_two_ways_is_refused(tmp_path: Path) -> None:
    """Labels written as strings (JSON, Parquet, the Hub) keep their spelling: ``1`` and ``1.0``, two classes."""
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate(["0", "1", "1.0", "0.0", "2"] * 3)]
    path = tmp_path / "spelt.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    message = (
        r"spelt\.jsonl: the label column 'label' writes one number several ways \('0' \(row 0\), '0\.0' \(row 3\); "
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
    """Before: it was kept as ``[CLS] [SEP]``, though an empty text is refused."""
    rows = reviews(20)
    rows[3]["text"] = "\x00\x00\x00"
    rows[7]["text"] = "\u200b\u200b"  # zero-width spaces: the tokenizer drops them too
    path = write_csv(tmp_path / "nul.csv", rows)
    message = r"nul\.csv: row 3 \('\\x00\\x00\\x00': no token but the special ones once tokenised\): empty text"
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
    with pytest.raises(DataError, match=r"long\.csv: row 4 .*empty text in column 'text'"):
        windows.setup("fit")
