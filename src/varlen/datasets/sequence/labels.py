"""What a label column makes of the task: classes (integer, boolean or string labels) or regression targets
(floats), and the classes' names and values in id order.

Classes are the sorted distinct labels of the training source (numbers, and text labels that all spell numbers,
in numeric order: `varlen.prepare.labels.class_order`, the text DataModule's rule too), unless given
(`class_names`, matched as written), or a Hugging Face `ClassLabel`'s names (its stored ids are their
positions; `class_names` then picks among its names: `varlen.prepare.labels.named_classes`). String labels
get the checks of `varlen.prepare.labels` (numbers mixed with words, one number spelt two ways: refused naming
rows), whatever door they came through. Floats that are all whole numbers (what ints mixed with floats, or
an int column with a gap read by pandas, become) are refused without `task`: class ids or targets is the
user's to say; `task="classification"` makes them integer classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from varlen.errors import DataError
from varlen.prepare.labels import check_labels, class_order, distinct_labels, examples, named_classes

__all__ = ["LabelSpec", "label_spec"]

TASKS = ("classification", "regression")


@dataclass(frozen=True)
class LabelSpec:
    """The task and its classes.

    Attributes:
        task: `classification` or `regression`.
        class_names: the classes' names in id order (None for regression).
        class_values: the label value of each class in id order (what the column holds), or None.
    """

    task: str
    class_names: list[str] | None
    class_values: np.ndarray | None


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _values_of(names: Sequence[str], kind: pa.DataType, where: str) -> np.ndarray:
    """The label values named by `names`: the names themselves for text labels, else their numbers (as
    floats for a float column of whole numbers)."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.asarray(list(names), dtype=str)
    try:
        return np.asarray([int(name) for name in names], dtype=np.float64 if pa.types.is_floating(kind) else np.int64)
    except ValueError as error:
        raise DataError(
            f"{where}: class_names {list(names)} name integer labels by their values (e.g. ['0', '1']); {error}"
        ) from error


def _first_met(values: np.ndarray, rows: np.ndarray) -> tuple[list[float], dict[float, str]]:
    """The distinct `values[rows]` in the order first met, and the row (from 0) each is first met at."""
    distinct, first = np.unique(values[rows], return_index=True)
    order = np.argsort(first, kind="stable")
    found = [float(distinct[k]) for k in order]
    return found, {value: f"row {int(rows[first[k]])}" for value, k in zip(found, order.tolist(), strict=True)}


def _whole_floats(column: pa.ChunkedArray, name: str, task: str | None, where: str) -> np.ndarray | None:
    """The distinct finite values of a float label column when all are whole numbers and `task` asks for
    classes, None when they are regression targets (`task` None and some value is not a whole number).
    Vectorised: a column of regression targets costs one pass, whatever its distinct values.

    Raises:
        DataError: all whole numbers and no `task` (class ids or targets: the user's to say).
        ValueError: classes asked of floats that are not all whole numbers.
    """
    values = np.asarray(column.to_numpy(), dtype=np.float64)  # nulls are NaN here
    finite = np.isfinite(values)
    odd = np.flatnonzero(finite & (values != np.floor(values)))
    if len(odd) and task is None:
        return None
    if len(odd):
        shown = examples(*_first_met(values, odd))
        raise ValueError(
            f"{where}: label column {name!r} holds floats that are not whole numbers ({shown}), which are "
            "regression targets: give integer or string labels to classify"
        )
    whole = np.unique(values[finite]) + 0.0  # -0.0 is 0.0
    if task is None and len(whole):
        shown = examples(*_first_met(values, np.flatnonzero(finite)))
        raise DataError(
            f"{where}: the label column {name!r} holds whole numbers as floats ({shown}): class ids (ints mixed "
            "with floats, or an int column with a gap read by pandas, become floats) or regression targets? give "
            f"task='classification' ({len(whole)} classes) or task='regression', or write the column as ints"
        )
    return whole


def label_spec(
    column: pa.ChunkedArray,
    name: str,
    task: str | None,
    class_names: Sequence[str] | None,
    named_ids: Sequence[str] | None,
    where: str,
) -> LabelSpec:
    """The task and classes of the training source's label `column` (see the module docstring).

    Args:
        column: the label column.
        name: its name (for messages).
        task: the task asked for (None: integers, booleans and strings classify, floats regress, unless all
            are whole numbers: refused).
        class_names: classes given by the user (a mixture's other sources get the first's).
        named_ids: a Hugging Face `ClassLabel`'s names (ids are positions), else None.
        where: the source, for messages.

    Raises:
        ValueError: a task other than the two, text asked to regress, or floats that are not whole numbers
            asked to classify.
        DataError: labels of another type than numbers or strings, no label at all, string labels that mix
            numbers with words or spell one number two ways, whole numbers as floats without `task`, or
            `class_names` that are not a `ClassLabel`'s names (each naming rows or names).
    """
    if task is not None and task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    column = _decoded(column)
    kind = column.type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if not (text or pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DataError(f"{where}: label column {name!r} is {kind}: give labels as numbers or strings")
    if task == "regression":
        if text:
            raise ValueError(f"{where}: label column {name!r} holds text: regression needs numbers")
        return LabelSpec("regression", None, None)
    if named_ids is not None:
        names, ids = named_classes(named_ids, class_names, where, name)
        return LabelSpec("classification", names, np.asarray(ids, dtype=np.int64))
    whole = _whole_floats(column, name, task, where) if pa.types.is_floating(kind) else None
    if pa.types.is_floating(kind) and whole is None:
        return LabelSpec("regression", None, None)
    if class_names is not None:
        return LabelSpec("classification", [str(n) for n in class_names], _values_of(class_names, kind, where))
    if whole is not None:
        values = whole
    else:
        distinct, first = distinct_labels(column)
        if text:
            check_labels(distinct, [f"row {row}" for row in first.tolist()], where, name)
        values = np.asarray(class_order(distinct), dtype=str) if text else np.sort(np.asarray(distinct))
    if not len(values):
        raise DataError(f"{where}: label column {name!r} holds no label")
    return LabelSpec("classification", [_name(v) for v in values.tolist()], values)


def _name(value: object) -> str:
    """A class's name: a whole float as the integer it is (`2.0`: `"2"`), other values as text."""
    return str(int(value)) if isinstance(value, float) else str(value)
