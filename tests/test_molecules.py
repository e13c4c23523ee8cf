"""Molecular graphs: readers, featurisation cache, splits, budgets, the GNN, the CLI and DDP."""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

import varlen.datasets.base
import varlen.datasets.molecules as mol
from varlen.datamodules.molecules import MoleculeDataModule
from varlen.models.molecules import MoleculeGNN
from varlen.testing import DataModuleContract, ddp_fit

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "molecules"
CONFIG = ROOT / "configs" / "molecules_esol.yaml"
CACHE = Path(tempfile.mkdtemp(prefix="varlen-molecules-test-"))


@pytest.fixture(scope="module", autouse=True)
def _remove_cache():
    yield
    shutil.rmtree(CACHE, ignore_errors=True)


def tiny(name: str = "esol_tiny.csv", **kwargs) -> MoleculeDataModule:
    kwargs.setdefault("cache_dir", str(CACHE))
    kwargs.setdefault("batch_size", 4)
    return MoleculeDataModule(path=str(DATA / name), **kwargs)


class TestMoleculeContract(DataModuleContract):
    config = str(CONFIG)
    cli_overrides = (f"--data.cache_dir={CACHE}",)

    def make_datamodule(self, **overrides):
        overrides.setdefault("cache_dir", str(CACHE))
        return MoleculeDataModule(**overrides)  # the packaged ESOL table

    def make_model(self, datamodule):
        return MoleculeGNN(num_tasks=datamodule.num_tasks, hidden=32, num_layers=3)

    def budget_overrides(self):
        return {"max_tokens": 400}  # atoms + directed bonds; the largest ESOL molecule has 179

    def test_real_batches_hold_the_budget(self) -> None:
        dm = self.make_datamodule(max_tokens=400)
        dm.setup("fit")
        sizes = []
        for batch in dm.train_dataloader():
            cost = batch.num_nodes + batch.edge_index.shape[1]
            assert cost <= 400, cost
            sizes.append(batch.num_graphs)
        assert max(sizes) > 5 * min(sizes)  # small molecules share batches, big ones get few mates

    def test_each_molecule_predicts_the_same_in_every_batch(self, datamodule, model) -> None:
        dataset = datamodule.dataset("val")
        with torch.no_grad():
            alone = torch.cat([model(datamodule.collate_fn([dataset[i]])) for i in range(len(dataset))])
            for epoch in range(2):
                datamodule.shuffle = True
                sampler = datamodule.batch_sampler("val", shuffle=True)
                sampler.set_epoch(epoch)
                for indices in sampler:
                    batch = datamodule.collate_fn([dataset[i] for i in indices])
                    torch.testing.assert_close(model(batch), alone[batch["index"]], atol=1e-5, rtol=1e-4)

    def test_batch_layout(self, datamodule) -> None:
        batch = next(iter(datamodule.val_dataloader()))
        num_graphs = batch.num_graphs
        assert batch["index"].dtype == torch.long and batch["index"].shape == (num_graphs,)
        assert batch.ptr.shape == (num_graphs + 1,) and int(batch.ptr[-1]) == batch.num_nodes
        assert batch.y.shape == batch.y_mask.shape == (num_graphs, 1)
        # edges stay inside their own graph after PyG's node offsets
        assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]])
        sample = datamodule.dataset("val")[int(batch["index"][0])]
        assert batch.ptr[1] - batch.ptr[0] == len(sample["x"])
        stats = datamodule.batch_stats(batch)
        assert stats.samples == num_graphs and stats.real == stats.padded == batch.num_nodes


# -- reading and bad input ------------------------------------------------------------------


def test_lengths_are_atoms_plus_directed_bonds() -> None:
    dm = tiny()
    dm.setup("fit")
    dataset = dm.dataset("train")
    for i in range(len(dataset)):
        sample = dataset[i]
        molecule = Chem.MolFromSmiles(dm.table.smiles[dataset.positions[i]])
        assert len(sample["x"]) == molecule.GetNumAtoms()
        assert dataset.lengths[i] == molecule.GetNumAtoms() + 2 * molecule.GetNumBonds()
        assert sample["index"] == i


def test_whitespace_and_crlf_are_handled() -> None:
    table = mol.read_table(DATA / "SAMPL.csv", "smiles", ["expt"])
    assert len(table.smiles) == 20 and all(s == s.strip() for s in table.smiles)
    assert np.isfinite(table.targets).all()
    esol = mol.read_table(DATA / "esol_tiny.csv", "smiles", ["measured log solubility in mols per litre"])
    assert esol.smiles[0] == "CCO"  # written with a trailing space


def test_multitask_missing_values_are_masked() -> None:
    dm = tiny("multitask.csv", dataset=None, smiles_column="smiles", target_columns=["task_a", "task_b"])
    assert dm.num_tasks == 2
    dm.setup("fit")
    table = dm.table
    assert np.isnan(table.targets[0, 0]) and np.isnan(table.targets[1, 1])  # "" and " nan"
    batch = dm.collate_fn([dm.dataset("train")[i] for i in range(len(dm.dataset("train")))])
    assert (~batch.y_mask).any() and batch.y_mask.any()
    assert torch.all(batch.y[~batch.y_mask] == 0)
    model = MoleculeGNN(num_tasks=2, hidden=16, num_layers=2)
    model.set_target_stats(dm.target_mean, dm.target_std)
    raw = model.raw(batch)
    target = (batch.y - model.target_mean) / model.target_std
    expected = ((raw - target)[batch.y_mask] ** 2).mean()
    torch.testing.assert_close(model.loss(raw, batch), expected)
    # the statistics come from the observed train targets only
    train = table.targets[dm.split_positions["train"]]
    np.testing.assert_allclose(dm.target_mean, np.nanmean(train, 0), rtol=1e-6)


def test_invalid_smiles_are_skipped_and_reported() -> None:
    dm = tiny("esol_invalid.csv")
    with pytest.warns(UserWarning, match="skipped 2 bad molecule"):
        dm.setup("fit")
    assert dm.num_invalid == 2 and dm.invalid_rows == [12, 13] and dm.skip_report.total == 2
    report = dm.invalid_report.read_text().splitlines()
    assert report[0] == "line,smiles,reason"
    assert report[1].startswith("12,C1CC,") and "parse" in report[1]
    assert report[2].startswith("13,") and "sanitisation" in report[2]
    assert sum(len(d) for d in dm.datasets.values()) == 10


def test_invalid_smiles_can_raise() -> None:
    with pytest.raises(ValueError, match=r"2 invalid SMILES.*line 12 'C1CC'"):
        tiny("esol_invalid.csv", on_invalid="error").setup("fit")


@pytest.mark.parametrize(
    ("name", "columns", "message"),
    [
        ("esol_tiny.csv", ["solubility"], r"column\(s\) \['solubility'\] not found"),
        ("bad_target.csv", ["y"], r"bad_target.csv, line 3: target 'y' is 'oops', not a finite number"),
        ("empty.csv", ["y"], "the file is empty"),
    ],
)
def test_bad_tables_name_file_and_problem(name: str, columns: list[str], message: str) -> None:
    dm = tiny(name, dataset=None, smiles_column="smiles", target_columns=columns)
    with pytest.raises(ValueError, match=message):
        dm.setup("fit")


@pytest.mark.parametrize("value", ["inf", "-Infinity", "1e40"])
def test_infinite_targets_are_refused_on_the_file_line(tmp_path: Path, value: str) -> None:
    """Blank lines are skipped but still counted, so the error names the line an editor shows."""
    path = tmp_path / "inf.csv"
    path.write_text(f"smiles,y\nCCO,1.0\n\nCCC,2.0\n   \nCCN,{value}\nCCCl,0.5\n")
    with pytest.raises(ValueError, match=rf"inf.csv, line 6: target 'y' is '{value}', not a finite number"):
        mol.read_table(path, "smiles", ["y"])
    path.write_text("smiles,y\nCCO,1.0\n\nCCC,2.0\n")
    table = mol.read_table(path, "smiles", ["y"])
    assert table.smiles == ["CCO", "CCC"] and table.rows.tolist() == [2, 4]


def test_missing_preset_says_what_to_fetch(tmp_path: Path) -> None:
    dm = MoleculeDataModule(dataset="freesolv", root=str(tmp_path), cache_dir=str(CACHE))
    with pytest.raises(mol.DatasetNotFoundError, match="SAMPL.csv"):
        dm.setup("fit")


# -- cache and download ---------------------------------------------------------------------


def test_graphs_are_cached_by_file_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "t.csv"
    shutil.copy(DATA / "esol_tiny.csv", source)
    first = MoleculeDataModule(path=str(source), cache_dir=str(tmp_path / "c"), batch_size=4)
    first.setup("fit")
    files = list((tmp_path / "c" / "molecules").glob("t-*.pt"))
    assert len(files) == 1

    def no_featurising(*args, **kwargs):
        raise AssertionError("featurised again although the cache is valid")

    monkeypatch.setattr(mol, "featurize_all", no_featurising)
    again = MoleculeDataModule(path=str(source), cache_dir=str(tmp_path / "c"), batch_size=4)
    again.setup("fit")
    np.testing.assert_array_equal(again.dataset("train").lengths, first.dataset("train").lengths)
    # an edited file has another hash, hence another cache entry (featurised again)
    source.write_text(source.read_text().replace("CCO", "CCN", 1))
    with pytest.raises(AssertionError, match="featurised again"):
        MoleculeDataModule(path=str(source), cache_dir=str(tmp_path / "c"), batch_size=4).setup("fit")


def test_parallel_featurisation_matches_serial() -> None:
    table = mol.read_table(DATA / "esol_tiny.csv", "smiles", ["measured log solubility in mols per litre"])
    serial = mol.featurize_all(table.smiles)
    parallel = mol.featurize_all(table.smiles, num_proc=2, chunk=8)
    for key in ("x", "edge_index", "edge_attr", "node_ptr", "edge_ptr", "valid", "descriptors"):
        np.testing.assert_array_equal(getattr(serial, key), getattr(parallel, key))
    assert serial.scaffolds == parallel.scaffolds


def fake_urlopen(path: Path):
    def urlopen(url, timeout=None):
        return io.BytesIO(path.read_bytes())

    return urlopen


def test_download_is_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = DATA / "SAMPL.csv"
    good = "sha256:" + hashlib.sha256(source.read_bytes()).hexdigest()
    monkeypatch.setattr(varlen.datasets.base.urllib.request, "urlopen", fake_urlopen(source))
    spec = mol.MOLECULENET["freesolv"]
    monkeypatch.setitem(mol.MOLECULENET, "freesolv", mol.MoleculeNetSpec(**{**spec.__dict__, "checksum": "md5:0"}))
    with pytest.raises(OSError, match="md5 is .* expected 0"):
        MoleculeDataModule(dataset="freesolv", root=str(tmp_path), download=True, cache_dir=str(CACHE)).setup("fit")
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind
    monkeypatch.setitem(mol.MOLECULENET, "freesolv", mol.MoleculeNetSpec(**{**spec.__dict__, "checksum": good}))
    dm = MoleculeDataModule(dataset="freesolv", root=str(tmp_path), download=True, batch_size=4, cache_dir=str(CACHE))
    dm.prepare_data()
    dm.setup("fit")
    assert (tmp_path / "SAMPL.csv").read_bytes() == source.read_bytes()
    assert sum(len(d) for d in dm.datasets.values()) == 20


def test_packaged_esol_matches_its_recorded_checksum() -> None:
    mol.verify_checksum(mol.packaged_esol(), mol.MOLECULENET["esol"].checksum)


# -- splits ---------------------------------------------------------------------------------


def scaffolds_of(dm: MoleculeDataModule, split: str) -> set[str]:
    smiles = [dm.table.smiles[p] for p in dm.split_positions[split]]
    return {MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(s), includeChirality=False) for s in smiles}


def test_scaffold_split_shares_no_scaffold() -> None:
    dm = MoleculeDataModule(split="scaffold", cache_dir=str(CACHE))
    dm.setup("fit")
    train, val, test = (scaffolds_of(dm, s) for s in ("train", "val", "test"))
    assert not (train & val) and not (train & test) and not (val & test)
    sizes = [len(dm.split_positions[s]) for s in ("train", "val", "test")]
    assert sum(sizes) == 1128 and sizes[0] >= 0.75 * 1128
    again = MoleculeDataModule(split="scaffold", seed=5, cache_dir=str(CACHE))
    again.setup("fit")
    assert all(np.array_equal(dm.split_positions[s], again.split_positions[s]) for s in dm.split_positions)


def test_random_split_is_seeded_and_disjoint() -> None:
    splits = []
    for seed in (0, 0, 1):
        dm = MoleculeDataModule(seed=seed, cache_dir=str(CACHE))
        dm.setup("fit")
        splits.append(dm.split_positions)
    assert all(np.array_equal(splits[0][s], splits[1][s]) for s in splits[0])
    assert not np.array_equal(splits[0]["test"], splits[2]["test"])
    together = np.concatenate(list(splits[0].values()))
    assert len(np.unique(together)) == len(together) == 1128
    assert [len(splits[0][s]) for s in ("train", "val", "test")] == [902, 113, 113]


# -- model ----------------------------------------------------------------------------------


def test_classification_logs_roc_auc(tmp_path: Path) -> None:
    dm = tiny("bbbp_tiny.csv", dataset="bbbp", split_fractions=(0.5, 0.25, 0.25))
    assert dm.task == "classification"
    model = MoleculeGNN(num_tasks=dm.num_tasks, task=dm.task, hidden=16, num_layers=2)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    assert "val/roc_auc" in metrics and 0.0 <= float(metrics["val/roc_auc"]) <= 1.0


def test_an_empty_split_is_refused(tmp_path: Path) -> None:
    (tmp_path / "five.csv").write_text("smiles,y\nCCO,1\nCCC,2\nCCN,3\nCCCl,4\nc1ccccc1,5\n")
    dm = MoleculeDataModule(path=str(tmp_path / "five.csv"), target_columns=["y"], cache_dir=str(CACHE))
    with pytest.raises(ValueError, match=r"five.csv: the val split\(s\) would be empty \(5 valid molecules"):
        dm.setup("fit")


def test_classification_targets_must_be_binary(tmp_path: Path) -> None:
    lines = (DATA / "bbbp_tiny.csv").read_text().splitlines()
    header, first = lines[0].split(","), lines[1].split(",")
    column = header.index("p_np")
    first[column] = "2"
    (tmp_path / "bbbp.csv").write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    dm = MoleculeDataModule(path=str(tmp_path / "bbbp.csv"), dataset="bbbp", cache_dir=str(CACHE))
    with pytest.raises(ValueError, match=r"bbbp.csv, line 2: target 'p_np' is 2; classification targets must be 0"):
        dm.setup("fit")


def test_regression_outputs_are_in_original_units() -> None:
    dm = MoleculeDataModule(cache_dir=str(CACHE))
    dm.setup("fit")
    model = MoleculeGNN(hidden=16, num_layers=2).eval()
    model.set_target_stats(dm.target_mean, dm.target_std)
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model.raw(batch) * float(dm.target_std[0]) + float(dm.target_mean[0]))


def test_descriptors_are_standardised_collated_and_invariant() -> None:
    dm = MoleculeDataModule(descriptors=True, cache_dir=str(CACHE))
    assert dm.num_descriptors == mol.NUM_DESCRIPTORS
    dm.setup("fit")
    train = np.stack([dm.dataset("train")[i]["descriptors"] for i in range(len(dm.dataset("train")))])
    np.testing.assert_allclose(train.mean(0), 0.0, atol=1e-4)  # train statistics, not all molecules
    # logP is the first descriptor: check one molecule against RDKit directly
    from rdkit.Chem import Crippen

    store = dm.dataset("val").store
    position = int(dm.split_positions["val"][0])
    assert store.descriptors[position, 0] == pytest.approx(
        Crippen.MolLogP(Chem.MolFromSmiles(dm.table.smiles[position]))
    )
    val = dm.dataset("val")
    model = MoleculeGNN(hidden=16, num_layers=2, pooling="add_mean", num_descriptors=dm.num_descriptors).eval()
    batch = next(iter(dm.val_dataloader()))
    assert batch.descriptors.shape == (batch.num_graphs, mol.NUM_DESCRIPTORS)
    with torch.no_grad():
        alone = torch.cat([model(dm.collate_fn([val[int(i)]])) for i in batch["index"]])
        torch.testing.assert_close(model(batch), alone, atol=1e-5, rtol=1e-4)
        del batch.descriptors
        with pytest.raises(ValueError, match="descriptors=True"):
            model(batch)


# -- configs, DDP ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["molecules_freesolv.yaml", "molecules_lipo.yaml"])
def test_real_data_configs_build(name: str, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varlen.cli import main

    monkeypatch.chdir(ROOT)
    table = shared_data / "molecules" / ("SAMPL.csv" if "freesolv" in name else "lipo.csv")
    config = ROOT / "configs" / name
    assert f"../shared/data/molecules/{table.name}" in config.read_text()  # relative to the checkout
    cli = main(["--config", str(config), f"--data.path={table}", f"--data.cache_dir={CACHE}"], run=False)
    dm = cli.datamodule
    assert cli.model.num_tasks == dm.num_tasks == 1 and cli.model.task == "regression"
    if "freesolv" in name:  # Lipophilicity (4,200 molecules) is too slow to featurise in a unit test
        dm.setup("fit")
        assert sum(len(d) for d in dm.datasets.values()) + dm.num_invalid == 642


def test_ddp_fit_two_processes(tmp_path: Path) -> None:
    records = ddp_fit(CONFIG, tmp_path, [f"--data.cache_dir={CACHE}", "--trainer.limit_train_batches=3"])
    assert records[0]["global_step"] == records[1]["global_step"] == 3
    assert records[0]["batches"] == records[1]["batches"] == 3
    assert not set(records[0]["indices"]) & set(records[1]["indices"])
