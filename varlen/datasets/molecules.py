"""Molecular graphs from MoleculeNet-style CSV tables: reading, RDKit featurisation, caching, splits.

A table is a CSV with one SMILES column and one or more numeric target columns (ESOL, FreeSolv,
Lipophilicity, QM9 subsets, HIV, BBBP...). Every molecule is featurised once with RDKit into
integer categorical atom and bond features and the result is cached on disk, keyed by the file's
SHA-256 and :data:`FEATURIZER_VERSION`: a changed file or a changed featuriser never reuses a
stale cache. The cache holds the graphs of all rows as a few concatenated arrays plus offsets
(like PyG's ``InMemoryDataset``), so per-sample sizes (atoms + directed bonds) are one vectorised
subtraction and never need a second pass over the samples.

Categorical features are stored already shifted into one shared vocabulary per kind (atoms,
bonds): column ``j`` of ``x`` holds ``offset_j + category``. A model then embeds all columns
with a single ``nn.Embedding(ATOM_VOCAB, d)`` and sums them (the OGB ``AtomEncoder`` idea).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from varlen.datasets.base import DatasetNotFoundError, download_url, file_hash
from varlen.datasets.base import verify_checksum as verify_checksum  # re-exported for users of this module

#: bump when the features change: it is part of the cache key
FEATURIZER_VERSION = "2"

# -- featurisation vocabulary ---------------------------------------------------------------

#: (name, number of categories) of each atom feature column; the last category is "other"
ATOM_FEATURES: tuple[tuple[str, int], ...] = (
    ("atomic_num", 120),  # 1..118, 119 = other
    ("degree", 12),  # 0..10, 11 = other
    ("formal_charge", 12),  # -5..5 -> 0..10, 11 = other
    ("hybridization", 8),  # RDKit HybridizationType values 0..6, 7 = other
    ("aromatic", 2),
    ("num_hs", 10),  # 0..8, 9 = other
    ("in_ring", 2),
    ("chirality", 10),  # RDKit ChiralType values 0..8, 9 = other
)
#: (name, number of categories) of each bond feature column
BOND_FEATURES: tuple[tuple[str, int], ...] = (
    ("bond_type", 5),  # single, double, triple, aromatic, other
    ("conjugated", 2),
    ("in_ring", 2),
    ("stereo", 7),  # RDKit BondStereo values 0..5, 6 = other
)
ATOM_OFFSETS = np.cumsum([0] + [n for _, n in ATOM_FEATURES[:-1]]).astype(np.int64)
BOND_OFFSETS = np.cumsum([0] + [n for _, n in BOND_FEATURES[:-1]]).astype(np.int64)
#: size of the shared atom / bond vocabularies (what ``nn.Embedding`` needs)
ATOM_VOCAB = int(sum(n for _, n in ATOM_FEATURES))
BOND_VOCAB = int(sum(n for _, n in BOND_FEATURES))

#: RDKit graph-level descriptors computed with every graph (optional model input): the
#: quantities of Delaney's ESOL equation (logP, weight, rotatable bonds, aromatic proportion)
#: plus common polarity / shape counts. Message passing over a few layers struggles to count
#: whole-molecule properties such as these; giving them to the readout helps small datasets.
DESCRIPTORS: tuple[str, ...] = (
    "MolLogP",
    "MolWt",
    "TPSA",
    "NumHDonors",
    "NumHAcceptors",
    "NumRotatableBonds",
    "RingCount",
    "FractionCSP3",
    "HeavyAtomCount",
    "AromaticProportion",
)
NUM_DESCRIPTORS = len(DESCRIPTORS)

# -- MoleculeNet presets --------------------------------------------------------------------

DEEPCHEM_URL = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/"


@dataclass(frozen=True)
class MoleculeNetSpec:
    """Where a MoleculeNet table lives and how to read it.

    Attributes:
        filename: file name on the DeepChem bucket (and in ``root``).
        smiles_column: the SMILES column.
        target_columns: the target columns (several = multi-task).
        task: ``"regression"`` or ``"classification"``.
        checksum: ``"sha256:<hex>"`` or ``"md5:<hex>"`` of the file, or None (not verified).
        checksum_source: where the checksum comes from (it is shown when verification fails).
    """

    filename: str
    smiles_column: str
    target_columns: tuple[str, ...]
    task: str
    checksum: str | None
    checksum_source: str = ""

    @property
    def url(self) -> str:
        return DEEPCHEM_URL + self.filename


#: the tables ``download=True`` knows. ESOL and FreeSolv checksums were computed from the copies
#: in the project's shared data folder (no network here to re-check the bucket); Lipophilicity,
#: HIV and BBBP use the md5 sums that TorchDrug publishes for the same DeepChem files.
MOLECULENET: dict[str, MoleculeNetSpec] = {
    "esol": MoleculeNetSpec(
        "delaney-processed.csv",
        "smiles",
        ("measured log solubility in mols per litre",),
        "regression",
        "sha256:e91dc7027cbaeec3872a45b2522c46676e483c123b1c97172839d858a2f26d9c",
        "local copy of delaney-processed.csv",
    ),
    "freesolv": MoleculeNetSpec(
        "SAMPL.csv",
        "smiles",
        ("expt",),
        "regression",
        "sha256:a82c5da54d7615f02d77d327a602e152fb3ed604fc093c49fb806bff2fd2149d",
        "local copy of SAMPL.csv",
    ),
    "lipo": MoleculeNetSpec(
        "Lipophilicity.csv", "smiles", ("exp",), "regression", "md5:85a0e1cb8b38b0dfc3f96ff47a57f0ab", "TorchDrug"
    ),
    "hiv": MoleculeNetSpec(
        "HIV.csv", "smiles", ("HIV_active",), "classification", "md5:9ad10c88f82f1dac7eb5c52b668c30a7", "TorchDrug"
    ),
    "bbbp": MoleculeNetSpec(
        "BBBP.csv", "smiles", ("p_np",), "classification", "md5:66286cb9e6b148bd75d80c870df580fb", "TorchDrug"
    ),
    "qm9": MoleculeNetSpec(
        "qm9.csv",
        "smiles",
        ("mu", "alpha", "homo", "lumo", "gap", "r2", "zpve", "cv", "u0", "u298", "h298", "g298"),
        "regression",
        None,
    ),
}

#: strings read as a missing target (besides the empty string)
MISSING_VALUES = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "None", "null"})


def packaged_esol() -> Path:
    """Path of the ESOL table shipped inside the package (Delaney 2004, via MoleculeNet)."""
    return Path(str(resources.files("varlen.datasets") / "data" / "esol.csv"))


def moleculenet_file(name: str, root: str | Path, download: bool = False) -> Path:
    """The local file of MoleculeNet table ``name`` under ``root``, downloaded if asked.

    Raises:
        DatasetNotFoundError: the file is absent and ``download`` is False.
    """
    if name not in MOLECULENET:
        raise ValueError(f"unknown MoleculeNet table {name!r}; known: {sorted(MOLECULENET)}")
    spec = MOLECULENET[name]
    path = Path(root).expanduser() / spec.filename
    if path.is_file():
        return path
    if not download:
        raise DatasetNotFoundError(
            f"{name}: {path} not found. Download {spec.url} into {path.parent} (or pass download=True, "
            "or path= to your own copy)."
        )
    try:
        return download_url(spec.url, path, spec.checksum)
    except OSError as error:
        if spec.checksum_source and "expected" in str(error):
            raise OSError(f"{error} (checksum from {spec.checksum_source})") from error
        raise


# -- reading tables -------------------------------------------------------------------------


@dataclass
class MoleculeTable:
    """A MoleculeNet-style table after reading and validation.

    Attributes:
        path: the CSV file.
        smiles: stripped SMILES, one per data row.
        targets: float32 ``[N, T]``, NaN where a value is missing.
        rows: CSV line number of each molecule (1 = the header), for error messages and reports.
        target_columns: the target column names.
    """

    path: Path
    smiles: list[str]
    targets: np.ndarray
    rows: np.ndarray
    target_columns: tuple[str, ...]


def read_table(path: str | Path, smiles_column: str, target_columns: Sequence[str]) -> MoleculeTable:
    """Read a MoleculeNet-style CSV, with clear errors for what is wrong and where.

    Stray whitespace around SMILES, headers and values is removed (MoleculeNet files have
    trailing spaces and CRLF line ends). Empty cells and ``nan``/``NA``-like strings are missing
    targets (masked in the loss); anything else that is not a finite number is an error naming the
    file's line (blank lines are skipped but counted).

    Raises:
        FileNotFoundError: no such file.
        ValueError: empty file, missing column, non-numeric target.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"molecule table {path} does not exist")
    if not target_columns:
        raise ValueError(f"{path}: give at least one target column")
    try:
        # blank lines are read (then dropped below) so that row numbers stay the file's line numbers
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, skip_blank_lines=False)
    except pd.errors.EmptyDataError as error:
        raise ValueError(f"{path}: the file is empty (expected a CSV header with {smiles_column!r})") from error
    frame.columns = [str(c).strip() for c in frame.columns]
    wanted = [smiles_column, *target_columns]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: column(s) {missing} not found; the header has {list(frame.columns)}")
    rows = np.arange(len(frame), dtype=np.int64) + 2  # line 1 is the header
    blank = (frame.apply(lambda column: column.str.strip()) == "").all(axis=1).to_numpy()
    frame, rows = frame[~blank], rows[~blank]
    if len(frame) == 0:
        raise ValueError(f"{path}: the table has a header but no rows")
    smiles = frame[smiles_column].str.strip().tolist()
    targets = np.empty((len(frame), len(target_columns)), dtype=np.float32)
    for j, column in enumerate(target_columns):
        text = frame[column].str.strip()
        absent = text.isin(MISSING_VALUES).to_numpy()
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused just below
            values = pd.to_numeric(text.where(~absent), errors="coerce").to_numpy(np.float64).astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(values) & ~absent)  # text, inf, or beyond float32
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{path}, line {rows[i]}: target {column!r} is {text.iloc[i]!r}, not a finite number "
                f"({bad.size} such row(s) in this column)"
            )
        targets[:, j] = values
    return MoleculeTable(path, smiles, targets, rows, tuple(target_columns))


# -- featurisation --------------------------------------------------------------------------


def _category(value: int, size: int) -> int:
    """``value`` if it is a known category, else the last ("other") one."""
    return value if 0 <= value < size - 1 else size - 1


def molecule_descriptors(mol: Any) -> np.ndarray:
    """The :data:`DESCRIPTORS` of a sanitised RDKit molecule, float32 ``[NUM_DESCRIPTORS]``."""
    from rdkit.Chem import Descriptors

    heavy = mol.GetNumHeavyAtoms()
    aromatic = sum(atom.GetIsAromatic() for atom in mol.GetAtoms())
    values = [getattr(Descriptors, name)(mol) for name in DESCRIPTORS[:-1]]
    values.append(aromatic / heavy if heavy else 0.0)
    return np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)


def featurize_smiles(smiles: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, np.ndarray] | str:
    """One molecule's graph, or an error string when RDKit cannot parse or sanitise it.

    Returns:
        ``(x [n, 8], edge_index [2, 2b], edge_attr [2b, 4], scaffold, descriptors [D])``: int16
        categorical features shifted into the shared vocabularies, both directions of every
        bond, the Bemis-Murcko scaffold SMILES (for scaffold splits; '' for acyclic molecules)
        and the float32 :data:`DESCRIPTORS`.
    """
    from rdkit import Chem, rdBase
    from rdkit.Chem.Scaffolds import MurckoScaffold

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles, sanitize=False)
        if mol is None:
            return "RDKit could not parse the SMILES"
        try:
            Chem.SanitizeMol(mol)
        except Exception as error:  # RDKit raises several sanitisation exception types
            return f"sanitisation failed: {error}"
        if mol.GetNumAtoms() == 0:
            return "the molecule has no atoms"
        sizes = [n for _, n in ATOM_FEATURES]
        x = np.array(
            [
                [
                    _category(atom.GetAtomicNum(), sizes[0]),
                    _category(atom.GetDegree(), sizes[1]),
                    _category(atom.GetFormalCharge() + 5, sizes[2]),
                    _category(int(atom.GetHybridization()), sizes[3]),
                    int(atom.GetIsAromatic()),
                    _category(atom.GetTotalNumHs(), sizes[5]),
                    int(atom.IsInRing()),
                    _category(int(atom.GetChiralTag()), sizes[7]),
                ]
                for atom in mol.GetAtoms()
            ],
            dtype=np.int64,
        ).reshape(-1, len(ATOM_FEATURES))
        bond_types = {Chem.BondType.SINGLE: 0, Chem.BondType.DOUBLE: 1, Chem.BondType.TRIPLE: 2}
        bond_types[Chem.BondType.AROMATIC] = 3
        stereo_size = BOND_FEATURES[3][1]
        pairs, attrs = [], []
        for bond in mol.GetBonds():
            pairs.append((bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))
            attrs.append(
                (
                    bond_types.get(bond.GetBondType(), 4),
                    int(bond.GetIsConjugated()),
                    int(bond.IsInRing()),
                    _category(int(bond.GetStereo()), stereo_size),
                )
            )
        pair = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        edge_index = np.concatenate([pair, pair[:, ::-1]]).T  # both directions
        attr = np.asarray(attrs, dtype=np.int64).reshape(-1, len(BOND_FEATURES))
        edge_attr = np.concatenate([attr, attr])
        try:
            scaffold = MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)
        except Exception:  # a scaffold failure must not lose the molecule: group it alone
            scaffold = f"<no scaffold: {smiles}>"
        descriptors = molecule_descriptors(mol)
    return (
        (x + ATOM_OFFSETS).astype(np.int16),
        np.ascontiguousarray(edge_index),
        (edge_attr + BOND_OFFSETS).astype(np.int16),
        scaffold,
        descriptors,
    )


def _featurize_many(smiles: Sequence[str]) -> list:
    return [featurize_smiles(s) for s in smiles]


@dataclass
class GraphStore:
    """All molecules of a table as concatenated arrays with offsets (what is cached on disk).

    Attributes:
        x: int16 ``[total_atoms, 8]`` atom features (shared vocabulary).
        edge_index: int64 ``[2, total_edges]``, node indices local to each molecule.
        edge_attr: int16 ``[total_edges, 4]`` bond features (shared vocabulary).
        node_ptr / edge_ptr: int64 ``[N + 1]`` offsets of each molecule's atoms / edges.
        valid: bool ``[N]``, False where featurisation failed (empty graph).
        errors: row position -> why it failed.
        scaffolds: Bemis-Murcko scaffold SMILES per molecule ('' when acyclic or invalid).
        descriptors: float32 ``[N, NUM_DESCRIPTORS]`` RDKit descriptors (zeros when invalid).
    """

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    valid: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)
    scaffolds: list[str] = field(default_factory=list)
    descriptors: np.ndarray = field(default_factory=lambda: np.zeros((0, NUM_DESCRIPTORS), np.float32))

    @property
    def num_nodes(self) -> np.ndarray:
        return np.diff(self.node_ptr)

    @property
    def num_edges(self) -> np.ndarray:
        return np.diff(self.edge_ptr)

    @classmethod
    def from_results(cls, results: Sequence) -> GraphStore:
        xs, edges, attrs, scaffolds, descriptors, errors = [], [], [], [], [], {}
        empty_x = np.zeros((0, len(ATOM_FEATURES)), np.int16)
        empty_e = np.zeros((2, 0), np.int64)
        empty_a = np.zeros((0, len(BOND_FEATURES)), np.int16)
        for i, result in enumerate(results):
            if isinstance(result, str):
                errors[i] = result
                result = (empty_x, empty_e, empty_a, "", np.zeros(NUM_DESCRIPTORS, np.float32))
            x, edge_index, edge_attr, scaffold, values = result
            descriptors.append(values)
            xs.append(x)
            edges.append(edge_index)
            attrs.append(edge_attr)
            scaffolds.append(scaffold)
        node_ptr = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)
        edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for e in edges])]).astype(np.int64)
        valid = np.ones(len(results), dtype=bool)
        valid[list(errors)] = False
        return cls(
            x=np.concatenate(xs) if xs else empty_x,
            edge_index=np.concatenate(edges, axis=1) if edges else empty_e,
            edge_attr=np.concatenate(attrs) if attrs else empty_a,
            node_ptr=node_ptr,
            edge_ptr=edge_ptr,
            valid=valid,
            errors=errors,
            scaffolds=scaffolds,
            descriptors=np.stack(descriptors).astype(np.float32)
            if descriptors
            else np.zeros((0, NUM_DESCRIPTORS), np.float32),
        )

    def state(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def featurize_all(smiles: Sequence[str], num_proc: int = 1, chunk: int = 2000) -> GraphStore:
    """Featurise every SMILES, in ``num_proc`` processes when the table is big enough to pay.

    Process start-up and pickling cost more than featurising a few thousand small molecules,
    so tables under ``2 * chunk`` molecules are done in this process.
    """
    smiles = list(smiles)
    if num_proc > 1 and len(smiles) >= 2 * chunk:
        parts = [smiles[i : i + chunk] for i in range(0, len(smiles), chunk)]
        with ProcessPoolExecutor(max_workers=num_proc) as pool:
            results = [r for part in pool.map(_featurize_many, parts) for r in part]
    else:
        results = _featurize_many(smiles)
    return GraphStore.from_results(results)


def default_cache_dir() -> Path:
    """``$VARLEN_CACHE`` or ``~/.cache/varlen``."""
    return Path(os.environ.get("VARLEN_CACHE", Path.home() / ".cache" / "varlen"))


def cached_graphs(
    path: str | Path, smiles: Sequence[str], smiles_column: str, cache_dir: str | Path | None = None, num_proc: int = 1
) -> tuple[GraphStore, Path]:
    """The graphs of a table, from the disk cache when the same file was featurised before.

    The key is (SHA-256 of the file, SMILES column, :data:`FEATURIZER_VERSION`), so an edited
    file or a new featuriser never reads a stale cache. The cache is written atomically (a
    temporary file, then a rename): concurrent DDP ranks featurising the same file at once
    cannot leave a half-written cache behind.

    Returns:
        The graph store and the cache file's path.
    """
    digest = hashlib.sha256(f"{file_hash(path)}|{smiles_column}|{FEATURIZER_VERSION}".encode()).hexdigest()[:20]
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = folder / "molecules" / f"{Path(path).stem}-{digest}.pt"
    if target.is_file():
        state = torch.load(target, weights_only=False)
        store = GraphStore(**state)
        if len(store.valid) == len(smiles):
            return store, target
    store = featurize_all(smiles, num_proc=num_proc)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    os.close(handle)
    try:
        torch.save(store.state(), tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return store, target


# -- the dataset ----------------------------------------------------------------------------


class MoleculeGraphs(Dataset):
    """Some molecules of a table as graph samples (one split, or the whole table).

    ``sample["index"]`` is the position within this dataset (what its sampler iterates).

    Args:
        store: the table's cached graphs.
        targets: float32 ``[N_table, T]`` targets of the whole table (NaN = missing), already
            standardised if wanted.
        positions: which table rows this dataset holds.
        rows: CSV line numbers of the table's rows (kept in samples for tracing).
        descriptors: float32 ``[N_table, D]`` graph-level features of the whole table (already
            standardised), or None to leave them out of the samples.

    Attributes:
        lengths: int64 ``[N]``, atoms + directed edges per molecule: what a batch's memory
            grows with; computed once from the store's offsets.
    """

    def __init__(
        self,
        store: GraphStore,
        targets: np.ndarray,
        positions: np.ndarray,
        rows: np.ndarray,
        descriptors: np.ndarray | None = None,
    ) -> None:
        self.store = store
        self.descriptors = None if descriptors is None else np.asarray(descriptors, dtype=np.float32)
        self.targets = np.asarray(targets, dtype=np.float32)
        self.positions = np.asarray(positions, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.num_nodes = store.num_nodes[self.positions]
        self.num_edges = store.num_edges[self.positions]
        self.lengths = self.num_nodes + self.num_edges

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One molecule: unpadded int64 ``x``, ``edge_index``, ``edge_attr``; float ``y [T]``, ``descriptors [D]``."""
        p = int(self.positions[i])
        s = self.store
        n0, n1 = s.node_ptr[p], s.node_ptr[p + 1]
        e0, e1 = s.edge_ptr[p], s.edge_ptr[p + 1]
        sample = {
            "index": int(i),
            "row": int(self.rows[p]),
            "x": s.x[n0:n1].astype(np.int64),
            "edge_index": s.edge_index[:, e0:e1],
            "edge_attr": s.edge_attr[e0:e1].astype(np.int64),
            "y": self.targets[p],
        }
        if self.descriptors is not None:
            sample["descriptors"] = self.descriptors[p]
        return sample


# -- splits ---------------------------------------------------------------------------------


def _split_sizes(n: int, fractions: Sequence[float]) -> tuple[int, int]:
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {list(fractions)}")
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    return n_train, min(n_val, n - n_train)


def random_split(n: int, fractions: Sequence[float], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded random (train, val, test) positions of ``n`` molecules."""
    n_train, n_val = _split_sizes(n, fractions)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:n_train]), np.sort(order[n_train : n_train + n_val]), np.sort(order[n_train + n_val :])


def scaffold_split(scaffolds: Sequence[str], fractions: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic Bemis-Murcko scaffold split: whole scaffold sets go to one split.

    Sets are taken largest first (ties: the set whose first molecule comes first) and go to
    train until it is full, then to validation, then to test; so train holds the common
    scaffolds and the test molecules have scaffolds never seen in training (the MoleculeNet /
    DeepChem convention).
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, scaffold in enumerate(scaffolds):
        groups[scaffold].append(i)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    n = len(scaffolds)
    n_train, n_val = _split_sizes(n, fractions)
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for group in ordered:
        if len(train) + len(group) <= n_train:
            train += group
        elif len(val) + len(group) <= n_val:
            val += group
        else:
            test += group
    return np.sort(np.asarray(train, np.int64)), np.sort(np.asarray(val, np.int64)), np.sort(np.asarray(test, np.int64))
