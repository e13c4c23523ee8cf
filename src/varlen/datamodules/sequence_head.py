"""What a `SequenceDataModule` tells from its training source in `__init__`: the
fields served and budgeted, and the task and classes the model is linked to (from the first rows, the label
column and, for token ids, the largest id; never the whole data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from varlen.datasets.sequence.dataset import SIZES
from varlen.datasets.sequence.dtypes import check_dtypes, served_specs
from varlen.datasets.sequence.fields import FieldSpec, served_fields, vocab_size
from varlen.datasets.sequence.labels import LabelSpec, label_spec
from varlen.datasets.sequence.sources import Source, source_of
from varlen.datasets.sequence.synthetic import synthetic_sequences
from varlen.errors import DataError

__all__ = ["HEAD_ROWS", "RESERVED", "TrainingHead"]

#: rows read from a file to tell its columns apart (a list of lists' element size)
HEAD_ROWS = 64
#: keys a batch holds besides the columns' own
RESERVED = ("index", "label", "labels", SIZES)


class TrainingHead:
    """The part of `SequenceDataModule` that reads its training source's head."""

    inputs: dict[str, Source]
    tables: dict[str, pa.Table]
    label_field: str | None

    def _head(self) -> pa.Table:
        """The training source's first rows (all of it in memory), refused without rows or label column."""
        source = self.inputs["train"]
        head = self.tables["train"] if "train" in self.tables else source.read(HEAD_ROWS)
        if head.num_rows == 0:
            raise DataError(f"{source.where}: holds no rows")
        if self.label_field is not None and self.label_field not in head.column_names:
            raise DataError(
                f"{source.where}: no label column {self.label_field!r} (columns: {head.column_names}): name it with "
                "label_field=..., or give label_field=None for data without labels"
            )
        return head

    def _link(
        self,
        head: pa.Table,
        fields: list[str] | None,
        size_field: str | list[str] | None,
        task: str | None,
        class_names: list[str] | None,
        dtypes: dict[str, str] | None = None,
    ) -> None:
        """The fields served (in their served dtypes) and budgeted, and what the model is linked to (known
        without reading the data beyond its first rows, its label column and, for token ids, its largest id)."""
        where = self.inputs["train"].where
        label = {self.label_field} if self.label_field else set()
        specs, self.unserved = served_fields(head, label, fields, where, RESERVED)
        self.dtypes = check_dtypes(dtypes, specs, type(self).__name__)
        self.specs = served_specs(specs, self.dtypes)
        self.fields = tuple(name for name, spec in self.specs.items() if spec.ragged)
        self.size_fields = self.size_axes = self._size_fields(size_field, where)
        self.mask_keys = tuple(f"{name}_mask" for name in self.size_fields)
        self.input_field = self.size_fields[0]
        spec = self.specs[self.input_field]
        self.feature_dim = spec.feature_dim
        self.vocab_size = self._vocab_size(spec) if spec.token_ids else None
        self.label_spec = self._label_spec(task, class_names)
        self.task = self.label_spec.task if self.label_spec is not None else None
        self.class_names = self.label_spec.class_names if self.label_spec is not None else None
        self.num_classes = len(self.class_names) if self.class_names is not None else None

    @staticmethod
    def _inputs(given: Mapping[str, Any], synthetic: int, seed: int) -> dict[str, Source]:
        inputs = {split: source_of(value, split) for split, value in given.items() if value is not None}
        if "train" not in inputs:
            if inputs:
                raise ValueError(f"give train as well as {sorted(inputs)} (without train, every split is synthetic)")
            inputs["train"] = Source(synthetic_sequences(synthetic, seed), "mapping", "synthetic sequences")
        return inputs

    def _size_fields(self, size_field: str | list[str] | None, where: str) -> tuple[str, ...]:
        names = [self.fields[0]] if size_field is None else [size_field] if isinstance(size_field, str) else size_field
        wrong = [name for name in names if name not in self.fields]
        if wrong or not names:
            raise ValueError(f"size_field {wrong or names} must name variable-length fields of {where}: {self.fields}")
        return tuple(names)

    def _vocab_size(self, spec: FieldSpec) -> int:
        """The training source's largest id of `spec` + 1 (`vocab_size`)."""
        source = self.inputs["train"]
        column = self.tables["train"].column(spec.name) if "train" in self.tables else source.column(spec.name)
        return vocab_size(column, spec.name, source.where)

    def _label_spec(self, task: str | None, class_names: list[str] | None) -> LabelSpec | None:
        if self.label_field is None:
            return None
        source = self.inputs["train"]
        table = self.tables.get("train")
        column = table.column(self.label_field) if table is not None else source.column(self.label_field)
        named = source.class_names(self.label_field)
        return label_spec(column, self.label_field, task, class_names, named, source.where)
