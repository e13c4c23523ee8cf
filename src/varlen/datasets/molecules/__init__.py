# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Molecular graphs from MoleculeNet-style SMILES tables: reading, RDKit featurisation, cache, dataset, collate.

Public entry points (what a DataModule of one's own is built from): the presets
`MOLECULENET`, `moleculenet_file` (a preset's verified download) and
`packaged_esol`; `read_table` (-> `MoleculeTable`); `featurize_all` and
`cached_graphs` (the table's graphs, built once into a mapped Arrow table),
`cached_targets` (its targets, likewise), `usable_positions` (molecules RDKit
could not use go through the report); `MoleculeGraphs` and `MoleculeCollator`; the
vocabulary sizes `ATOM_VOCAB` and `BOND_VOCAB` a model embeds. Helpers stay in their
submodules:

* `.readers`: presets, downloads, `read_table` (table errors name the file and line);
* `.classes`: every validation and test split holds both classes of each task (ROC-AUC);
* `.features`: RDKit atom / bond categories in shared vocabularies, canonical SMILES, scaffolds,
  descriptors; molecules over `max_atoms` refused before any of it;
* `.graphs`: the table's graphs as one Arrow table (list columns), built a chunk at a time
  and mapped (`GraphStore`, read-only views that pickle as the file's path);
* `.scaffolds`: the Bemis-Murcko scaffolds, computed for scaffold splits only, in a table beside;
* `.targets`: the table's targets and line numbers, mapped likewise (`TargetStore`);
* `.rows`: `MoleculeRows`, a batch of molecules as the arrays of one graph;
* `.dataset`: `MoleculeGraphs`, one split over the mapped stores (pickled as their
  paths and its positions), gathering a batch at once as `MoleculeRows`; target and
  descriptor statistics;
* `.collate`: `MoleculeCollator`, those rows to a PyG `Batch` (`graph_batch`).
"""

from varlen._extras import require

require("molecules")  # first: names the extra when its packages are missing

from varlen.datasets.molecules.collate import MoleculeCollator
from varlen.datasets.molecules.dataset import MoleculeGraphs
from varlen.datasets.molecules.features import ATOM_VOCAB, BOND_VOCAB
from varlen.datasets.molecules.graphs import cached_graphs, featurize_all, usable_positions
from varlen.datasets.molecules.readers import MOLECULENET, MoleculeTable, moleculenet_file, packaged_esol, read_table

__all__ = [
    "ATOM_VOCAB",
    "BOND_VOCAB",
    "MOLECULENET",
    "MoleculeCollator",
    "MoleculeGraphs",
    "MoleculeTable",
    "cached_graphs",
    "featurize_all",
    "moleculenet_file",
    "packaged_esol",
    "read_table",
    "usable_positions",
]
