"""The molecules' graph and target tables: built once per node in prepare_data, mapped by every process after.

What is checked: where the tables are and what keys them, that a second DataModule or a fresh
process reads no CSV and featurises nothing, that a bad file is rebuilt with a warning (never
used), that two processes building at once leave one valid table, that a dataset pickles as
paths plus positions, and that an unwritable cache folder is a DataError naming it.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from faults import flip_bytes, rewrite, with_value

import varlen.datamodules.molecules as molecule_dm
import varlen.datasets.molecules as mol
from varlen.datamodules.molecules import MoleculeDataModule
from varlen.datasets.molecules import features, graphs, targets
from varlen.errors import DataError
from varlen.storage.tables import open_table, write_table

DATA = Path(__file__).parent / "data" / "molecules"
ESOL_TARGET = "measured log solubility in mols per litre"


def tiny(cache: Path, name: str = "esol_tiny.csv", **kwargs) -> MoleculeDataModule:
    kwargs.setdefault("path", str(DATA / name))
    return MoleculeDataModule(cache_dir=str(cache), batch_size=4, **kwargs)


def graph_files(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "molecules").glob("*.arrow") if "-targets-" not in p.name)


def target_files(cache: Path) -> list[Path]:
    return sorted((cache / "molecules").glob("*-targets-*.arrow"))


def no_featurising(*args, **kwargs):
    raise AssertionError("featurised again although the cache is valid")


def no_reading(*args, **kwargs):
    raise AssertionError("read the CSV again although the cache is valid")


def forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, featurising or reading the CSV fails the test: only mapping is allowed."""
    monkeypatch.setattr(graphs, "featurize_all", no_featurising)
    monkeypatch.setattr(molecule_dm, "read_table", no_reading)


def test_prepare_data_builds_both_tables_and_setup_only_maps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, cache = tmp_path / "t.csv", tmp_path / "c"
    shutil.copy(DATA / "esol_tiny.csv", source)
    first = tiny(cache, path=str(source))
    first.prepare_data()
    assert graph_files(cache) == [graphs.graph_cache_path(source, "smiles", cache)]
    assert target_files(cache) == [targets.targets_cache_path(source, "smiles", [ESOL_TARGET], "regression", cache)]
    forbid_building(monkeypatch)
    first.setup("fit")  # maps what prepare_data built
    again = tiny(cache, path=str(source))
    again.prepare_data()
    again.setup("fit")
    np.testing.assert_array_equal(again.dataset("train").lengths, first.dataset("train").lengths)
    assert not again.dataset("train").store.atoms.values.flags.writeable  # a view of the file
    # an edited file has another hash, hence other tables (built again)
    source.write_text(source.read_text().replace("CCO", "CCN", 1))
    with pytest.raises(AssertionError, match="read the CSV again"):
        tiny(cache, path=str(source)).prepare_data()


def test_the_graphs_are_keyed_by_the_featurizer_and_the_targets_by_their_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    featurize = graphs.featurize_all

    def counting(*args, **kwargs):
        calls.append(1)
        return featurize(*args, **kwargs)

    monkeypatch.setattr(graphs, "featurize_all", counting)
    tiny(tmp_path).prepare_data()
    assert len(calls) == 1
    other_target = tiny(tmp_path, dataset=None, smiles_column="smiles", target_columns=["Molecular Weight"])
    other_target.prepare_data()  # new targets, the same graphs
    assert len(calls) == 1 and len(target_files(tmp_path)) == 2 and len(graph_files(tmp_path)) == 1
    monkeypatch.setattr(features, "FEATURIZER_VERSION", features.FEATURIZER_VERSION + "-bumped")
    tiny(tmp_path).prepare_data()
    assert len(calls) == 2 and len(graph_files(tmp_path)) == 2
    forbid_building(monkeypatch)  # same version: nothing is built
    dm = tiny(tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    assert sum(len(d) for d in dm.datasets.values()) == 40


class RunsCode:
    """A pickle payload: unpickling it creates `marker` (what a hostile cache file could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def damage(path: Path, how: str, marker: Path, tmp_path: Path) -> None:
    """Put a bad file at `path`: a new file (the one a live DataModule maps stays as it was, as
    after an atomic replace; truncating a mapped file in place would crash its readers)."""
    key = graphs.graph_key(DATA / "esol_tiny.csv", "smiles")
    content = path.read_bytes()
    path.unlink()
    if how == "truncated":
        path.write_bytes(content[: len(content) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "other_format":
        write_table(path, {"x": np.zeros(3)}, version="molecule-graphs-arrow-0", key=key)
    elif how == "other_inputs":  # another table's graphs where these should be
        other = tmp_path / "other.csv"
        other.write_text("smiles,y\nCCO,1\nCCC,2\n")
        shutil.copy(mol.cached_graphs(mol.read_table(other, "smiles", ["y"]), "smiles", tmp_path / "o")[1], path)
    elif how == "other_columns":
        write_table(path, {"atoms": np.zeros((40, 8), np.int16)}, version=graphs.CACHE_FORMAT, key=key)
    elif how == "flipped":  # sixteen bytes of the middle changed (a disk's, a copy's fault)
        path.write_bytes(content)
        flip_bytes(path)
    elif how == "bond_outside":  # a bond to an atom of the next molecule, under a valid checksum
        path.write_bytes(content)
        rewrite(path, edges=lambda edges: with_value(edges, 5, 99))
    else:  # a pickle where the table should be (what a hostile file could hold)
        path.write_bytes(pickle.dumps(RunsCode(marker)))


@pytest.mark.parametrize(
    "how", ["truncated", "empty", "other_format", "other_inputs", "other_columns", "pickled", "flipped", "bond_outside"]
)
def test_an_unusable_graph_table_is_rebuilt_with_a_warning(tmp_path: Path, how: str) -> None:
    cache, marker = tmp_path / "c", tmp_path / "code-ran"
    dm = tiny(cache)
    dm.prepare_data()
    dm.setup("fit")
    expected = {split: (d.lengths, d.positions) for split, d in dm.datasets.items()}
    served = {name: np.array(value) for name, value in vars(dm.dataset("train").__getitems__(range(16))).items()}
    path = graphs.graph_cache_path(DATA / "esol_tiny.csv", "smiles", cache)
    damage(path, how, marker, tmp_path)
    again = tiny(cache)
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(path))} .*; building it again") as said:
        again.prepare_data()
    assert len([w for w in said if "building it again" in str(w.message)]) == 1  # said once
    assert not marker.exists()  # nothing was unpickled
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.setup("fit")
    assert not [w for w in caught if "cache" in str(w.message)], [str(w.message) for w in caught]
    for split, (lengths, positions) in expected.items():
        np.testing.assert_array_equal(again.dataset(split).lengths, lengths)
        np.testing.assert_array_equal(again.dataset(split).positions, positions)
    for name, value in vars(again.dataset("train").__getitems__(range(16))).items():
        np.testing.assert_array_equal(value, served[name], err_msg=name)  # the clean table's molecules
    assert open_table(path, version=graphs.CACHE_FORMAT, key=graphs.graph_key(DATA / "esol_tiny.csv", "smiles"))


def test_a_target_table_cut_short_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    tiny(tmp_path).prepare_data()
    [path] = target_files(tmp_path)
    content = path.read_bytes()
    path.unlink()
    path.write_bytes(content[:100])
    dm = tiny(tmp_path)
    with pytest.warns(UserWarning, match=rf"cache {re.escape(str(path))} is unreadable.*building it again"):
        dm.setup("fit")
    read = mol.read_table(DATA / "esol_tiny.csv", "smiles", [ESOL_TARGET])
    np.testing.assert_array_equal(dm.table.targets, read.targets)
    np.testing.assert_array_equal(dm.table.rows, read.rows)


def test_featurisation_errors_survive_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny(tmp_path, "esol_invalid.csv", on_bad="skip").prepare_data()
    forbid_building(monkeypatch)
    dm = tiny(tmp_path, "esol_invalid.csv", on_bad="skip")
    with pytest.warns(UserWarning, match=r"skipped 2 bad item\(s\).*esol_invalid\.csv, line 12 'C1CC'"):
        dm.setup("fit")
    assert dm.report.num_skipped == 2 and dm.report.skipped("RDKit could not parse the SMILES") == 1
    rows, messages, smiles = dm.store.errors()
    assert rows.tolist() == [10, 11] and smiles == ["C1CC", "C(C)(C)(C)(C)C"]
    assert messages[0] == "RDKit could not parse the SMILES"
    assert dm.store.atoms.lengths[rows].tolist() == [0, 0]  # their graphs are empty


def test_the_graph_table_is_plain_arrow_and_parallel_featurisation_writes_the_same(tmp_path: Path) -> None:
    table = mol.read_table(DATA / "esol_tiny.csv", "smiles", [ESOL_TARGET])
    key = graphs.graph_key(table.path, "smiles")
    serial = mol.featurize_all(table.smiles, tmp_path / "serial.arrow", key=key)
    parallel = mol.featurize_all(table.smiles, tmp_path / "parallel.arrow", key=key, num_proc=2, chunk=8)
    one_by_one = mol.featurize_all(table.smiles, tmp_path / "one.arrow", key=key, chunk=1)
    read = pa.ipc.open_stream(str(serial.table.path)).read_all()
    assert read.equals(pa.ipc.open_stream(str(parallel.table.path)).read_all())
    assert read.equals(pa.ipc.open_stream(str(one_by_one.table.path)).read_all())
    assert read.schema.field("atoms").type == pa.large_list(pa.list_(pa.int16(), 8))
    assert read.schema.field("edges").type == pa.large_list(pa.list_(pa.int32(), 2))
    assert read.schema.field("descriptors").type == pa.list_(pa.float32(), features.NUM_DESCRIPTORS)
    assert read.schema.field("smiles").type == read.schema.field("error").type == pa.string()
    ethanol = read.slice(0, 1).to_pylist()[0]  # CCO: 3 atoms, 2 bonds in both directions
    assert ethanol["smiles"] == "CCO" and len(ethanol["atoms"]) == 3 and ethanol["error"] == ""
    assert sorted(map(tuple, ethanol["edges"])) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    x, edge_index, edge_attr, canonical, descriptors = features.featurize_smiles("CCO")
    np.testing.assert_array_equal(serial.atoms.values[: len(x)], x)
    np.testing.assert_array_equal(serial.edges.values[: edge_index.shape[1]].T, edge_index)
    np.testing.assert_array_equal(serial.bonds.values[: len(edge_attr)], edge_attr)
    np.testing.assert_array_equal(serial.descriptors[0], descriptors)
    assert serial.canonical[0] == canonical == "CCO"


def test_a_dataset_pickles_as_paths_and_positions_and_serves_the_same_batches(tmp_path: Path) -> None:
    dm = MoleculeDataModule(cache_dir=str(tmp_path), descriptors=True)  # packaged ESOL, 1,128 molecules
    dm.prepare_data()
    dm.setup("fit")
    train = dm.dataset("train")
    payload = pickle.dumps(train)
    stored = sum(a.nbytes for a in (train.store.atoms.values, train.store.bonds.values, train.store.edges.values))
    assert len(payload) < train.positions.nbytes + 2_000 < stored / 10  # positions, paths and statistics only
    copy = pickle.loads(payload)
    assert "lengths" not in vars(copy)  # sizes are the sampler's business, not a worker's
    assert not copy.store.atoms.values.flags.writeable and not copy.targets.flags.writeable
    batch = [5, 0, 17, 3, 400]
    for name, value in vars(train.__getitems__(batch)).items():
        np.testing.assert_array_equal(getattr(copy.__getitems__(batch), name), value, err_msg=name)
    for name, value in train[7].items():
        np.testing.assert_array_equal(copy[7][name], value, err_msg=name)


def _race(cache: str, barrier, built) -> None:
    """One of two processes building the same tables at once: both wait until both found none."""
    featurize = graphs.featurize_all

    def featurize_together(*args, **kwargs):
        barrier.wait(timeout=300)
        built.put(1)
        return featurize(*args, **kwargs)

    graphs.featurize_all = featurize_together
    MoleculeDataModule(cache_dir=cache).prepare_data()


def _map_only(cache: str, sizes) -> None:
    """A fresh process: setup with the same cache, where reading the CSV or featurising fails."""
    graphs.featurize_all, molecule_dm.read_table = no_featurising, no_reading
    dm = MoleculeDataModule(cache_dir=cache)
    dm.setup("fit")
    sizes.put({name: len(dataset) for name, dataset in dm.datasets.items()})


def test_two_processes_building_at_once_leave_valid_tables_and_a_third_builds_nothing(tmp_path: Path) -> None:
    # forked where the platform can (this process never opened tmp_path: nothing of it is memoised)
    context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier, built, sizes = context.Barrier(2), context.Queue(), context.Queue()
    racers = [context.Process(target=_race, args=(str(tmp_path), barrier, built)) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(300)
    assert [r.exitcode for r in racers] == [0, 0]
    assert [built.get(timeout=10) for _ in range(2)] == [1, 1]  # both featurised the whole table
    files = sorted(p.name for p in (tmp_path / "molecules").iterdir())
    assert len(files) == 2 and all(name.endswith(".arrow") for name in files)  # no scratch or temporary file
    checker = context.Process(target=_map_only, args=(str(tmp_path), sizes))
    checker.start()
    checker.join(300)
    assert checker.exitcode == 0
    assert sizes.get(timeout=10) == {"train": 902, "val": 113, "test": 113}
    assert sorted(p.name for p in (tmp_path / "molecules").iterdir()) == files


def test_a_cache_dir_that_cannot_be_written_is_a_data_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=f"cannot write in {re.escape(str(blocker / 'molecules'))}"):
        tiny(blocker).prepare_data()
