"""Text tokenised once per node (issue 18): who tokenises, what the key covers, what the mapped tables
serve, how small a dataset pickles, the report replayed from the cache, bad caches, the linked class
count read from the label column alone, and a 2-process DDP fit that tokenises once."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from faults import flip_bytes, rewrite, with_value

import varlen.datasets.text.sources as sources_module
import varlen.datasets.text.store as store
from varlen.datamodules import TextClassificationDataModule
from varlen.datasets.text import TextColumns, encode_rows, load_tokenizer, read_table
from varlen.datasets.text.sources import TextSource
from varlen.datasets.text.tokens import tokenize_table
from varlen.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
WORDS = "the movie was good bad long short plot actor scene music dull bright zzzfoo".split()
COLUMNS = TextColumns("text", None, "label")


def corpus(n: int, seed: int = 0) -> list[dict]:
    """`n` rows, labels `neg` / `pos` alternating, every fifth text long (60 to 90 words)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        length = int(rng.integers(60, 90)) if i % 5 == 4 else int(rng.integers(3, 12))
        rows.append({"text": " ".join(rng.choice(WORDS, length)), "label": ["neg", "pos"][i % 2]})
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def make(cache: Path, **kwargs) -> TextClassificationDataModule:
    return TextClassificationDataModule(**{"batch_size": 8, "max_length": 32, "cache_dir": str(cache), **kwargs})


def cached(cache: Path) -> dict[Path, int]:
    """Every file in the text cache folder and its mtime."""
    folder = cache / "text"
    return {p: p.stat().st_mtime_ns for p in folder.iterdir()} if folder.is_dir() else {}


def token_tables(cache: Path) -> list[Path]:
    """The token tables (samples files) in the cache, not their bad-row tables nor the selections."""
    return sorted(p for p in (cache / "text").glob("*.arrow") if ".bad." not in p.name and not _selection(p))


def _selection(path: Path) -> bool:
    return re.search(r"-(train|val|test)-[0-9a-f]{24}\.arrow$", path.name) is not None


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)


@pytest.fixture
def builds(monkeypatch) -> dict[str, list]:
    """Every token-table build (the source's name) and every text encoded, in this process."""
    made: dict[str, list] = {"sources": [], "texts": []}
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


def refuse(*args, **kwargs):
    raise AssertionError("tokenised although the cache is valid")


def batches(dm: TextClassificationDataModule) -> dict[str, list[dict]]:
    """Every batch of every split, in plan order."""
    return {split: list(dm.loader(split)) for split in ("train", "val", "test")}


def same_batches(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> None:
    assert list(a) == list(b)
    for split in a:
        assert len(a[split]) == len(b[split]) > 0, split
        for x, y in zip(a[split], b[split], strict=True):
            assert x.keys() == y.keys()
            for key in x:
                assert torch.equal(x[key], y[key]), (split, key)


# -- built once ---------------------------------------------------------------------------------


def test_prepare_data_tokenises_once_and_setup_only_maps(tmp_path: Path, builds) -> None:
    rows = corpus(40)
    path = write_csv(tmp_path / "reviews.csv", rows)
    first = make(tmp_path / "cache", train_file=str(path))
    first.prepare_data()
    assert builds["sources"] == [str(path)] and len(builds["texts"]) == 40
    files = cached(tmp_path / "cache")
    assert len(token_tables(tmp_path / "cache")) == 1
    assert len(files) == 4  # the samples, the bad rows, the train and the carved val selections
    first.setup("fit")
    assert len(builds["texts"]) == 40 and cached(tmp_path / "cache") == files
    again = make(tmp_path / "cache", train_file=str(path))  # another rank, another run: the same inputs
    again.prepare_data()
    again.setup("fit")
    assert builds["sources"] == [str(path)] and len(builds["texts"]) == 40
    assert cached(tmp_path / "cache") == files  # nothing written again
    expected = batches(first)
    same_batches(expected, batches(again))
    alone = make(tmp_path / "other", train_file=str(path))  # setup without prepare_data builds it itself, once
    alone.setup("fit")
    assert len(builds["sources"]) == 2 and len(builds["texts"]) == 80
    same_batches(expected, batches(alone))
    assert not alone.dataset("train").ids.values.flags.writeable  # a view of the mapped file


def test_a_fresh_process_maps_the_cache_and_tokenises_nothing(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "reviews.csv", corpus(40))
    args = {"train_file": str(path), "batch_size": 8, "max_length": 32, "cache_dir": str(tmp_path / "cache")}
    dm = TextClassificationDataModule(**args)
    dm.prepare_data()
    dm.setup("fit")
    files = cached(tmp_path / "cache")
    script = """
import json, sys
import varlen.datasets.text.store as store
def refuse(*args, **kwargs):
    raise AssertionError("tokenised again")
store.build_tokens = store.encode_texts = refuse
from varlen.datamodules import TextClassificationDataModule
dm = TextClassificationDataModule(**json.loads(sys.argv[1]))
dm.prepare_data()
dm.setup("fit")
print(json.dumps({split: [b["input_ids"].tolist() for b in dm.loader(split)] for split in ("train", "val")}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {split: [b["input_ids"].tolist() for b in dm.loader(split)] for split in ("train", "val")}
    assert cached(tmp_path / "cache") == files  # no file added or rewritten


def test_the_key_covers_the_content_the_tokenizer_and_the_settings(tmp_path: Path, tokenizer, builds) -> None:
    rows = corpus(30)
    rows[0]["text"] = "zzzfoo was good"  # an added token changes its ids
    path = write_csv(tmp_path / "reviews.csv", rows)
    cache = tmp_path / "cache"

    def setup(**extra) -> TextClassificationDataModule:
        dm = make(cache, train_file=str(path), **extra)
        dm.prepare_data()
        dm.setup("fit")
        return dm

    def ids_of_row(dm: TextClassificationDataModule, row: int) -> list[int]:
        for split in ("train", "val"):
            dataset = dm.dataset(split)
            hits = np.flatnonzero(dataset.rows == row)
            if len(hits):
                return [int(t) for i in hits for t in dataset[int(i)]["input_ids"]]
        raise AssertionError(row)

    def label_of_row(dm: TextClassificationDataModule) -> dict[int, int]:
        served = [dm.dataset(split) for split in ("train", "val")]
        rows_, labels_ = (np.concatenate([getattr(d, name) for d in served]) for name in ("rows", "labels"))
        return dict(zip(rows_.tolist(), labels_.tolist(), strict=True))

    first = setup()
    assert len(builds["sources"]) == 1
    setup(batch_size=4, seed=3, val_fraction=0.3, on_bad="skip", shuffle=False)
    assert len(builds["sources"]) == 1  # the split, the batches and the policy: not the stored tokens
    subset = setup(max_train_samples=10)  # the subset is drawn before tokenising: its settings are in the key
    setup(max_train_samples=10, seed=1)
    assert len(builds["sources"]) == 3 and len(subset.dataset("train")) == 10
    short = setup(max_length=16)
    assert ids_of_row(short, 4) == tokenizer(rows[4]["text"], truncation=True, max_length=16)["input_ids"]
    setup(overflow="windows", stride=8)
    setup(overflow="windows", stride=4)
    reversed_classes = setup(class_names=["pos", "neg"])
    assert len(builds["sources"]) == 7 and len(token_tables(cache)) == 7
    labels = [label_of_row(dm) for dm in (first, reversed_classes)]
    assert labels[0].keys() == labels[1].keys() and all(labels[1][row] == 1 - k for row, k in labels[0].items())

    def with_tokenizer(changed, **extra) -> TextClassificationDataModule:
        dm = make(cache, train_file=str(path), **extra)
        dm.tokenizer = changed
        dm.setup("fit")
        return dm

    # the tokenizer's vocabulary: one token added
    added = load_tokenizer(None)
    added.add_tokens(["zzzfoo"])
    grown = with_tokenizer(added)
    assert len(builds["sources"]) == 8
    assert ids_of_row(grown, 0) == added(rows[0]["text"])["input_ids"] != ids_of_row(first, 0)

    # the side the tokenizer truncates (a setting of the tokenizer, not of its vocabulary)
    left = load_tokenizer(None)
    left.truncation_side = "left"
    cut_left = with_tokenizer(left, max_length=16)
    assert len(builds["sources"]) == 9
    expected = left(rows[4]["text"], truncation=True, max_length=16)["input_ids"]
    assert ids_of_row(cut_left, 4) == expected != ids_of_row(short, 4)

    # the tokenizer's name: the same files elsewhere
    copy = tmp_path / "tokenizer"
    tokenizer.save_pretrained(copy)
    setup(tokenizer_name_or_path=str(copy))
    assert len(builds["sources"]) == 10

    # the file's content (same name)
    rows[3]["text"] = "an edited review of the plot"
    write_csv(path, rows)
    edited = setup()
    assert len(builds["sources"]) == 11 and len(token_tables(cache)) == 11
    assert ids_of_row(edited, 3) == tokenizer(rows[3]["text"])["input_ids"] != ids_of_row(first, 3)


# -- what the mapped tables serve ----------------------------------------------------------------


def in_memory(dm: TextClassificationDataModule, path: Path, split: str, tokenizer):
    """`split` tokenised in memory from the file (the path before issue 18): the texts of the split's
    rows, in the split's order, through `tokenize_table`."""
    served = dm.dataset(split)
    table, labels = encode_rows(read_table(path, COLUMNS), dm.class_names, COLUMNS)
    first = np.sort(np.unique(served.rows, return_index=True)[1])  # each row once, in the split's order
    position = {int(r): i for i, r in enumerate(table.rows)}
    picks = [position[int(r)] for r in served.rows[first]]
    dataset, _ = tokenize_table(
        table.select(picks),
        labels[picks],
        tokenizer,
        dm.max_length,
        False,
        dm.pad_to_multiple_of,
        dm.overflow,
        dm.stride,
    )
    return dataset


@pytest.mark.parametrize("overflow", ["truncate", "windows"])
def test_the_mapped_tables_serve_the_in_memory_batches(tmp_path: Path, tokenizer, overflow: str) -> None:
    rows = corpus(40)
    path = write_csv(tmp_path / "reviews.csv", rows)
    settings = {"overflow": overflow, "stride": 8, "pad_to_multiple_of": 8}
    dm = make(tmp_path / "cache", train_file=str(path), **settings)
    dm.prepare_data()
    dm.setup("fit")
    for split in ("train", "val"):
        served, memory = dm.dataset(split), in_memory(dm, path, split, tokenizer)
        assert len(served) == len(memory) > 0
        np.testing.assert_array_equal(served.lengths, memory.lengths)
        np.testing.assert_array_equal(served.labels, memory.labels)
        np.testing.assert_array_equal(served.rows, memory.rows)
        if overflow == "windows":
            np.testing.assert_array_equal(served.documents, memory.documents)
            assert served.num_documents == len(np.unique(served.rows)) <= len(served)
        else:
            assert served.documents is None and served.lengths.max() <= 32
        for i in range(len(served)):
            assert served[i].keys() == memory[i].keys()
            for key, value in memory[i].items():
                np.testing.assert_array_equal(served[i][key], value, err_msg=f"{split} {i} {key}")
        loaded = 0
        for batch in dm.loader(split, shuffle=split == "train"):
            expected = dm.collate_fn(memory.__getitems__(batch["index"].tolist()))
            assert batch.keys() == expected.keys()
            for key in batch:
                assert torch.equal(batch[key], expected[key]), (split, key)
            loaded += len(batch["index"])
        assert loaded == len(served)
    train = dm.dataset("train")
    if overflow == "windows":
        assert train.num_documents < len(train)  # the long texts became several windows
    else:
        assert train.lengths.max() == 32  # the long texts were cut

    # a few rows against the tokenizer itself: two long ones and a short one
    in_train = np.unique(train.rows).tolist()
    picked = [r for r in in_train if r % 5 == 4][:2] + [r for r in in_train if r % 5 != 4][:1]
    assert len(picked) == 3
    for row in picked:
        text, label = rows[row]["text"], dm.class_names.index(rows[row]["label"])
        hits = np.flatnonzero(train.rows == row)
        if overflow == "truncate":
            expected = [tokenizer(text, truncation=True, max_length=32)["input_ids"]]
        else:
            encoded = tokenizer(text, truncation=True, max_length=32, stride=8, return_overflowing_tokens=True)
            expected = encoded["input_ids"]
            assert len({int(train.documents[i]) for i in hits}) == 1
        assert [train[int(i)]["input_ids"].tolist() for i in hits] == expected
        assert [int(train.lengths[i]) for i in hits] == [len(e) for e in expected]
        assert {int(train.labels[i]) for i in hits} == {label}


def test_a_dataset_pickles_small_whatever_the_corpus_size_and_serves_the_same(tmp_path: Path) -> None:
    payloads = {}
    for n in (500, 5000):
        dm = TextClassificationDataModule(
            synthetic_samples=n, max_train_samples=n // 2, batch_size=16, cache_dir=str(tmp_path / f"c{n}")
        )
        dm.prepare_data()
        dm.setup("fit")
        for split in ("train", "val"):  # train: a selection of its source; val: all of its own
            dataset = dm.dataset(split)
            payload = pickle.dumps(dataset)
            payloads[n, split] = len(payload)
            copy = pickle.loads(payload)
            assert not copy.ids.values.flags.writeable and not copy.labels.flags.writeable  # mapped again
            np.testing.assert_array_equal(copy.lengths, dataset.lengths)
            np.testing.assert_array_equal(copy.rows, dataset.rows)
            picks = [0, len(dataset) - 1, len(dataset) // 2, 7]
            got = vars(copy.__getitems__(picks))
            for name, value in vars(dataset.__getitems__(picks)).items():
                assert (got[name] is None) if value is None else torch.equal(got[name], value), name
            for i in picks:
                for key, value in dataset[i].items():
                    np.testing.assert_array_equal(copy[i][key], value)
        assert dm.dataset("train").ids.values.nbytes > 20 * payloads[n, "train"] or n == 500
    for split in ("train", "val"):
        assert payloads[5000, split] < 4000 and abs(payloads[5000, split] - payloads[500, split]) < 100, payloads


# -- the report, replayed ------------------------------------------------------------------------


def bad_files(tmp_path: Path) -> tuple[Path, Path]:
    rows = corpus(30)
    rows[3]["text"] = ""  # an empty text
    rows[6]["label"] = "meh"  # a class the training set names (it becomes one) ...
    val = corpus(10, seed=1)
    val[2]["label"] = "neutral"  # ... and one it does not
    val[5]["label"] = None
    return write_csv(tmp_path / "train.csv", rows), write_csv(tmp_path / "val.csv", val)


@pytest.mark.parametrize("overflow", ["truncate", "windows"])
def test_the_report_is_the_same_whether_the_cache_was_built_or_mapped(tmp_path: Path, builds, overflow) -> None:
    train, val = bad_files(tmp_path)
    args = {"train_file": str(train), "val_file": str(val), "on_bad": "skip", "overflow": overflow, "stride": 8}
    reports = []
    for _ in range(2):
        dm = make(tmp_path / "cache", **args)
        with pytest.warns(UserWarning, match=r"skipped 3 bad item\(s\) .*train\.csv: line 5: empty text"):
            dm.prepare_data()
            dm.setup("fit")
        reports.append((dm.report.to_dict(), str(dm.report)))
    assert builds["sources"] == [str(train), str(val)]  # the second DataModule only mapped
    assert reports[0] == reports[1]
    report = reports[1][0]
    assert report["train"]["skipped"] == {"row: empty text in column 'text'": 1}
    assert report["val"]["skipped"] == {
        "row: label not one of the 3 classes ['meh', 'neg', 'pos']": 1,
        "row: no label (empty cell)": 1,
    }
    long_train = sum(1 for i in range(30) if i % 5 == 4 and i != 3)
    if overflow == "truncate":
        assert report["train"]["truncated"] == {"text": long_train} and report["val"]["truncated"] == {"text": 2}
        assert report["train"]["kept"] == 29
    else:
        assert report["train"]["truncated"] == {} and report["train"]["documents"] == 29
        assert report["train"]["windows"] == report["train"]["kept"] > 29
    strict = make(tmp_path / "cache", **{**args, "on_bad": "raise"})
    with pytest.raises(DataError, match=r"train\.csv: line 5: empty text in column 'text'"):
        strict.setup("fit")
    assert len(builds["sources"]) == 2  # judged from the cache, under this DataModule's on_bad


# -- bad caches ----------------------------------------------------------------------------------


def cut_short(path: Path, size: int | None = None) -> None:
    """A new, shorter file at `path` (a live DataModule's mapping of the old one stays valid)."""
    content = path.read_bytes()
    path.unlink()
    path.write_bytes(content[: size if size is not None else len(content) // 2])


def built(tmp_path: Path) -> tuple[Path, Path, list, Path]:
    """A 40-review file tokenised into a fresh cache: the file, the cache, its batches and its token table."""
    path = write_csv(tmp_path / "reviews.csv", corpus(40))
    cache = tmp_path / "cache"
    dm = make(cache, train_file=str(path))
    dm.prepare_data()
    dm.setup("fit")
    (samples,) = token_tables(cache)
    return path, cache, batches(dm), samples


def test_a_cut_short_or_foreign_table_is_rebuilt_with_a_warning(tmp_path: Path, builds) -> None:
    path, cache, expected, samples = built(tmp_path)
    cut_short(samples)
    again = make(cache, train_file=str(path))
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(samples))} is unreadable .*building it again"):
        again.prepare_data()
    assert len(builds["sources"]) == 2
    again.setup("fit")
    same_batches(expected, batches(again))

    (bad,) = (cache / "text").glob("*.bad.arrow")
    cut_short(bad, 40)
    third = make(cache, train_file=str(path))
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(bad))} is unreadable"):
        third.setup("fit")
    assert len(builds["sources"]) == 3  # the two tables are written together
    same_batches(expected, batches(third))

    (selection,) = (p for p in (cache / "text").iterdir() if re.search(r"-val-[0-9a-f]{24}\.arrow$", p.name))
    cut_short(selection)
    fourth = make(cache, train_file=str(path))
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(selection))} is unreadable"):
        fourth.setup("fit")
    assert len(builds["sources"]) == 3  # a selection is made again from the mapped tokens, nothing tokenised
    same_batches(expected, batches(fourth))

    other = make(tmp_path / "other", train_file=str(path), max_length=16)
    other.setup("fit")
    shutil.copyfile(token_tables(tmp_path / "other")[0], samples)  # a valid table of other inputs, under this key
    fifth = make(cache, train_file=str(path))
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(samples))} is built from other inputs"):
        fifth.setup("fit")
    assert len(builds["sources"]) == 5
    same_batches(expected, batches(fifth))


def test_flipped_bytes_in_a_token_table_are_found_and_it_is_rebuilt(tmp_path: Path, builds) -> None:
    """Sixteen bytes flipped in the middle of a built table were served as token ids (-1013, -1999...):
    its data no longer match the checksum recorded when it was built, so it is rebuilt with a warning."""
    path, cache, expected, samples = built(tmp_path)
    flip_bytes(samples)
    again = make(cache, train_file=str(path))
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(samples))} is corrupt: .*building it again"):
        again.prepare_data()
    assert len(builds["sources"]) == 2
    again.setup("fit")
    same_batches(expected, batches(again))


def test_a_table_holding_ids_outside_the_vocabulary_is_rebuilt(tmp_path: Path, builds, tokenizer) -> None:
    """An id outside the tokenizer's vocabulary fails an embedding (a device-side assert on a GPU): a table
    holding one (its checksum valid: a build's bug) is rebuilt with a warning."""
    path, cache, expected, samples = built(tmp_path)
    rewrite(samples, input_ids=lambda ids: with_value(ids, 100, len(tokenizer) + 7))  # a valid checksum
    again = make(cache, train_file=str(path))
    outside = rf"token id {len(tokenizer) + 7} in row \d+, outside the tokenizer's {len(tokenizer):,} ids"
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(samples))} is holding {outside}; building it"):
        again.prepare_data()
    again.setup("fit")
    same_batches(expected, batches(again))


def test_a_tokenizer_giving_an_id_outside_its_vocabulary_is_a_data_error(
    tmp_path: Path, tokenizer, monkeypatch
) -> None:
    path = write_csv(tmp_path / "reviews.csv", corpus(40))
    encode = store.encode_texts

    def off_by_one(tokenizer, texts, *args, **kwargs):  # a tokenizer whose last id is past its vocabulary
        encoded = encode(tokenizer, texts, *args, **kwargs)
        encoded.fields["input_ids"][3] = [*encoded.fields["input_ids"][3][:-1], len(tokenizer)]
        return encoded

    monkeypatch.setattr(store, "encode_texts", off_by_one)
    name = re.escape(str(path))
    with pytest.raises(DataError, match=rf"{name}, line 5: the tokenizer gave token id {len(tokenizer)}, outside"):
        make(tmp_path / "cache", train_file=str(path)).prepare_data()
    assert list((tmp_path / "cache" / "text").iterdir()) == []  # no table, no scratch


def test_a_cache_dir_that_cannot_be_written_is_a_data_error_naming_it(tmp_path: Path, builds) -> None:
    path = write_csv(tmp_path / "reviews.csv", corpus(20))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    folder = re.escape(str(blocker / "text"))
    with pytest.raises(DataError, match=rf"cannot write in {folder} .*cache_dir="):
        make(blocker, train_file=str(path)).prepare_data()
    with pytest.raises(DataError, match=rf"cannot write in {folder}"):
        make(blocker, train_file=str(path)).setup("fit")
    assert builds["texts"] == []  # refused before anything was tokenised


# -- the linked class count ------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_num_classes_reads_the_label_column_alone(tmp_path: Path, monkeypatch, suffix: str) -> None:
    import pandas as pd

    rows = [
        {"text": f"review {i}", "gold": ["b", "a", "c"][i % 3], "split": ["train", "dev"][i % 4 == 0]}
        for i in range(24)
    ]
    rows[0]["gold"] = "only-in-validation"  # a validation row: not a training class
    path = tmp_path / f"reviews{suffix}"
    frame = pd.DataFrame(rows)
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    reads: list[list[str]] = []
    read_columns = sources_module.read_columns

    def spy(*args, include=None, **kwargs):
        reads.append(list(include))
        return read_columns(*args, include=include, **kwargs)

    monkeypatch.setattr(sources_module, "read_columns", spy)
    monkeypatch.setattr(store, "build_tokens", refuse)
    monkeypatch.setattr(store, "encode_texts", refuse)
    monkeypatch.setattr(TextSource, "slices", refuse)
    dm = make(tmp_path / "cache", train_file=str(path), label_column="gold")
    assert dm.num_classes == 4 and dm.class_names == ["a", "b", "c", "only-in-validation"]
    assert reads == [["gold"]]
    marked = make(tmp_path / "cache", train_file=str(path), label_column="gold", split_column="split")
    assert marked.num_classes == 3 and marked.class_names == ["a", "b", "c"]
    assert sorted(reads[1:]) == [["gold"], ["split"]]

    from varlen.cli.dispatch import main  # what LightningCLI links: the model gets it, nothing is tokenised

    cli = main(
        [
            "--config",
            str(ROOT / "configs" / "text_bert.yaml"),
            f"--data.init_args.train_file={path}",
            "--data.init_args.label_column=gold",
            "--data.init_args.split_column=split",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--model.init_args.pretrained=false",
            f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false",
        ],
        run=False,
    )
    assert cli.model.hparams.num_classes == 3
    assert not (tmp_path / "cache" / "text").exists()  # nothing was tokenised


# -- DDP -----------------------------------------------------------------------------------------


def test_a_parquet_source_is_read_a_batch_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """A Parquet file is tokenised from record batches (memory holds one batch of text, whatever the
    file), never read whole; the rows come in order, each once, and the ids equal a CSV's."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = corpus(45)
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows)), path, row_group_size=20)
    source = sources_module.file_sources({"train": str(path)}, COLUMNS)["train"]

    def whole(*args, include=None, **kwargs):
        if include and "text" in include:
            raise AssertionError("the text column of a Parquet file was read whole")
        return read_columns(*args, include=include, **kwargs)

    read_columns = sources_module.read_columns
    monkeypatch.setattr(sources_module, "read_columns", whole)
    slices = list(source.slices(8))
    assert max(len(s.texts) for s in slices) <= 8
    assert [s.start for s in slices] == list(np.cumsum([0] + [len(s.texts) for s in slices[:-1]]))
    assert [t for s in slices for t in s.texts] == [r["text"] for r in rows]
    from_parquet = make(tmp_path / "a", train_file=str(path), val_file=str(path))
    from_csv = make(tmp_path / "b", train_file=str(write_csv(tmp_path / "t.csv", rows)), val_file=str(path))
    for dm in (from_parquet, from_csv):
        dm.prepare_data()
        dm.setup("fit")
    for i in range(len(rows)):
        np.testing.assert_array_equal(
            from_parquet.dataset("train")[i]["input_ids"], from_csv.dataset("train")[i]["input_ids"]
        )
