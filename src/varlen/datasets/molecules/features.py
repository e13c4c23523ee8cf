"""RDKit featurisation of one molecule: integer atom and bond categories, canonical SMILES, descriptors.

Categorical features are stored already shifted into one shared vocabulary per kind (atoms,
bonds): column `j` of `x` holds `offset_j + category`. A model then embeds all columns
with a single `nn.Embedding(ATOM_VOCAB, d)` and sums them (the OGB `AtomEncoder` idea).
`FEATURIZER_VERSION` is part of the graph cache's key: bump it whenever the features change.

A molecule over `max_atoms` atoms is refused before anything but parsing runs on it (a 10,000-atom
chain parses in milliseconds; RDKit's other passes grow much faster than its size). Bemis-Murcko
scaffolds (`scaffold_smiles`) are computed apart, only for the splits that need them: they
grow about cubically with a chain's length (a 4,000-atom alkane: 90 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "ATOM_FEATURES",
    "ATOM_OFFSETS",
    "ATOM_VOCAB",
    "BOND_FEATURES",
    "BOND_OFFSETS",
    "BOND_VOCAB",
    "DESCRIPTORS",
    "FEATURIZER_VERSION",
    "MAX_ATOMS",
    "NUM_DESCRIPTORS",
    "TOO_LARGE",
    "Graph",
    "featurize_many",
    "featurize_smiles",
    "molecule_descriptors",
    "scaffold_many",
    "scaffold_smiles",
]

#: bump when the features change: it is part of the cache key (read at call time, so tests can patch it)
FEATURIZER_VERSION = "3"
#: the default `max_atoms`: 4.5 times the largest molecule of the MoleculeNet tables shipped with the
#: project (HIV: 222 atoms; Lipophilicity 115, ESOL 55, FreeSolv 24), far above any drug-like molecule
MAX_ATOMS = 1000
#: the reason a molecule over `max_atoms` is refused with (its detail: how many atoms it has)
TOO_LARGE = "more atoms than max_atoms"

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
#: size of the shared atom / bond vocabularies (what `nn.Embedding` needs)
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

#: one molecule: `(x [n, 8] int16, edge_index [2, 2b] int64, edge_attr [2b, 4] int16, canonical, descriptors [D])`
Graph = tuple[np.ndarray, np.ndarray, np.ndarray, str, np.ndarray]


def _category(value: int, size: int) -> int:
    """`value` if it is a known category, else the last ("other") one."""
    return value if 0 <= value < size - 1 else size - 1


def molecule_descriptors(mol: Any) -> np.ndarray:
    """The `DESCRIPTORS` of a sanitised RDKit molecule, float32 `[NUM_DESCRIPTORS]`."""
    from rdkit.Chem import Descriptors

    heavy = mol.GetNumHeavyAtoms()
    aromatic = sum(atom.GetIsAromatic() for atom in mol.GetAtoms())
    values = [getattr(Descriptors, name)(mol) for name in DESCRIPTORS[:-1]]
    values.append(aromatic / heavy if heavy else 0.0)
    return np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)


def _atom_features(mol: Any) -> np.ndarray:
    """int16 `[atoms, 8]` categories, shifted into the shared atom vocabulary."""
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
    return (x + ATOM_OFFSETS).astype(np.int16)


def _bond_features(mol: Any) -> tuple[np.ndarray, np.ndarray]:
    """`edge_index [2, 2b]` (both directions of every bond) and int16 `edge_attr [2b, 4]`."""
    from rdkit import Chem

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
    edge_index = np.ascontiguousarray(np.concatenate([pair, pair[:, ::-1]]).T)
    attr = np.asarray(attrs, dtype=np.int64).reshape(-1, len(BOND_FEATURES))
    return edge_index, (np.concatenate([attr, attr]) + BOND_OFFSETS).astype(np.int16)


def featurize_smiles(smiles: str, max_atoms: int | None = MAX_ATOMS) -> Graph | str:
    """One molecule's graph, or why it cannot be used (`"<reason>"` or `"<reason>: <detail>"`).

    The reasons are few and fixed (so the report counts by reason), the detail names the atom or
    the size: `"RDKit could not parse the SMILES"`, `"more atoms than max_atoms: 10000 atoms,
    max_atoms=1000"` (counted on the parsed, unsanitised molecule: the graph's nodes; None: no limit),
    `"RDKit could not sanitise the molecule: Explicit valence for atom # 0 C, 5, is greater than
    permitted"`, `"the SMILES has no atoms"` (RDKit parses an empty string into an empty
    molecule, without an error).

    Returns:
        `(x, edge_index, edge_attr, canonical, descriptors)`: see `Graph`; `canonical` is
        RDKit's canonical (isomeric) SMILES, the molecule's identity for finding duplicates.
    """
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles, sanitize=False)
        if mol is None:
            return "RDKit could not parse the SMILES"
        if max_atoms is not None and mol.GetNumAtoms() > max_atoms:
            return f"{TOO_LARGE}: {mol.GetNumAtoms()} atoms, max_atoms={max_atoms}"
        try:
            Chem.SanitizeMol(mol)
        except Exception as error:  # RDKit raises several sanitisation exception types
            return f"RDKit could not sanitise the molecule: {error}"
        if mol.GetNumAtoms() == 0:
            return "the SMILES has no atoms"
        edge_index, edge_attr = _bond_features(mol)
        canonical = Chem.MolToSmiles(mol)
        return _atom_features(mol), edge_index, edge_attr, canonical, molecule_descriptors(mol)


def featurize_many(smiles: Sequence[str], max_atoms: int | None = MAX_ATOMS) -> list[Graph | str]:
    """`featurize_smiles` of each (a top-level function: process pools pickle it)."""
    return [featurize_smiles(s, max_atoms) for s in smiles]


def scaffold_smiles(smiles: str) -> str:
    """The Bemis-Murcko scaffold SMILES of a molecule RDKit reads ('' when acyclic); one it cannot
    compute is the molecule's own group (`"<no scaffold: SMILES>"`), so no molecule is lost."""
    from rdkit import rdBase
    from rdkit.Chem.Scaffolds import MurckoScaffold

    with rdBase.BlockLogs():
        try:
            return MurckoScaffold.MurckoScaffoldSmiles(smiles=smiles, includeChirality=False)
        except Exception:  # RDKit raises several types (and None for an unparsable SMILES)
            return f"<no scaffold: {smiles}>"


def scaffold_many(smiles: Sequence[str]) -> list[str]:
    """`scaffold_smiles` of each ('' stays ''; a top-level function: process pools pickle it)."""
    return [scaffold_smiles(s) if s else "" for s in smiles]
