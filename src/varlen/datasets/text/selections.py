"""The text split policy: which samples of which tokenised source each split serves.

Rows are split, then served as their samples (a text, or its windows), so the windows of a
document never straddle two splits:

* `train`: the training source's rows (those its split column marks `train`, with one), less
  the validation rows carved out, optionally a stratified, seeded subset (`max_train_samples`);
* `val`: its own source; else the training rows its split column marks `val`; else
  `val_fraction` of the training rows, carved out stratified and seeded, every copy of a text
  on the side of its first (`varlen.prepare.splits.keyed_split`: copies never straddle train and val);
* `test`: its own source; else the rows marked `test`; else the validation split.

With `deduplicate`, a text (and pair) whose exact copy came earlier is left out: earlier in its
source, or, for a validation or test source of its own, in the training source.

With `max_train_samples`, the training source is tokenised only where some split serves it
(`TextSplit.subset`: the splits drawn from its rows' labels, digests and marks before any
is tokenised); the splits drawn again from its token table serve its `tokenised` rows only.

A split that serves all of its source's samples reads the token table itself. One that serves
some gets a *selection* table, built once per node beside the token table and keyed by it and the
split settings: per sample its `start` and `length` in the source's ids, `label`, `row`,
`truncated`, `digest` (and `document`, numbered again from 0). Either way every per-sample array a
process reads is a view of a mapped file: a loader worker holds nothing of its own per sample.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from varlen.batching.ragged import concat_ranges
from varlen.datasets.text.column_splits import SPLITS
from varlen.datasets.text.store import Rows, Subset, TokenTables
from varlen.errors import DataError
from varlen.prepare.duplicates import repeats
from varlen.prepare.report import SOURCE, DataReport
from varlen.prepare.splits import fractions_of, keyed_split, stratified_split
from varlen.storage.cache import cache_key
from varlen.storage.tables import MappedTable, open_table, write_table

__all__ = ["SELECTION_VERSION", "SplitPlan", "TextSplit", "document_digests", "document_starts", "split_summary"]

#: format version of the selection tables
SELECTION_VERSION = "text split 2"
#: the reason a row `deduplicate` leaves out is counted under (unused, in the report)
REPEATED = "copy of an earlier row's text, deduplicate=True"


@dataclass(frozen=True)
class SplitPlan:
    """Which rows of which source a split serves.

    Attributes:
        source: the source it reads (`"train"`, `"val"` or `"test"`).
        mark: only the rows the split column gives this code (0 train, 1 val, 2 test); None: every row.
        carve: `"train"` or `"val"`: that part of the validation split carved out of those rows.
        subset: the training subset (`max_train_samples`) of what is left.
        dedupe: leave out the rows whose text an earlier row has (`deduplicate`).
        reference: the other source whose texts count as earlier (`"train"` for a validation or
            test source of its own, under `dedupe`), or None.
    """

    source: str
    mark: int | None = None
    carve: str | None = None
    subset: bool = False
    dedupe: bool = False
    reference: str | None = None

    @property
    def whole(self) -> bool:
        """Whether it serves every sample of its source (no selection table)."""
        return self.mark is None and self.carve is None and not self.subset and not self.dedupe


def document_starts(samples: MappedTable) -> tuple[np.ndarray, np.ndarray]:
    """The first sample and the number of samples of each document (a text, or its windows)."""
    n = len(samples)
    if "document" not in samples.columns:
        return np.arange(n), np.ones(n, np.int64)
    first = np.flatnonzero(np.diff(samples.numpy("document"), prepend=-1))
    return first, np.diff(first, append=n)


def document_digests(samples: MappedTable, selection: MappedTable | None = None) -> np.ndarray:
    """The digest of each document (a text and its pair) a split serves from these tables, in order."""
    per_sample = selection if selection is not None else samples
    return per_sample.numpy("digest")[document_starts(per_sample)[0]]


def split_summary(samples: MappedTable, selection: MappedTable | None) -> tuple[int, int]:
    """`(documents, truncated texts)` of a split served from these tables."""
    per_sample = selection if selection is not None else samples
    truncated = int(np.count_nonzero(per_sample.numpy("truncated")))
    if "document" not in per_sample.columns:
        return len(per_sample), truncated
    documents = per_sample.numpy("document")  # numbered from 0, in order
    return (int(documents[-1]) + 1 if len(documents) else 0), truncated


def _marks(tables: TokenTables) -> tuple[np.ndarray, np.ndarray]:
    """The split code of each usable document and of each unusable row."""
    first, _ = document_starts(tables.samples)
    return tables.samples.numpy("mark")[first], tables.bad.numpy("mark")


@dataclass(frozen=True)
class TextSplit:
    """The split settings of a text DataModule (see the module docstring).

    Args:
        val_fraction: share of the training rows carved out for validation, when nothing else gives one.
        max_train_samples: keep a stratified, seeded subset of this many training rows (documents).
        seed: seed of the carved validation and of the subset.
        split_column: the training source's column naming each row's split, or None.
        deduplicate: leave out every row whose exact text (and pair) an earlier row has.
    """

    val_fraction: float = 0.1
    max_train_samples: int | None = None
    seed: int = 0
    split_column: str | None = None
    deduplicate: bool = False

    def marked(self, tables: Mapping[str, TokenTables]) -> np.ndarray:
        """Rows of the training source its split column gives each split (usable or not), `[3]`."""
        if self.split_column is None:
            return np.zeros(3, np.int64)
        kept, bad = _marks(tables["train"])
        return np.bincount(kept, minlength=3) + np.bincount(bad, minlength=3)

    def plans(self, tables: Mapping[str, TokenTables]) -> dict[str, SplitPlan | str]:
        """`split -> SplitPlan`, or the name of the split it repeats (test: `"val"`)."""
        return self.plans_of(tables, {SPLITS[k] for k, n in enumerate(self.marked(tables)) if n})

    def plans_of(self, sources: Collection[str], marked: Collection[str]) -> dict[str, SplitPlan | str]:
        """`plans` from the splits that have a source and those the split column names."""
        train_mark = 0 if self.split_column else None
        dedupe = self.deduplicate
        reference = "train" if dedupe and "train" in sources else None
        if "val" in sources:
            val = SplitPlan("val", dedupe=dedupe, reference=reference)
        elif "val" in marked:
            val = SplitPlan("train", 1, dedupe=dedupe)
        else:
            val = SplitPlan("train", train_mark, carve="val", dedupe=dedupe)
        subset = self.max_train_samples is not None
        train = SplitPlan("train", train_mark, "train" if val.carve else None, subset, dedupe=dedupe)
        test: SplitPlan | str = "val"
        if "test" in sources:
            test = SplitPlan("test", dedupe=dedupe, reference=reference)
        elif "test" in marked:
            test = SplitPlan("train", 2, dedupe=dedupe)
        return {"train": train, "val": val, "test": test}

    def check(
        self, tables: Mapping[str, TokenTables], plans: Mapping[str, SplitPlan | str], report: DataReport
    ) -> None:
        """Pass every unusable row through `report` (under its split, in row order), refuse a split
        left without a usable row, and count the rows the split column gives a split that has a source
        of its own (unused).

        Raises:
            DataError: an unusable row under `on_bad="raise"` (naming the source and the row), or a
                split without a usable row.
        """
        own = {split: plan for split, plan in plans.items() if isinstance(plan, SplitPlan) and plan.carve != "val"}
        for split, plan in own.items():
            tables_of = tables[plan.source]
            marks = tables_of.bad.numpy("mark")
            picked = np.flatnonzero(marks == plan.mark) if plan.mark is not None else np.arange(len(marks))
            if len(picked):  # the text columns are read only when there is something to say
                places, details, reasons = (tables_of.bad.numpy(c) for c in ("place", "detail", "reason"))
                for i in picked:
                    where = f"{tables_of.name}: {places[i]}{details[i]}"
                    report.bad(where, str(reasons[i]), item="row", split=split)
        for split, plan in own.items():
            tables_of = tables[plan.source]
            if plan.mark is None:
                kept = len(tables_of.samples)
            else:
                kept = int(np.count_nonzero(_marks(tables_of)[0] == plan.mark))
            if not kept:
                raise DataError(f"{tables_of.name}: no usable row is left ({split} split); see dm.report:\n{report}")
        marked = self.marked(tables)
        for split in ("val", "test"):
            if split in tables and marked[SPLITS.index(split)]:
                reason = f"the split column {self.split_column!r} gives them to {split}, which has its own file"
                report.leave_unused(SOURCE, reason, int(marked[SPLITS.index(split)]), "row")

    def firsts(self, samples: MappedTable, earlier: MappedTable | None = None) -> np.ndarray:
        """bool per document of `samples`: no row before it (in its source, or in `earlier`, the
        reference source's samples) has its text."""
        digests = document_digests(samples)
        first = ~repeats(digests)
        if earlier is not None:
            first &= ~np.isin(digests, document_digests(earlier))
        return first

    def documents(self, samples: MappedTable | Rows, plan: SplitPlan, earlier: MappedTable | None = None) -> np.ndarray:
        """The documents (numbers among the source's usable ones, ascending) that `plan` serves
        (`earlier`: the samples of the plan's `reference` source). From a table tokenised for a
        `subset`, the documents tokenised among them: those the subset drew."""
        first, _ = document_starts(samples)
        labels = samples.numpy("label")[first]
        docs = np.arange(len(first)) if plan.mark is None else np.flatnonzero(samples.numpy("mark")[first] == plan.mark)
        if plan.dedupe:
            docs = docs[self.firsts(samples, earlier)[docs]]
        if plan.carve:
            digests, fractions = samples.numpy("digest")[first][docs], fractions_of(self.val_fraction)
            parts = keyed_split(digests, fractions, self.seed, labels[docs], "validation split")
            docs = docs[parts[plan.carve]]
        if "tokenised" in samples.columns:  # the subset was drawn before tokenising, from the same rows
            return docs[samples.numpy("tokenised")[first[docs]] == 1]
        if plan.subset and self.max_train_samples < len(docs):
            share = self.max_train_samples / len(docs)
            fractions = {"kept": share, "rest": 1 - share}
            docs = docs[stratified_split(labels[docs], fractions, self.seed, "training subset")["kept"]]
        return docs

    def subset(self, sources: Collection[str], marks: np.ndarray | None) -> Subset | None:
        """What of the training source to tokenise under `max_train_samples` (None without it): the
        documents some split draws from it, drawn as `documents` draws them (`sources`: the
        splits with a source; `marks`: the training source's split column codes, or None)."""
        if self.max_train_samples is None:
            return None
        marked = set() if marks is None else {SPLITS[k] for k in np.unique(marks)}
        plans = self.plans_of(sources, marked).values()
        served = [p for p in plans if isinstance(p, SplitPlan) and p.source == "train"]

        def keep(rows: Rows) -> np.ndarray:
            kept = np.zeros(len(rows), bool)
            for plan in served:
                kept[self.documents(rows, plan)] = True
            return kept

        return Subset({"split": asdict(self), "plans": [asdict(p) for p in served]}, keep)

    def select(
        self, samples: MappedTable, plan: SplitPlan, earlier: MappedTable | None = None
    ) -> dict[str, np.ndarray]:
        """The per-sample columns of the selection table of `plan` (see the module docstring)."""
        docs = self.documents(samples, plan, earlier)
        first, counts = document_starts(samples)
        chosen = concat_ranges(first[docs], counts[docs])
        lengths = samples.numpy("length")
        columns = {"start": samples.ragged("input_ids", lengths=lengths).starts[chosen], "length": lengths[chosen]}
        columns |= {name: samples.numpy(name)[chosen] for name in ("label", "row", "truncated", "digest")}
        if "document" in samples.columns:
            columns["document"] = np.repeat(np.arange(len(docs), dtype=np.int64), counts[docs])
        return columns

    def selection_key(self, tables: TokenTables, plan: SplitPlan, earlier: TokenTables | None = None) -> str:
        """The content key of a selection table: the token tables' key (and the reference source's)
        and the settings `plan` uses."""
        settings = {}
        if plan.carve:
            settings |= {"val_fraction": self.val_fraction, "seed": self.seed}
        if plan.subset:
            settings |= {"max_train_samples": self.max_train_samples, "seed": self.seed}
        if earlier is not None:
            settings |= {"reference": earlier.key}
        return cache_key(tables.key, asdict(plan), settings, version=SELECTION_VERSION)

    def selection(
        self, folder: str | Path, tables: Mapping[str, TokenTables], split: str, plan: SplitPlan
    ) -> MappedTable | None:
        """The mapped selection table of `split` (built first when it is not there) from `tables`
        (every source's), or None when the split serves its whole source."""
        if plan.whole:
            return None
        own = tables[plan.source]
        earlier = tables[plan.reference] if plan.reference else None
        key = self.selection_key(own, plan, earlier)
        path = Path(folder) / f"{own.slug}-{split}-{key}.arrow"
        found = open_table(path, version=SELECTION_VERSION, key=key)
        if found is None:
            columns = self.select(own.samples, plan, earlier.samples if earlier is not None else None)
            write_table(path, columns, version=SELECTION_VERSION, key=key)
            found = open_table(path, version=SELECTION_VERSION, key=key)
        return found

    def repeated(
        self, tables: Mapping[str, TokenTables], plans: Mapping[str, SplitPlan | str], report: DataReport
    ) -> None:
        """Count in `report` (unused, under the source pseudo-split) the rows `deduplicate` leaves out."""
        sources = {
            plan.source: plan.reference for plan in plans.values() if isinstance(plan, SplitPlan) and plan.dedupe
        }
        for source, reference in sources.items():
            earlier = tables[reference].samples if reference else None
            left_out = int(np.count_nonzero(~self.firsts(tables[source].samples, earlier)))
            report.leave_unused(SOURCE, REPEATED, left_out, "row")
