"""Molecular graphs: MoleculeNet-style SMILES tables to PyG batches under a node + edge budget."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from varlen.batching.shape_policy import DEFAULT_MAX_SHAPES
from varlen.batching.telemetry import BatchStats
from varlen.datamodules.arguments import keep
from varlen.datamodules.base import VarLenDataModule
from varlen.datamodules.weighting import BALANCED, check_sample_weights, checked_column
from varlen.datasets.molecules.classes import SINGLE_CLASS, SingleClass, check_classes
from varlen.datasets.molecules.collate import MoleculeCollator
from varlen.datasets.molecules.dataset import MoleculeGraphs, descriptor_statistics, target_statistics
from varlen.datasets.molecules.features import ATOM_VOCAB, BOND_VOCAB, MAX_ATOMS, NUM_DESCRIPTORS
from varlen.datasets.molecules.graphs import GraphStore, build_graphs, open_graphs, usable_positions
from varlen.datasets.molecules.readers import MOLECULENET, TASKS, MoleculeTable, read_table, table_path
from varlen.datasets.molecules.scaffolds import cached_scaffolds
from varlen.datasets.molecules.targets import TargetStore, open_targets, write_targets
from varlen.errors import DataError
from varlen.prepare.duplicates import count_duplicates, repeats
from varlen.prepare.report import SOURCE
from varlen.prepare.splits import balanced_scaffold_split, fractions_of, keyed_split, scaffold_split, stratified_split

__all__ = ["SPLIT_MODES", "MoleculeDataModule"]

SPLIT_MODES = ("random", "scaffold", "scaffold_balanced")
SPLITS = ("train", "val", "test")


class MoleculeDataModule(VarLenDataModule):
    """MoleculeNet-style molecules as graphs, batched by a budget on atoms + bonds per batch.

    Each molecule is featurised once per node with RDKit, in `prepare_data`, into an Arrow
    table in `cache_dir` (see `varlen.datasets.molecules.graphs`), and the targets are
    written beside it (`targets`); `setup` in every rank and
    every loader worker only map both files. A molecule's size is atoms + directed edges, and the
    sampler's `cost="sum"` keeps the *sum* of sizes in a batch under `max_tokens` (graphs are
    concatenated, not padded), so a batch's memory is bounded whatever the molecule sizes.
    Molecules RDKit cannot use are skipped and counted in `dm.report` (the default) or raise;
    a broken table (no file, undecodable, empty, a bad target) raises under either policy.

    Default: the ESOL table packaged with varlen (offline, 1,128 real molecules).

    Batch:
        x: [N, 8] int64, atom features of the batch's N atoms, each column shifted into one vocabulary
        edge_index: [2, E] int64, directed bonds (both directions) in the batch's atom numbering
        edge_attr: [E, 4] int64, bond features, shifted into one vocabulary
        y: [B, T] float32, the T targets of each molecule as the file has them, 0 where missing
        y_mask: [B, T] bool, True = the target is observed
        batch: [N] int64, the molecule of each atom
        ptr: [B + 1] int64, where each molecule's atoms start in x
        num_nodes: int, the batch's atoms (N)
        index: [B] int64, each molecule's position in its split

    A PyG `Batch` (graphs concatenated, nothing padded); `descriptors=True` adds `descriptors`
    `[B, 10]` float32 (train-standardized) and `follow_batch` `<name>_batch` / `<name>_ptr`.

    Args:
        dataset: a MoleculeNet preset (`esol`, `freesolv`, `lipo`, `hiv`, `bbbp`,
            `qm9`) giving the default columns, task and download URL; None for your own table.
        path: CSV file to read (default: the preset's file: packaged for ESOL, else under `root`).
        root: folder of downloaded presets (default: `<cache_dir>/molecules/raw`).
        download: fetch the preset's file from the DeepChem bucket (checksum-verified) if absent.
        smiles_column: SMILES column (default: the preset's).
        target_columns: target columns, several for multi-task (default: the preset's).
        task: `"regression"` or `"classification"` (default: the preset's, else regression).
        split: `"random"` (seeded), `"scaffold"` or `"scaffold_balanced"` (default: the
            preset's: `scaffold_balanced` for the classification presets `bbbp` and `hiv`,
            else `random`). Both scaffold splits keep every Bemis-Murcko scaffold set in one
            split, so test molecules have scaffolds never trained on. `scaffold` is
            MoleculeNet's deterministic one: the largest sets fill train and whatever sets come
            last fill val and test; on BBBP in its file order these are singletons of one class,
            and val and test held positives only. `scaffold_balanced` is the balanced scaffold
            split of chemprop (Yang et al. 2019, "Analyzing Learned Molecular Representations for
            Property Prediction", J. Chem. Inf. Model.; `split_type="scaffold_balanced"`) and
            astartes: sets larger than half of the val (or test) size go to train, the others
            are shuffled with `split_seed` and dealt in that order, so val and test look like
            the whole table. See `varlen.prepare.splits.balanced_scaffold_split`. Scaffolds are
            computed for the scaffold splits only (once per node, beside the graph table). Every
            split keeps the copies of a molecule (the same canonical SMILES) together; `dm.report`
            counts each split's duplicates.
        val_fraction: share of the molecules for validation.
        test_fraction: share for testing (the rest trains).
        max_train_samples: keep a stratified, seeded subset of this many training molecules (a quick
            run, a learning curve): drawn from the training split with `split_seed`, within each class of
            `balance_task` (the first target when unset; one stratum for regression), the others
            counted as unused in `dm.report`; validation and test stay whole. Every molecule is still
            featurised, once per node and cached by the file alone (every subset shares that cache):
            a split needs every molecule's canonical SMILES (copies stay together; scaffolds come from it).
        split_seed: seed of the random and balanced scaffold splits and of the training subset (default: `seed`).
        single_class: for classification, a val or test split holding one class only for some
            task has no ROC-AUC: `"raise"` (the default) stops with a `DataError` naming the
            split, the target column and the count of each class; `"warn"` goes on with a
            warning (the model logs that ROC-AUC as NaN, never 0).
        standardize: regression targets standardized with train statistics (the model gets
            `target_mean` / `target_std` and reports metrics in the original units).
        descriptors: add RDKit graph-level descriptors (logP, weight, TPSA, H donors/acceptors,
            rotatable bonds, rings, sp3 fraction, heavy atoms, aromatic proportion; see
            `DESCRIPTORS`) to every sample, standardized with
            train statistics; the model concatenates them to the pooled graph embedding
            (`num_descriptors` is linked to it; the ESOL config uses them: docs/benchmarks.md).
        sample_weights: how the training sampler draws each epoch (validation, test and predict
            serve every molecule once): None (each molecule once), `"balanced"` (inverse class
            frequency of `balance_task` in the training split: actives served as often as
            inactives, e.g. HIV's 3.5%; molecules missing that task's target keep their share;
            classification only) or the name of a numeric column of the CSV holding each
            molecule's weight (a missing, negative or non-finite weight is a `DataError` naming
            the line). Needs `shuffle`.
        balance_task: the target column `"balanced"` balances (default: the only one; several
            targets need it).
        max_atoms: the most atoms (graph nodes: heavy atoms and any hydrogen written as an atom) a
            molecule may have; a larger one is bad input (`on_bad`), refused from its parsed SMILES
            before any featurisation (RDKit's passes grow much faster than a molecule: a
            10,000-atom chain did not finish in 10 minutes). The default, 1000, is 4.5 times
            HIV's largest molecule; raise it for polymers or proteins.
        deduplicate: keep only the first line of each molecule (canonical SMILES); the others are
            counted as unused in `dm.report`. Without it, copies stay together in one split.
        cache_dir: where the graph and target tables are built and mapped from (default:
            `$VARLEN_CACHE` or `~/.cache/varlen`); a folder that cannot be written is a `DataError`.
        num_proc: processes for featurising big tables (small ones are done in-process).
        follow_batch: fields (of `x`, `edge_index`, `edge_attr`, `y`, `y_mask`,
            `descriptors`) that also get `<name>_batch` and `<name>_ptr` in the batch, as PyG's
            `follow_batch`; another name raises `ValueError`.

    The base's arguments are `VarLenDataModule`'s: `batch_size` counts
    molecules, `max_tokens` budgets atoms + directed edges per batch (neither set: 1536); `on_bad` meets a
    SMILES RDKit rejects or one over `max_atoms` (`raise` names the file, line and SMILES; `skip` counts
    each in `dm.report` by reason; some MoleculeNet tables hold a few, 7 in HIV: their configs set `skip`).
    A source in `sources` (e.g. `[{name: extra, path: more.csv}]`) has its own data arguments and inherits
    the others. Nothing is padded: there is no `pad_to_multiple_of`, `max_shapes` or `rung_batch_sizes`.
    """

    sampler_cost = "sum"
    default_batching = (None, 1536)
    size_axes = ("atoms + directed edges",)
    source_arguments = ("dataset", "path", "root", "download", "max_train_samples")
    fixed_arguments = ("pad_to_multiple_of", "max_shapes", "rung_batch_sizes")
    #: arguments kept as given, each an attribute of the same name
    kept_arguments = (
        "path root download max_train_samples single_class descriptors max_atoms deduplicate cache_dir num_proc"
    )
    # filled by setup()
    source: Path | None = None
    store: GraphStore | None = None
    target_store: TargetStore | None = None
    _table: MoleculeTable | None = None
    descriptor_stats: tuple[np.ndarray, np.ndarray] | None = None

    def __init__(
        self,
        dataset: str | None = "esol",
        path: str | None = None,
        root: str | None = None,
        download: bool = False,
        smiles_column: str | None = None,
        target_columns: list[str] | None = None,
        task: Literal["regression", "classification"] | None = None,
        split: Literal["random", "scaffold", "scaffold_balanced"] | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        max_train_samples: int | None = None,
        split_seed: int | None = None,
        single_class: SingleClass = "raise",
        standardize: bool = True,
        descriptors: bool = False,
        sample_weights: str | None = None,
        balance_task: str | None = None,
        max_atoms: int = MAX_ATOMS,
        deduplicate: bool = False,
        cache_dir: str | None = None,
        num_proc: int = 1,
        follow_batch: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        # graphs are batched as they are: nothing padded, no shapes to fit (the base's values, fixed)
        super().__init__(pad_to_multiple_of=None, max_shapes=DEFAULT_MAX_SHAPES, rung_batch_sizes=None, **kwargs)
        keep(self, locals(), self.kept_arguments)
        vars(self).update(molecule_arguments(locals()))
        self.sample_weights = check_sample_weights(sample_weights, type(self).__name__, self.shuffle, columns=True)
        self.balance_index = self._balance_task(balance_task)
        self.split_seed = self.seed if split_seed is None else split_seed
        self.standardize = standardize and self.task == "regression"
        self.collate_fn = MoleculeCollator(follow_batch)
        self._known_now()

    def _known_now(self) -> None:
        """What is known before any molecule is read: the sizes linked to the model at instantiation
        (cli.LINKED), and the training split's statistics at their neutral values until setup."""
        self.num_tasks = len(self.target_columns)
        self.node_features, self.edge_features = ATOM_VOCAB, BOND_VOCAB
        self.num_descriptors = NUM_DESCRIPTORS if self.descriptors else 0
        self.target_mean = np.zeros(self.num_tasks, np.float32)
        self.target_std = np.ones(self.num_tasks, np.float32)
        self.split_positions: dict[str, np.ndarray] = {}

    def _balance_task(self, name: str | None) -> int | None:
        """The target column index `sample_weights="balanced"` balances (None: not balanced)."""
        if self.sample_weights != BALANCED:
            if name is not None:
                raise ValueError(f"balance_task={name!r} needs sample_weights='balanced'")
            return None
        if self.task != "classification":
            raise ValueError(
                f"sample_weights='balanced' balances classes: the {self.task} task of {self.target_columns} has none "
                "(use a weight column, or task='classification')"
            )
        if name is None:
            if len(self.target_columns) > 1:
                raise ValueError(
                    f"sample_weights='balanced' with several tasks {self.target_columns}: name one as balance_task"
                )
            return 0
        if name not in self.target_columns:
            raise ValueError(f"balance_task={name!r} is not a target column; the targets are {self.target_columns}")
        return self.target_columns.index(name)

    def resolve_path(self, download: bool = False) -> Path:
        """The CSV to read: `path`, the packaged ESOL, or the preset's file under `root`."""
        return table_path(self.dataset_name, self.path, self.root, download, self.cache_dir)

    def _stores(self, download: bool) -> tuple[Path, GraphStore, TargetStore]:
        """The table's graphs and targets mapped from `cache_dir`; the CSV is read (and checked) only
        when one of them is missing, to build it."""
        source = self.resolve_path(download)
        args = (source, self.smiles_column)
        graphs = open_graphs(*args, self.cache_dir, self.max_atoms)
        targets = open_targets(*args, self.target_columns, self.task, self.cache_dir)
        if graphs is None or targets is None:
            table = read_table(source, self.smiles_column, self.target_columns, self.task)
            if graphs is None:
                graphs = build_graphs(table, self.smiles_column, self.cache_dir, self.num_proc, self.max_atoms)
            if targets is None:
                targets = write_targets(table, self.smiles_column, self.task, self.cache_dir)
        return source, graphs, targets

    def prepare_data(self) -> None:
        """Download when asked and build the graph and target tables, and the scaffolds when the split
        needs them (Lightning: once per node, before setup)."""
        _, graphs, _ = self._stores(self.download)
        if self.split != "random":
            cached_scaffolds(graphs, self.num_proc)

    @property
    def table(self) -> MoleculeTable | None:
        """The table as read (SMILES, targets, line numbers), from the mapped stores; None before `setup`.

        Its SMILES list is made when first asked (`setup` does not need it).
        """
        if self._table is None and self.store is not None:
            targets = self.target_store
            columns = tuple(self.target_columns)
            self._table = MoleculeTable(self.source, self.store.smiles, targets.targets, targets.lines, columns)
        return self._table

    @staticmethod
    def sample_sizes(samples: list[Any]) -> np.ndarray:
        """Atoms + directed edges of each decoded molecule (what `lengths` counts), `[n, 1]`."""
        return np.array([[len(s["x"]) + len(s["edge_attr"])] for s in samples], dtype=np.int64).reshape(-1, 1)

    def build(self, stage: str | None) -> dict[str, MoleculeGraphs]:
        """Map the table's graphs and targets, leave out (and count) unusable molecules, split, standardize."""
        source, store, targets = self._stores(self.download)  # built by prepare_data: only mapped here
        self.source, self.store, self.target_store, self._table = source, store, targets, None
        valid = usable_positions(source, store, targets.lines, self.report)
        if self.deduplicate:
            copies = repeats(store.canonical[valid])
            reason = "copy of an earlier line's molecule, deduplicate=True"
            self.report.leave_unused(SOURCE, reason, int(copies.sum()), "molecule")
            valid = valid[~copies]
        self.split_positions = self._split(source, store, targets.targets, valid)
        self.split_positions["train"] = self._training_subset(self.split_positions["train"], targets.targets)
        units = {name: store.canonical[part] for name, part in self.split_positions.items()}
        count_duplicates(self.report, units, "molecule")
        train = self.split_positions["train"]
        if self.standardize:
            self.target_mean, self.target_std = target_statistics(targets.targets[train])
        if self.descriptors:
            self.descriptor_stats = descriptor_statistics(store.descriptors[train])
        return {
            name: MoleculeGraphs(store, targets, positions, self.descriptor_stats)
            for name, positions in self.split_positions.items()
        }

    # -- what a checkpoint carries -----------------------------------------------------------

    state_must_match = ("target_columns", "task", "descriptors")
    state_restored = ("target_mean", "target_std", "descriptor_mean", "descriptor_std")

    def data_state(self) -> dict[str, object]:
        """The targets and task the model predicts, and the train statistics of targets and descriptors."""
        state = {"target_columns": self.target_columns, "task": self.task, "descriptors": self.descriptors}
        if self.standardize:
            state |= {"target_mean": self.target_mean, "target_std": self.target_std}
        if self.descriptor_stats is not None:
            state |= dict(zip(("descriptor_mean", "descriptor_std"), self.descriptor_stats, strict=True))
        return state

    def restore_data_state(self, state: Mapping[str, Any]) -> None:
        """The checkpoint's train statistics replace this table's: targets are de-standardised and
        descriptors standardised in the training's units."""
        if "target_mean" in state and self.standardize:
            self.target_mean = np.asarray(state["target_mean"], dtype=np.float32)
            self.target_std = np.asarray(state["target_std"], dtype=np.float32)
        if "descriptor_mean" in state and self.descriptor_stats is not None:
            stats = tuple(np.asarray(state[k], dtype=np.float32) for k in ("descriptor_mean", "descriptor_std"))
            self.descriptor_stats = stats
            for dataset in self.datasets.values():  # each batch is standardised with them
                dataset.descriptor_stats = stats

    def _split(self, source: Path, store: GraphStore, targets: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
        """Table positions per split (random: stream `"molecule split"`, copies of a molecule together;
        scaffold: deterministic; balanced: stream `"molecule scaffold split"`), checked to hold both
        classes where classified."""
        if len(valid) < len(SPLITS):
            raise DataError(f"{source}: only {len(valid)} usable molecule(s); need at least 3 to split")
        if self.split == "random":
            parts = keyed_split(store.canonical[valid], self.fractions, self.split_seed, name="molecule split")
        elif self.split == "scaffold":
            parts = scaffold_split(cached_scaffolds(store, self.num_proc)[valid].tolist(), self.fractions)
        else:
            scaffolds = cached_scaffolds(store, self.num_proc)[valid].tolist()
            parts = balanced_scaffold_split(scaffolds, self.fractions, self.split_seed, "molecule scaffold split")
        positions = {name: valid[part] for name, part in parts.items()}
        empty = [name for name, part in positions.items() if self.fractions[name] > 0 and not len(part)]
        if empty:
            sizes = {name: len(part) for name, part in positions.items()}
            raise DataError(
                f"{source}: the {'/'.join(empty)} split(s) would be empty ({len(valid)} usable molecules, "
                f"split={self.split!r}, fractions {self.fractions} give {sizes}); use more molecules "
                "or larger fractions"
            )
        if self.task == "classification":
            check_classes(source, targets, positions, self.target_columns, self.split, self.single_class)
        return positions

    def _training_subset(self, train: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """`max_train_samples` of the training positions (stream `"training subset"`, within each class
        of the balanced task, missing targets a class of their own); the rest counted as unused."""
        if self.max_train_samples is None or self.max_train_samples >= len(train):
            return train
        if self.task == "classification":
            classes = np.nan_to_num(targets[train, self.balance_index or 0], nan=-1)
        else:
            classes = np.zeros(len(train))
        share = self.max_train_samples / len(train)
        parts = stratified_split(classes, {"kept": share, "rest": 1 - share}, self.split_seed, "training subset")
        reason = f"not in the training subset, max_train_samples={self.max_train_samples}"
        self.report.leave_unused("train", reason, len(parts["rest"]), "molecule")
        return train[parts["kept"]]

    def class_labels(self, dataset: MoleculeGraphs) -> np.ndarray | None:
        """The 0/1 class of each molecule in `balance_task` (-1: missing); None for regression."""
        if self.task != "classification":
            return None
        targets = dataset.targets[dataset.positions, self.balance_index or 0]
        return np.where(np.isnan(targets), -1, targets).astype(np.int64)

    def weight_column(self, dataset: MoleculeGraphs, column: str) -> np.ndarray:
        """Each molecule's weight: its line's value in `column` of the CSV (read as targets are:
        an empty cell is missing, text a `DataError` naming the line)."""
        try:
            table = read_table(self.source, self.smiles_column, [column])
        except DataError as error:  # it names the line; say what the column was read for
            raise DataError(f"sample_weights={column!r}: {error}") from None
        lines = self.target_store.lines[dataset.positions]
        at = np.searchsorted(table.rows, lines)
        if not np.array_equal(table.rows[np.minimum(at, len(table.rows) - 1)], lines):
            raise DataError(f"{self.source}: changed since its targets were cached; run again to rebuild them")
        weights = table.targets[at, 0]
        return checked_column(weights, column, lambda i: f"{self.source}, line {int(lines[i])}")

    def batch_stats(self, batch: Mapping[str, Any]) -> BatchStats:
        """Graphs, and atoms as both real and padded elements: graphs are never padded."""
        nodes = int(batch.num_nodes)
        return BatchStats(int(batch.num_graphs), nodes, nodes)


def molecule_arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """A molecule DataModule's arguments (`given`: its `__init__`'s locals) checked together, with the
    preset's columns, task and split mode where they are not given."""
    dataset, path, split = given["dataset"], given["path"], given["split"]
    if dataset is not None and dataset not in MOLECULENET:
        raise ValueError(f"unknown dataset {dataset!r}; presets: {sorted(MOLECULENET)} (or None with path=)")
    preset = MOLECULENET[dataset] if dataset is not None else None
    if preset is None and (path is None or given["smiles_column"] is None or not given["target_columns"]):
        raise ValueError("without a dataset preset, give path, smiles_column and target_columns")
    split = split or (preset.split if preset is not None else "random")
    if split not in SPLIT_MODES:
        raise ValueError(f"split must be one of {SPLIT_MODES}, got {split!r}")
    if given["single_class"] not in SINGLE_CLASS:
        raise ValueError(f"single_class must be one of {SINGLE_CLASS}, got {given['single_class']!r}")
    if not given["test_fraction"] > 0:
        raise ValueError(f"test_fraction must be > 0, got {given['test_fraction']}")
    if given["max_atoms"] < 1:
        raise ValueError(f"max_atoms must be >= 1, got {given['max_atoms']}")
    if given["max_train_samples"] is not None and given["max_train_samples"] < 1:
        raise ValueError(f"max_train_samples must be >= 1, got {given['max_train_samples']}")
    fractions = fractions_of(given["val_fraction"], given["test_fraction"])
    task = given["task"] or (preset.task if preset is not None else "regression")
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return {
        "split": split,
        "fractions": fractions,
        "dataset_name": dataset,
        "smiles_column": given["smiles_column"] or preset.smiles_column,
        "target_columns": list(given["target_columns"] or preset.target_columns),
        "task": task,
    }
