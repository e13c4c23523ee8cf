"""Tokenised sources on disk: built once per node, a slice of rows at a time; mapped by everyone else.

Each source (a file, a Hub split, a synthetic split) becomes two Arrow IPC tables in the cache
folder (:mod:`varlen.tables`), named by a content key over the source's content, the tokenizer
(its name, its whole definition: vocabulary, normaliser, special tokens; and the side it truncates),
``max_length``, ``overflow``, ``stride``, the columns, the class list the labels were encoded with,
and whether token type ids are kept:

* ``<slug>-<key>.arrow``: one row per sample (a usable text, or a window of one): ``input_ids``
  (and ``token_type_ids``) as list columns, and per sample ``length``, ``label`` (class id),
  ``row`` (in the source), ``truncated``, ``digest`` (of the row's text and pair: equal texts,
  equal digests; what duplicates are found by), ``document`` (windows: the text's number among the
  usable ones) and ``mark`` (the split its split column names, with one);
* ``<slug>-<key>.bad.arrow``: the rows that cannot be used (their row, what is wrong, their mark;
  a text the tokenizer leaves nothing of but the special tokens is empty, as a blank one is),
  which ``setup`` passes through the report as they were found (raised or counted: the report is the
  same whether the cache was just built or mapped).

Building reads, checks and encodes :data:`~varlen.datasets.text.tokens.CHUNK` rows at a time and
appends them to a :class:`~varlen.tables.TableBuilder` (ids go to a scratch file as they come): memory
holds one slice and a few bytes per row, never a Python list of the corpus' ids.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from varlen.batching.ragged import Ragged
from varlen.cache import cache_key, tokenizer_identity, writable_folder
from varlen.datasets.text.readers import check_rows
from varlen.datasets.text.sources import RowSlice, TextSource
from varlen.datasets.text.tokens import CHUNK, Encoded, Tokenization, check_stride, encode_texts
from varlen.duplicates import text_digests
from varlen.errors import DataError
from varlen.tables import MappedTable, TableBuilder, ids_outside, open_table, write_table

__all__ = ["VERSION", "TokenTables", "build_tokens", "load_tokens", "token_key"]

log = logging.getLogger(__name__)

#: format version of the token tables (a reader of another version rebuilds them)
VERSION = "text tokens 2"
DTYPES = {"input_ids": np.int32, "token_type_ids": np.int8}


def token_key(source: TextSource, classes: Sequence[str], tokenizer_id: str, tokenization: Tokenization) -> str:
    """The content key of a source's token tables (see the module docstring for what it covers)."""
    settings = [tokenization.max_length, tokenization.overflow, tokenization.stride, tokenization.with_token_type_ids]
    columns = [list(source.columns), source.split_column]
    return cache_key(source.identity, columns, list(classes), tokenizer_id, settings, version=VERSION)


@dataclass
class TokenTables:
    """What one source became: its samples and the rows left out, mapped (see the module docstring).

    Attributes:
        name: the source's name (for messages).
        samples: one row per sample.
        bad: one row per unusable source row (``row``, ``detail``, ``reason``, ``mark``).
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
    """A token id outside the tokenizer's ``vocabulary`` ids (an embedding would fail on it), or None."""
    found = ids_outside(samples.ragged("input_ids", lengths=samples.numpy("length")), vocabulary)
    if found is None:
        return None
    return f"holding token id {found[1]} in row {found[0]}, outside the tokenizer's {vocabulary:,} ids"


def load_tokens(
    folder: str | Path,
    source: TextSource,
    classes: Sequence[str],
    tokenizer: Any,
    tokenization: Tokenization,
    tokenizer_id: str | None = None,
) -> TokenTables:
    """The token tables of ``source`` in ``folder``: mapped when they are there (and valid), else built
    first (a cut-short, other-version or other-input file is rebuilt with a warning).

    ``tokenizer_id`` is :func:`tokenizer_identity` of ``tokenizer``, when the caller has it already."""
    folder = Path(folder)
    key = token_key(source, classes, tokenizer_id or tokenizer_identity(tokenizer), tokenization)
    found = _open(folder, source, key, len(tokenizer))
    if found is None:
        build_tokens(folder, source, classes, tokenizer, tokenization, key)
        found = _open(folder, source, key, len(tokenizer))
    if found is None:
        raise RuntimeError(f"the token tables of {source.name} in {folder} do not open after being written")
    return found


class _Bad:
    """The unusable rows found so far."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.details: list[str] = []
        self.reasons: list[str] = []
        self.marks: list[int] = []

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "row": np.asarray(self.rows, np.int64),
            "detail": np.asarray(self.details, dtype=str),
            "reason": np.asarray(self.reasons, dtype=str),
            "mark": np.asarray(self.marks, np.int8),
        }


def build_tokens(
    folder: str | Path,
    source: TextSource,
    classes: Sequence[str],
    tokenizer: Any,
    tokenization: Tokenization,
    key: str | None = None,
) -> None:
    """Check, tokenise and write ``source``'s rows a slice at a time (see the module docstring).

    Raises:
        DataError: the source cannot be read, its split column names no split, ``folder`` cannot
            be written (naming it), or the tokenizer gives an id outside its vocabulary.
        ValueError: a ``stride`` that leaves a window no new token.
    """
    started = time.perf_counter()
    folder = Path(folder)
    key = key or token_key(source, classes, tokenizer_identity(tokenizer), tokenization)
    windows = tokenization.overflow == "windows"
    if windows:
        check_stride(tokenizer, tokenization.max_length, tokenization.stride)
    samples_path, bad_path = _paths(folder, source, key)
    writable_folder(samples_path)
    marks = source.marks()  # first: a split column naming no split is refused before any tokenising
    slices = source.slices(CHUNK)
    first = next(slices, None)  # the file is read (and refused) before a scratch file exists
    ragged = {name: (DTYPES[name], ()) for name in tokenization.fields}
    builder = TableBuilder(samples_path, version=VERSION, key=key, ragged=ragged)
    bad, documents, rows = _Bad(), 0, 0
    try:
        for part in itertools.chain([first] if first is not None else [], slices):
            ids = _append(builder, part, bad, marks, documents, classes, source, tokenizer, tokenization)
            documents, rows = documents + int(np.count_nonzero(ids >= 0)), rows + len(ids)
        if not rows:
            builder.append(**_empty(tokenization, windows, marks is not None))
        write_table(bad_path, bad.columns(), version=VERSION, key=key)  # first: a samples file means both are
    except BaseException:
        builder.abandon()
        raise
    builder.finish()
    log.info(
        "tokenised %s: %d rows (%d unusable) -> %d samples in %s (%.1f s)",
        source.name,
        rows,
        len(bad.rows),
        builder.rows,
        samples_path,
        time.perf_counter() - started,
    )


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
) -> np.ndarray:
    """Check and encode one slice, append its samples to ``builder`` and its unusable rows to ``bad``;
    returns the class id of each row (-1: unusable)."""
    ids, problems = check_rows(part.texts, part.pairs, part.labels, classes, source.columns)
    keep = np.flatnonzero(ids >= 0)
    pairs = None if part.pairs is None else [part.pairs[i] for i in keep]
    encoded = encode_texts(tokenizer, [part.texts[i] for i in keep], pairs, tokenization)
    if encoded.empty.any():  # nothing left once tokenised: refused as an empty text is
        problems = sorted(problems + _emptied(part, keep[encoded.empty], source.columns))
        ids[keep[encoded.empty]] = -1
        encoded, keep = _without_empty(encoded), keep[~encoded.empty]
    for i, detail, reason in problems:
        bad.rows.append(part.start + i)
        bad.details.append(detail)
        bad.reasons.append(reason)
        bad.marks.append(-1 if marks is None else int(marks[part.start + i]))
    of_row = keep[encoded.of_text]  # each sample's row in the slice
    if (found := ids_outside(Ragged.from_arrays(encoded.fields["input_ids"]), len(tokenizer))) is not None:
        where = f"{source.name}, row {part.start + int(of_row[found[0]])}"
        raise DataError(f"{where}: the tokenizer gave token id {found[1]}, outside its {len(tokenizer):,} ids")
    columns: dict[str, Any] = {name: encoded.fields[name] for name in tokenization.fields}
    columns["length"] = np.fromiter(map(len, encoded.fields["input_ids"]), np.int64, len(of_row))
    columns["label"] = ids[of_row]
    columns["row"] = part.start + of_row
    columns["truncated"] = encoded.truncated.astype(np.int8)
    digests = text_digests([part.texts[i] for i in keep], None if pairs is None else [part.pairs[i] for i in keep])
    columns["digest"] = digests[encoded.of_text]
    if tokenization.overflow == "windows":
        columns["document"] = documents + encoded.of_text
    if marks is not None:
        columns["mark"] = marks[part.start + of_row]
    builder.append(**columns)
    return ids


def _emptied(part: RowSlice, positions: np.ndarray, columns: Any) -> list[tuple[int, str, str]]:
    """``(position, detail, reason)`` of the rows of ``part`` at ``positions`` that tokenise to nothing."""
    named = repr(columns.text) if part.pairs is None else f"{columns.text!r} or {columns.pair!r}"
    reason = f"empty text in column {named}"
    return [
        (int(i), f" ({str(part.texts[i])[:40]!r}: no token but the special ones once tokenised)", reason)
        for i in positions
    ]


def _without_empty(encoded: Encoded) -> Encoded:
    """``encoded`` less the samples of its empty texts, the others' text numbers counted again."""
    keep = ~encoded.empty[encoded.of_text]
    number = np.cumsum(~encoded.empty) - 1
    fields = {
        name: [row for row, kept in zip(rows, keep, strict=True) if kept] for name, rows in encoded.fields.items()
    }
    return Encoded(fields, number[encoded.of_text[keep]], encoded.truncated[keep], encoded.empty[~encoded.empty])


def _empty(tokenization: Tokenization, windows: bool, marked: bool) -> dict[str, Any]:
    """The columns of no sample (a source without rows still gets every column)."""
    columns: dict[str, Any] = {name: [] for name in tokenization.fields}
    plain = (("length", np.int64), ("label", np.int64), ("row", np.int64), ("truncated", np.int8), ("digest", np.int64))
    for name, dtype in plain:
        columns[name] = np.zeros(0, dtype)
    if windows:
        columns["document"] = np.zeros(0, np.int64)
    if marked:
        columns["mark"] = np.zeros(0, np.int8)
    return columns
