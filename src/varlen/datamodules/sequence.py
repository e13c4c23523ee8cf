"""Any ragged data, no scenario needed: tables of variable-length arrays batched under a budget, padded per field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from varlen import notices
from varlen.batching import BucketBatchSampler, EpochBatchSampler
from varlen.batching.telemetry import BatchStats, mask_stats
from varlen.datamodules.base import VarLenDataModule
from varlen.datamodules.packing import row_width
from varlen.datamodules.sequence_head import HEAD_ROWS, TrainingHead
from varlen.datamodules.shaping import check_max_tokens
from varlen.datamodules.weighting import BALANCED, check_sample_weights, checked_column
from varlen.datasets.sequence.checks import RowRules, class_ids, usable_rows
from varlen.datasets.sequence.collate import SequenceCollator
from varlen.datasets.sequence.columns import SequenceColumns, table_columns
from varlen.datasets.sequence.dataset import SIZES, SequenceDataset
from varlen.datasets.sequence.dtypes import check_ranges, float64_notice
from varlen.datasets.sequence.fields import FieldSpec, field_specs
from varlen.datasets.sequence.outputs import OutputRules
from varlen.datasets.sequence.sources import described, is_path
from varlen.datasets.sequence.store import cached_columns
from varlen.datasets.sequence.transform import SampleTransform, transform_name
from varlen.errors import DataError
from varlen.prepare.report import SOURCE
from varlen.prepare.splits import check_fractions, random_split, stratified_split

__all__ = ["COSTS", "SPLITS", "SequenceDataModule", "SplitData"]

SPLITS = ("train", "val", "test", "predict")
#: a split's data: a Parquet / Arrow IPC path, a `datasets.Dataset`, a `pyarrow.Table` or a mapping
#: of column name -> values (typed `Any` so that jsonargparse keeps a path as a string and a mapping as one)
SplitData = Any
#: what `sampler_cost` may say: `varlen.batching.plan.COST_MODES` but `packed` (a layout this has not)
COSTS = ("padded", "sum")


class SequenceDataModule(TrainingHead, VarLenDataModule):
    """Batches of any variable-length data: each column a field, padded per batch, bucketed by a size field.

    Every split's data is a Parquet, Arrow IPC, CSV or JSON Lines file (`--data.train=PATH` on the
    command line; `varlen.write_arrays` writes your arrays as Parquet; a CSV cell of a variable-length
    field holds a JSON list, `"[[0.1, 0.2], [0.3, 0.4]]"`), a Hugging Face `datasets.Dataset`, a
    `pyarrow.Table` or a mapping of column name -> values (one array per sample, of any length along its
    first axis and one shape beyond it, e.g. `[T, 3]`). A
    column of lists is a variable-length field (a `Ragged` over the Arrow list's
    own buffers), served in the dtype it is stored in (`dtypes` casts; a float64 field meeting a float32
    model is said once); a column of numbers or fixed-size lists is a fixed field; the label column makes the
    task (integer, boolean or string labels: classification, classes from the sorted labels, numbers by number; floats:
    regression; a Hugging Face `ClassLabel`: its names). String labels that mix numbers with words or
    spell one number two ways, and floats that are all whole numbers (`1, 2.0, 3`) without `task`, are
    refused naming rows (`labels`). Files and Datasets are converted once
    per node into an Arrow IPC cache table (`prepare_data`, keyed by the file's content or the Dataset's
    fingerprint) that every rank and worker maps; tables and mappings are held in memory as given (a
    spawned worker gets a pickled copy). Without `val`, `val_fraction` of `train` is carved out
    (stratified by class); without `test`, the validation split is the test split (the report says so),
    unless `test_fraction` carves one from `train` (`varlen.prepare.splits.STANDS_IN`, every DataModule's
    rule). `transform` (a callable sample -> sample) changes training samples in the loader's workers,
    its draws a function of `(seed, epoch, index)` (`transform`).
    Without `train`: a small synthetic set
    (`synthetic_sequences`). Bad rows (a missing value, an empty size
    field, a non-finite number, an unknown label) raise, or are skipped and counted.

    Batch:
        index: [B] int64, each sample's position in its split
        <field>: [B, L, *trailing] its dtype, padded with pad_values[field] (0 unless given)
        <field>_mask: [B, L] bool, True where the field's element is real
        <field>_lengths: [B] int64, the field's length in each sample
        <fixed field>: [B, *trailing] its dtype, stacked
        labels: [B] int64 or float32, class ids (classification) or targets (regression); with a label column only

    Args:
        train: the training data (None: synthetic sequences, `synthetic` of them).
        val: validation data (None: `val_fraction` of `train`).
        test: test data (None: `test_fraction` of `train` when above 0, else the validation split).
        predict: data to predict (None: `predict_split`).
        size_field: the variable-length field whose length is a sample's size (None: the first); a list
            of fields budgets each (`max_tokens` then one value per field).
        label_field: the label column (None: no labels).
        task: `classification` or `regression` (None: told from the labels' type; floats that are all
            whole numbers need it: `classification` makes them integer classes).
        class_names: the classes in id order, each label matched as written (None: the training labels,
            sorted, or a `ClassLabel`'s names in id order; over a `ClassLabel`, some of its names).
        fields: the columns to serve (None: every numeric column; others are counted as unused).
        pad_values: per variable-length field, the value padding writes (default 0).
        dtypes: field -> the dtype it is served in (e.g. `{"signal": "float32"}`; default: as stored).
        transform: a callable `sample -> sample` (`sample, rng -> sample` to get a numpy Generator) that
            changes each training sample as its batch is fetched (augmentation; validation and test are served
            as stored): its randomness comes from `(seed, epoch, index)`, so a resumed run, any worker count
            and any rank draw the same; it may shorten a size field, not lengthen it; a module-level function
            (`--data.transform=my_module.augment`) reaches spawned workers.
        val_fraction: share of `train` carved for validation when `val` is not given.
        test_fraction: share carved for testing when `test` is not given (0: none carved, the validation
            split is the test split).
        synthetic: samples of the synthetic set served without `train`.
        sample_weights: None, `"balanced"` (inverse class frequency; classification) or a numeric column.
        cache_dir: where files' and Datasets' cache tables go (default: `$VARLEN_CACHE`).
        sampler_cost: what `max_tokens` counts of a batch: `"padded"` (`B x` its longest size field, what
            the padded tensor holds) or `"sum"` (the sizes summed, as lhotse's `max_duration`: a batch then
            allocates more than the budget; the shape policy's rungs need `"padded"`).
        layout: `"padded"` or `"packed"`: the one variable-length field's samples end to end in one row of
            `max_tokens` elements (rounded up to `pad_to_multiple_of`; a longer sample is bad input, see
            `on_bad`), `<field>_cu_seqlens` where each starts (`packed`), filled
            best-fit; one shape an epoch. In-memory data of one source; `SequenceModel`
            reads it.

    The base's arguments are `VarLenDataModule`'s (`max_tokens`: one value per
    size field, 8192 when neither it nor `batch_size` is set; `on_bad` meets a bad row, named by its source).

    Attributes (linked to the model): `input_field` (the first size field), `feature_dim` (values per
    element), `vocab_size` (integer ids one per element: the training source's largest id + 1, else None; past
    `MAX_VOCAB` refused: values read as ids, `dtypes` serves them as features),
    `task`, `num_classes` (None for regression), `class_names`.
    """

    default_batching = (None, 8192)
    source_arguments = ("train", "val", "test", "predict", "synthetic")

    def __init__(
        self,
        train: SplitData = None,
        val: SplitData = None,
        test: SplitData = None,
        predict: SplitData = None,
        size_field: str | list[str] | None = None,
        label_field: str | None = "label",
        task: Literal["classification", "regression"] | None = None,
        class_names: list[str] | None = None,
        fields: list[str] | None = None,
        pad_values: dict[str, float] | None = None,
        dtypes: dict[str, str] | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.0,
        synthetic: int = 300,
        sample_weights: str | None = None,
        cache_dir: str | None = None,
        sampler_cost: Literal["padded", "sum"] = "padded",
        layout: Literal["padded", "packed"] = "padded",
        **kwargs: Any,
    ) -> None:
        given = {"train": train, "val": val, "test": test, "predict": predict}
        # data held in memory (and a transform) stays out of the hyperparameters (checkpoints, loggers): described
        self.unsaved_arguments = tuple(k for k, v in given.items() if v is not None and not is_path(v))
        self.unsaved_arguments += ("transform",) if transform is not None else ()
        check_sequence_arguments(type(self).__name__, sampler_cost, layout, transform, kwargs)
        self.layout, self.sampler_cost = layout, "packed" if layout == "packed" else sampler_cost  # packed: best-fit
        super().__init__(**kwargs)
        self.hparams.update({k: described(given[k]) for k in self.unsaved_arguments if k in given})
        if transform is not None:
            self.hparams["transform"] = transform_name(transform)
        self.inputs = self._inputs(given, synthetic, self.seed)
        self.tables = {split: s.read() for split, s in self.inputs.items() if s.in_memory}
        self.cache_dir, self.label_field, self.synthetic = cache_dir, label_field, synthetic
        self._link(self._head(), fields, size_field, task, class_names, dtypes)
        self._serve(pad_values, transform, sample_weights)
        self.fractions = {"val": val_fraction if val is None else 0.0, "test": test_fraction if test is None else 0.0}
        check_fractions({"train": 1 - sum(self.fractions.values()), **self.fractions})

    def _serve(self, pad_values: dict[str, float] | None, transform: Callable | None, sample_weights: str | None):
        """How samples are served: the budget's axes, each field's padding, the collate, the transform and the
        training sampler's weights."""
        owner = type(self).__name__
        check_max_tokens(self.max_tokens, self.size_axes, owner)  # one value per size field, said now
        unknown = sorted(set(pad_values or {}) - set(self.fields))
        if unknown:
            raise ValueError(f"{owner}: pad_values name {unknown}, which are no variable-length field {self.fields}")
        self.pad_values = {name: (pad_values or {}).get(name, 0) for name in self.fields}
        if self.layout == "packed" and len(self.fields) != 1:
            raise ValueError(f"{owner}: layout='packed' lays one variable-length field end to end; {self.fields}")
        padding = (self.fields, self.pad_values, self.pad_to_multiple_of, self.size_fields, self.dtypes)
        self.collate_fn = SequenceCollator(*padding)
        rules = OutputRules(self.specs, self.size_fields, self.task, self.num_classes)  # what a transform returns
        where = self.inputs["train"].where
        self.transform = None if transform is None else SampleTransform(transform, self.seed, rules, where)
        self._dtypes_told = False  # the float64 notice, said at the first batch
        self.host_fields: dict[str, BatchStats] | None = None  # each field's padding in the last training batch
        self.sample_weights = check_sample_weights(sample_weights, owner, self.shuffle, columns=True)
        if self.sample_weights == BALANCED and self.task != "classification":
            raise ValueError(f"{owner}: sample_weights='balanced' balances classes: this data has none ({self.task})")

    # -- building -----------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Convert every file's and Dataset's served columns into a cache table (once per node)."""
        for split, source in self.inputs.items():
            if not source.in_memory:
                cached_columns(source, self._split_specs(split), self._label_of(split), self.cache_dir)

    def _label_of(self, split: str) -> str | None:
        """The label column where the split's source has it (a `predict` source may have none)."""
        if self.label_field is None:
            return None
        source = self.inputs[split]
        names = self.tables[split].column_names if split in self.tables else source.read(0).column_names
        if self.label_field in names:
            return self.label_field
        if split != "predict":
            raise DataError(f"{source.where}: no label column {self.label_field!r} (columns: {names})")
        return None

    def _split_specs(self, split: str) -> dict[str, FieldSpec]:
        """The served columns of `split`'s source: the training source's, with the same shapes."""
        if split == "train":
            return self.specs
        source = self.inputs[split]
        head = self.tables[split] if split in self.tables else source.read(HEAD_ROWS)
        specs, _ = field_specs(head, {self.label_field} if self.label_field else set(), source.where)
        for name, spec in self.specs.items():
            theirs = specs.get(name)
            if theirs is None or (theirs.ragged, theirs.trailing) != (spec.ragged, spec.trailing):
                found = "no such column" if theirs is None else f"{'variable' if theirs.ragged else 'fixed'} {theirs}"
                raise DataError(f"{source.where}: column {name!r} is {found}, the training source's is {spec}")
        return {name: specs[name] for name in self.specs}

    def _columns(self, split: str) -> SequenceColumns:
        source, specs, label = self.inputs[split], self._split_specs(split), self._label_of(split)
        if source.in_memory:
            return table_columns(self.tables[split], specs, label, source.where)
        return cached_columns(source, specs, label, self.cache_dir)

    def _rules(self) -> RowRules:
        classes = self.label_spec.class_values if self.label_spec is not None else None
        token = self.input_field if self.vocab_size is not None else None
        row = row_width(self.max_tokens, None) if self.layout == "packed" else None
        return RowRules(self.size_fields, self.label_field, classes, token, self.vocab_size, row)

    def _targets(self, columns: SequenceColumns) -> np.ndarray | None:
        """Class ids (int64) or regression targets (float32) of every row, None without labels."""
        if columns.labels is None:
            return None
        if self.task == "regression":
            return columns.labels.astype(np.float32)
        return class_ids(columns.labels, self.label_spec.class_values)

    def build(self, stage: str | None) -> dict[str, SequenceDataset]:
        """Every split's rows: read (or mapped), checked, carved from train where not given."""
        datasets, rules = {}, self._rules()
        for split, source in self.inputs.items():
            columns = self._columns(split)
            if columns.rows == 0:
                raise DataError(f"{source.where}: holds no rows")
            check_ranges({**columns.ragged, **columns.fixed}, self.dtypes, source.where, source.place)
            kept = usable_rows(
                columns, rules, self.report, source.where, split if split != "train" else SOURCE, source.place
            )
            if not len(kept):
                raise DataError(f"{source.where}: no usable row ({columns.rows} read; see dm.report)")
            for column, why in self.unserved.items():  # each named: a user looks for the column, not a count
                self.report.leave_unused(
                    split if split != "train" else SOURCE, f"{column!r} not served: {why}", 1, "column"
                )
            targets = self._targets(columns)
            parts = self._carve(kept, targets) if split == "train" else {split: kept}
            for name, rows in parts.items():
                labels = None if targets is None else targets[rows]
                datasets[name] = SequenceDataset(
                    columns,
                    rows,
                    labels,
                    self.size_fields,
                    self.pad_values,
                    self.pad_to_multiple_of,
                    source.where,
                    self.dtypes,
                    self.transform if name == "train" else None,
                )
        if self.layout == "packed":  # one row length for every split: the budget (a longer sample is bad input)
            self.collate_fn.packing = row_width(self.max_tokens, self.pad_to_multiple_of)
            for dataset in datasets.values():
                dataset.packing = self.collate_fn.packing
        return datasets

    def _carve(self, kept: np.ndarray, targets: np.ndarray | None) -> dict[str, np.ndarray]:
        """The training rows, and val / test carved from them when not given (stratified by class)."""
        fractions = check_fractions({"train": 1 - sum(self.fractions.values()), **self.fractions})
        wanted = {k: f for k, f in fractions.items() if f > 0}
        if len(wanted) == 1:
            return {"train": kept}
        wanted = check_fractions(wanted)
        if self.task == "classification" and targets is not None:
            parts = stratified_split(targets[kept], wanted, self.seed)
        else:
            parts = random_split(len(kept), wanted, self.seed)
        empty = [k for k, part in parts.items() if not len(part)]
        if empty:
            raise DataError(
                f"{self.inputs['train'].where}: {len(kept)} usable rows leave nothing for {empty}: give more rows, "
                "larger fractions, or the split itself (val=..., test=...)"
            )
        return {k: kept[part] for k, part in parts.items()}

    # -- what the base asks of a DataModule -----------------------------------------------------

    @staticmethod
    def sample_sizes(samples: list[Any]) -> np.ndarray:
        """Decoded samples' sizes `[n, D]`: the `sizes` each sample carries (its size fields' lengths)."""
        if samples and SIZES not in samples[0]:
            raise DataError(
                f"streamed samples carry no {SIZES!r}: write the chunks from a SequenceDataModule (varlen optimize)"
            )
        return np.stack([np.atleast_1d(np.asarray(s[SIZES], dtype=np.int64)) for s in samples]).reshape(
            len(samples), -1
        )

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """With a `transform` (here or in a source), training batches carry their epoch (its draws')."""
        transforms = self.transform is not None or any(a.get("transform") for _, a in self.other_sources)
        return EpochBatchSampler if split == "train" and transforms else BucketBatchSampler

    def loader(self, split: str, shuffle: bool = False) -> Any:
        """The base's loader; a `transform` that spawned workers cannot receive is refused first."""
        if split == "train" and self.transform is not None:
            owner = type(self).__name__
            self.transform.check_picklable(owner, self.num_workers, self.multiprocessing_context)
        return super().loader(split, shuffle)

    def field_stats(self, batch: Mapping[str, Any]) -> dict[str, BatchStats]:
        """Each variable-length field's samples, real and allocated elements in `batch` (its `<field>_mask`):
        the padding of each, where `batch_stats` counts the size fields' together."""
        return {name: mask_stats(batch, (f"{name}_mask",)) for name in self.fields if f"{name}_mask" in batch}

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """The base's counts, each field's padding on the host (`host_fields`, what the epoch line and
        telemetry show per field when there are several), and once a notice of float64 fields meeting a model
        of lower precision (naming the `dtypes` that casts them)."""
        trainer = self.trainer
        if not self._dtypes_told:
            self._dtypes_told = True
            told = float64_notice(type(self).__name__, self.specs, getattr(trainer, "lightning_module", None))
            if told is not None:
                notices.warn(told)
        if trainer is not None and trainer.training and len(self.fields) > 1:
            self.host_fields = self.field_stats(batch)
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def class_labels(self, dataset: SequenceDataset) -> np.ndarray | None:
        """Class ids per sample (classification only)."""
        return dataset.labels if self.task == "classification" else None

    def weight_column(self, dataset: SequenceDataset, column: str) -> np.ndarray:
        """Per-sample weights from a numeric fixed column (checked, naming the source's row)."""
        if column not in dataset.columns.fixed or dataset.columns.fixed[column].ndim != 1:
            raise DataError(f"{dataset.where}: sample weight column {column!r} is not a numeric column of one value")
        values = dataset.columns.fixed[column][dataset.positions]
        return checked_column(values, column, lambda i: f"{dataset.where}, row {int(dataset.positions[i])}")

    state_must_match = ("class_names", "task", "input_field", "feature_dim", "vocab_size")

    def data_state(self) -> dict[str, Any]:
        """The task, its classes, and what the model reads (its field, values per element, vocabulary)."""
        state = {"task": self.task, "input_field": self.input_field, "feature_dim": self.feature_dim}
        if self.class_names is not None:
            state["class_names"] = list(self.class_names)
        if self.vocab_size is not None:
            state["vocab_size"] = self.vocab_size
        return state


def check_sequence_arguments(
    owner: str, sampler_cost: str, layout: str, transform: Any, base: Mapping[str, Any]
) -> None:
    """Refuse a sampler cost, layout or transform that the base's arguments (`base`, as given) contradict."""
    if sampler_cost not in COSTS:
        raise ValueError(
            f"{owner}: sampler_cost must be one of {COSTS}, got {sampler_cost!r}"
            + (" ('packed' lays samples end to end, a layout SequenceDataModule has not)" if sampler_cost else "")
        )
    stream = base.get("stream")
    if transform is not None and stream is not None:
        raise ValueError(f"{owner}: transform changes in-memory training samples; a streamed split has none yet")
    if layout not in ("padded", "packed"):
        raise ValueError(f"{owner}: layout must be 'padded' or 'packed', got {layout!r}")
    if layout == "packed" and (base.get("max_tokens") is None or stream is not None or base.get("sources")):
        raise ValueError(
            f"{owner}: layout='packed' needs max_tokens (the row's length) and in-memory data of one source "
            "(a stream or extra sources are padded only, for now)"
        )
    if sampler_cost == "sum" and base.get("rung_batch_sizes"):
        raise ValueError(f"{owner}: rung_batch_sizes are padded lengths, and sampler_cost='sum' pads nothing")
