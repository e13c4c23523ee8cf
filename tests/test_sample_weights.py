"""`sample_weights` on the classification DataModules: class balance, weight columns, the
unweighted evaluation splits, bad values, DDP, checkpoints and `varlen inspect`."""

import csv
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from varlen.cli.inspection import summarize
from varlen.datamodules.bearing import BearingDataModule
from varlen.datamodules.hyperspectral import HyperspectralDataModule
from varlen.datamodules.molecules import MoleculeDataModule
from varlen.datamodules.text import TextClassificationDataModule
from varlen.errors import DataError

HS = Path(__file__).parent / "data" / "hyperspectral"
EPOCHS = 20


def write_csv(path: Path, rows: list[dict]) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def reviews(tmp_path: Path, n: int = 300, weight=lambda i, label: 1.0) -> str:
    """`n` distinct texts of varied length (copies would share a split), one in ten of class `b`, with a
    weight column `w`."""
    rows = []
    for i in range(n):
        label = "b" if i % 10 == 0 else "a"
        rows.append(
            {"text": f"review {i}: " + " ".join(["word"] * (3 + i % 40)), "label": label, "w": weight(i, label)}
        )
    return write_csv(tmp_path / "reviews.csv", rows)


SMILES = (
    ["C" * k + "O" for k in range(1, 13)]
    + ["c1ccccc1" + "C" * k for k in range(0, 8)]
    + ["CC(=O)N" + "C" * k for k in range(6)]
)


def molecules(tmp_path: Path, n: int = 200, weight=lambda i: 1.0) -> str:
    """`n` molecules, one in six active in `active`; `logp` a regression target, `w` a weight."""
    rows = [
        {"smiles": SMILES[i % len(SMILES)], "active": int(i % 6 == 0), "logp": i / 10, "w": weight(i)} for i in range(n)
    ]
    return write_csv(tmp_path / "mols.csv", rows)


def served_shares(dm, epochs: int = EPOCHS, num_replicas: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Each class's share of the training samples served over `epochs`, and of the split."""
    labels = dm.class_labels(dm.dataset("train"))
    sampler = dm.batch_sampler("train", True, num_replicas=num_replicas, rank=0)
    counts = np.zeros(labels.max() + 1)
    for epoch in range(epochs):
        order = sampler.global_plan(epoch).order
        assert len(order) == len(labels)  # num_samples: the split's size
        counts += np.bincount(labels[order], minlength=len(counts))
    return counts / counts.sum(), np.bincount(labels) / len(labels)


def assert_balanced(dm, tolerance: float) -> None:
    served, held = served_shares(dm)
    classes = held > 0
    assert held.max() - held.min() > 2 * tolerance  # the split is imbalanced: the test can fail
    assert np.abs(served[classes] - 1 / classes.sum()).max() <= tolerance, (served, held)


def assert_every_sample_once(dm, split: str) -> None:
    sampler = getattr(dm, f"{split}_dataloader")().batch_sampler
    assert sampler.draw is None
    served = sorted(i for batch in sampler for i in batch)
    assert served == list(range(len(dm.dataset(split))))


# -- each DataModule: "balanced" serves every class equally often; evaluation stays unweighted ----


def test_text_balanced(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(train_file=reviews(tmp_path), batch_size=16, sample_weights="balanced")
    dm.setup("fit")
    assert_balanced(dm, 0.03)  # 20 epochs of 270 draws: 0.03 is 4.4 standard deviations
    for split in ("val", "test"):
        assert_every_sample_once(dm, split)


def test_molecules_balanced_on_the_only_task(tmp_path: Path) -> None:
    path = molecules(tmp_path)
    dm = MoleculeDataModule(dataset=None, path=path, smiles_column="smiles", target_columns=["active"],
                            task="classification", single_class="warn", sample_weights="balanced")  # fmt: skip
    dm.setup("fit")
    assert_balanced(dm, 0.035)
    for split in ("val", "test"):
        assert_every_sample_once(dm, split)


def test_bearing_balanced() -> None:
    args = {"simulated_per_class": 2, "simulated_seconds": (1.0, 6.0), "window_length": 512, "stride": 256}
    dm = BearingDataModule(**args, batch_size=16, sample_weights="balanced")
    dm.setup("fit")
    assert_balanced(dm, 0.02)  # 10 classes, ~20 x 400 draws
    for split in ("val", "test"):
        assert_every_sample_once(dm, split)


def test_bearing_balanced_with_augmentation_and_recording_batches() -> None:
    """The per-epoch sampler (augmentation) and group-pure batches take the weights too."""
    args = {"simulated_per_class": 2, "simulated_seconds": (1.0, 6.0), "window_length": 512, "stride": 256}
    dm = BearingDataModule(**args, batch_size=16, sample_weights="balanced", augment=True, grouping="recording")
    dm.setup("fit")
    assert type(dm.batch_sampler("train", True)).__name__ == "EpochBatchSampler"
    assert_balanced(dm, 0.02)


def test_hyperspectral_balanced(tmp_path: Path) -> None:
    files = {"cube_path": str(HS / "tiny_v5.mat"), "labels_path": str(HS / "tiny_v5_gt.mat")}
    dm = HyperspectralDataModule(scenes=["custom"], root=str(tmp_path), **files, block_size=4, val_fraction=0.2,
                                 wavelengths=np.linspace(450, 2400, 12).tolist(), test_fraction=0.3, batch_size=8,
                                 sample_weights="balanced")  # fmt: skip
    dm.setup("fit")
    assert_balanced(dm, 0.04)
    for split in ("val", "test"):
        assert_every_sample_once(dm, split)


def test_unweighted_is_the_plain_plan(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(train_file=reviews(tmp_path), batch_size=16)
    dm.setup("fit")
    assert dm.train_weights() is None and dm.train_dataloader().batch_sampler.draw is None
    served, held = served_shares(dm, epochs=1)
    assert np.allclose(served, held)


# -- weight columns ---------------------------------------------------------------------------


def test_text_weight_column_is_each_rows_weight(tmp_path: Path) -> None:
    path = reviews(tmp_path, weight=lambda i, label: 3.0 if label == "b" else 1.0)
    dm = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="w")
    dm.setup("fit")
    train = dm.dataset("train")
    assert np.array_equal(dm.train_weights(), np.where(train.labels == 1, 3.0, 1.0))
    served, held = served_shares(dm)
    expected = 3 * held[1] / (3 * held[1] + held[0])
    assert abs(served[1] - expected) <= 0.03


def test_molecule_weight_column_follows_the_lines(tmp_path: Path) -> None:
    path = molecules(tmp_path, weight=lambda i: i + 1)  # line i + 2 weighs i + 1
    dm = MoleculeDataModule(dataset=None, path=path, smiles_column="smiles", target_columns=["logp"],
                            sample_weights="w")  # fmt: skip
    dm.setup("fit")
    lines = dm.target_store.lines[dm.dataset("train").positions]
    assert np.array_equal(dm.train_weights(), lines - 1)


@pytest.mark.parametrize(
    ("weight", "message"),
    [(-1.0, r"line 9: sample weight column 'w' is negative \(-1\)"), ("", "line 9: .*'w' is missing"),
     ("inf", "line 9: .*'w' is infinite")],
)  # fmt: skip
def test_a_bad_text_weight_names_the_row(tmp_path: Path, weight, message: str) -> None:
    path = reviews(tmp_path, weight=lambda i, label: weight if i == 7 else 1.0)
    dm = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="w", val_fraction=0.01, seed=1)
    dm.setup("fit")
    assert 7 in dm.dataset("train").rows
    with pytest.raises(DataError, match=message):
        dm.train_dataloader()


def test_a_bad_molecule_weight_names_the_line(tmp_path: Path) -> None:
    path = molecules(tmp_path, weight=lambda i: -2.0 if i % 50 == 3 else 1.0)
    dm = MoleculeDataModule(dataset=None, path=path, smiles_column="smiles", target_columns=["logp"],
                            sample_weights="w", val_fraction=0.05, test_fraction=0.05)  # fmt: skip
    dm.setup("fit")
    with pytest.raises(DataError, match=r"mols.csv, line \d+: sample weight column 'w' is negative"):
        dm.train_dataloader()


def test_unknown_or_textual_weight_columns_are_refused(tmp_path: Path) -> None:
    path = reviews(tmp_path)
    dm = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="weight")
    dm.setup("fit")
    with pytest.raises(DataError, match="no column 'weight' for sample_weights"):
        dm.train_dataloader()
    dm = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="label")
    dm.setup("fit")
    with pytest.raises(DataError, match="sample weight column 'label' holds string, not numbers"):
        dm.train_dataloader()
    mols = MoleculeDataModule(dataset=None, path=molecules(tmp_path), smiles_column="smiles",
                              target_columns=["logp"], sample_weights="weight")  # fmt: skip
    mols.setup("fit")
    with pytest.raises(DataError, match=r"column\(s\) \['weight'\] not found"):
        mols.train_dataloader()
    rows = [{"smiles": "C" * (i + 1) + "O", "logp": 1.0, "w": "heavy" if i == 5 else 1} for i in range(30)]  # distinct:
    # copies of one molecule would share one split
    mols = MoleculeDataModule(dataset=None, path=write_csv(tmp_path / "words.csv", rows), smiles_column="smiles",
                              target_columns=["logp"], sample_weights="w")  # fmt: skip
    mols.setup("fit")
    with pytest.raises(DataError, match="sample_weights='w': .*words.csv, line 7: .*'w' is 'heavy'"):
        mols.train_dataloader()


def test_all_zero_weights_are_refused(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(train_file=reviews(tmp_path, weight=lambda i, label: 0), sample_weights="w")
    dm.setup("fit")
    with pytest.raises(DataError, match="'w' is 0 on every training row"):
        dm.train_dataloader()


# -- settings refused when the DataModule is made ---------------------------------------------


def test_settings_that_cannot_work_are_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the regression task of \\['logp'\\] has none"):
        MoleculeDataModule(dataset=None, path="x.csv", smiles_column="smiles", target_columns=["logp"],
                           sample_weights="balanced")  # fmt: skip
    with pytest.raises(ValueError, match="the regression task"):
        MoleculeDataModule(dataset="esol", sample_weights="balanced")
    two = {"dataset": "bbbp", "target_columns": ["p_np", "other"], "sample_weights": "balanced"}
    with pytest.raises(ValueError, match="several tasks \\['p_np', 'other'\\]: name one as balance_task"):
        MoleculeDataModule(**two)
    with pytest.raises(ValueError, match="balance_task='nope' is not a target column"):
        MoleculeDataModule(**two, balance_task="nope")
    with pytest.raises(ValueError, match="balance_task='p_np' needs sample_weights='balanced'"):
        MoleculeDataModule(dataset="bbbp", balance_task="p_np")
    with pytest.raises(ValueError, match="no per-row weight column"):
        TextClassificationDataModule(sample_weights="w")  # the synthetic reviews
    with pytest.raises(ValueError, match="no per-row weight column"):
        BearingDataModule(sample_weights="w")
    with pytest.raises(ValueError, match="no per-row weight column"):
        HyperspectralDataModule(sample_weights="w")
    with pytest.raises(ValueError, match="needs shuffle"):
        TextClassificationDataModule(sample_weights="balanced", shuffle=False)


def test_several_tasks_balance_the_named_one(tmp_path: Path) -> None:
    rows = [{"smiles": SMILES[i % len(SMILES)], "a": int(i % 6 == 0), "b": "" if i % 4 == 1 else int(i % 2 == 0)}
            for i in range(200)]  # fmt: skip
    path = write_csv(tmp_path / "two.csv", rows)
    dm = MoleculeDataModule(dataset=None, path=path, smiles_column="smiles", target_columns=["a", "b"],
                            task="classification", single_class="warn", sample_weights="balanced",
                            balance_task="b")  # fmt: skip
    dm.setup("fit")
    labels = dm.class_labels(dm.dataset("train"))
    assert set(labels.tolist()) == {-1, 0, 1}  # -1: b is missing
    served = np.zeros(3)
    sampler = dm.batch_sampler("train", True)
    for epoch in range(EPOCHS):
        served += np.bincount(labels[sampler.global_plan(epoch).order] + 1, minlength=3)
    served /= served.sum()
    held = np.bincount(labels + 1) / len(labels)
    assert abs(served[0] - held[0]) <= 0.03  # unlabelled molecules keep their share
    assert abs(served[1] - served[2]) <= 0.04  # the labelled ones are balanced


# -- DDP, checkpoints, inspect -----------------------------------------------------------------


def test_weights_travel_with_the_sampler_lightning_rebuilds_under_ddp(tmp_path: Path) -> None:
    """Lightning re-creates the batch sampler from its saved arguments with a DistributedSampler:
    the weights are one of them, and both ranks get as many batches."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader

    dm = TextClassificationDataModule(train_file=reviews(tmp_path), batch_size=16, sample_weights="balanced")
    dm.setup("fit")
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()  # as Lightning requests it
    ranks = []
    for rank in range(2):
        injected = DistributedSampler(dm.dataset("train"), num_replicas=2, rank=rank)
        ranks.append(_update_dataloader(loader, injected).batch_sampler)
    assert all(s.draw is not None and s.draw.key() == loader.batch_sampler.draw.key() for s in ranks)
    assert len(ranks[0]) == len(ranks[1])
    served = [list(s) for s in ranks]
    assert len(served[0]) == len(served[1]) == len(ranks[0])
    assert sorted(i for part in served for b in part for i in b) == sorted(ranks[0].global_plan(0).order.tolist())
    direct = [dm.batch_sampler("train", True, num_replicas=2, rank=r) for r in range(2)]
    assert len(direct[0]) == len(direct[1]) == len(ranks[0])


def test_a_resume_with_other_weights_warns_and_the_sampler_refuses(tmp_path: Path) -> None:
    path = reviews(tmp_path)
    weighted = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="balanced")
    weighted.setup("fit")
    assert weighted.state_dict()["data_state"]["sample_weights"] == "balanced"
    loader = weighted.train_dataloader()
    batches = iter(loader)
    next(batches), next(batches)
    state = loader.state_dict()
    plain = TextClassificationDataModule(train_file=path, batch_size=16)
    plain.setup("fit")
    with pytest.warns(UserWarning, match="sample_weights='balanced' \\(here None\\)"):
        plain.load_state_dict(weighted.state_dict())
    other = plain.train_dataloader()
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="saved with other weights"):
        next(iter(other))
    same = TextClassificationDataModule(train_file=path, batch_size=16, sample_weights="balanced")
    same.setup("fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.load_state_dict(weighted.state_dict())
    resumed = same.train_dataloader()
    resumed.load_state_dict(state)
    assert next(iter(resumed))["index"].tolist() == next(batches)["index"].tolist()


def test_inspect_shows_the_served_share_per_class(tmp_path: Path) -> None:
    dm = TextClassificationDataModule(train_file=reviews(tmp_path), batch_size=16, sample_weights="balanced")
    dm.setup("fit")
    summary = summarize(dm, "train", max_batches=2)
    order = dm.batch_sampler("train", True).global_plan(0).order
    labels = dm.dataset("train").labels
    assert [name for name, _, _ in summary.served] == ["a", "b"]
    assert [round(s, 6) for _, s, _ in summary.served] == [round(x, 6) for x in np.bincount(labels[order]) / len(order)]
    assert abs(summary.served[1][2] - 0.1) < 0.01  # the split's share
    text = "\n".join(summary.lines())
    assert "sample_weights='balanced': served share per class in epoch 0" in text
    assert f"b {summary.served[1][1]:.3f} ({summary.served[1][2]:.3f})" in text
    assert "served share" not in "\n".join(summarize(dm, "val", max_batches=2).lines())


def test_varlen_inspect_takes_sample_weights_from_the_command_line(monkeypatch, capsys) -> None:
    import sys

    from varlen.cli import dispatch as cli

    config = str(Path(__file__).resolve().parents[1] / "configs" / "text_bert.yaml")
    argv = ["varlen", "inspect", "--config", config, "--data.init_args.synthetic_samples=300",
            "--data.init_args.sample_weights=balanced", "--max-batches=2"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    cli.console()
    out = capsys.readouterr().out
    assert "sample_weights='balanced': served share per class in epoch 0" in out
    shares = re.findall(r"\b([01]) (\d\.\d{3}) \((\d\.\d{3})\)", out)  # class served (held)
    assert [name for name, _, _ in shares] == ["0", "1"]
    assert abs(sum(float(served) for _, served, _ in shares) - 1) < 2e-3
