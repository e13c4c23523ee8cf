"""Molecule splits for classification: the balanced scaffold split, one-class splits, NaN ROC-AUC.

`tests/data/molecules/bbbp_order.csv` (written by `tests/data/molecules/data.py`) reproduces
MoleculeNet's BBBP failure in 60 molecules: large scaffold sets of both classes, then singleton
scaffolds, the positive ones last, so the deterministic scaffold split leaves positives only in
val and test.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from varlen.datamodules.molecules import MoleculeDataModule
from varlen.datasets.molecules.classes import check_classes, class_counts
from varlen.datasets.molecules.scaffolds import cached_scaffolds
from varlen.errors import DataError
from varlen.models.molecules import MoleculeGNN
from varlen.prepare.splits import balanced_scaffold_split

DATA = Path(__file__).parent / "data" / "molecules"
BBBP_ORDER = DATA / "bbbp_order.csv"
CACHE = Path(tempfile.mkdtemp(prefix="varlen-molecule-splits-test-"))


@pytest.fixture(scope="module", autouse=True)
def _remove_cache():
    yield
    shutil.rmtree(CACHE, ignore_errors=True)


def bbbp_like(**kwargs) -> MoleculeDataModule:
    kwargs.setdefault("batch_size", 8)
    kwargs.setdefault("max_tokens", None)
    return MoleculeDataModule(dataset="bbbp", path=str(BBBP_ORDER), cache_dir=str(CACHE), **kwargs)


def classes_per_split(dm: MoleculeDataModule) -> dict[str, list[int]]:
    """[class-0 count, class-1 count] of each split's only task."""
    return {
        name: np.bincount(dm.table.targets[part, 0].astype(int), minlength=2).tolist()
        for name, part in dm.split_positions.items()
    }


def trainer() -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)


def test_classification_presets_default_to_the_balanced_scaffold_split() -> None:
    assert bbbp_like().split == "scaffold_balanced"
    hiv = MoleculeDataModule(dataset="hiv", path=str(BBBP_ORDER), target_columns=["p_np"], cache_dir=str(CACHE))
    assert hiv.split == "scaffold_balanced"
    for preset in ("esol", "freesolv", "lipo"):
        assert MoleculeDataModule(dataset=preset, path=str(BBBP_ORDER), target_columns=["p_np"]).split == "random"
    own = MoleculeDataModule(dataset=None, path=str(BBBP_ORDER), smiles_column="smiles", target_columns=["p_np"])
    assert own.split == "random"
    assert bbbp_like(split="scaffold").split == "scaffold"
    with pytest.raises(ValueError, match="split must be one of .*scaffold_balanced"):
        bbbp_like(split="balanced")
    with pytest.raises(ValueError, match="single_class must be one of"):
        bbbp_like(single_class="ignore")


def test_the_deterministic_scaffold_split_names_the_split_task_and_counts() -> None:
    dm = bbbp_like(split="scaffold")
    with pytest.raises(DataError) as error:
        dm.setup("fit")
    message = str(error.value)
    assert message.startswith(f"{BBBP_ORDER}: the val split holds one class only for task 'p_np' (0 of class 0, 6 of")
    assert "the test split holds one class only for task 'p_np' (0 of class 0, 6 of class 1)" in message
    assert "split='scaffold'" in message and "split='scaffold_balanced'" in message and "single_class='warn'" in message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_balanced_scaffold_split_keeps_both_classes_in_every_split(seed: int) -> None:
    dm = bbbp_like(seed=seed)
    dm.setup("fit")
    counts = classes_per_split(dm)
    assert all(zero > 0 and one > 0 for zero, one in counts.values()), counts
    assert [sum(counts[s]) for s in ("train", "val", "test")] == [48, 6, 6]
    scaffolds = cached_scaffolds(dm.dataset("train").store)
    sets = {name: set(scaffolds[part].tolist()) for name, part in dm.split_positions.items()}
    assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"])
    expected = balanced_scaffold_split(scaffolds.tolist(), dm.fractions, seed, "molecule scaffold split")
    assert all(np.array_equal(dm.split_positions[s], expected[s]) for s in expected)  # every molecule is valid
    other = bbbp_like(seed=seed + 3)  # seeds 0-9 all keep both classes here
    other.setup("fit")
    assert not np.array_equal(other.split_positions["test"], dm.split_positions["test"])


def test_a_one_class_split_can_warn_and_its_roc_auc_is_nan_not_zero() -> None:
    dm = bbbp_like(split="scaffold", single_class="warn")
    with pytest.warns(UserWarning, match=r"the val split holds one class only for task 'p_np' .* logs it as NaN"):
        dm.setup("fit")
    model = MoleculeGNN(num_tasks=1, task="classification", hidden=16, num_layers=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        val = trainer().validate(model, datamodule=dm, verbose=False)[0]
        test = trainer().test(model, datamodule=dm, verbose=False)[0]
    assert math.isnan(val["val/roc_auc"]) and math.isnan(test["test/roc_auc"])
    assert math.isfinite(val["val/loss"])
    messages = [str(w.message) for w in caught]
    assert any("val/roc_auc: 'p_np' has 0 target(s) of class 0 and 6 of class 1" in m for m in messages), messages
    assert any(m.startswith("test/roc_auc: 'p_np' has 0 target(s)") for m in messages)
    assert not any("No negative samples" in m for m in messages)  # torchmetrics' 0.0 is never computed


def test_a_task_without_both_classes_is_left_out_of_the_mean() -> None:
    model = MoleculeGNN(num_tasks=2, task="classification", hidden=8, num_layers=1)
    scores = torch.tensor([0.1, 0.4, 0.35, 0.8])
    model.val_metrics[0]["roc_auc"].update(scores, torch.tensor([0, 0, 1, 1]))  # ROC-AUC 0.75
    model.val_classes[0].update(torch.tensor([0.0, 0.0, 1.0, 1.0]))
    model.val_metrics[1]["roc_auc"].update(scores, torch.tensor([1, 1, 1, 1]))
    model.val_classes[1].update(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    with pytest.warns(UserWarning, match=r"val/roc_auc: task 1 has 0 target\(s\) of class 0 and 4 of class 1"):
        values = model._task_values(model.val_metrics, model.val_classes, "val")
    auc = torch.stack(values["roc_auc"])
    assert auc[0].item() == pytest.approx(0.75) and math.isnan(auc[1].item())
    assert auc.nanmean().item() == pytest.approx(0.75)
    assert int(model.val_classes[1].counts.sum()) == 0  # reset for the next epoch


def test_any_classification_split_is_checked(tmp_path: Path) -> None:
    smiles = [line.split(",")[-1] for line in BBBP_ORDER.read_text().splitlines()[1:21]]
    lines = ["smiles,active"] + [f"{s},{int(i > 0)}" for i, s in enumerate(smiles)]  # one negative in 20
    (tmp_path / "rare.csv").write_text("\n".join(lines) + "\n")
    dm = MoleculeDataModule(
        dataset=None,
        path=str(tmp_path / "rare.csv"),
        smiles_column="smiles",
        target_columns=["active"],
        task="classification",
        cache_dir=str(CACHE),
    )
    with pytest.raises(DataError, match=r"rare\.csv: the (val|test) split holds one class only for task 'active' "):
        dm.setup("fit")
    with pytest.raises(DataError, match=r"split='random'\): ROC-AUC is undefined there\. Try another seed"):
        dm.setup("fit")


def test_check_classes_counts_labels_only() -> None:
    targets = np.array([[0, np.nan], [1, np.nan], [1, 0], [0, 1]], dtype=np.float32)
    negatives, positives = class_counts(targets)
    assert negatives.tolist() == [2, 1] and positives.tolist() == [2, 1]
    parts = {"train": np.array([2, 3]), "val": np.array([0, 1]), "test": np.array([], dtype=np.int64)}
    with pytest.raises(DataError, match=r"t\.csv: the val split holds no label for task 'b' \(0 of class 0, 0 of"):
        check_classes(Path("t.csv"), targets, parts, ["a", "b"], "random")
    check_classes(Path("t.csv"), targets, {"val": np.array([2, 3])}, ["a", "b"], "random")  # both classes: silent


def test_max_train_samples_keeps_a_stratified_seeded_subset_of_the_training_split() -> None:
    """Half of the training molecules, each class kept in its share (within one molecule), the same ones
    on every setup; validation and test untouched; the rest counted as unused. Regression: exactly n."""
    full = bbbp_like(split="random")
    full.setup("fit")
    train = full.split_positions["train"]
    n = len(train) // 2
    subsets = []
    for _ in range(2):
        dm = bbbp_like(split="random", max_train_samples=n)
        dm.setup("fit")
        subsets.append(dm.split_positions["train"])
    kept = subsets[0]
    assert np.array_equal(kept, subsets[1]) and len(dm.dataset("train")) == len(kept)
    assert np.isin(kept, train).all() and len(np.unique(kept)) == len(kept)
    classes = full.table.targets[:, 0].astype(int)
    for c in (0, 1):  # stratified: each class's count within one molecule of its share
        assert abs(np.sum(classes[kept] == c) - n / len(train) * np.sum(classes[train] == c)) < 1
    for split in ("val", "test"):
        assert np.array_equal(dm.split_positions[split], full.split_positions[split])
    unused = dm.report.to_dict()["train"]["unused"]
    assert unused == {f"molecule: not in the training subset, max_train_samples={n}": len(train) - len(kept)}

    esol = MoleculeDataModule(path=str(DATA / "esol_tiny.csv"), cache_dir=str(CACHE), max_train_samples=10)
    esol.setup("fit")
    assert len(esol.dataset("train")) == 10
    with pytest.raises(ValueError, match="max_train_samples must be >= 1, got 0"):
        MoleculeDataModule(path=str(DATA / "esol_tiny.csv"), max_train_samples=0)
