"""Text classification DataModule: local tables, a Hub dataset or synthetic reviews, batched by length."""

from __future__ import annotations

import logging
from functools import cached_property

from varlen.datamodules.base import VarLenDataModule, base_args
from varlen.datasets import text as text_data
from varlen.errors import DataError
from varlen.report import OnBad
from varlen.splits import fractions_of, stratified_split

__all__ = ["TextClassificationDataModule"]

log = logging.getLogger(__name__)


class TextClassificationDataModule(VarLenDataModule):
    """Sentences (or sentence pairs) and labels, tokenised once, batched by length.

    Sources, in the spirit of Hugging Face's ``run_glue.py``: ``train_file`` / ``val_file`` /
    ``test_file`` (CSV, TSV, JSON, JSONL or Parquet), or ``dataset_name`` from the Hub (when
    online), or neither: the embedded synthetic reviews, so that everything runs offline.
    Without a validation source, ``val_fraction`` of the training rows (stratified, seeded) is
    held out; without a test source, the validation split is also the test split.

    Args:
        train_file: local training table.
        val_file: local validation table.
        test_file: local test table; without one, ``test`` (and ``predict``) use the validation set
            (SST-2's test labels are hidden, so its dev set is the usual test), and setup logs it.
        dataset_name: a Hub dataset (e.g. ``"glue"``), used when no ``train_file`` is given.
        dataset_config_name: its configuration (e.g. ``"sst2"``).
        text_column: column with the text.
        text_pair_column: optional column with the second text of a pair.
        label_column: column with the label (strings or ints).
        class_names: the class list, in id order; default: the sorted training labels.
        tokenizer_name_or_path: Hub name or local path; default: the offline MiniLM tokenizer.
        max_length: longest kept sequence in tokens (longer ones are truncated, and counted in
            ``report``).
        with_token_type_ids: return ``token_type_ids`` (None: when the tokenizer produces them).
        val_fraction: share of training rows held out when there is no validation source.
        max_train_samples: keep a stratified, seeded subset of this many training rows (rounded per
            class, so it may differ by a row or so with several classes).
        synthetic_samples: size of the synthetic training set (validation and test: a fifth each).
        batch_size: sentences per batch (or use ``max_tokens``).
        max_tokens: budget of padded tokens per batch, ``len(batch) * longest <= max_tokens``.
        shuffle: reshuffle the training batches every epoch.
        seed: seed of the batch plan, the held-out split and the training subset.
        num_buckets: length buckets of the sampler (None: automatic).
        pad_to_multiple_of: pad to a multiple of this many tokens (8 for tensor cores).
        num_workers: loader worker processes.
        pin_memory: pin batches (None: when CUDA is available).
        persistent_workers: keep workers alive between epochs.
        prefetch_factor: batches prefetched per worker.
        on_bad: a row with an empty text or a missing, non-finite or unknown label: ``"raise"``
            (naming the file and row) or ``"skip"`` it and count it in ``report``.
    """

    mask_keys = ("attention_mask",)

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
        class_names: list[str] | None = None,
        tokenizer_name_or_path: str | None = None,
        max_length: int = 128,
        with_token_type_ids: bool | None = None,
        val_fraction: float = 0.1,
        max_train_samples: int | None = None,
        synthetic_samples: int = 2000,
        batch_size: int | None = 32,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        on_bad: OnBad = "raise",
    ) -> None:
        super().__init__(**base_args(locals()))
        if train_file is None and (val_file or test_file):
            raise ValueError("val_file/test_file need a train_file")
        if max_train_samples is not None and max_train_samples < 1:
            raise ValueError(f"max_train_samples must be >= 1, got {max_train_samples}")
        self.train_file = train_file
        self.val_file = val_file
        self.test_file = test_file
        self.dataset_name = dataset_name
        self.dataset_config_name = dataset_config_name
        self.columns = (
            text_data.TextColumns(text_column, text_pair_column, label_column)
            if train_file or dataset_name
            else text_data.TextColumns("text", None, "label")  # the synthetic default's own
        )
        self._class_names = list(class_names) if class_names else None
        self.tokenizer_name_or_path = tokenizer_name_or_path
        self.max_length = max_length
        self._with_token_type_ids = with_token_type_ids
        self.val_fraction = val_fraction
        self.max_train_samples = max_train_samples
        self.synthetic_samples = synthetic_samples

    # -- raw tables (read lazily: the CLI reads num_classes before setup) --------------------

    @cached_property
    def tables(self) -> dict[str, text_data.TextTable]:
        """The rows of each available split as read (checked files, not yet checked rows)."""
        if self.train_file:
            files = {"train": self.train_file, "val": self.val_file, "test": self.test_file}
            return {
                split: text_data.read_table(path, self.columns, role=f"{split}_file")
                for split, path in files.items()
                if path
            }
        if self.dataset_name:
            return text_data.read_hub(self.dataset_name, self.dataset_config_name, self.columns)
        return text_data.synthetic_tables(self.synthetic_samples)

    @property
    def class_names(self) -> list[str]:
        """Class names in id order (from the config, else the sorted training labels); two at least."""
        if self._class_names is None:
            train = self.tables["train"]
            self._class_names = text_data.check_classes(
                text_data.class_list(train.labels), train.name, self.columns.label
            )
        return text_data.check_classes(self._class_names, "class_names", self.columns.label)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @cached_property
    def tokenizer(self):
        return text_data.load_tokenizer(self.tokenizer_name_or_path)

    @property
    def with_token_type_ids(self) -> bool:
        if self._with_token_type_ids is None:
            return "token_type_ids" in self.tokenizer.model_input_names
        return self._with_token_type_ids

    # -- build --------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download a Hub dataset once per node (files and the synthetic default need nothing)."""
        if self.dataset_name and not self.train_file:
            text_data.read_hub(self.dataset_name, self.dataset_config_name, self.columns)

    def build(self, stage: str | None) -> dict[str, text_data.TokenizedTexts]:
        classes = self.class_names
        rows = {
            split: text_data.encode_rows(table, classes, self.columns, self.report, split)
            for split, table in self.tables.items()
        }
        for split, (table, _) in rows.items():
            if not len(table):
                raise DataError(f"{table.name}: no usable row is left ({split} split); see dm.report:\n{self.report}")
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
        self.collate_fn = text_data.TextCollator(
            self.tokenizer.pad_token_id, self.with_token_type_ids, self.pad_to_multiple_of
        )
        datasets = {}
        pairs = self.columns.pair is not None
        for split, (table, split_labels) in rows.items():
            datasets[split], truncated = text_data.tokenize_table(
                table,
                split_labels,
                self.tokenizer,
                self.max_length,
                self.with_token_type_ids and pairs,
                self.pad_to_multiple_of,
            )
            self.report.truncate(split, truncated, "text")
        if "test" not in datasets:
            log.info("no test split given: test and predict use the validation set (%d samples)", len(datasets["val"]))
            datasets["test"] = datasets["val"]
        return datasets
