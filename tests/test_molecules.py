"""Molecular graphs: readers, splits, budgets, the GNN, bad input and the CLI (the cache: test_molecule_cache.py)."""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
import urllib.error
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold
from torch_geometric.data import Batch, Data

import varlen.datasets.download
import varlen.datasets.molecules as mol
from varlen.datamodules.molecules import MoleculeDataModule
from varlen.datasets.molecules import features
from varlen.datasets.molecules.readers import MoleculeNetSpec
from varlen.errors import DataError, DatasetNotFoundError, DownloadError
from varlen.models.molecules import MoleculeGNN
from varlen.prepare.splits import keyed_split
from varlen.testing import BadInput, DataModuleContract

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "molecules"
CONFIG = ROOT / "configs" / "molecules_esol.yaml"
CACHE = Path(tempfile.mkdtemp(prefix="varlen-molecules-test-"))
ESOL_TARGET = "measured log solubility in mols per litre"
GOOD = ["CCO", "CCC", "CCN", "CCCl", "c1ccccc1", "CC(=O)O", "CCOC", "c1ccncc1", "CC(C)O", "C1CCCCC1", "CCCCO"]


@pytest.fixture(scope="module", autouse=True)
def _remove_cache():
    yield
    shutil.rmtree(CACHE, ignore_errors=True)


def tiny(name: str = "esol_tiny.csv", **kwargs) -> MoleculeDataModule:
    kwargs.setdefault("cache_dir", str(CACHE))
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("path", str(DATA / name))
    return MoleculeDataModule(**kwargs)


def own_table(path: Path, content: str | bytes, **extra) -> dict:
    """DataModule arguments reading `content` written to `path` as a `smiles,y` table."""
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return {"dataset": None, "path": str(path), "smiles_column": "smiles", "target_columns": ["y"], **extra}


def good_rows(start: float = 0.0) -> str:
    return "".join(f"{s},{start + i / 10:.1f}\n" for i, s in enumerate(GOOD))


class TestMoleculeContract(DataModuleContract):
    config = str(CONFIG)
    cli_overrides = (f"--data.init_args.cache_dir={CACHE}",)

    def make_datamodule(self, **overrides):
        overrides.setdefault("cache_dir", str(CACHE))
        return MoleculeDataModule(**overrides)  # the packaged ESOL table

    def make_model(self, datamodule):
        return MoleculeGNN(num_tasks=datamodule.num_tasks, task=datamodule.task, hidden=32, num_layers=3)

    def budget_overrides(self):
        return {"max_tokens": 400}  # atoms + directed bonds; the largest ESOL molecule has 179

    def collated_cost(self, datamodule, batch):
        """Graphs are concatenated, not padded: the budget bounds the batch's atoms + directed bonds."""
        return np.array([int(batch.num_nodes) + int(batch.edge_index.shape[1])])

    def ddp_overrides(self, tmp_path: Path) -> list[str]:
        cache = tmp_path / "fresh-cache"
        assert not cache.exists()
        return [
            f"--data.init_args.path={DATA / 'esol_tiny.csv'}",
            f"--data.init_args.cache_dir={cache}",
            "--data.init_args.max_tokens=96",
        ]

    def bad_input(self, case: str, tmp_path: Path) -> BadInput | None:
        if case == "missing_source":
            absent = tmp_path / "absent" / "SAMPL.csv"
            return BadInput(
                {"dataset": "freesolv", "path": str(absent)},
                r"'freesolv' \(SAMPL\.csv\) not found \(looked in: .*absent/SAMPL\.csv\)\. To get it: download "
                r"https://deepchemdata\S+/SAMPL\.csv",
            )
        if case == "unreadable_file":  # a table cannot be half-read: raises under both policies
            overrides = own_table(tmp_path / "latin1.csv", b"smiles,y\nCCO,1.0\nCC\xe9O,2.0\n" + good_rows().encode())
            return BadInput(overrides, r"latin1\.csv, line 3: bytes that are not UTF-8")
        if case == "empty_source":
            return BadInput(own_table(tmp_path / "header.csv", "smiles,y\n\n"), r"header\.csv: .*header but no rows")
        if case == "non_finite":  # a broken target column, not a bad molecule: raises under both policies
            overrides = own_table(tmp_path / "inf.csv", "smiles,y\n" + good_rows() + "CCCC,inf\n")
            return BadInput(overrides, rf"inf\.csv, line {len(GOOD) + 2}: target 'y' is 'inf', not a finite number")
        if case == "empty_sample":  # RDKit parses '' into a molecule without atoms: skipped under "skip"
            overrides = own_table(tmp_path / "blank_smiles.csv", "smiles,y\nCCO,1.0\n ,2.0\n" + good_rows())
            return BadInput(overrides, r"blank_smiles\.csv, line 3 '': the SMILES has no atoms", skipped="no atoms")
        if case == "unknown_label":  # a classification target must be 0 or 1, under both policies
            rows = "".join(f"{s},{i % 2}\n" for i, s in enumerate(GOOD))
            overrides = own_table(tmp_path / "label.csv", "smiles,y\nCCO,1\nCCN,2\n" + rows, task="classification")
            return BadInput(overrides, r"label\.csv, line 3: target 'y' is 2; classification targets must be 0 or 1")
        return None

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
                sampler = datamodule.batch_sampler("val", shuffle=True)
                sampler.set_epoch(epoch)
                for indices in sampler:
                    batch = datamodule.collate_fn([dataset[i] for i in indices])
                    torch.testing.assert_close(model(batch), alone[batch["index"]], atol=1e-5, rtol=1e-4)

    def test_batch_layout(self, datamodule) -> None:
        batch = next(iter(datamodule.val_dataloader()))
        num_graphs = batch.num_graphs
        assert isinstance(datamodule.collate_fn, mol.MoleculeCollator)
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
    esol = mol.read_table(DATA / "esol_tiny.csv", "smiles", [ESOL_TARGET])
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
    model = MoleculeGNN(num_tasks=2, task="regression", hidden=16, num_layers=2)
    model.set_target_stats(dm.target_mean, dm.target_std)
    raw = model.raw(batch)
    target = (batch.y - model.target_mean) / model.target_std
    expected = ((raw - target)[batch.y_mask] ** 2).mean()
    torch.testing.assert_close(model.loss(raw, batch), expected)
    # the statistics come from the observed train targets only
    train = table.targets[dm.split_positions["train"]]
    np.testing.assert_allclose(dm.target_mean, np.nanmean(train, 0), rtol=1e-6)


def test_invalid_smiles_are_skipped_and_counted_by_reason() -> None:
    """What a user of an HIV-like table sees: counts by reason, with the file, line and SMILES of each."""
    strict = tiny("esol_invalid.csv")
    assert strict.on_bad == "raise"  # one default in every scenario; MoleculeNet configs say skip
    strict.prepare_data()
    with pytest.raises(DataError, match=r"esol_invalid\.csv, line 12 'C1CC'.*on_bad='skip'"):
        strict.setup("fit")
    dm = tiny("esol_invalid.csv", on_bad="skip")
    dm.prepare_data()
    with pytest.warns(UserWarning, match=r"skipped 2 bad item\(s\).*esol_invalid\.csv, line 12 'C1CC'"):
        dm.setup("fit")
    report = dm.report
    assert report.num_skipped == 2
    assert report.skipped("RDKit could not parse the SMILES") == 1
    assert report.skipped("RDKit could not sanitise the molecule") == 1
    examples = report.to_dict()["source"]["examples"]
    assert any(e.endswith("esol_invalid.csv, line 12 'C1CC': RDKit could not parse the SMILES") for e in examples)
    assert any("line 13 'C(C)(C)(C)(C)C' (Explicit valence for atom # 0 C, 5" in e for e in examples)
    assert "skipped in source: 1 molecule(s): RDKit could not sanitise the molecule" in str(report)
    assert sum(len(d) for d in dm.datasets.values()) == 10
    kept = np.concatenate(list(dm.split_positions.values()))
    assert not set(dm.table.rows[kept].tolist()) & {12, 13}
    assert not list(CACHE.glob("molecules/*.csv"))  # no report file beside the cache any more


def test_invalid_smiles_can_raise() -> None:
    dm = tiny("esol_invalid.csv", on_bad="raise")
    with pytest.raises(DataError, match=r"esol_invalid\.csv, line 12 'C1CC': RDKit could not parse the SMILES"):
        dm.setup("fit")


@pytest.mark.parametrize(
    ("name", "columns", "message"),
    [
        ("esol_tiny.csv", ["solubility"], r"esol_tiny\.csv: column\(s\) \['solubility'\] not found"),
        ("bad_target.csv", ["y"], r"bad_target\.csv, line 3: target 'y' is 'oops', not a finite number"),
        ("empty.csv", ["y"], r"empty\.csv: the file is empty \(expected a CSV header with 'smiles'"),
    ],
)
@pytest.mark.parametrize("on_bad", ["raise", "skip"])
def test_bad_tables_name_file_and_problem(name: str, columns: list[str], message: str, on_bad: str) -> None:
    dm = tiny(name, dataset=None, smiles_column="smiles", target_columns=columns, on_bad=on_bad)
    with pytest.raises(DataError, match=message):
        dm.setup("fit")


def test_undecodable_bytes_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "cp1252.csv"
    path.write_bytes(b"smiles,y\r\nCCO,1\r\n\r\nCCN,2\r\nOC\x96C,3\r\n")
    with pytest.raises(DataError, match=r"cp1252\.csv, line 5: bytes that are not UTF-8 \(b'\\x96C,3'"):
        mol.read_table(path, "smiles", ["y"])
    path.write_bytes(b"\xef\xbb\xbfsmiles,y\nCCO,1\n")  # a UTF-8 byte-order mark is fine
    assert mol.read_table(path, "smiles", ["y"]).smiles == ["CCO"]


@pytest.mark.parametrize("value", ["inf", "-Infinity", "1e40"])
def test_infinite_targets_are_refused_on_the_file_line(tmp_path: Path, value: str) -> None:
    """Blank lines are skipped but still counted, so the error names the line an editor shows."""
    path = tmp_path / "inf.csv"
    path.write_text(f"smiles,y\nCCO,1.0\n\nCCC,2.0\n   \nCCN,{value}\nCCCl,0.5\n")
    with pytest.raises(DataError, match=rf"inf\.csv, line 6: target 'y' is '{value}', not a finite number"):
        mol.read_table(path, "smiles", ["y"])
    path.write_text("smiles,y\nCCO,1.0\n\nCCC,2.0\n")
    table = mol.read_table(path, "smiles", ["y"])
    assert table.smiles == ["CCO", "CCC"] and table.rows.tolist() == [2, 4]


def test_missing_preset_says_what_to_fetch(tmp_path: Path) -> None:
    dm = MoleculeDataModule(dataset="freesolv", root=str(tmp_path), cache_dir=str(CACHE))
    with pytest.raises(DatasetNotFoundError, match=r"'freesolv' \(SAMPL\.csv\) not found") as info:
        dm.prepare_data()
    assert "download=True" in str(info.value) and mol.MOLECULENET["freesolv"].url in str(info.value)
    assert info.value.looked == [str(tmp_path / "SAMPL.csv")]
    with pytest.raises(DatasetNotFoundError, match=r"molecule table nothing\.csv not found"):
        mol.read_table(tmp_path / "nothing.csv", "smiles", ["y"])


# -- download (the graph and target cache: tests/test_molecule_cache.py) ----------------------


def fake_urlopen(path: Path):
    def urlopen(url, timeout=None):
        return io.BytesIO(path.read_bytes())

    return urlopen


def test_download_is_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = DATA / "SAMPL.csv"
    good = "sha256:" + hashlib.sha256(source.read_bytes()).hexdigest()
    monkeypatch.setattr(varlen.datasets.download.urllib.request, "urlopen", fake_urlopen(source))
    spec = mol.MOLECULENET["freesolv"]
    monkeypatch.setitem(mol.MOLECULENET, "freesolv", MoleculeNetSpec(**{**spec.__dict__, "checksum": "md5:0"}))
    dm = MoleculeDataModule(dataset="freesolv", root=str(tmp_path), download=True, cache_dir=str(CACHE))
    with pytest.raises(DownloadError, match=r"md5 is .* expected 0.*\(checksum from local copy of SAMPL\.csv\)"):
        dm.prepare_data()
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind
    monkeypatch.setitem(mol.MOLECULENET, "freesolv", MoleculeNetSpec(**{**spec.__dict__, "checksum": good}))
    dm = MoleculeDataModule(dataset="freesolv", root=str(tmp_path), download=True, batch_size=4, cache_dir=str(CACHE))
    dm.prepare_data()
    dm.setup("fit")
    assert (tmp_path / "SAMPL.csv").read_bytes() == source.read_bytes()
    assert sum(len(d) for d in dm.datasets.values()) == 20


def test_offline_download_says_where_to_put_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(url, timeout=None):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(varlen.datasets.download.urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError, match=r"downloading https://\S+/BBBP\.csv to .*BBBP\.csv failed: URLError"):
        mol.moleculenet_file("bbbp", tmp_path, download=True)


def test_packaged_esol_matches_its_recorded_checksum() -> None:
    checksum = mol.MOLECULENET["esol"].checksum
    assert varlen.datasets.download.checksum_mismatch(mol.packaged_esol(), checksum) is None


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


def test_random_split_is_the_named_stream_of_varlen_splits() -> None:
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
    # every molecule of ESOL is valid; its 11 copies of a molecule (canonical SMILES) go with their first
    canonical = dm.store.canonical
    expected = keyed_split(canonical, {"train": 0.8, "val": 0.1, "test": 0.1}, 0, name="molecule split")
    assert all(np.array_equal(splits[0][s], expected[s]) for s in expected)
    assert len(canonical) - len(set(canonical)) == 11


def test_split_fractions_are_checked() -> None:
    with pytest.raises(ValueError, match="sum < 1"):
        MoleculeDataModule(val_fraction=0.6, test_fraction=0.5)
    with pytest.raises(ValueError, match="test_fraction must be > 0"):
        MoleculeDataModule(test_fraction=0.0)


def test_an_empty_split_is_refused(tmp_path: Path) -> None:
    (tmp_path / "five.csv").write_text("smiles,y\nCCO,1\nCCC,2\nCCN,3\nCCCl,4\nc1ccccc1,5\n")
    dm = MoleculeDataModule(path=str(tmp_path / "five.csv"), target_columns=["y"], cache_dir=str(CACHE))
    with pytest.raises(DataError, match=r"five\.csv: the test split\(s\) would be empty \(5 usable molecules"):
        dm.setup("fit")


# -- batch assembly: gathered arrays to a real PyG Batch ------------------------------------


def reference_batch(dataset, indices, follow_batch=None) -> Batch:
    """What the collate built before it gathered: one `Data` per molecule and PyG's `from_data_list`."""
    graphs = []
    for i in indices:
        s = dataset[i]
        y = torch.from_numpy(s["y"]).view(1, -1)
        fields = {"x": torch.from_numpy(s["x"]), "edge_index": torch.from_numpy(s["edge_index"])}
        fields.update(edge_attr=torch.from_numpy(s["edge_attr"]), y=torch.nan_to_num(y), y_mask=~torch.isnan(y))
        if "descriptors" in s:
            fields["descriptors"] = torch.from_numpy(s["descriptors"]).view(1, -1)
        graphs.append(Data(**fields, num_nodes=len(s["x"])))
    batch = Batch.from_data_list(graphs, follow_batch=follow_batch)
    batch.index = torch.tensor(list(indices))  # after batching: PyG shifts a field named "index" by node counts
    return batch


def assert_same_tensors(ours: dict, expected: dict) -> None:
    assert list(ours) == list(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
        else:
            assert ours[key] == value, key


def assert_same_batch(ours: Batch, expected: Batch) -> None:
    """Same class, keys (in order), values, dtypes, and the bookkeeping `get_example` reads."""
    assert type(ours) is type(expected) and ours.num_graphs == expected.num_graphs
    assert_same_tensors(ours.to_dict(), expected.to_dict())
    assert_same_tensors(ours._slice_dict, expected._slice_dict)
    assert_same_tensors(ours._inc_dict, expected._inc_dict)
    assert ours._num_nodes == expected._num_nodes


def bondless_table(tmp_path: Path, **kwargs) -> MoleculeDataModule:
    """Two tasks with missing values, descriptors, and molecules without bonds (no edges)."""
    lines = ["smiles,a,b"] + [f"{s},{i / 7:.2f},{'' if i % 3 else i}" for i, s in enumerate(GOOD + ["C", "O", "[Na+]"])]
    (tmp_path / "mixed.csv").write_text("\n".join(lines) + "\n")
    kwargs = {"target_columns": ["a", "b"], "descriptors": True, "val_fraction": 0.1, "test_fraction": 0.1, **kwargs}
    dm = MoleculeDataModule(dataset=None, path=str(tmp_path / "mixed.csv"), smiles_column="smiles", **kwargs)
    dm.setup("fit")
    return dm


def test_gathered_batches_equal_pyg_from_data_list(tmp_path: Path) -> None:
    dm = bondless_table(tmp_path, cache_dir=str(CACHE))
    train = dm.dataset("train")
    bondless = np.flatnonzero(train.num_edges == 0).tolist()
    assert bondless and (~np.isnan(train.targets[train.positions])).sum() < train.targets[train.positions].size
    everything = list(range(len(train)))
    for indices in (everything, everything[::-1], [3], bondless, [*bondless, 0, *bondless]):
        expected = reference_batch(train, indices)
        assert_same_batch(DataModuleContract.collate(dm, "train", indices), expected)  # the loader's path
        assert_same_batch(dm.collate_fn([train[i] for i in indices]), expected)  # a list of samples
    for batch in dm.train_dataloader():
        assert_same_batch(batch, reference_batch(train, batch.index.tolist()))


def test_follow_batch_matches_pyg(tmp_path: Path) -> None:
    follow = ["x", "edge_attr", "y", "descriptors"]
    dm = bondless_table(tmp_path, cache_dir=str(CACHE), follow_batch=follow)
    train = dm.dataset("train")
    indices = list(range(len(train)))[::-1]
    batch = DataModuleContract.collate(dm, "train", indices)
    assert_same_batch(batch, reference_batch(train, indices, follow_batch=follow))
    assert torch.equal(batch.x_batch, batch.batch) and torch.equal(batch.y_ptr, torch.arange(len(train) + 1))
    with pytest.raises(ValueError, match=r"follow_batch \['index', 'nope'\]: not a field of the batch"):
        MoleculeDataModule(follow_batch=["x", "nope", "index"])


def test_batches_round_trip_and_feed_pyg_layers() -> None:
    from torch_geometric.nn import GINEConv, global_add_pool, global_mean_pool

    dm = MoleculeDataModule(descriptors=True, cache_dir=str(CACHE))
    dm.setup("fit")
    val = dm.dataset("val")
    batch = next(iter(dm.val_dataloader()))
    expected = reference_batch(val, batch.index.tolist())
    assert_same_batch(batch, expected)
    molecules = batch.to_data_list()
    for data, reference, i in zip(molecules, expected.to_data_list(), batch.index.tolist(), strict=True):
        assert_same_tensors(data.to_dict(), reference.to_dict())
        sample = val[i]
        assert np.array_equal(data.x.numpy(), sample["x"]) and np.array_equal(data.edge_index, sample["edge_index"])
        assert np.array_equal(data.descriptors[0].numpy(), sample["descriptors"])
    again = Batch.from_data_list(molecules)  # what a user's PyG loader over those molecules would build
    again.index = batch.index
    assert_same_batch(again, batch)
    torch.manual_seed(0)
    atoms = len(features.ATOM_FEATURES)
    mlp = torch.nn.Sequential(torch.nn.Linear(atoms, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    conv = GINEConv(mlp, edge_dim=len(features.BOND_FEATURES))
    model = MoleculeGNN(
        num_tasks=1, task="regression", hidden=16, num_layers=2, num_descriptors=dm.num_descriptors
    ).eval()

    def outputs(graphs: Batch) -> tuple[torch.Tensor, ...]:
        h = conv(graphs.x.float(), graphs.edge_index, graphs.edge_attr.float())
        return (
            global_add_pool(h, graphs.batch, size=graphs.num_graphs),
            global_mean_pool(h, graphs.batch),
            model(graphs),
        )

    with torch.no_grad():
        for ours, theirs in zip(outputs(batch), outputs(expected), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


# -- model ----------------------------------------------------------------------------------


class KnownLogits(MoleculeGNN):
    """Logits fixed by each graph's atom and bond counts: what the logged ROC-AUC must rank."""

    def raw(self, batch):
        atoms = torch.bincount(batch.batch, minlength=batch.num_graphs).float()
        bonds = torch.bincount(batch.batch[batch.edge_index[0]], minlength=batch.num_graphs).float() / 2
        # integers scaled once: equal scores are exactly equal, and the sigmoid keeps every order. Some
        # batches hold only task-0 scores in [0, 1], others not: a metric that decides per batch whether
        # it was given logits (BinaryAUROC does) would rank them on two scales
        return torch.stack([(3 * atoms - 2 * bonds - 4) / 8, (bonds - atoms * (atoms % 3)) / 4], dim=1)


def mann_whitney_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(a positive outscores a negative), ties counted half: the ROC-AUC."""
    positive, negative = scores[labels == 1], scores[labels == 0]
    wins = (positive[:, None] > negative[None, :]).sum() + 0.5 * (positive[:, None] == negative[None, :]).sum()
    return float(wins / (len(positive) * len(negative)))


def test_classification_logs_the_roc_auc_of_its_logits(tmp_path: Path) -> None:
    smiles = mol.read_table(DATA / "esol_tiny.csv", "smiles", [ESOL_TARGET]).smiles
    rng = np.random.default_rng(4)
    lines = ["smiles,a,b"]
    for i, s in enumerate(smiles):
        b = "" if i % 6 == 0 else str(int(rng.random() < 0.5))  # task b has missing labels: masked
        lines.append(f"{s},{int(rng.random() < 0.4)},{b}")
    (tmp_path / "two_tasks.csv").write_text("\n".join(lines) + "\n")
    dm = MoleculeDataModule(
        dataset=None,
        path=str(tmp_path / "two_tasks.csv"),
        smiles_column="smiles",
        target_columns=["a", "b"],
        task="classification",
        val_fraction=0.6,
        test_fraction=0.2,
        batch_size=4,
        max_tokens=None,  # batches of 4: some hold only scores in [0, 1], some do not
        cache_dir=str(CACHE),
    )
    model = KnownLogits(num_tasks=2, task="classification", hidden=8, num_layers=1)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    logged = trainer.validate(model, datamodule=dm, verbose=False)[0]
    val = dm.dataset("val")
    with torch.no_grad():
        scores = model.raw(dm.collate_fn([val[i] for i in range(len(val))])).numpy()
    labels = val.targets[val.positions]
    aucs = []
    for t in range(2):
        seen = ~np.isnan(labels[:, t])
        assert 0 < labels[seen, t].sum() < seen.sum(), "the val split needs both classes in every task"
        aucs.append(mann_whitney_auc(scores[seen, t], labels[seen, t]))
    assert abs(aucs[0] - aucs[1]) > 0.05 and 0.5 not in aucs  # a mean that can tell the tasks apart
    assert logged["val/roc_auc"] == pytest.approx(np.mean(aucs), abs=1e-6)


def test_classification_targets_must_be_binary(tmp_path: Path) -> None:
    lines = (DATA / "bbbp_tiny.csv").read_text().splitlines()
    header, first = lines[0].split(","), lines[1].split(",")
    column = header.index("p_np")
    first[column] = "2"
    (tmp_path / "bbbp.csv").write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    dm = MoleculeDataModule(path=str(tmp_path / "bbbp.csv"), dataset="bbbp", cache_dir=str(CACHE))
    with pytest.raises(DataError, match=r"bbbp\.csv, line 2: target 'p_np' is 2; classification targets must be 0"):
        dm.setup("fit")


def test_regression_outputs_are_in_original_units() -> None:
    dm = MoleculeDataModule(cache_dir=str(CACHE))
    dm.setup("fit")
    model = MoleculeGNN(num_tasks=1, task="regression", hidden=16, num_layers=2).eval()
    model.set_target_stats(dm.target_mean, dm.target_std)
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model.raw(batch) * float(dm.target_std[0]) + float(dm.target_mean[0]))


def test_descriptors_are_standardized_collated_and_invariant() -> None:
    dm = MoleculeDataModule(descriptors=True, cache_dir=str(CACHE))
    assert dm.num_descriptors == features.NUM_DESCRIPTORS
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
    model = MoleculeGNN(
        num_tasks=1, task="regression", hidden=16, num_layers=2, pooling="add_mean", num_descriptors=dm.num_descriptors
    ).eval()
    batch = next(iter(dm.val_dataloader()))
    assert batch.descriptors.shape == (batch.num_graphs, features.NUM_DESCRIPTORS)
    with torch.no_grad():
        alone = torch.cat([model(dm.collate_fn([val[int(i)]])) for i in batch["index"]])
        torch.testing.assert_close(model(batch), alone, atol=1e-5, rtol=1e-4)
        del batch.descriptors
        with pytest.raises(ValueError, match="descriptors=True"):
            model(batch)


# -- configs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["molecules_freesolv.yaml", "molecules_lipo.yaml"])
def test_real_data_configs_build(name: str, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varlen.cli.dispatch import main

    monkeypatch.chdir(ROOT)
    table = shared_data / "molecules" / ("SAMPL.csv" if "freesolv" in name else "lipo.csv")
    config = ROOT / "configs" / name
    assert f"${{VARLEN_DATA}}/molecules/{table.name}" in config.read_text()  # under the data folder
    cli = main(["--config", str(config), f"--data.path={table}", f"--data.cache_dir={CACHE}"], run=False)
    dm = cli.datamodule
    assert dm.on_bad == "skip"
    assert cli.model.num_tasks == dm.num_tasks == 1 and cli.model.task == "regression"
    if "freesolv" in name and table.is_file():  # Lipophilicity (4,200 molecules) is too slow for a unit test
        dm.prepare_data()
        dm.setup("fit")
        assert sum(len(d) for d in dm.datasets.values()) == 642 and dm.report.num_skipped == 0


# -- what a checkpoint carries --------------------------------------------------------------------


def _shifted_table(tmp_path: Path, reverse: bool = False) -> Path:
    """esol_tiny.csv with the targets in other units (x 3 + 50), optionally rows in reverse order."""
    lines = (DATA / "esol_tiny.csv").read_text().splitlines()
    header, rows = lines[0], [line.split(",") for line in lines[1:] if line.strip()]
    column = header.split(",").index(ESOL_TARGET)
    for row in rows:
        row[column] = f"{float(row[column]) * 3 + 50:.3f}"
    rows = rows[::-1] if reverse else rows
    path = tmp_path / "shifted.csv"
    path.write_text("\n".join([header, *(",".join(r) for r in rows)]) + "\n")
    return path


def _predictions(trainer_args: dict, model, dm, **kwargs) -> torch.Tensor:
    outputs = pl.Trainer(**trainer_args).predict(model, datamodule=dm, **kwargs)
    order = torch.cat([o["index"] for o in outputs]).argsort()
    return torch.cat([o["output"] for o in outputs])[order]


def test_predict_from_a_checkpoint_with_another_table_keeps_the_training_units(tmp_path: Path) -> None:
    """Fit on one table; predict from the checkpoint with a DataModule over a table whose targets
    have other statistics (the same molecules, in the same splits): the predictions are the trained
    model's, both through `load_from_checkpoint` and through `ckpt_path`."""
    args = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    trained = tiny(descriptors=True)
    torch.manual_seed(0)
    model = MoleculeGNN(num_tasks=1, hidden=16, num_layers=2, num_descriptors=trained.num_descriptors)
    trainer = pl.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=False, **args)
    trainer.fit(model, datamodule=trained)
    trainer.save_checkpoint(tmp_path / "fitted.ckpt")
    expected = _predictions(args, model, trained)
    mean = float(model.target_mean)

    other = dict(path=str(_shifted_table(tmp_path)), descriptors=True)
    restored = MoleculeGNN.load_from_checkpoint(tmp_path / "fitted.ckpt")
    got = _predictions(args, restored, tiny(**other))
    assert float(restored.target_mean) == pytest.approx(mean)  # not the other table's 3 x mean + 50
    torch.testing.assert_close(got, expected)
    fresh = MoleculeGNN(num_tasks=1, hidden=16, num_layers=2, num_descriptors=trained.num_descriptors)
    torch.testing.assert_close(_predictions(args, fresh, tiny(**other), ckpt_path=tmp_path / "fitted.ckpt"), expected)


def test_checkpoint_descriptor_statistics_standardize_another_table(tmp_path: Path) -> None:
    """Rows in another order put other molecules in the train split, so the table's own descriptor
    statistics differ; loaded from the checkpoint, every molecule's descriptors are the trained ones."""
    trained = tiny(descriptors=True)
    trained.setup("fit")
    other = tiny(path=str(_shifted_table(tmp_path, reverse=True)), descriptors=True)
    other.setup("fit")
    assert not np.allclose(other.descriptor_stats[0], trained.descriptor_stats[0])
    other.load_state_dict(trained.state_dict())
    np.testing.assert_allclose(other.target_mean, trained.target_mean)
    trained_rows, other_rows = descriptors_by_smiles(trained), descriptors_by_smiles(other)
    assert trained_rows.keys() == other_rows.keys()
    for smiles, row in other_rows.items():
        np.testing.assert_allclose(row, trained_rows[smiles], rtol=1e-5, atol=1e-6)


def descriptors_by_smiles(dm: MoleculeDataModule) -> dict[str, np.ndarray]:
    """The descriptors every split serves, by SMILES (standardised as the DataModule does it now)."""
    out = {}
    for dataset in dm.datasets.values():
        for i in range(len(dataset)):
            out[dm.table.smiles[dataset.positions[i]]] = dataset[i]["descriptors"]
    return out


def test_checkpoint_refuses_other_targets(tmp_path: Path) -> None:
    trained = tiny()
    trained.setup("fit")
    table = tmp_path / "t.csv"
    other = MoleculeDataModule(**own_table(table, "smiles,y\n" + good_rows(), cache_dir=str(CACHE)))
    other.setup("fit")
    with pytest.raises(DataError, match="target_columns"):
        other.load_state_dict(trained.state_dict())
