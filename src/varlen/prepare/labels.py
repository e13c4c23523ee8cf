"""Class labels read from a column of text: refuse a column whose spellings do not say one thing.

Each distinct label becomes a class, so a column that mixes numbers with other words (`0`, `1`,
`true`, `positive`) or writes one number two ways (`1` and `1.0`) would become one class
per spelling, five classes where two were meant, without a word. `check_labels` refuses
such a column, naming examples and where they are; `class_names` is how a user says what the
classes are (each label is then matched as written, others are bad rows). `class_order` is the
classes' order whatever the door: labels that all spell numbers by number (`"0", "1", "2", ..., "10"`),
others as text. Used by the text
DataModule (its label column), the sequence one (a column of string labels, whatever door it came
through) and the bearing one (a metadata CSV's `label` column).

A Hugging Face `ClassLabel` column stores ids whose names the dataset says: `classlabel_names`
reads them from the features `datasets` writes into every Arrow schema it makes (a `Dataset`'s, its
`.arrow` files', its Parquet files'), and `named_classes` makes them the classes (in id order,
or those `class_names` picks by name), for the text and the sequence DataModule alike.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from varlen.errors import DataError

__all__ = [
    "CLASS_NAMES_HINT",
    "check_labels",
    "class_order",
    "classlabel_names",
    "distinct_labels",
    "examples",
    "label_number",
    "named_classes",
]

#: a decimal number as a label column writes it (no `inf` / `nan`: those are words here)
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
#: what the message says to do
CLASS_NAMES_HINT = (
    "give class_names, the classes in id order (each label is then matched as written; a row whose label "
    "is none of them is refused, or skipped and counted with on_bad='skip'), or write the column one way"
)
SHOWN = 3


def label_number(name: str) -> float | None:
    """The number a label spells (`"1"`, `"1.0"`, `"01"`, `"1e0"`: 1.0), or None for a word."""
    text = name.strip()
    return float(text) if NUMBER.fullmatch(text) else None


def class_order(names: Sequence[str]) -> list[str]:
    """The classes' order, one rule for every door: labels that all spell numbers by their number
    (`"2"` before `"10"`), else as text. Checked labels (`check_labels`) spell a number once, so
    the order is total."""
    names = [str(name) for name in names]
    numbers = [label_number(name) for name in names]
    if names and all(number is not None for number in numbers):
        return [name for _, name in sorted(zip(numbers, names, strict=True))]
    return sorted(names)


def examples(names: Sequence[Any], places: dict[Any, str]) -> str:
    """A few labels with their places, as messages show them: `'0' (row 1), '1' (row 2) and 4 more`."""
    shown = ", ".join(f"{name!r} ({places[name]})" for name in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def check_labels(names: Sequence[str], places: Sequence[str], source: str, column: str) -> None:
    """Refuse a label column whose distinct labels `names` (each at `places`, e.g. `"row 4"`,
    in the order first met) mix numbers with words, or spell one number several ways.

    Raises:
        DataError: naming `source`, `column`, examples with their places, and what to do.
    """
    where = dict(zip(names, places, strict=True))
    numbers = {name: label_number(name) for name in names}
    numeric = [name for name in names if numbers[name] is not None]
    words = [name for name in names if numbers[name] is None]
    if numeric and words:
        raise DataError(
            f"{source}: the label column {column!r} mixes numbers ({examples(numeric, where)}) with words "
            f"({examples(words, where)}): each spelling would be a class of its own ({len(names)} classes); "
            f"{CLASS_NAMES_HINT}"
        )
    spellings: dict[float, list[str]] = defaultdict(list)
    for name in numeric:
        spellings[numbers[name]].append(name)
    clashes = [group for group in spellings.values() if len(group) > 1]
    if clashes:
        raise DataError(
            f"{source}: the label column {column!r} writes one number several ways ({examples(clashes[0], where)}"
            f"{f'; {len(clashes) - 1} more number(s) too' if len(clashes) > 1 else ''}): each spelling would be "
            f"a class of its own; {CLASS_NAMES_HINT}"
        )


def distinct_labels(column: Any) -> tuple[list[Any], np.ndarray]:
    """The distinct non-null values of a pyarrow (chunked) array, in the order first met, and the position
    each is first met at: one pass in Arrow, only the distinct values become Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    encoded = column.dictionary_encode()
    indices = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    ids, first = np.unique(indices, return_index=True)
    first, ids = first[ids >= 0], ids[ids >= 0]
    return encoded.dictionary.take(pa.array(ids, pa.int64())).to_pylist(), first


def classlabel_names(schema: Any, column: str | None) -> list[str] | None:
    """The names of a Hugging Face `ClassLabel` column (its stored ids are their positions), read from the
    features `datasets` writes into a `pyarrow.Schema`'s metadata; None for another column or schema."""
    metadata = getattr(schema, "metadata", None) or {}
    try:
        features = json.loads(metadata[b"huggingface"])["info"]["features"]
        feature = features[column]
    except (KeyError, TypeError, ValueError):
        return None
    names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None
    return [str(name) for name in names] if isinstance(names, list) else None


def named_classes(
    names: Sequence[str], given: Sequence[str] | None, source: str, column: str
) -> tuple[list[str], list[int]]:
    """The classes of a `ClassLabel` column of `names`, and each class's stored id, in class order: its
    names (id = position), or the `given` `class_names`, each one of its names (a subset, in any order).

    Raises:
        DataError: a given name that is none of the `ClassLabel`'s (naming `source`, `column` and both).
    """
    names = [str(name) for name in names]
    if given is None:
        return names, list(range(len(names)))
    given = [str(name) for name in given]
    if any(name not in names for name in given):
        raise DataError(
            f"{source}: class_names {given} are not names of the ClassLabel of column {column!r}, whose ids name "
            f"the classes {names} (in id order): give some of those names, or leave class_names out"
        )
    return given, [names.index(name) for name in given]
