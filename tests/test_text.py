"""Text classification: the contract, the real tokenizer and model, sources and bad input."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from varlen.datamodules import TextClassificationDataModule
from varlen.datasets.text import TextCollator, class_list, encode_labels
from varlen.models import TextClassifier
from varlen.testing import DataModuleContract, ddp_fit

ROOT = Path(__file__).resolve().parents[1]
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


def test_datamodule_uses_the_tokenizer_pad_token() -> None:
    dm = TextClassificationDataModule(synthetic_samples=50, batch_size=50)
    dm.tokenizer.pad_token = "[MASK]"
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    pad_id = dm.tokenizer.pad_token_id
    assert pad_id not in (0, None)
    assert (batch["input_ids"][batch["attention_mask"] == 0] == pad_id).all()
    assert (batch["attention_mask"] == 0).any()


def write_csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path


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


def test_truncation_is_counted(tmp_path: Path) -> None:
    rows = [{"text": "word " * n, "label": n % 2} for n in (3, 50, 200, 400)]
    dm = TextClassificationDataModule(
        train_file=str(write_csv(tmp_path / "t.csv", rows)),
        val_file=str(write_csv(tmp_path / "v.csv", rows)),
        max_length=64,
    )
    with pytest.warns(UserWarning, match="2 of 4 texts"):
        dm.setup("fit")
    assert dm.truncated == {"train": 2, "val": 2}
    assert dm.dataset("train").lengths.max() == 64


@pytest.mark.parametrize(
    ("rows", "kwargs", "message"),
    [
        ([{"text": "fine", "label": 0}, {"text": "  ", "label": 1}], {}, r"empty text.*row\(s\) 1"),
        ([{"sentence": "fine", "label": 0}], {}, r"missing column\(s\) \['text'\]"),
        ([{"text": "fine", "label": 0}], {"label_column": "gold"}, r"missing column\(s\) \['gold'\]"),
    ],
)
def test_bad_tables_give_clear_errors(tmp_path: Path, rows, kwargs, message) -> None:
    path = write_csv(tmp_path / "bad.csv", rows)
    with pytest.raises(ValueError, match=message):
        dm = TextClassificationDataModule(train_file=str(path), **kwargs)
        dm.setup("fit")


def test_unknown_label_names_the_row(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "train.csv", [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}])
    val = write_csv(tmp_path / "val.csv", [{"text": "ok", "label": "pos"}, {"text": "meh", "label": "neutral"}])
    dm = TextClassificationDataModule(train_file=str(train), val_file=str(val))
    with pytest.raises(ValueError, match=r"val.csv: row 1 has label 'neutral'"):
        dm.setup("fit")


def test_a_missing_label_names_its_row_and_integer_labels_survive_it(tmp_path: Path) -> None:
    """One blank cell makes a CSV's integer label column float: 1.0 must still be class "1"."""
    rows = [{"text": f"text {i}", "label": i % 2} for i in range(10)]
    rows[2]["label"] = ""
    path = write_csv(tmp_path / "blank.csv", rows)
    with pytest.raises(ValueError, match=r"blank.csv: row 2 has no label \(empty cell\)"):
        TextClassificationDataModule(train_file=str(path), val_fraction=0.3).setup("fit")
    assert class_list([1.0, 0.0, float("nan"), None]) == ["0", "1"]
    assert encode_labels([1.0, 0, np.int64(1)], ["0", "1"], "x").tolist() == [1, 0, 1]


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.tsv"):
        TextClassificationDataModule(train_file=str(tmp_path / "nowhere.tsv")).setup("fit")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"\x00\x01 this is not parquet")
    with pytest.raises(ValueError, match="broken.parquet: cannot read it"):
        TextClassificationDataModule(train_file=str(broken)).setup("fit")
    odd = tmp_path / "data.xlsx"
    odd.write_text("x")
    with pytest.raises(ValueError, match="unsupported file type"):
        TextClassificationDataModule(train_file=str(odd)).setup("fit")


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
    assert dm.truncated["val"] == 0
    for batch in dm.train_dataloader():
        assert batch["input_ids"].numel() <= 512 or len(batch["index"]) == 1


def test_ddp_fit_ends_with_equal_steps(tmp_path: Path) -> None:
    ranks = ddp_fit(
        ROOT / "configs" / "text_bert.yaml",
        tmp_path,
        [
            "--data.init_args.synthetic_samples=90",
            "--data.init_args.batch_size=null",
            "--data.init_args.max_tokens=400",
            "--model.init_args.pretrained=false",
            f"--model.init_args.config_overrides={json.dumps(TINY_BERT)}",
        ],
    )
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == ranks[0]["num_training_batches"] > 0
    served = sorted(ranks[0]["indices"] + ranks[1]["indices"])
    assert served == list(range(90))


class BatchRecorder(__import__("lightning").pytorch.Callback):
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append(batch["index"].tolist())


def test_resume_through_a_lightning_checkpoint_with_a_warmup_schedule(tmp_path: Path) -> None:
    """The LR schedule reads trainer.estimated_stepping_batches; the loader state must survive it."""
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
        return recorder.batches

    full = fit()
    assert len(full) == 16  # 8 batches per epoch
    resumed = fit(tmp_path / "step=9.ckpt")  # one batch into the second epoch
    assert resumed == full[9:]


def test_hub_style_dataset_folder_and_two_workers(tmp_path: Path) -> None:
    """``dataset_name`` goes through ``datasets.load_dataset``: a local folder takes the same path."""
    folder = tmp_path / "reviews"
    folder.mkdir()
    rows = [{"text": f"review number {i} " + "great " * (i % 7), "label": i % 3} for i in range(60)]
    write_csv(folder / "train.csv", rows)
    write_csv(folder / "validation.csv", rows[:12])
    dm = TextClassificationDataModule(dataset_name=str(folder), batch_size=8, num_workers=2, persistent_workers=True)
    assert dm.num_classes == 3
    dm.setup("fit")
    assert len(dm.dataset("val")) == 12 and len(dm.dataset("test")) == 12
    seen = [i for batch in dm.train_dataloader() for i in batch["index"].tolist()]
    assert sorted(seen) == list(range(60))


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
