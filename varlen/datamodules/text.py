"""Text classification: dynamic padding, length bucketing and token budgets for BERT-style models."""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

import numpy as np

from varlen.datamodules.base import VarLenDataModule, stratified_split
from varlen.datasets import text as text_data

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
        max_length: longest kept sequence in tokens (longer ones are truncated, and counted).
        with_token_type_ids: return ``token_type_ids`` (None: when the tokenizer produces them).
        val_fraction: share of training rows held out when there is no validation source.
        max_train_samples: keep a stratified, seeded subset of this many training rows.
        synthetic_samples: size of the synthetic training set (validation and test: a fifth each).
        num_proc: processes for tokenisation (None: one).
        batch_size: sentences per batch (or use ``max_tokens``).
        max_tokens: budget of padded tokens per batch, ``len(batch) * longest <= max_tokens``.
        shuffle: reshuffle the training batches every epoch.
        seed: seed of the batch plan and the held-out split.
        num_buckets: length buckets of the sampler (None: automatic).
        pad_to_multiple_of: pad to a multiple of this many tokens (8 for tensor cores).
        num_workers: loader worker processes.
        pin_memory: pin batches (None: when CUDA is available).
        persistent_workers: keep workers alive between epochs.
        prefetch_factor: batches prefetched per worker.
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
        num_proc: int | None = None,
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
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            max_tokens=max_tokens,
            shuffle=shuffle,
            seed=seed,
            num_buckets=num_buckets,
            pad_to_multiple_of=pad_to_multiple_of,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        if train_file is None and (val_file or test_file):
            raise ValueError("val_file/test_file need a train_file")
        self.train_file = train_file
        self.val_file = val_file
        self.test_file = test_file
        self.dataset_name = dataset_name
        self.dataset_config_name = dataset_config_name
        self.text_column = text_column
        self.text_pair_column = text_pair_column
        self.label_column = label_column
        self._class_names = list(class_names) if class_names else None
        self.tokenizer_name_or_path = tokenizer_name_or_path
        self.max_length = max_length
        self._with_token_type_ids = with_token_type_ids
        self.val_fraction = val_fraction
        self.max_train_samples = max_train_samples
        self.synthetic_samples = synthetic_samples
        self.num_proc = num_proc
        self.truncated: dict[str, int] = {}

    # -- raw tables (read lazily: the CLI reads num_classes before setup) --------------------

    @cached_property
    def tables(self) -> dict[str, tuple[Any, str]]:
        """Raw ``datasets.Dataset`` per available split, with a name for error messages."""
        import datasets

        if self.train_file:
            tables = {"train": (text_data.load_table(self.train_file), self.train_file)}
            for split, path in (("val", self.val_file), ("test", self.test_file)):
                if path:
                    tables[split] = (text_data.load_table(path), path)
        elif self.dataset_name:
            hub = datasets.load_dataset(self.dataset_name, self.dataset_config_name)
            names = {"train": "train", "val": "validation", "test": "test"}
            tables = {s: (hub[h], f"{self.dataset_name}[{h}]") for s, h in names.items() if h in hub}
            if "test" in tables and set(tables["test"][0].unique(self.label_column)) <= {-1}:
                del tables["test"]  # GLUE-style hidden test labels
        else:
            tables = {
                split: (datasets.Dataset.from_dict(text_data.synthetic_reviews(n, seed)), f"synthetic {split}")
                for split, n, seed in (
                    ("train", self.synthetic_samples, 0),
                    ("val", max(self.synthetic_samples // 5, 2), 1),
                    ("test", max(self.synthetic_samples // 5, 2), 2),
                )
            }
        for table, name in tables.values():
            text_data.check_columns(table, self._columns, name)
        return tables

    @property
    def _columns(self) -> tuple[str, str | None, str]:
        """(text, pair, label) columns; the synthetic default has its own."""
        if self.train_file or self.dataset_name:
            return self.text_column, self.text_pair_column, self.label_column
        return "text", None, "label"

    @property
    def class_names(self) -> list[str]:
        """Class names in id order (from the config, else the sorted training labels)."""
        if self._class_names is None:
            table, _ = self.tables["train"]
            self._class_names = text_data.class_list(table[self._columns[2]])
        return self._class_names

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

    # -- setup --------------------------------------------------------------------------------

    def _tokenize(self, split: str) -> text_data.TokenizedTexts:
        table, name = self.tables[split]
        text_column, pair_column, label_column = self._columns
        text_data.check_texts(table[text_column], name, text_column)
        if pair_column:
            text_data.check_texts(table[pair_column], name, pair_column)
        labels = text_data.encode_labels(table[label_column], self.class_names, name)
        ids, offsets, type_ids, truncated = text_data.tokenize_table(
            table,
            self.tokenizer,
            text_column,
            pair_column,
            self.max_length,
            self.with_token_type_ids and pair_column is not None,
            self.num_proc,
        )
        self.truncated[split] = truncated
        text_data.warn_truncated(truncated, len(labels), self.max_length, name)
        return text_data.TokenizedTexts(ids, offsets, labels, rows=np.arange(len(labels)), type_ids=type_ids)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        splits = {split: self._tokenize(split) for split in self.tables}
        train = splits["train"]
        if "val" not in splits:
            kept, held = stratified_split(train.labels, self.val_fraction, self.seed)
            splits["val"] = train.subset(held)
            train = train.subset(kept)
        if self.max_train_samples is not None and self.max_train_samples < len(train):
            _, chosen = stratified_split(train.labels, self.max_train_samples / len(train), self.seed)
            train = train.subset(chosen)
        splits["train"] = train
        if "test" not in splits:
            log.info("no test split given: test and predict use the validation set (%d samples)", len(splits["val"]))
            splits["test"] = splits["val"]
        self.datasets = splits
        self.collate_fn = text_data.TextCollator(
            self.tokenizer.pad_token_id, self.with_token_type_ids, self.pad_to_multiple_of
        )
