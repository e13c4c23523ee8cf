"""What a label column makes of the task: classes (integer, boolean or string labels) or regression targets
(floats), and the classes' names and values in id order.

Classes are the sorted distinct labels of the training source (integers in numeric order), unless given
(``class_names``, or a Hugging Face ``ClassLabel``'s names, whose stored ids are their positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from varlen.errors import DataError

__all__ = ["LabelSpec", "label_spec"]

TASKS = ("classification", "regression")


@dataclass(frozen=True)
class LabelSpec:
    """The task and its classes.

    Attributes:
        task: ``classification`` or ``regression``.
        class_names: the classes' names in id order (None for regression).
        class_values: the label value of each class in id order (what the column holds), or None.
    """

    task: str
    class_names: list[str] | None
    class_values: np.ndarray | None


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _values_of(names: Sequence[str], kind: pa.DataType, where: str) -> np.ndarray:
    """The label values named by ``names``: the names themselves for text labels, else their numbers."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.asarray(list(names), dtype=str)
    try:
        return np.asarray([int(name) for name in names], dtype=np.int64)
    except ValueError as error:
        raise DataError(
            f"{where}: class_names {list(names)} name integer labels by their values (e.g. ['0', '1']); {error}"
        ) from error


def label_spec(
    column: pa.ChunkedArray,
    name: str,
    task: str | None,
    class_names: Sequence[str] | None,
    named_ids: Sequence[str] | None,
    where: str,
) -> LabelSpec:
    """The task and classes of the training source's label ``column`` (see the module docstring).

    Args:
        column: the label column.
        name: its name (for messages).
        task: the task asked for (None: integers, booleans and strings classify, floats regress).
        class_names: classes given by the user (a mixture's other sources get the first's).
        named_ids: a Hugging Face ``ClassLabel``'s names (ids are positions), else None.
        where: the source, for messages.

    Raises:
        ValueError: a task other than the two, or float labels asked to classify.
        DataError: labels of another type than numbers or strings, or no label at all.
    """
    if task is not None and task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    column = _decoded(column)
    kind = column.type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if not (text or pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DataError(f"{where}: label column {name!r} is {kind}: give labels as numbers or strings")
    if task == "regression" or (task is None and pa.types.is_floating(kind)):
        if text:
            raise ValueError(f"{where}: label column {name!r} holds text: regression needs numbers")
        return LabelSpec("regression", None, None)
    if pa.types.is_floating(kind):
        raise ValueError(
            f"{where}: label column {name!r} holds floats, which are regression targets: give integer or string "
            "labels to classify"
        )
    if class_names is not None:
        values = np.arange(len(class_names)) if named_ids is not None else _values_of(class_names, kind, where)
        return LabelSpec("classification", [str(n) for n in class_names], values)
    if named_ids is not None:
        return LabelSpec("classification", list(named_ids), np.arange(len(named_ids)))
    distinct = pc.unique(column.drop_null()).to_numpy(zero_copy_only=False)
    if not len(distinct):
        raise DataError(f"{where}: label column {name!r} holds no label")
    values = np.sort(distinct.astype(str) if text else distinct)
    return LabelSpec("classification", [str(v) for v in values.tolist()], values)
