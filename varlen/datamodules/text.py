"""Text classification DataModule: local tables, a Hub dataset or synthetic reviews, batched by length."""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Literal

from varlen import notices
from varlen.datamodules.base import PredictSplit, StartMethod, VarLenDataModule, base_args
from varlen.datasets.text.collate import TextCollator
from varlen.datasets.text.column_splits import split_by_column
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.readers import (
    TextColumns,
    TextTable,
    check_classes,
    class_list,
    encode_rows,
    read_hub,
    read_table,
)
from varlen.datasets.text.report import TextReport
from varlen.datasets.text.synthetic import SYNTHETIC_KINDS, synthetic_tables
from varlen.datasets.text.tokens import OVERFLOW, load_tokenizer, tokenize_table
from varlen.errors import DataError
from varlen.report import SOURCE, OnBad
from varlen.splits import fractions_of, stratified_split

__all__ = ["TextClassificationDataModule"]

log = logging.getLogger(__name__)


class TextClassificationDataModule(VarLenDataModule):
    """Sentences (or sentence pairs) and labels, tokenised once, batched by length.

    Sources, in the spirit of Hugging Face's ``run_glue.py``: ``train_file`` / ``val_file`` /
    ``test_file`` (CSV, TSV, JSON, JSONL or Parquet), or ``dataset_name`` from the Hub (when
    online), or neither: the embedded synthetic reviews, so that everything runs offline.
    A ``split_column`` of the training table may say which rows are validation or test rows.
    Without a validation source, ``val_fraction`` of the training rows (stratified, seeded) is
    held out; without a test source, the validation split is also the test split.

    Long documents: ``overflow="windows"`` cuts a text longer than ``max_length`` into
    overlapping windows (the fast tokenizer's overflow support), each a sample with its text's
    label and a ``document_ids`` entry in the batch; the rows are split first, then windowed, so
    the windows of a document never straddle two splits, and :class:`~varlen.models.TextClassifier`
    reports document-level metrics besides the window-level ones.

    Args:
        train_file: local training table.
        val_file: local validation table.
        test_file: local test table; without one, ``test`` uses the validation set (SST-2's test
            labels are hidden, so its dev set is the usual test), and setup logs it.
        dataset_name: a Hub dataset (e.g. ``"glue"``), used when no ``train_file`` is given.
        dataset_config_name: its configuration (e.g. ``"sst2"``).
        text_column: column with the text.
        text_pair_column: optional column with the second text of a pair.
        label_column: column with the label (strings or ints).
        split_column: a column of the training table (file or Hub ``train`` split) naming each row's
            split: ``train`` / ``training``, ``validation`` / ``valid`` / ``val`` / ``dev``, ``test`` /
            ``testing`` (any case), or True / False (1 / 0; fastai's ``is_valid``: True = validation).
            It replaces carving validation out (``val_fraction`` is only used when it marks no
            validation row and no ``val_file`` is given). Rows it gives to a split that has its own
            file are left out and counted in ``report`` (unused rows). An unknown value, or no
            training row, is a :class:`~varlen.errors.DataError` naming the file, column and rows.
        class_names: the class list, in id order; default: the sorted training labels.
        tokenizer_name_or_path: Hub name or local path; default: the offline MiniLM tokenizer.
        max_length: longest sequence in tokens; a longer text is truncated (counted in ``report``)
            or cut into windows (``overflow``).
        overflow: ``"truncate"`` a long text to its first ``max_length`` tokens, or cut it into
            ``"windows"`` of ``max_length`` tokens that share ``stride`` tokens (single texts only;
            ``report`` then counts no truncation and says how many windows the documents became).
        stride: tokens shared by consecutive windows (``overflow="windows"``; below ``max_length``
            less the special tokens).
        with_token_type_ids: return ``token_type_ids`` (None: when the tokenizer produces them).
        val_fraction: share of training rows held out when there is no validation source.
        max_train_samples: keep a stratified, seeded subset of this many training rows (documents,
            with windows; rounded per class, so it may differ by a row or so with several classes).
        synthetic_samples: size of the synthetic training set (validation and test: a fifth each).
        synthetic: the synthetic set: short ``"reviews"`` or IMDB-like ``"long_reviews"`` (median
            about 300 tokens, opinions spread thinly and mostly late: truncation loses them).
        batch_size: sentences per batch; with ``max_tokens``, the most sentences in a batch (neither
            set: 32 per batch).
        max_tokens: budget of padded tokens per batch, ``len(batch) * longest <= max_tokens``.
        shuffle: reshuffle the training batches every epoch.
        seed: seed of the batch plan, the held-out split and the training subset.
        num_buckets: length buckets of the sampler (None: automatic).
        pad_to_multiple_of: pad to a multiple of this many tokens (8 for tensor cores).
        num_workers: loader worker processes.
        pin_memory: pin batches (None: when CUDA is available).
        persistent_workers: keep workers alive between epochs.
        prefetch_factor: batches prefetched per worker.
        multiprocessing_context: how workers start (``fork``, ``spawn``, ``forkserver``; None: the
            platform's default).
        predict_split: the split ``trainer.predict`` runs on (``test``: the validation set when no
            test source is given, see ``test_file``).
        on_bad: a row with an empty text or a missing, non-finite or unknown label: ``"raise"``
            (naming the file and row) or ``"skip"`` it and count it in ``report``.
    """

    mask_keys = ("attention_mask",)
    size_axes = ("tokens",)

    def __init__(
        self,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        dataset_name: str | None = None,
        dataset_config_name: str | None = None,
        text_column: str = "text",
        text_pair_column: str | None = None,
        label_column: str = "label",
        split_column: str | None = None,
        class_names: list[str] | None = None,
        tokenizer_name_or_path: str | None = None,
        max_length: int = 128,
        overflow: Literal["truncate", "windows"] = "truncate",
        stride: int = 32,
        with_token_type_ids: bool | None = None,
        val_fraction: float = 0.1,
        max_train_samples: int | None = None,
        synthetic_samples: int = 2000,
        synthetic: Literal["reviews", "long_reviews"] = "reviews",
        batch_size: int | None = None,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        multiprocessing_context: StartMethod = None,
        predict_split: PredictSplit = "test",
        on_bad: OnBad = "raise",
    ) -> None:
        super().__init__(**base_args(locals()))
        if train_file is None and (val_file or test_file):
            raise ValueError("val_file/test_file need a train_file")
        if max_train_samples is not None and max_train_samples < 1:
            raise ValueError(f"max_train_samples must be >= 1, got {max_train_samples}")
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 tokens (room for [CLS] and [SEP] at least), got {max_length}")
        if overflow not in OVERFLOW:
            raise ValueError(f"overflow must be one of {OVERFLOW}, got {overflow!r}")
        if overflow == "windows" and text_pair_column:
            raise ValueError("overflow='windows' takes single texts; sentence pairs need overflow='truncate'")
        if stride < 0:
            raise ValueError(f"stride must be >= 0, got {stride}")
        if split_column and not (train_file or dataset_name):
            raise ValueError("split_column needs a train_file or a dataset_name (the synthetic reviews come split)")
        if synthetic not in SYNTHETIC_KINDS:
            raise ValueError(f"synthetic must be one of {SYNTHETIC_KINDS}, got {synthetic!r}")
        self.report = TextReport(on_bad)  # the shared report, plus documents -> windows
        self.train_file = train_file
        self.val_file = val_file
        self.test_file = test_file
        self.dataset_name = dataset_name
        self.dataset_config_name = dataset_config_name
        self.columns = (
            TextColumns(text_column, text_pair_column, label_column)
            if train_file or dataset_name
            else TextColumns("text", None, "label")  # the synthetic default's own
        )
        self.split_column = split_column
        self._class_names = list(class_names) if class_names else None
        self.tokenizer_name_or_path = tokenizer_name_or_path
        self.max_length = max_length
        self.overflow = overflow
        self.stride = stride
        self._with_token_type_ids = with_token_type_ids
        self.val_fraction = val_fraction
        self.max_train_samples = max_train_samples
        self.synthetic_samples = synthetic_samples
        self.synthetic = synthetic
        self._left_out: dict[str, int] = {}  # split -> rows the split column gave to a split with its own file

    # -- raw tables (read lazily: the CLI reads num_classes before setup) --------------------

    @cached_property
    def tables(self) -> dict[str, TextTable]:
        """The rows of each available split as read (checked files, not yet checked rows), the
        training table already divided by its ``split_column``."""
        if self.train_file:
            files = {"train": self.train_file, "val": self.val_file, "test": self.test_file}
            marked = {"train": self.split_column}  # only the training table may carry the split column
            tables = {
                split: read_table(path, self.columns, f"{split}_file", marked.get(split))
                for split, path in files.items()
                if path
            }
        elif self.dataset_name:
            tables = read_hub(self.dataset_name, self.dataset_config_name, self.columns, self.split_column)
        else:
            return synthetic_tables(self.synthetic_samples, self.synthetic)
        return self._by_split_column(tables) if self.split_column else tables

    def _by_split_column(self, tables: dict[str, TextTable]) -> dict[str, TextTable]:
        """The training table's rows dealt by its split column; a split with its own source keeps it."""
        parts = split_by_column(tables["train"], self.split_column)
        self._left_out = {split: len(part) for split, part in parts.items() if split != "train" and split in tables}
        counts = ", ".join(f"{len(part):,} {split}" for split, part in parts.items())
        notices.info(log, "%s: split column %r gives %s rows", tables["train"].name, self.split_column, counts)
        merged = {**parts, **tables, "train": parts["train"]}
        return {split: merged[split] for split in ("train", "val", "test") if split in merged}

    @property
    def class_names(self) -> list[str]:
        """Class names in id order (from the config, else the sorted training labels); two at least."""
        if self._class_names is None:
            train = self.tables["train"]
            self._class_names = check_classes(class_list(train.labels), train.name, self.columns.label)
        return check_classes(self._class_names, "class_names", self.columns.label)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @cached_property
    def tokenizer(self):
        return load_tokenizer(self.tokenizer_name_or_path)

    @property
    def with_token_type_ids(self) -> bool:
        if self._with_token_type_ids is None:
            return "token_type_ids" in self.tokenizer.model_input_names
        return self._with_token_type_ids

    # -- what a checkpoint carries -----------------------------------------------------------

    state_must_match = ("class_names", "vocab_size")

    def data_state(self) -> dict[str, object]:
        """Classes in id order, the tokenizer (its name as configured; None: the offline default)
        and how texts were cut."""
        return {
            "class_names": self.class_names,
            "tokenizer": self.tokenizer_name_or_path,
            "vocab_size": len(self.tokenizer),
            "max_length": self.max_length,
            "overflow": self.overflow,
            "stride": self.stride,
        }

    # -- build --------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download a Hub dataset once per node (files and the synthetic default need nothing)."""
        if self.dataset_name and not self.train_file:
            read_hub(self.dataset_name, self.dataset_config_name, self.columns)

    def build(self, stage: str | None) -> dict[str, TokenizedTexts]:
        classes = self.class_names
        rows = {
            split: encode_rows(table, classes, self.columns, self.report, split) for split, table in self.tables.items()
        }
        for split, (table, _) in rows.items():
            if not len(table):
                raise DataError(f"{table.name}: no usable row is left ({split} split); see dm.report:\n{self.report}")
        for split, count in self._left_out.items():
            reason = f"the split column {self.split_column!r} gives them to {split}, which has its own file"
            self.report.leave_unused(SOURCE, reason, count, "row")
        train, labels = rows["train"]
        if "val" not in rows:
            parts = stratified_split(labels, fractions_of(self.val_fraction), self.seed, "validation split")
            rows["val"] = (train.select(parts["val"]), labels[parts["val"]])
            train, labels = train.select(parts["train"]), labels[parts["train"]]
        if self.max_train_samples is not None and self.max_train_samples < len(labels):
            share = self.max_train_samples / len(labels)
            kept = stratified_split(labels, {"kept": share, "rest": 1 - share}, self.seed, "training subset")["kept"]
            train, labels = train.select(kept), labels[kept]
        rows["train"] = (train, labels)
        # first: it refuses a tokenizer without a pad token before anything is tokenised
        self.collate_fn = TextCollator(self.tokenizer.pad_token_id, self.with_token_type_ids, self.pad_to_multiple_of)
        datasets = {}
        pairs = self.columns.pair is not None
        for split, (table, split_labels) in rows.items():
            datasets[split], truncated = tokenize_table(
                table,
                split_labels,
                self.tokenizer,
                self.max_length,
                self.with_token_type_ids and pairs,
                self.pad_to_multiple_of,
                self.overflow,
                self.stride,
            )
            self.report.truncate(split, truncated, "text")
            if self.overflow == "windows":
                self.report.window(split, len(table), len(datasets[split]))
        if "test" not in datasets:
            notices.info(log, "no test split given: test uses the validation set (%d samples)", len(datasets["val"]))
            datasets["test"] = datasets["val"]
            if "val" in self.report.windows:
                self.report.window("test", *self.report.windows["val"])
        return datasets
