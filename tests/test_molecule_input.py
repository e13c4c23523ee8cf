"""Molecule input that used to stall the build or bend the split without a word (issue 29).

A molecule over `max_atoms` is refused (or counted) before any featurisation; scaffolds are
computed for scaffold splits only; copies of a molecule stay in one split and are counted.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem, rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold

from varlen.datamodules.molecules import MoleculeDataModule
from varlen.datasets.molecules.features import MAX_ATOMS
from varlen.errors import DataError

GOOD = ["CCO", "CCC", "CCN", "CCCl", "c1ccccc1", "CC(=O)O", "CCOC", "c1ccncc1", "CC(C)O", "C1CCCCC1", "CCCCO"]


def table(tmp_path: Path, smiles: list[str], **kwargs) -> MoleculeDataModule:
    """A DataModule over a `smiles,y` table of `smiles` (line 2 is the first)."""
    path = tmp_path / "table.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{i / 10:.1f}\n" for i, s in enumerate(smiles)))
    kwargs = {"cache_dir": str(tmp_path / "cache"), "batch_size": 4, "split": "random", **kwargs}
    return MoleculeDataModule(dataset=None, path=str(path), smiles_column="smiles", target_columns=["y"], **kwargs)


@pytest.fixture
def scaffold_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every molecule RDKit's Murcko scaffold is computed for (by SMILES, or the molecule's SMILES)."""
    calls, original = [], MurckoScaffold.MurckoScaffoldSmiles

    def counting(smiles=None, mol=None, **kwargs):
        calls.append(smiles if smiles is not None else Chem.MolToSmiles(mol))
        return original(smiles=smiles, mol=mol, **kwargs)

    monkeypatch.setattr(MurckoScaffold, "MurckoScaffoldSmiles", counting)
    return calls


# -- a molecule too large to featurise (item 1) --------------------------------------------------


def test_a_5000_atom_molecule_is_refused_by_its_line_and_size_under_the_default_limit(tmp_path: Path) -> None:
    """Before: the scaffold of the 5,000-carbon chain ran for minutes under split: random, then kept it."""
    dm = table(tmp_path, [*GOOD[:5], "C" * 5000, *GOOD[5:]])
    message = r"table\.csv, line 7 'C+'\.\.\. \(5,000 characters\) \(5000 atoms, max_atoms=1000\): more atoms than"
    with pytest.raises(DataError, match=message) as error:
        dm.prepare_data()
        dm.setup("fit")
    assert "C" * 100 not in str(error.value)  # the SMILES is shown shortened


def test_a_5000_atom_molecule_is_counted_under_skip_and_the_rest_is_served(tmp_path: Path) -> None:
    dm = table(tmp_path, [*GOOD[:5], "C" * 5000, *GOOD[5:]], on_bad="skip")
    dm.prepare_data()
    with pytest.warns(UserWarning, match="more atoms than max_atoms"):
        dm.setup("fit")
    assert dm.report.skipped("more atoms than max_atoms") == 1 and dm.report.num_skipped == 1
    assert sum(len(d) for d in dm.datasets.values()) == len(GOOD)
    assert int(dm.store.num_nodes.max()) < 10  # the chain was never featurised


def test_max_atoms_is_an_argument_and_part_of_the_graph_cache(tmp_path: Path) -> None:
    smiles = [*GOOD, "C" * 40]
    strict = table(tmp_path, smiles, max_atoms=30, on_bad="skip")
    with pytest.warns(UserWarning, match="more atoms than max_atoms"):
        strict.setup("fit")
    assert strict.report.skipped("more atoms than max_atoms") == 1
    loose = table(tmp_path, smiles, max_atoms=40, on_bad="skip")  # the same file, another table
    loose.setup("fit")
    assert loose.report.num_skipped == 0 and int(loose.store.num_nodes.max()) == 40
    assert loose.store.table.path != strict.store.table.path
    with pytest.raises(ValueError, match="max_atoms must be >= 1"):
        table(tmp_path, smiles, max_atoms=0)


def test_the_shipped_moleculenet_tables_stay_far_under_the_default_limit(shared_data: Path) -> None:
    largest = {}
    with rdBase.BlockLogs():
        for path in sorted((shared_data / "molecules").glob("*.csv*")):
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt") as handle:
                header = handle.readline().strip().split(",")
                column = header.index("smiles")
                sizes = []
                for line in handle:
                    mol = Chem.MolFromSmiles(line.rstrip("\r\n").split(",")[column].strip(), sanitize=False)
                    sizes.append(mol.GetNumAtoms() if mol is not None else 0)
            largest[path.name] = max(sizes)
    assert largest["HIV.csv.gz"] == 222 and max(largest.values()) * 4 < MAX_ATOMS


# -- scaffolds only for the splits that need them ------------------------------------------------


def test_a_random_split_computes_no_scaffold(tmp_path: Path, scaffold_calls: list[str]) -> None:
    dm = table(tmp_path, GOOD)
    dm.prepare_data()
    dm.setup("fit")
    assert scaffold_calls == []


def test_a_scaffold_split_never_meets_a_molecule_over_max_atoms(tmp_path: Path, scaffold_calls: list[str]) -> None:
    ring_chain = "C1CCCCC1" + "C" * 60  # 66 atoms
    dm = table(tmp_path, [*GOOD, ring_chain, "C1CCCCC1CC"], split="scaffold", max_atoms=50, on_bad="skip")
    dm.prepare_data()
    with pytest.warns(UserWarning, match="more atoms than max_atoms"):
        dm.setup("fit")
    assert dm.report.skipped("more atoms than max_atoms") == 1
    assert len(scaffold_calls) == len(GOOD) + 1 and not any(len(s) > 50 for s in scaffold_calls)
    cyclohexanes = [p for p in range(len(dm.store)) if dm.store.canonical[p] in ("C1CCCCC1", "CCC1CCCCC1")]
    assert len({name for name, part in dm.split_positions.items() for p in cyclohexanes if p in part}) == 1
    again = table(tmp_path, [*GOOD, ring_chain, "C1CCCCC1CC"], split="scaffold", max_atoms=50, on_bad="skip")
    with pytest.warns(UserWarning, match="more atoms than max_atoms"):
        again.setup("fit")  # the scaffolds are mapped from their table, not computed again
    assert len(scaffold_calls) == len(GOOD) + 1


# -- duplicates (item 3) --------------------------------------------------------------------------

CHAINS = [f"{'C' * k}O" for k in range(1, 50)]  # 49 distinct alcohols
#: 51 copies: 30 written as they are, 21 written the other way round (the same canonical SMILES)
COPIES = CHAINS[:30] + [f"O{'C' * k}" for k in range(1, 22)]


def test_copies_of_a_molecule_share_a_split_and_each_split_counts_its_copies(tmp_path: Path) -> None:
    """Before: 51 copies under split: random landed 38 / 6 / 7 in train / val / test, unreported."""
    dm = table(tmp_path, CHAINS + COPIES)
    dm.setup("fit")
    canonical = dm.store.canonical
    homes = {name: set(canonical[part].tolist()) for name, part in dm.split_positions.items()}
    assert not (homes["train"] & homes["val"]) and not (homes["train"] & homes["test"])
    assert not (homes["val"] & homes["test"])
    counted = dm.report.duplicates
    assert sum(d.repeated for d in counted.values()) == 51 and all(d.in_train == 0 for d in counted.values())
    for name, part in dm.split_positions.items():
        assert counted[name].repeated == len(part) - len(homes[name]) and counted[name].unit == "molecule"
    assert dm.report.to_dict()["train"]["duplicates"] == {
        "repeated": counted["train"].repeated,
        "in_train": 0,
        "unit": "molecule",
    }
    assert f"duplicates in train: {counted['train'].repeated} molecule(s) repeat an earlier one" in str(dm.report)


def test_deduplicate_keeps_the_first_line_of_each_molecule(tmp_path: Path) -> None:
    dm = table(tmp_path, CHAINS + COPIES, deduplicate=True)
    dm.setup("fit")
    kept = np.concatenate(list(dm.split_positions.values()))
    assert sorted(kept.tolist()) == list(range(len(CHAINS)))  # the first lines
    assert dm.report.unused("deduplicate=True") == 51
    assert all(d.repeated == 0 for d in dm.report.duplicates.values())
    assert "51 molecule (copy of an earlier line's molecule, deduplicate=True)" in str(dm.report)
