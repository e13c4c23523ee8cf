# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Molecular graphs from MoleculeNet-style SMILES tables: reading, RDKit featurisation, cache, dataset, collate.

* :mod:`.readers`: presets, downloads, :func:`read_table` (table errors name the file and line);
* :mod:`.classes`: every validation and test split holds both classes of each task (ROC-AUC);
* :mod:`.features`: RDKit atom / bond categories in shared vocabularies, scaffolds, descriptors;
* :mod:`.graphs`: the table's graphs as concatenated arrays, cached as ``.npz`` (no pickles);
* :mod:`.rows`: :class:`MoleculeRows`, a batch of molecules as the arrays of one graph;
* :mod:`.dataset`: :class:`MoleculeGraphs`, one split over the shared store, gathering a batch at
  once as :class:`MoleculeRows`;
* :mod:`.collate`: :class:`MoleculeCollator`, those rows to a PyG ``Batch`` (:func:`graph_batch`).

:data:`FEATURIZER_VERSION` here is a copy for reading; the cache key reads
``varlen.datasets.molecules.features.FEATURIZER_VERSION``.
"""

from varlen._extras import require

require("molecules")  # first: names the extra when its packages are missing

from varlen.datasets.molecules.classes import SINGLE_CLASS, SingleClass, check_classes, class_counts
from varlen.datasets.molecules.collate import GRAPH_FIELDS, MoleculeCollator, graph_batch
from varlen.datasets.molecules.dataset import (
    MoleculeGraphs,
    descriptor_statistics,
    standardized_descriptors,
    target_statistics,
)
from varlen.datasets.molecules.features import (
    ATOM_FEATURES,
    ATOM_VOCAB,
    BOND_FEATURES,
    BOND_VOCAB,
    DESCRIPTORS,
    FEATURIZER_VERSION,
    NUM_DESCRIPTORS,
    featurize_smiles,
    molecule_descriptors,
)
from varlen.datasets.molecules.graphs import (
    CACHE_FORMAT,
    GraphStore,
    cached_graphs,
    featurize_all,
    graph_cache_path,
    usable_positions,
)
from varlen.datasets.molecules.readers import (
    MOLECULENET,
    TASKS,
    MoleculeNetSpec,
    MoleculeTable,
    moleculenet_file,
    packaged_esol,
    read_table,
    table_path,
)
from varlen.datasets.molecules.rows import MoleculeRows

__all__ = [
    "ATOM_FEATURES",
    "ATOM_VOCAB",
    "BOND_FEATURES",
    "BOND_VOCAB",
    "CACHE_FORMAT",
    "DESCRIPTORS",
    "FEATURIZER_VERSION",
    "GRAPH_FIELDS",
    "MOLECULENET",
    "NUM_DESCRIPTORS",
    "SINGLE_CLASS",
    "TASKS",
    "GraphStore",
    "MoleculeCollator",
    "MoleculeGraphs",
    "MoleculeNetSpec",
    "MoleculeRows",
    "MoleculeTable",
    "SingleClass",
    "cached_graphs",
    "check_classes",
    "class_counts",
    "featurize_all",
    "featurize_smiles",
    "graph_batch",
    "graph_cache_path",
    "molecule_descriptors",
    "moleculenet_file",
    "packaged_esol",
    "read_table",
    "descriptor_statistics",
    "standardized_descriptors",
    "table_path",
    "target_statistics",
    "usable_positions",
]
