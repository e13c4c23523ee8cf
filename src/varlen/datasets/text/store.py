"""Tokenised sources on disk: built once per node, a slice of rows at a time; mapped by everyone else.

Each source (a file, a Hub split, a synthetic split) becomes two Arrow IPC tables in the cache
folder (`varlen.storage.tables`), named by a content key over the source's content, the tokenizer
(its name, its whole definition: vocabulary, normaliser, special tokens; and the side it truncates),
`max_length`, `overflow`, `stride`, the columns, the class list the labels were encoded with,
and whether token type ids are kept:

* `<slug>-<key>.arrow`: one row per sample (a usable text, or a window of one): `input_ids`
  (and `token_type_ids`) as list columns, and per sample `length`, `label` (class id),
  `row` (in the source), `truncated`, `digest` (of the row's text and pair: equal texts,
  equal digests; what duplicates are found by), `document` (windows: the text's number among the
  usable ones) and `mark` (the split its split column names, with one);
* `<slug>-<key>.bad.arrow`: the rows that cannot be used (their row, its place as messages name
  it, what is wrong, their mark; a text the tokenizer leaves nothing of but the special tokens is
  empty, as a blank one is),
  which `setup` passes through the report as they were found (raised or counted: the report is the
  same whether the cache was just built or mapped).

Building reads, checks and encodes `CHUNK` rows at a time and
appends them to a `TableBuilder` (ids go to a scratch file as they come): memory
holds one slice and a few bytes per row, never a Python list of the corpus' ids. A table of token ids
(`pretokenised`) is checked and truncated instead of tokenised.

A `Subset` (`max_train_samples`) tokenises only the rows some split serves: a first pass
reads and checks every row (labels, texts, digests, marks: no tokenising) and the subset's `keep`
draws from that what is tokenised; every other usable row stays in the table as a sample of no id
(`tokenised` 0), so that the splits drawn again from the table draw the same rows. The key then
covers the subset's settings.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.datasets.text.pretokenised import IDS, encode_ids
from varlen.datasets.text.readers import UNUSABLE, check_rows
from varlen.datasets.text.sources import RowSlice, TextSource
from varlen.datasets.text.tokens import CHUNK, Encoded, Tokenization, check_stride, encode_texts
from varlen.errors import DataError
from varlen.prepare.duplicates import text_digests
from varlen.storage.cache import cache_key, tokenizer_identity, writable_folder
from varlen.storage.tables import MappedTable, TableBuilder, ids_outside, open_table, write_table

__all__ = ["VERSION", "Rows", "Subset", "TokenTables", "build_tokens", "load_tokens", "token_key"]

log = logging.getLogger(__name__)

#: format version of the token tables (a reader of another version rebuilds them)
VERSION = "text tokens 3"
DTYPES = {"input_ids": np.int32, "token_type_ids": np.int8}


class Rows:
    """A source's usable rows as the split policy reads them, before any is tokenised: per row its class
    `label`, text `digest`, `row` and `mark` (with a split column); one document each. It reads as
    a token table's samples do (`numpy(name)`, `columns`, `len`)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self._columns = columns

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def numpy(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __len__(self) -> int:
        return len(self._columns["row"])


@dataclass(frozen=True)
class Subset:
    """Only some rows of a source are tokenised (see the module docstring).

    Attributes:
        settings: what the draw depends on besides the rows (JSON-like: part of the key).
        keep: `Rows` -> bool per row: tokenise it.
    """

    settings: dict[str, Any]
    keep: Callable[[Rows], np.ndarray]


def token_key(
    source: TextSource,
    classes: Sequence[str],
    tokenizer_id: str,
    tokenization: Tokenization,
    subset: Subset | None = None,
) -> str:
    """The content key of a source's token tables (see the module docstring for what it covers)."""
    settings = [tokenization.max_length, tokenization.overflow, tokenization.stride, tokenization.with_token_type_ids]
    columns = [list(source.columns), source.split_column, source.type_ids]
    parts = [source.identity, columns, list(classes), tokenizer_id, settings]
    return cache_key(*parts, *([subset.settings] if subset is not None else []), version=VERSION)


@dataclass
class TokenTables:
    """What one source became: its samples and the rows left out, mapped (see the module docstring).

    Attributes:
        name: the source's name (for messages).
        samples: one row per sample.
        bad: one row per unusable source row (`row`, `place`, `detail`, `reason`, `mark`).
        key: their content key.
    """

    name: str
    samples: MappedTable
    bad: MappedTable
    key: str

    @property
    def slug(self) -> str:
        """The samples file's name without its key (for the names of tables derived from it)."""
        return self.samples.path.name.removesuffix(f"-{self.key}.arrow")


def _paths(folder: Path, source: TextSource, key: str) -> tuple[Path, Path]:
    return folder / f"{source.slug}-{key}.arrow", folder / f"{source.slug}-{key}.bad.arrow"


def _open(folder: Path, source: TextSource, key: str, vocabulary: int) -> TokenTables | None:
    samples_path, bad_path = _paths(folder, source, key)
    samples = open_table(samples_path, version=VERSION, key=key, check=lambda table: _ids_problem(table, vocabulary))
    bad = open_table(bad_path, version=VERSION, key=key) if samples is not None else None
    return TokenTables(source.name, samples, bad, key) if samples is not None and bad is not None else None


def _ids_problem(samples: MappedTable, vocabulary: int) -> str | None:
    """A token id outside the tokenizer's `vocabulary` ids (an embedding would fail on it), or None."""
    found = ids_outside(samples.ragged("input_ids", lengths=samples.numpy("length")), vocabulary)
    if found is None:
        return None
    return f"holding token id {found[1]} in row {found[0] + 1}, outside the tokenizer's {vocabulary:,} ids"


def load_tokens(
    folder: str | Path,
    source: TextSource,
    classes: Sequence[str],
    tokenizer: Any,
    tokenization: Tokenization,
    tokenizer_id: str | None = None,
    subset: Subset | None = None,
) -> TokenTables:
    """The token tables of `source` in `folder`: mapped when they are there (and valid), else built
    first (a cut-short, other-version or other-input file is rebuilt with a warning).

    `tokenizer_id` is `tokenizer_identity` of `tokenizer`, when the caller has it already;
    `subset`: tokenise only the rows it keeps."""
    folder = Path(folder)
    key = token_key(source, classes, tokenizer_id or tokenizer_identity(tokenizer), tokenization, subset)
    found = _open(folder, source, key, len(tokenizer))
    if found is None:
        build_tokens(folder, source, classes, tokenizer, tokenization, key, subset)
        found = _open(folder, source, key, len(tokenizer))
    if found is None:
        raise RuntimeError(f"the token tables of {source.name} in {folder} do not open after being written")
    return found


class _Bad:
    """The unusable rows found so far."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.places: list[str] = []
        self.details: list[str] = []
        self.reasons: list[str] = []
        self.marks: list[int] = []

    def add(self, part: RowSlice, problems: list[tuple[int, str, str]], marks: np.ndarray | None, source) -> None:
        """The `(position, detail, reason)` problems of `part`, named as messages name their rows."""
        rows = [part.start + i for i, _, _ in problems]
        self.rows += rows
        self.places += source.places(rows) if rows else []
        self.details += [detail for _, detail, _ in problems]
        self.reasons += [reason for _, _, reason in problems]
        self.marks += [-1 if marks is None else int(marks[r]) for r in rows]

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "row": np.asarray(self.rows, np.int64),
            "place": np.asarray(self.places, dtype=str),
            "detail": np.asarray(self.details, dtype=str),
            "reason": np.asarray(self.reasons, dtype=str),
            "mark": np.asarray(self.marks, np.int8),
        }


def _survey(source: TextSource, classes: Sequence[str], marks: np.ndarray | None) -> Rows:
    """Every usable row's label, digest, row and mark (a pass that tokenises nothing)."""
    parts: dict[str, list[np.ndarray]] = {"label": [], "digest": [], "row": []}
    for part in source.slices(CHUNK):
        ids, _ = check_rows(part.texts, part.pairs, part.labels, classes, source.columns)
        usable = np.flatnonzero(ids != UNUSABLE)
        pairs = None if part.pairs is None else [part.pairs[i] for i in usable]
        parts["label"].append(ids[usable])
        parts["digest"].append(text_digests([part.texts[i] for i in usable], pairs))
        parts["row"].append(part.start + usable)
    columns = {name: np.concatenate([np.zeros(0, np.int64), *arrays]) for name, arrays in parts.items()}
    if marks is not None:
        columns["mark"] = marks[columns["row"]]
    return Rows(columns)


class _Drawn(NamedTuple):
    """What the first pass of a `Subset` build found, by source row: tokenise it, and its digest."""

    keep: np.ndarray
    digests: np.ndarray


def _drawn(rows: Rows, subset: Subset) -> _Drawn:
    size = int(rows.numpy("row").max(initial=-1)) + 1
    keep, digests = np.zeros(size, bool), np.zeros(size, np.int64)
    keep[rows.numpy("row")[subset.keep(rows)]] = True
    digests[rows.numpy("row")] = rows.numpy("digest")
    return _Drawn(keep, digests)


def build_tokens(
    folder: str | Path,
    source: TextSource,
    classes: Sequence[str],
    tokenizer: Any,
    tokenization: Tokenization,
    key: str | None = None,
    subset: Subset | None = None,
) -> None:
    """Check, tokenise and write `source`'s rows a slice at a time (see the module docstring).

    Raises:
        DataError: the source cannot be read, its split column names no split, `folder` cannot
            be written (naming it), the tokenizer gives an id outside its vocabulary, or a table of
            token ids holds one (or is to be cut into windows).
        ValueError: a `stride` that leaves a window no new token.
    """
    started = time.perf_counter()
    folder = Path(folder)
    key = key or token_key(source, classes, tokenizer_identity(tokenizer), tokenization, subset)
    windows = tokenization.overflow == "windows"
    if windows and source.columns.text == IDS:
        raise DataError(f"{source.name}: holds token ids (input_ids), which overflow='windows' cannot cut; truncate")
    if windows:
        check_stride(tokenizer, tokenization.max_length, tokenization.stride)
    samples_path, bad_path = _paths(folder, source, key)
    writable_folder(samples_path)
    marks = source.marks()  # first: a split column naming no split is refused before any tokenising
    drawn = None if subset is None else _drawn(_survey(source, classes, marks), subset)
    slices = source.slices(CHUNK)
    first = next(slices, None)  # the file is read (and refused) before a scratch file exists
    ragged = {name: (DTYPES[name], ()) for name in tokenization.fields}
    builder = TableBuilder(samples_path, version=VERSION, key=key, ragged=ragged)
    bad, documents, rows_read, tokenised = _Bad(), 0, 0, 0
    try:
        for part in itertools.chain([first] if first is not None else [], slices):
            added, done = _append(builder, part, bad, marks, documents, classes, source, tokenizer, tokenization, drawn)
            documents, rows_read, tokenised = documents + added, rows_read + len(part.labels), tokenised + done
        if not rows_read:
            builder.append(**_empty(tokenization, windows, marks is not None, drawn is not None))
        write_table(bad_path, bad.columns(), version=VERSION, key=key)  # first: a samples file means both are
    except BaseException:
        builder.abandon()
        raise
    builder.finish()
    log.info(
        "tokenised %s: %d rows (%d unusable, %d tokenised) -> %d samples in %s (%.1f s)",
        source.name,
        rows_read,
        len(bad.rows),
        tokenised,
        builder.rows,
        samples_path,
        time.perf_counter() - started,
    )


def _encode(
    part: RowSlice, todo: np.ndarray, source: TextSource, tokenizer: Any, tokenization: Tokenization
) -> Encoded:
    """The rows `todo` of `part` encoded: tokenised, or, in a table of token ids, checked and truncated."""
    texts = [part.texts[i] for i in todo]
    if source.columns.text != IDS:
        pairs = None if part.pairs is None else [part.pairs[i] for i in todo]
        encoded = encode_texts(tokenizer, texts, pairs, tokenization)
        if (found := ids_outside(Ragged.from_arrays(encoded.fields["input_ids"]), len(tokenizer))) is not None:
            place = source.places.of(part.start + int(todo[encoded.of_text[found[0]]]))
            raise DataError(
                f"{source.name}, {place}: the tokenizer gave token id {found[1]}, outside its {len(tokenizer):,} ids"
            )
        return encoded
    type_rows = None if part.type_ids is None else [part.type_ids[i] for i in todo]

    def where(i: int) -> str:
        return f"{source.name}: {source.places.of(part.start + int(todo[i]))}"

    max_length, keep_types = tokenization.max_length, tokenization.with_token_type_ids
    fields, truncated, empty = encode_ids(tokenizer, texts, type_rows, max_length, keep_types, where)
    return Encoded(fields, np.arange(len(todo), dtype=np.int64), truncated, empty)


def _append(
    builder: TableBuilder,
    part: RowSlice,
    bad: _Bad,
    marks: np.ndarray | None,
    documents: int,
    classes: Sequence[str],
    source: TextSource,
    tokenizer: Any,
    tokenization: Tokenization,
    drawn: _Drawn | None = None,
) -> tuple[int, int]:
    """Check and encode one slice, append its samples to `builder` and its unusable rows to `bad`;
    returns the documents it added and the rows it tokenised. With `drawn`, only the rows it keeps
    are tokenised; the other usable rows get a sample of no id (`tokenised` 0)."""
    ids, problems = check_rows(part.texts, part.pairs, part.labels, classes, source.columns)
    usable = np.flatnonzero(ids != UNUSABLE)
    todo = usable if drawn is None else usable[drawn.keep[part.start + usable]]
    encoded = _encode(part, todo, source, tokenizer, tokenization)
    emptied = todo[encoded.empty]  # nothing left once tokenised: refused as an empty text is
    bad.add(part, sorted(problems + _emptied(part, emptied, source.columns)), marks, source)
    if encoded.empty.any():
        encoded, todo = _without_empty(encoded), todo[~encoded.empty]
    if drawn is None:  # no row stays without ids: an emptied one is no document
        usable = usable[~np.isin(usable, emptied)]
    holes = usable[~np.isin(usable, todo)]  # usable rows not tokenised (not drawn, or emptied)
    of_row = np.concatenate([todo[encoded.of_text], holes])  # each sample's row in the slice, then sorted
    order = np.argsort(of_row, kind="stable")  # a row's windows keep their order
    of_row = of_row[order]
    columns: dict[str, Any] = {name: _ordered(encoded.fields[name], len(holes), order) for name in tokenization.fields}
    columns["length"] = np.fromiter(map(len, columns["input_ids"]), np.int64, len(of_row))
    columns["label"] = ids[of_row]
    columns["row"] = part.start + of_row
    columns["truncated"] = np.concatenate([encoded.truncated, np.zeros(len(holes), bool)])[order].astype(np.int8)
    document = np.searchsorted(usable, of_row)  # each sample's document among the slice's
    if drawn is not None:  # hashed by the first pass
        columns["digest"] = drawn.digests[part.start + usable][document]
    else:
        pairs = None if part.pairs is None else [part.pairs[i] for i in usable]
        columns["digest"] = text_digests([part.texts[i] for i in usable], pairs)[document]
    if tokenization.overflow == "windows":
        columns["document"] = documents + document
    if marks is not None:
        columns["mark"] = marks[part.start + of_row]
    if drawn is not None:
        columns["tokenised"] = (order < len(order) - len(holes)).astype(np.int8)
    builder.append(**columns)
    return len(usable), len(todo)


def _ordered(rows: list[list[int]], holes: int, order: np.ndarray) -> list[list[int]]:
    """`rows` and `holes` empty rows, in `order`."""
    every = rows + [[]] * holes
    return [every[i] for i in order]


def _emptied(part: RowSlice, positions: np.ndarray, columns: Any) -> list[tuple[int, str, str]]:
    """`(position, detail, reason)` of the rows of `part` at `positions` that tokenise to nothing."""
    named = repr(columns.text) if part.pairs is None else f"{columns.text!r} or {columns.pair!r}"
    reason = f"empty text in column {named}"
    return [
        (int(i), f" ({str(part.texts[i])[:40]!r}: no token but the special ones once tokenised)", reason)
        for i in positions
    ]


def _without_empty(encoded: Encoded) -> Encoded:
    """`encoded` less the samples of its empty texts, the others' text numbers counted again."""
    keep = ~encoded.empty[encoded.of_text]
    number = np.cumsum(~encoded.empty) - 1
    fields = {
        name: [row for row, kept in zip(rows, keep, strict=True) if kept] for name, rows in encoded.fields.items()
    }
    return Encoded(fields, number[encoded.of_text[keep]], encoded.truncated[keep], encoded.empty[~encoded.empty])


def _empty(tokenization: Tokenization, windows: bool, marked: bool, subset: bool) -> dict[str, Any]:
    """The columns of no sample (a source without rows still gets every column)."""
    columns: dict[str, Any] = {name: [] for name in tokenization.fields}
    plain = (("length", np.int64), ("label", np.int64), ("row", np.int64), ("truncated", np.int8), ("digest", np.int64))
    for name, dtype in plain:
        columns[name] = np.zeros(0, dtype)
    if windows:
        columns["document"] = np.zeros(0, np.int64)
    if marked:
        columns["mark"] = np.zeros(0, np.int8)
    if subset:
        columns["tokenised"] = np.zeros(0, np.int8)
    return columns
