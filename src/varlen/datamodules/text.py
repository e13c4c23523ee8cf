"""Text classification DataModule: local tables, a Hub dataset or synthetic reviews, batched by length."""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from varlen import notices
from varlen.datamodules.arguments import keep
from varlen.datamodules.base import VarLenDataModule
from varlen.datamodules.packing import long_samples, row_width
from varlen.datamodules.text_tables import Table, TextTables
from varlen.datamodules.weighting import check_sample_weights
from varlen.datasets.text.collate import TextCollator
from varlen.datasets.text.column_splits import SPLITS
from varlen.datasets.text.dataset import TokenizedTexts
from varlen.datasets.text.readers import TextColumns
from varlen.datasets.text.report import TextReport
from varlen.datasets.text.selections import SplitPlan, TextSplit, document_digests, split_summary
from varlen.datasets.text.sources import TextSource
from varlen.datasets.text.store import TokenTables, load_tokens
from varlen.datasets.text.synthetic import SYNTHETIC_KINDS
from varlen.datasets.text.tokens import OVERFLOW, Tokenization, load_tokenizer
from varlen.prepare.duplicates import count_duplicates
from varlen.storage.cache import default_cache_dir, tokenizer_identity

__all__ = ["LAYOUTS", "TextClassificationDataModule", "check_text_arguments", "given_columns"]

#: a text batch's layouts: a row per text, or the texts end to end in one row
LAYOUTS = ("padded", "packed")

log = logging.getLogger(__name__)


class TextClassificationDataModule(TextTables, VarLenDataModule):
    """Sentences (or sentence pairs) and labels, tokenised once per node, batched by length.

    Sources, in the spirit of Hugging Face's `run_glue.py`: `train_file` / `val_file` /
    `test_file` (each a CSV, TSV, JSON, JSONL, Parquet or `.arrow` file, a folder written by
    `Dataset.save_to_disk`, or, from Python, a `datasets.Dataset`), or `dataset_name` (the Hub,
    when online, or a saved `DatasetDict` folder), or neither: the embedded synthetic reviews, so
    that everything runs offline. `predict_file` adds a `predict` split (labels optional).
    A `split_column` of the training table may say which rows are validation or test rows.
    Without a validation source, `val_fraction` of the training rows (stratified, seeded) is
    held out; without a test source, the validation split is also the test split.

    A table that already holds token ids (an `input_ids` column of integer lists, as `Dataset.map`
    with a tokenizer leaves it; `token_type_ids` kept when the model takes them; `attention_mask`
    not read) is used as it is: `text_column` and `text_pair_column` are then not read, an id
    outside the tokenizer's vocabulary is a `DataError` naming the row, and a row longer than
    `max_length` is truncated and counted (see `varlen.datasets.text.pretokenised`).

    Long documents: `overflow="windows"` cuts a text longer than `max_length` into
    overlapping windows (the fast tokenizer's overflow support), each a sample with its text's
    label and a `document_ids` entry in the batch; the rows are split first, then windowed, so
    the windows of a document never straddle two splits, and `TextClassifier`
    reports document-level metrics besides the window-level ones.

    Where the data live: `prepare_data` (one process per node) tokenises each source once, a
    slice of rows at a time, into Arrow tables in `cache_dir/text` named by a content key (the
    file's content, a `Dataset`'s fingerprint, the tokenizer, `max_length`, `overflow`,
    `stride`, the columns, the classes; with `max_train_samples`, the subset's settings: only the
    rows some split serves are tokenised), and writes the split's selections beside them (see
    `varlen.datasets.text.store` and `varlen.datasets.text.selections`). `setup` (every
    rank) and every loader worker, under any start method, only map those files; a `setup` that
    finds them missing (called without `prepare_data`) builds them first. The linked
    `num_classes` reads the training table's label column alone.

    Messages name a row by its place: a file's line for CSV, TSV and JSON Lines (the header is line
    1), else the row counted from 1 (Parquet, Arrow, a `Dataset`, a JSON array, the Hub).

    Batch:
        input_ids: [B, L] int64, token ids padded with the tokenizer's pad id (L: the longest, rounded up)
        attention_mask: [B, L] int64, 1 for a real token, 0 for padding
        labels: [B] int64, class id of each sample (-1: a predict_file row without a label)
        index: [B] int64, the sample's position in its split (its source row: dataset.rows[index])
        token_type_ids: [B, L] int64, segment of each token, 0 where padded (with with_token_type_ids only)

    With `overflow="windows"` a batch also holds `document_ids` ([B] int64, the document each window
    comes from).

    The base's arguments (see `VarLenDataModule`) count tokens here:
    `batch_size` is sentences per batch (neither it nor `max_tokens` set: 32 per batch); `max_tokens`
    a budget of padded tokens, `len(batch) * longest <= max_tokens` (packed, the row's length `T`: the
    texts of a batch hold at most as many tokens, end to end); `seed` also draws the held-out split and the
    training subset; `predict_split` is read when no `predict_file` is given (`test`: the validation
    set when no test source is given); `on_bad` meets a row with an empty text (blank, or nothing left once
    tokenised but the special tokens: NUL bytes, characters the tokenizer drops) or a missing, non-finite or
    unknown label. A source in `sources` (e.g. `[{name: noisy, train_file: noisy.csv}]`) has its own
    data arguments and inherits the others. With a `stream` (the `stream` extra), `train_file` may be
    left out when `val_file` is given: the classes come from the chunks.

    Args:
        train_file: the training table: a path (CSV, TSV, JSON, JSONL, Parquet, `.arrow`: Arrow IPC,
            stream or file format; a `Dataset.save_to_disk` folder) or a `datasets.Dataset`.
        val_file: the validation table (as `train_file`).
        test_file: the test table (as `train_file`); without one, `test` uses the validation set
            (SST-2's test labels are hidden, so its dev set is the usual test), and setup logs it.
        predict_file: a table to predict on (as `train_file`; the label column may be missing): it
            becomes a `predict` split, which `trainer.predict` reads instead of `predict_split`.
        dataset_name: a Hub dataset (e.g. `"glue"`) or a `DatasetDict.save_to_disk` folder, used
            when no `train_file` is given.
        dataset_config_name: its configuration (e.g. `"sst2"`).
        text_column: column with the text (not read from a table of token ids).
        text_pair_column: optional column with the second text of a pair.
        label_column: column with the label (strings or ints).
        split_column: a column of the training table (file or Hub `train` split) naming each row's
            split: `train` / `training`, `validation` / `valid` / `val` / `dev`, `test` /
            `testing` (any case), or True / False (1 / 0; fastai's `is_valid`: True = validation).
            It replaces carving validation out (`val_fraction` is only used when it marks no
            validation row and no `val_file` is given). Rows it gives to a split that has its own
            file are left out and counted in `report` (unused rows). An unknown value, or no
            training row, is a `DataError` naming the file, column and rows.
        class_names: the class list, in id order; default: the sorted training labels, refused
            (a `DataError` naming rows) when they mix numbers with words (`0`, `1`, `true`) or
            spell one number two ways (`1`, `1.0`). Given, each label is matched as written and a
            row with another label is bad input (`on_bad`). A Hugging Face `ClassLabel` column's ids
            are read as its names: the default is those names in id order; given names must be among them.
        tokenizer_name_or_path: Hub name or local path; default: the offline MiniLM tokenizer.
        max_length: longest sequence in tokens; a longer text is truncated (counted in `report`)
            or cut into windows (`overflow`).
        overflow: `"truncate"` a long text to its first `max_length` tokens, or cut it into
            `"windows"` of `max_length` tokens that share `stride` tokens (single texts only;
            `report` then counts no truncation and says how many windows the documents became).
        stride: tokens shared by consecutive windows (`overflow="windows"`; below `max_length`
            less the special tokens).
        with_token_type_ids: return `token_type_ids` (None: when the tokenizer produces them).
        val_fraction: share of training rows held out when there is no validation source.
        max_train_samples: keep a stratified, seeded subset of this many training rows (documents,
            with windows; rounded per class, so it may differ by a row or so with several classes),
            drawn from the labels before tokenising: only those rows (and the held-out ones) are tokenised.
        synthetic_samples: size of the synthetic training set (validation and test: a fifth each).
        synthetic: the synthetic set: short `"reviews"` or IMDB-like `"long_reviews"` (median
            about 300 tokens, opinions spread thinly and mostly late: truncation loses them).
        sample_weights: how the training sampler draws each epoch (validation, test and predict
            serve every sample once): None (each text once), `"balanced"` (inverse class
            frequency of the training split: every class served equally often; windows count
            each as a sample) or the name of a numeric column of `train_file` holding each row's
            weight (read alone; a missing, negative or non-finite weight is a `DataError` naming
            the row). A Hub dataset or the synthetic reviews take `"balanced"` only. Needs `shuffle`.
        cache_dir: where the tokenised tables are written (under `text/`; None: `$VARLEN_CACHE`,
            else `~/.cache/varlen`). Shared safely by ranks, runs and processes: files are written
            atomically and keyed by content.
        layout: `"padded"` (a row per text, padded to the batch's rung) or `"packed"`: every batch one row
            `[1, T]` (`T` = `max_tokens` rounded up to `pad_to_multiple_of`; a longer text is bad input, see
            `on_bad`), its texts end to end, filled best-fit at their real lengths from the plan, with
            `cu_seqlens`, `position_ids` (restarting at 0 at each text: the model adds its own first position)
            and `max_seqlen`; one shape for every batch, no padding but the row's tail. Pick it
            for short, skewed lengths on a GPU (bf16): the dense layers run on the real tokens only; not for
            lengths all near `max_length` or on a CPU (the model's attention runs per text there).
            `TextClassifier` attends over packed rows.
        deduplicate: leave out every row whose exact text (and pair) an earlier row has: earlier in
            its file, or, for `val_file` / `test_file`, in the training file (counted as unused
            rows in `report`). Without it, copies of a text stay on one side of a carved
            validation split, and `report` counts each split's copies and its texts also in train.
    """

    mask_keys = ("attention_mask",)
    source_arguments = (
        "train_file",
        "val_file",
        "test_file",
        "predict_file",
        "dataset_name",
        "dataset_config_name",
        "split_column",
        "synthetic",
        "synthetic_samples",
        "max_train_samples",
    )
    size_axes = ("tokens",)
    #: arguments kept as given, each an attribute of the same name
    kept_arguments = (
        "train_file val_file test_file predict_file dataset_name dataset_config_name split_column"
        " tokenizer_name_or_path max_length overflow layout stride val_fraction max_train_samples synthetic_samples"
        " synthetic cache_dir deduplicate"
    )

    def __init__(
        self,
        train_file: Table | None = None,
        val_file: Table | None = None,
        test_file: Table | None = None,
        predict_file: Table | None = None,
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
        layout: Literal["padded", "packed"] = "padded",
        stride: int = 32,
        with_token_type_ids: bool | None = None,
        val_fraction: float = 0.1,
        max_train_samples: int | None = None,
        synthetic_samples: int = 2000,
        synthetic: Literal["reviews", "long_reviews"] = "reviews",
        sample_weights: str | None = None,
        cache_dir: str | None = None,
        deduplicate: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._describe_tables(train_file=train_file, val_file=val_file, test_file=test_file, predict_file=predict_file)
        check_text_arguments(locals(), self.stream, self.max_tokens)
        owner, has_columns = type(self).__name__, train_file is not None
        self.sample_weights = check_sample_weights(sample_weights, owner, self.shuffle, has_columns)
        self.report = TextReport(self.on_bad)  # the shared report, plus documents -> windows
        keep(self, locals(), self.kept_arguments)
        self.columns = given_columns(locals())
        self._class_names, self._classes_read = (list(class_names) if class_names else None), False
        self._with_token_type_ids = with_token_type_ids
        self.sampler_cost = "packed" if layout == "packed" else self.sampler_cost  # packed: a row filled best-fit
        self.splitter = TextSplit(val_fraction, max_train_samples, self.seed, split_column, deduplicate)

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

    @property
    def cache_folder(self) -> Path:
        """Where the tokenised tables live: `<cache_dir>/text`."""
        return (Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir()) / "text"

    def tokenization(self, source: TextSource) -> Tokenization:
        """How `source`'s rows become ids: token type ids kept for pairs, or from a table of ids that has them."""
        pairs = source.columns.pair is not None or source.type_ids is not None
        return Tokenization(self.max_length, self.overflow, self.stride, self.with_token_type_ids and pairs)

    def prepare_data(self) -> None:
        """Tokenise every source and select every split into `cache_folder`, once per node (a Hub
        dataset is downloaded first); what is there already is only checked."""
        self._collate()
        tables = self._token_tables()
        for split, plan in self._plans(tables).items():
            if isinstance(plan, SplitPlan):
                self.splitter.selection(self.cache_folder, tables, split, plan)

    def _collate(self) -> TextCollator:
        """The collate (it refuses a tokenizer without a pad token before anything is tokenised)."""
        args = (self.tokenizer.pad_token_id, self.with_token_type_ids, self.pad_to_multiple_of)
        return TextCollator(*args, packing=self.packing)

    @cached_property
    def packing(self) -> tuple[int, int] | None:
        """`(T, first position)` of a packed batch's row (None: padded): `max_tokens` rounded up to
        `pad_to_multiple_of` (a longer text is bad input: `packing`); positions from 0
        (the model knows its own start, `first_position`: the tokenizer's path
        does not)."""
        if self.layout != "packed":
            return None
        return row_width(self.max_tokens, self.pad_to_multiple_of), 0

    @property
    def _streams_train(self) -> bool:
        """The training split comes from `stream` and validation has a source of its own (not carved
        from the training rows, nor marked by a split column): the training source is not tokenised."""
        return self.stream is not None and "val" in self.sources and not self.split_column

    def _token_tables(self) -> dict[str, TokenTables]:
        """Each source's token tables, mapped (built first where they are not in the cache); the training
        source's only where this DataModule serves it."""
        classes, identity, tables = self.class_names, tokenizer_identity(self.tokenizer), {}
        for split, source in self.sources.items():
            if split == "train" and self._streams_train:
                continue
            subset = self.splitter.subset(self.sources, source.marks()) if split == "train" else None
            settings = (self.tokenizer, self.tokenization(source), identity, subset)
            tables[split] = load_tokens(self.cache_folder, source, classes, *settings)
        return tables

    def _plans(self, tables: dict[str, TokenTables]) -> dict[str, SplitPlan | str]:
        plans = self.splitter.plans(tables)
        if "predict" in tables:  # every row of predict_file, once
            plans["predict"] = SplitPlan("predict")
        return {k: v for k, v in plans.items() if k != "train"} if self._streams_train else plans

    @staticmethod
    def sample_sizes(samples: list[Any]) -> np.ndarray:
        """Tokens of each decoded sample (what `lengths` counts), `[n, 1]`."""
        return np.array([[len(s["input_ids"])] for s in samples], dtype=np.int64).reshape(-1, 1)

    def _fits_row(self, split: str, source: str, per_sample: Any) -> np.ndarray | None:
        """Packed: the samples of `split` that fit the row (each longer one raised or skipped and counted,
        named by its source row); None: every sample (padded, or every one fits)."""
        if self.layout != "packed":
            return None
        budget = int(np.atleast_1d(self.max_tokens)[0])
        name, places = self.sources[source].name, self.sources[source].places
        fix = f"raise max_tokens to at least max_length={self.max_length}, or lower max_length to {budget}"
        where = lambda at: [f"{name}: {p}" for p in places(per_sample.numpy("row")[at])]  # noqa: E731
        return long_samples(per_sample.numpy("length"), budget, self.report, split, where, fix, "text", "tokens")

    def build(self, stage: str | None) -> dict[str, TokenizedTexts]:
        self.collate_fn = self._collate()
        tables = self._token_tables()
        if self.split_column:
            marked = zip(SPLITS, self.splitter.marked(tables), strict=True)
            counts = ", ".join(f"{n:,} {split}" for split, n in marked if n)
            notices.info(log, "%s: split column %r gives %s rows", tables["train"].name, self.split_column, counts)
        plans = self._plans(tables)
        self.splitter.check(tables, plans, self.report)
        self.splitter.repeated(tables, plans, self.report)
        datasets: dict[str, TokenizedTexts] = {}
        digests: dict[str, np.ndarray] = {}
        for split, plan in plans.items():
            if not isinstance(plan, SplitPlan):
                continue
            samples = tables[plan.source].samples
            selection = self.splitter.selection(self.cache_folder, tables, split, plan)
            digests[split] = document_digests(samples, selection)
            pad = self.tokenizer.pad_token_id
            fits = self._fits_row(split, plan.source, samples if selection is None else selection)
            settings = (pad, self.pad_to_multiple_of, self.packing, fits)
            datasets[split] = TokenizedTexts.mapped(samples, selection, *settings)
            documents, truncated = split_summary(samples, selection)
            self.report.truncate(split, truncated, "text")
            if self.overflow == "windows":
                self.report.window(split, documents, len(datasets[split]))
        count_duplicates(self.report, digests, "row", "train" if "train" in digests else None)
        if "test" not in datasets:
            notices.info(log, "no test split given: test uses the validation set (%d samples)", len(datasets["val"]))
            datasets["test"] = datasets["val"]
            if "val" in self.report.windows:
                self.report.window("test", *self.report.windows["val"])
        return datasets


def given_columns(given: dict[str, Any]) -> TextColumns:
    """The columns read: as `given` (`__init__`'s locals) where a table or a Hub dataset is, else the synthetic
    reviews' own."""
    if any(given[name] is not None for name in ("train_file", "val_file", "predict_file")) or given["dataset_name"]:
        return TextColumns(given["text_column"], given["text_pair_column"], given["label_column"])
    return TextColumns("text", None, "label")


def check_text_arguments(given: dict[str, Any], stream: Any, max_tokens: Any) -> None:
    """Refuse a text DataModule's arguments that contradict each other (`given`: its `__init__`'s locals)."""
    train_file, val_file, test_file = given["train_file"], given["val_file"], given["test_file"]
    if train_file is None and (val_file is not None or test_file is not None):
        if stream is None:
            raise ValueError("val_file/test_file need a train_file (or a stream that serves the training split)")
        if val_file is None:
            raise ValueError("a stream without a train_file needs a val_file (none to carve validation from)")
    if given["max_train_samples"] is not None and given["max_train_samples"] < 1:
        raise ValueError(f"max_train_samples must be >= 1, got {given['max_train_samples']}")
    if given["max_length"] < 2:
        problem = "max_length must be >= 2 tokens (room for [CLS] and [SEP] at least)"
        raise ValueError(f"{problem}, got {given['max_length']}")
    overflow = given["overflow"]
    if overflow not in OVERFLOW:
        raise ValueError(f"overflow must be one of {OVERFLOW}, got {overflow!r}")
    if overflow == "windows" and given["text_pair_column"]:
        raise ValueError("overflow='windows' takes single texts; sentence pairs need overflow='truncate'")
    if given["stride"] < 0:
        raise ValueError(f"stride must be >= 0, got {given['stride']}")
    if given["split_column"] and train_file is None and not given["dataset_name"]:
        raise ValueError("split_column needs a train_file or a dataset_name (the synthetic reviews come split)")
    if given["synthetic"] not in SYNTHETIC_KINDS:
        raise ValueError(f"synthetic must be one of {SYNTHETIC_KINDS}, got {given['synthetic']!r}")
    if given["layout"] not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {given['layout']!r}")
    if given["layout"] == "packed" and max_tokens is None:
        raise ValueError("layout='packed' needs max_tokens: the row's length in tokens (e.g. 4096)")
