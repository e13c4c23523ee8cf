"""Text classification: the contract, the real tokenizer and model, sources, splits and bad input."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import varlen.testing.runs
from varlen.batching.padding import pad_flat
from varlen.batching.ragged import Ragged
from varlen.datamodules import TextClassificationDataModule
from varlen.datasets.text import TextCollator, TextColumns, TextTable, encode_rows, read_table
from varlen.datasets.text.dataset import pad_texts
from varlen.datasets.text.labels import class_list
from varlen.errors import DataError, DatasetNotFoundError
from varlen.models import TextClassifier
from varlen.prepare.report import DataReport
from varlen.testing import BadInput, DataModuleContract

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "text"
TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}


def tiny_model(num_classes: int = 2) -> TextClassifier:
    return TextClassifier(num_classes=num_classes, pretrained=False, config_overrides=TINY_BERT)


class TestTextContract(DataModuleContract):
    config = str(ROOT / "configs" / "text_bert.yaml")
    cli_overrides = (
        "--data.init_args.synthetic_samples=64",
        "--model.init_args.pretrained=false",
        f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
    )

    def make_datamodule(self, **overrides):
        return TextClassificationDataModule(**{"synthetic_samples": 200, "batch_size": 16, **overrides})

    def make_model(self, datamodule):
        return tiny_model(datamodule.num_classes)

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        return [
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",  # empty: prepare_data tokenises, once
            "--data.init_args.synthetic_samples=90",
            "--data.init_args.batch_size=null",
            "--data.init_args.max_tokens=400",
            "--model.init_args.pretrained=false",
            f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
        ]

    def test_ddp_fit_covers_all_and_metrics_equal_one_process(self, tmp_path: Path, monkeypatch) -> None:
        """The contract's 2-process fit, from an empty cache, tokenises each source once between the
        two ranks: each build logs one `tokenised <source>` line (the `varlen` logger, printed on
        stderr by every rank), and the cache holds one token table and one bad-rows table per source."""
        outputs = []
        run_cli = varlen.testing.runs.run_cli

        def captured(*args, **kwargs):
            result = run_cli(*args, **kwargs)
            outputs.append(result.stdout + result.stderr)
            return result

        monkeypatch.setattr(varlen.testing.runs, "run_cli", captured)
        super().test_ddp_fit_covers_all_and_metrics_equal_one_process(tmp_path)
        (output,) = outputs
        built = re.findall(r"^tokenised (synthetic \w+): ", output, flags=re.MULTILINE)
        assert sorted(built) == ["synthetic test", "synthetic train", "synthetic val"], output[-3000:]
        names = sorted(p.name for p in (tmp_path / "cache" / "text").iterdir())
        assert len(names) == 6 and all(n.endswith(".arrow") for n in names)  # no scratch file left

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        if case == "missing_source":
            return BadInput({"train_file": str(tmp_path / "nowhere.csv")}, r"train_file.*nowhere\.csv")
        if case == "unreadable_file":
            return BadInput({"train_file": str(DATA / "latin1.csv")}, r"latin1\.csv, line 3: bytes that are not UTF-8")
        if case == "empty_source":
            return BadInput({"train_file": str(DATA / "empty.csv")}, r"empty\.csv: the file is empty")
        if case == "non_finite":  # a numeric label column holding "inf": a bad label, its row left out
            return BadInput(
                {"train_file": str(DATA / "inf_label.csv")},
                r"inf_label\.csv: line 10 \(label inf\): label is not a finite number",
                "not a finite number",
            )
        if case == "empty_sample":
            return BadInput(
                {"train_file": str(DATA / "empty_text.csv")},
                r"empty_text\.csv: line 5: empty text in column 'text'",
                "empty text",
            )
        if case == "unknown_label":
            return BadInput(
                {"train_file": str(DATA / "reviews.csv"), "val_file": str(DATA / "val_unknown_label.csv")},
                r"val_unknown_label\.csv: line 4 \(label 'neutral'\): label not one of the 2 classes",
                "not one of the",
            )
        raise AssertionError(case)


# -- model and collate ---------------------------------------------------------------------------


def test_pretrained_minilm_is_padding_invariant() -> None:
    dm = TextClassificationDataModule(synthetic_samples=40, batch_size=8)
    dm.setup("fit")
    model = TextClassifier(num_classes=2).eval()
    dataset = dm.dataset("val")
    order = np.argsort(dataset.lengths)
    samples = [dataset[int(i)] for i in (order[0], order[-1], order[len(order) // 2])]
    batch = dm.collate_fn(samples)
    assert batch["attention_mask"][0].sum() < batch["attention_mask"].shape[1]  # really padded
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model(dm.collate_fn([s])) for s in samples])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


def test_collate_pads_with_the_tokenizer_pad_id() -> None:
    samples = [
        {"index": 0, "input_ids": np.array([101, 5, 6, 102]), "label": 1},
        {"index": 1, "input_ids": np.array([101, 102]), "label": 0},
    ]
    batch = TextCollator(pad_token_id=7, with_token_type_ids=True, pad_to_multiple_of=8)(samples)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["input_ids"][1].tolist() == [101, 102] + [7] * 6
    assert batch["attention_mask"].tolist() == [[1] * 4 + [0] * 4, [1] * 2 + [0] * 6]
    assert batch["token_type_ids"].eq(0).all()
    assert batch["labels"].tolist() == [1, 0] and batch["index"].tolist() == [0, 1]


def test_batched_fetch_collates_like_single_samples() -> None:
    dm = TextClassificationDataModule(synthetic_samples=30, batch_size=8)
    dm.setup("fit")
    train = dm.dataset("train")
    picks = [4, 0, 17, 9]
    fetched = dm.collate_fn(train.__getitems__(picks))
    single = dm.collate_fn([train[i] for i in picks])
    assert fetched.keys() == single.keys()
    for key in fetched:
        assert torch.equal(fetched[key], single[key]), key


def todays_batch(dataset, picks: list[int], pad_id: int, multiple: int | None) -> dict[str, torch.Tensor]:
    """The batch as the collate built it before the ragged gather: ids joined, one masked scatter."""
    samples = [dataset[i] for i in picks]
    lengths = np.array([len(s["input_ids"]) for s in samples])
    ids = pad_flat(np.concatenate([s["input_ids"] for s in samples]), lengths, pad_id, multiple, dtype=torch.long)
    types = np.concatenate([s["token_type_ids"] for s in samples])
    return {
        "index": torch.tensor(picks),
        "input_ids": ids.values,
        "attention_mask": ids.mask.long(),
        "labels": torch.tensor([s["label"] for s in samples]),
        "token_type_ids": pad_flat(types, lengths, 0, multiple, dtype=torch.long).values,
    }


@pytest.mark.parametrize("multiple", [None, 8])
def test_gathered_batches_equal_todays(tmp_path: Path, multiple: int | None) -> None:
    """Pairs, a pad id that is not 0, `pad_to_multiple_of`: the same keys, dtypes and values as before,
    from the batched fetch, from `dataset[i]` dicts and from the loader."""
    rows = [{"a": "word " * (1 + i % 9), "b": "other " * (1 + i % 4), "label": i % 2} for i in range(40)]
    dm = TextClassificationDataModule(
        train_file=str(write_csv(tmp_path / "pairs.csv", rows)),
        text_column="a",
        text_pair_column="b",
        batch_size=8,
        pad_to_multiple_of=multiple,
        max_shapes=None,  # each batch padded to its own longest, as before the shape policy
    )
    dm.tokenizer.pad_token = "[MASK]"
    dm.setup("fit")
    train, pad_id = dm.dataset("train"), dm.tokenizer.pad_token_id
    picks = [5, 0, 17, 30, 9]
    expected = todays_batch(train, picks, pad_id, multiple)
    loader_batch = next(iter(dm.train_dataloader()))
    for batch in (DataModuleContract.collate(dm, "train", picks), dm.collate_fn([train[i] for i in picks])):
        assert batch.keys() == expected.keys()
        for key, value in expected.items():
            assert batch[key].dtype == value.dtype and torch.equal(batch[key], value), key
    again = todays_batch(train, loader_batch["index"].tolist(), pad_id, multiple)
    assert all(torch.equal(loader_batch[key], value) for key, value in again.items())


@pytest.mark.parametrize("multiple", [None, 8])
def test_pad_texts_equals_the_core_gather(multiple: int | None) -> None:
    """The text fast path gives what `Ragged.pad` gives (empty rows and the last row included)."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 1000, int(n)).astype(np.int32) for n in rng.integers(0, 20, 30)]
    arrays[-1] = np.arange(7, dtype=np.int32)  # the last row: its tail reads past the end of the values
    ids = Ragged.from_arrays(arrays)
    types = Ragged.from_arrays([(a % 2).astype(np.int8) for a in arrays])
    labels = rng.integers(0, 3, 30)
    for picks in ([29, 0, 3], [int(np.argmin([len(a) for a in arrays]))], list(range(30))):
        core = ids.pad(picks, 5, multiple, torch.long)
        texts = pad_texts(ids, types, labels, picks, 5, multiple)
        assert torch.equal(texts.ids, core.values) and torch.equal(texts.mask, core.mask)
        assert torch.equal(texts.type_ids, types.pad(picks, 0, multiple, torch.long).values)
        assert texts.labels.tolist() == labels[picks].tolist() and texts.index.tolist() == picks


def test_datamodule_uses_the_tokenizer_pad_token() -> None:
    dm = TextClassificationDataModule(synthetic_samples=50, batch_size=50)
    dm.tokenizer.pad_token = "[MASK]"
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    pad_id = dm.tokenizer.pad_token_id
    assert pad_id not in (0, None)
    assert (batch["input_ids"][batch["attention_mask"] == 0] == pad_id).all()
    assert (batch["attention_mask"] == 0).any()


# -- sources and formats -------------------------------------------------------------------------


def write_csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", ["reviews.csv", "reviews.tsv", "reviews.jsonl", "reviews.json", "reviews.parquet"])
def test_every_format_reads_the_same_rows(name: str) -> None:
    column = "sentence" if name.endswith(".tsv") else "text"
    table = read_table(DATA / name, TextColumns(column, None, "label"))
    reference = read_table(DATA / "reviews.jsonl", TextColumns("text", None, "label"))
    assert table.labels == reference.labels and len(table) == 24
    # TSV (GLUE layout) has no quoting, so its one multi-line review was written on one line
    assert [t.replace("\n", " ") for t in table.texts] == [t.replace("\n", " ") for t in reference.texts]
    assert table.texts[5].startswith('a "quoted", two-line')


def test_pairs_string_labels_and_carved_validation(tmp_path: Path) -> None:
    rows = [
        {"premise": f"a man plays guitar number {i}", "hypothesis": "someone makes music", "gold": ["yes", "no"][i % 2]}
        for i in range(40)
    ]
    path = write_csv(tmp_path / "pairs.csv", rows)
    dm = TextClassificationDataModule(
        train_file=str(path),
        text_column="premise",
        text_pair_column="hypothesis",
        label_column="gold",
        val_fraction=0.25,
        batch_size=8,
    )
    assert dm.class_names == ["no", "yes"] and dm.num_classes == 2
    dm.setup("fit")
    train, val = dm.dataset("train"), dm.dataset("val")
    assert len(train) == 30 and len(val) == 10
    assert set(train.rows).isdisjoint(val.rows)
    assert np.bincount(val.labels).tolist() == [5, 5]  # stratified
    batch = next(iter(dm.train_dataloader()))
    assert (batch["token_type_ids"] == 1).any()  # the second segment
    assert (batch["token_type_ids"][batch["attention_mask"] == 0] == 0).all()


def test_validation_split_is_seeded_stratified_and_disjoint(tmp_path: Path) -> None:
    """docs/scenarios/text.md's claim: the held-out validation split depends on the seed, and only on it."""
    rows = [{"text": f"review number {i}", "label": ["a", "b", "c"][i % 3]} for i in range(90)]
    path = str(write_csv(tmp_path / "three.csv", rows))

    def split(seed: int) -> tuple[set, set]:
        dm = TextClassificationDataModule(train_file=path, val_fraction=0.2, seed=seed)
        dm.setup("fit")
        train, val = dm.dataset("train"), dm.dataset("val")
        for dataset in (train, val):
            assert set(dataset.labels.tolist()) == {0, 1, 2}  # every class on both sides
            assert [rows[r]["label"] for r in dataset.rows] == [dm.class_names[k] for k in dataset.labels]
        return set(train.rows.tolist()), set(val.rows.tolist())

    train, val = split(0)
    assert not train & val and train | val == set(range(90)) and len(val) == 18
    assert split(0) == (train, val)
    assert split(1)[1] != val


def test_max_train_samples_keeps_that_many_stratified_and_seeded(tmp_path: Path) -> None:
    rows = [{"text": f"text {i}", "label": int(i % 7 == 0)} for i in range(301)]
    path = str(write_csv(tmp_path / "skewed.csv", rows))
    dm = TextClassificationDataModule(train_file=path, val_fraction=0.1, max_train_samples=101, seed=3)
    dm.setup("fit")
    train, val = dm.dataset("train"), dm.dataset("val")
    assert abs(len(train) - 101) <= 1 and set(train.rows).isdisjoint(val.rows)
    assert abs(np.mean(train.labels) - 43 / 301) < 0.02  # the class mix of the file
    for seed, same in ((3, True), (4, False)):
        again = TextClassificationDataModule(train_file=path, val_fraction=0.1, max_train_samples=101, seed=seed)
        again.setup("fit")
        assert (again.dataset("train").rows.tolist() == train.rows.tolist()) is same


def test_truncation_is_counted_in_the_report(tmp_path: Path) -> None:
    rows = [{"text": "word " * n, "label": n % 2} for n in (3, 50, 200, 400)]
    dm = TextClassificationDataModule(
        train_file=str(write_csv(tmp_path / "t.csv", rows)),
        val_file=str(write_csv(tmp_path / "v.csv", rows)),
        max_length=64,
    )
    dm.setup("fit")
    assert dm.report.split("train").truncated == {"text": 2}
    assert dm.report.split("val").truncated == {"text": 2}
    assert dm.report.num_skipped == 0
    assert dm.dataset("train").lengths.max() == 64
    assert sorted(dm.dataset("train").lengths.tolist())[:2] == [5, 52]  # [CLS] + words + [SEP], untouched


# -- bad input beyond the contract's matrix ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("header_only.csv", {}, r"header_only\.csv: the file has a header \['text', 'label'\] but no rows"),
        ("ragged.csv", {}, r"ragged\.csv: line 3 has 3 fields, the header 2: 'not, quoted,neg'"),
        ("broken.parquet", {}, r"broken\.parquet: cannot read it as Parquet: .*magic bytes"),
        ("reviews.csv", {"text_column": "sentence"}, r"reviews\.csv: missing column\(s\) \['sentence'\]; it has"),
        ("reviews.csv", {"label_column": "gold"}, r"reviews\.csv: missing column\(s\) \['gold'\]"),
        ("one_class.csv", {}, r"one_class\.csv: the label column 'label' holds only the class 'pos'"),
    ],
)
def test_unusable_files_give_clear_errors(name: str, kwargs: dict, message: str) -> None:
    dm = TextClassificationDataModule(train_file=str(DATA / name), **kwargs)
    with pytest.raises(DataError, match=message):
        dm.setup("fit")


def test_unsupported_type_and_missing_val_file(tmp_path: Path) -> None:
    odd = tmp_path / "data.xlsx"
    odd.write_text("x")
    with pytest.raises(DataError, match=r"data\.xlsx: unsupported file type '\.xlsx'"):
        TextClassificationDataModule(train_file=str(odd)).setup("fit")
    dm = TextClassificationDataModule(train_file=str(DATA / "reviews.csv"), val_file=str(tmp_path / "dev.tsv"))
    with pytest.raises(DatasetNotFoundError, match=r"val_file.*dev\.tsv.*To get it: point val_file"):
        dm.setup("fit")


def test_one_class_given_as_class_names_is_refused() -> None:
    dm = TextClassificationDataModule(train_file=str(DATA / "reviews.csv"), class_names=["pos"])
    with pytest.raises(DataError, match=r"class_names: the label column 'label' holds only the class 'pos'"):
        dm.setup("fit")


def test_a_missing_label_names_its_row_and_integer_labels_survive_it(tmp_path: Path) -> None:
    """One blank cell makes a CSV's integer label column float: 1.0 must still be class "1"."""
    rows = [{"text": f"text {i}", "label": i % 2} for i in range(10)]
    rows[2]["label"] = ""
    path = write_csv(tmp_path / "blank.csv", rows)
    with pytest.raises(DataError, match=r"blank\.csv: line 4: no label \(empty cell\)"):
        TextClassificationDataModule(train_file=str(path), val_fraction=0.3).setup("fit")
    assert class_list([1.0, 0.0, float("nan"), float("inf"), None]) == ["0", "1"]
    table = TextTable("x", ["a", "b", "c"], [1.0, 0, np.int64(1)])
    assert encode_rows(table, ["0", "1"], TextColumns("text", None, "label"))[1].tolist() == [1, 0, 1]


def test_skipped_rows_are_counted_and_nothing_else_shifts() -> None:
    """Under "skip" the bad rows leave their split; every other row keeps its own row number and label."""
    columns = TextColumns("text", None, "label")
    table = read_table(DATA / "empty_text.csv", columns)
    report = DataReport("skip")
    kept, labels = encode_rows(table, ["neg", "pos"], columns, report, "train")
    assert kept.rows.tolist() == [r for r in range(24) if r != 3]
    assert [table.labels[r] for r in kept.rows] == [["neg", "pos"][k] for k in labels]
    assert report.skipped("empty text") == 1 and "empty_text.csv: line 5" in str(report)

    dm = TextClassificationDataModule(
        train_file=str(DATA / "reviews.csv"), val_file=str(DATA / "val_unknown_label.csv"), on_bad="skip"
    )
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        dm.setup("fit")
    assert dm.dataset("val").rows.tolist() == [0, 1, 3, 4, 5]
    assert dm.report.split("val").kept == 5 and dm.report.split("val").num_skipped == 1
    assert dm.report.skipped("not one of the 2 classes") == 1


def test_a_split_left_without_rows_is_an_error(tmp_path: Path) -> None:
    val = write_csv(tmp_path / "dev.csv", [{"text": "fine", "label": "maybe"}, {"text": "ok", "label": "perhaps"}])
    dm = TextClassificationDataModule(train_file=str(DATA / "reviews.csv"), val_file=str(val), on_bad="skip")
    with pytest.raises(DataError, match=r"dev\.csv: no usable row is left \(val split\)"):
        dm.setup("fit")
    assert dm.report.split("val").num_skipped == 2


def test_missing_and_unreadable_files_raise_data_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=r"nowhere\.tsv.*To get it:.*SST-2"):
        TextClassificationDataModule(train_file=str(tmp_path / "nowhere.tsv")).setup("fit")
    with pytest.raises(DataError, match=r"latin1\.csv, line 3: bytes that are not UTF-8 \(b'\\xe9 no'"):
        TextClassificationDataModule(train_file=str(DATA / "latin1.csv")).setup("fit")


# -- real data and integration -------------------------------------------------------------------


def test_real_sst2_files(shared_data: Path) -> None:
    dm = TextClassificationDataModule(
        train_file=str(shared_data / "text" / "sst2_train.tsv"),
        val_file=str(shared_data / "text" / "sst2_dev.tsv"),
        text_column="sentence",
        max_train_samples=1000,
        batch_size=None,
        max_tokens=512,
    )
    assert dm.class_names == ["0", "1"]
    dm.setup("fit")
    assert len(dm.dataset("train")) == 1000 and len(dm.dataset("val")) == 872
    assert dm.report.num_truncated == 0 and dm.report.num_skipped == 0
    for batch in dm.train_dataloader():
        assert batch["input_ids"].numel() <= 512 or len(batch["index"]) == 1


class BatchRecorder(__import__("lightning").pytorch.Callback):
    """The batches trained on, and the learning rate each was stepped with."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.rates: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append(batch["index"].tolist())
        self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_resume_through_a_lightning_checkpoint_with_a_warmup_schedule(tmp_path: Path) -> None:
    """The LR schedule reads trainer.estimated_stepping_batches; the loader state must survive it,
    and the resumed run steps with the uninterrupted run's learning rates (warm-up, then decay)."""
    import lightning.pytorch as pl

    def fit(ckpt_path=None):
        recorder = BatchRecorder()
        callbacks = [recorder]
        if ckpt_path is None:
            callbacks.append(
                pl.callbacks.ModelCheckpoint(tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}")
            )
        trainer = pl.Trainer(
            max_epochs=2,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            callbacks=callbacks,
            enable_checkpointing=ckpt_path is None,
            num_sanity_val_steps=0,
            limit_val_batches=0,
        )
        dm = TextClassificationDataModule(synthetic_samples=60, batch_size=8)
        trainer.fit(tiny_model(), datamodule=dm, ckpt_path=ckpt_path)
        return recorder

    full = fit()
    assert len(full.batches) == 16  # 8 batches per epoch
    peak = max(full.rates)
    assert full.rates[0] < peak and full.rates[-1] < peak  # warm-up from 0, then decay
    resumed = fit(tmp_path / "step=9.ckpt")  # one batch into the second epoch
    assert resumed.batches == full.batches[9:]
    assert resumed.rates == pytest.approx(full.rates[9:], rel=1e-12)


def test_hub_style_dataset_folder_and_two_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dataset_name` goes through `datasets.load_dataset`: a local folder takes the same path."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")  # read at each load
    folder = tmp_path / "reviews"
    folder.mkdir()
    rows = [{"text": f"review number {i} " + "great " * (i % 7), "label": i % 3} for i in range(60)]
    write_csv(folder / "train.csv", rows)
    write_csv(folder / "validation.csv", rows[:12])
    dm = TextClassificationDataModule(dataset_name=str(folder), batch_size=8, num_workers=2, persistent_workers=True)
    assert dm.num_classes == 3
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.dataset("val")) == 12 and len(dm.dataset("test")) == 12
    seen = [i for batch in dm.train_dataloader() for i in batch["index"].tolist()]
    assert sorted(seen) == list(range(60))
    assert any((tmp_path / "hf_cache").iterdir())  # the Hub path's cache, not the user's


def test_missing_hub_dataset_says_what_to_fetch(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(dataset_name=str(tmp_path / "no_such_dataset"))
    with pytest.raises(DatasetNotFoundError, match=r"no_such_dataset.*To get it: run once online"):
        dm.prepare_data()


def test_warmup_linear_decay_schedule() -> None:
    from varlen.models.base import WarmupLinearDecay

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = WarmupLinearDecay(optimizer, 0.2, lambda: 10)
    rates = []
    for _ in range(11):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0])
    assert "total_steps" not in scheduler.state_dict()  # checkpoints stay picklable
