"""Class labels read from a column of text: refuse a column whose spellings do not say one thing.

Each distinct label becomes a class, so a column that mixes numbers with other words (``0``, ``1``,
``true``, ``positive``) or writes one number two ways (``1`` and ``1.0``) would become one class
per spelling, five classes where two were meant, without a word. :func:`check_labels` refuses
such a column, naming examples and where they are; ``class_names`` is how a user says what the
classes are (each label is then matched as written, others are bad rows). Used by the text
DataModule (its label column) and the bearing one (a metadata CSV's ``label`` column).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from varlen.errors import DataError

__all__ = ["CLASS_NAMES_HINT", "check_labels", "label_number"]

#: a decimal number as a label column writes it (no ``inf`` / ``nan``: those are words here)
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
#: what the message says to do
CLASS_NAMES_HINT = (
    "give class_names, the classes in id order (each label is then matched as written; a row whose label "
    "is none of them is refused, or skipped and counted with on_bad='skip'), or write the column one way"
)
SHOWN = 3


def label_number(name: str) -> float | None:
    """The number a label spells (``"1"``, ``"1.0"``, ``"01"``, ``"1e0"``: 1.0), or None for a word."""
    text = name.strip()
    return float(text) if NUMBER.fullmatch(text) else None


def _examples(names: Sequence[str], places: dict[str, str]) -> str:
    shown = ", ".join(f"{name!r} ({places[name]})" for name in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def check_labels(names: Sequence[str], places: Sequence[str], source: str, column: str) -> None:
    """Refuse a label column whose distinct labels ``names`` (each at ``places``, e.g. ``"row 4"``,
    in the order first met) mix numbers with words, or spell one number several ways.

    Raises:
        DataError: naming ``source``, ``column``, examples with their places, and what to do.
    """
    where = dict(zip(names, places, strict=True))
    numbers = {name: label_number(name) for name in names}
    numeric = [name for name in names if numbers[name] is not None]
    words = [name for name in names if numbers[name] is None]
    if numeric and words:
        raise DataError(
            f"{source}: the label column {column!r} mixes numbers ({_examples(numeric, where)}) with words "
            f"({_examples(words, where)}): each spelling would be a class of its own ({len(names)} classes); "
            f"{CLASS_NAMES_HINT}"
        )
    spellings: dict[float, list[str]] = defaultdict(list)
    for name in numeric:
        spellings[numbers[name]].append(name)
    clashes = [group for group in spellings.values() if len(group) > 1]
    if clashes:
        raise DataError(
            f"{source}: the label column {column!r} writes one number several ways ({_examples(clashes[0], where)}"
            f"{f'; {len(clashes) - 1} more number(s) too' if len(clashes) > 1 else ''}): each spelling would be "
            f"a class of its own; {CLASS_NAMES_HINT}"
        )
