"""Leak-free splits of vibration recordings into windows: the bearing split policy.

Overlapping windows of one recording in train and test give scores that collapse in the field.
`WindowSplit` (a frozen, checked spec) splits by time block (each recording cut into
train | gap | val | gap | test blocks, for CWRU-like data where a class has one recording), by
whole recording, or by operating condition; the leaky random window split exists only to measure
that effect, and warns. Its methods are pure functions of the recordings' lengths, labels and
conditions; what no window covers goes to the `DataReport` they are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from varlen import notices
from varlen.datasets.bearing.windows import Segments, WindowTable, cut_windows, uncovered_between_segments
from varlen.errors import DataError
from varlen.prepare.report import SOURCE, DataReport
from varlen.prepare.splits import condition_split, fractions_of, group_split, random_split, time_block_split

__all__ = [
    "GAP",
    "OTHER",
    "SPLITS",
    "TAIL",
    "UNIT",
    "WindowSplit",
    "check_split_arguments",
    "window_geometry",
]

SPLITS = ("time_block", "recording", "condition", "random_window")
#: the unit and reasons of the signal no window covers, in `dm.report`
UNIT = "signal samples"
GAP = "gaps that separate split blocks"
TAIL = "tail dropped by drop_tail=True"
OTHER = "recordings of conditions outside train/val/test_conditions"


def check_split_arguments(
    split: str,
    grouping: str,
    test_fraction: float,
    gap: int | None,
    test_conditions: Sequence[str] | None,
    val_conditions: Sequence[str] | None,
    train_conditions: Sequence[str] | None = None,
) -> None:
    """Refuse split arguments that cannot work, before any data is read.

    Raises:
        ValueError: naming the argument and what it needs.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if grouping not in ("shuffle", "recording"):
        raise ValueError(f"grouping must be shuffle or recording, got {grouping!r}")
    if not test_fraction > 0:
        raise ValueError(f"test_fraction must be > 0, got {test_fraction}")
    if gap is not None and gap < 0:
        raise ValueError(f"gap must be >= 0 samples (a negative gap makes splits overlap), got {gap}")
    if split == "condition" and not test_conditions:
        raise ValueError("split='condition' needs test_conditions (e.g. ['3'] to test on CWRU load 3)")
    if train_conditions is not None and split != "condition":
        raise ValueError(f"train_conditions needs split='condition' (split is {split!r})")
    if train_conditions is not None and not train_conditions:
        raise ValueError("train_conditions is empty: name the conditions to train on, or None for all the others")
    named = {"train": train_conditions, "val": val_conditions, "test": test_conditions}
    for a, b in (("val", "test"), ("train", "test"), ("train", "val")):
        overlap = sorted({str(c) for c in named[a] or []} & {str(c) for c in named[b] or []})
        if overlap:
            raise ValueError(
                f"conditions {overlap} are in both {a}_conditions and {b}_conditions: the same recordings "
                f"would be in {a} and {b}"
            )


def window_geometry(
    rate: float,
    window_length: int,
    stride: int | None,
    window_seconds: float | None,
    stride_seconds: float | None,
    gap: int | None,
) -> tuple[int, int, int]:
    """`(window, hop, gap)` in samples at `rate`: seconds win over samples; the hop defaults to
    half a window, the gap to one window.

    Raises:
        ValueError: a window or hop under one sample.
    """
    window = int(round(window_seconds * rate)) if window_seconds else int(window_length)
    step = int(round(stride_seconds * rate)) if stride_seconds else stride
    hop = int(step) if step else max(1, window // 2)
    if window < 1 or hop < 1:
        raise ValueError(f"window ({window}) and stride ({hop}) must be >= 1 sample")
    return window, hop, window if gap is None else int(gap)


@dataclass(frozen=True)
class WindowSplit:
    """One leak-free split of recordings into windows (see the module's docstring).

    Attributes:
        split: `time_block`, `recording`, `condition` or `random_window`.
        val_fraction: share of each recording (time blocks) or of the recordings (whole) for
            validation; with `condition` and no `val_conditions`, of each train recording.
        test_fraction: the same for test (`time_block`, `recording`, `random_window`).
        window: window length in samples.
        hop: hop between windows in samples.
        gap: samples left out between blocks of different splits.
        drop_tail: drop each segment's last, shorter window (counted as unused).
        seed: seed of the recording and random window splits.
        test_conditions: conditions held out for test (`condition`).
        val_conditions: conditions for validation (`condition`); None: time blocks.
    """

    split: str
    val_fraction: float
    test_fraction: float
    window: int
    hop: int
    gap: int
    drop_tail: bool = False
    seed: int = 0
    test_conditions: tuple[str, ...] = ()
    val_conditions: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_split_arguments(
            self.split, "shuffle", self.test_fraction, self.gap, self.test_conditions, self.val_conditions
        )
        if self.window < 1 or self.hop < 1:
            raise ValueError(f"window ({self.window}) and stride ({self.hop}) must be >= 1 sample")

    @property
    def fractions(self) -> dict[str, float]:
        return fractions_of(self.val_fraction, self.test_fraction)

    def needed_length(self) -> int:
        """Shortest recording the split can use: one window, or all its time blocks and gaps."""
        if self.split == "time_block" or (self.split == "condition" and self.val_conditions is None):
            held = (self.val_fraction + self.test_fraction) if self.split == "time_block" else self.val_fraction
            blocks = 2 if self.split == "time_block" else 1
            return int(np.ceil((self.window + blocks * (self.gap + 1)) / (1 - held)))
        return self.window

    def unusable(self, length: int, condition: str) -> str | None:
        """Why a recording of `length` samples under `condition` cannot be split (None: it can)."""
        if length < self.window:
            return f"shorter than one window ({self.window} samples)"
        cut = self.split == "time_block" or (self.split == "condition" and condition not in self.test_conditions)
        if cut and length < self.needed_length():
            return (
                f"too short for a {self.split} split (needs {self.needed_length()} samples: "
                f"a window per block plus gaps of {self.gap})"
            )
        return None

    def windows(
        self,
        lengths: np.ndarray,
        labels: np.ndarray,
        conditions: Sequence[str],
        report: DataReport,
        class_names: Sequence[str],
    ) -> tuple[dict[str, WindowTable], dict[str, np.ndarray]]:
        """The windows of every split, and the span `[start, end)` each may move within (its block).

        What the windows leave of the signal goes to `report` (unit `UNIT`).
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.split == "random_window":
            tables = self._random_windows(lengths, report)
            whole = np.stack([np.zeros_like(lengths), lengths], axis=1)
            return tables, {name: whole[table.recording] for name, table in tables.items()}
        segments = self.segments(lengths, labels, conditions, class_names)
        for name in segments:  # the report lists the splits in this order
            report.split(name)
        for name, count in uncovered_between_segments(lengths, segments).items():
            report.leave_unused(name, GAP, count, UNIT)
        tables, bounds = {}, {}
        for name, part in segments.items():
            tables[name], between, dropped = cut_windows(part, self.window, self.hop, self.drop_tail)
            self._leave_unused(report, name, between, dropped)
            span = np.zeros((len(lengths), 2), dtype=np.int64)  # a recording has one block per split
            span[part.recording] = np.stack([part.start, part.end], axis=1)
            bounds[name] = span[tables[name].recording]
        return tables, bounds

    def segments(
        self, lengths: np.ndarray, labels: np.ndarray, conditions: Sequence[str], class_names: Sequence[str]
    ) -> dict[str, Segments]:
        """Per split (train, val, test): the recordings and spans it owns.

        Raises:
            DataError: a split left without recordings, or conditions that cannot be split.
        """
        every = np.arange(len(lengths))

        def blocks(recs: np.ndarray, fractions: Mapping[str, float]) -> dict[str, Segments]:
            spans = time_block_split(lengths[recs], fractions, self.gap)
            return {name: Segments(recs, start, end) for name, (start, end) in spans.items()}

        if self.split == "time_block":
            return blocks(every, self.fractions)
        if self.split == "recording":  # whole: split -> the recordings it owns whole
            whole = group_split(every, self.fractions, self.seed, labels=labels, name="recording split")
            empty = [name for name, part in whole.items() if len(part) == 0]
            if empty:
                raise DataError(
                    f"split='recording' leaves no recording for {empty} ({len(lengths)} recordings); "
                    "use split='time_block'"
                )
            hint = "too few recordings per class; split='time_block' keeps every class in every split"
            self._warn_missing_classes(labels, whole, class_names, hint)
        else:  # condition
            try:
                whole = condition_split(list(conditions), list(self.test_conditions), self.val_conditions)
            except ValueError as error:
                raise DataError(f"split='condition': {error}") from None
            self._warn_missing_classes(
                labels,
                {"val": whole.get("val", whole["train"]), "test": whole["test"]},
                class_names,
                "no recording of those classes under these conditions; their scores are not measured",
            )
        segments = {name: Segments(part, np.zeros_like(part), lengths[part]) for name, part in whole.items()}
        if "val" not in segments:  # condition split without val_conditions: val is each train recording's last block
            segments = {**blocks(whole["train"], fractions_of(self.val_fraction)), "test": segments["test"]}
        return {name: segments[name] for name in ("train", "val", "test")}

    def _random_windows(self, lengths: np.ndarray, report: DataReport) -> dict[str, WindowTable]:
        """LEAKY on purpose (to measure the leakage effect): windows of whole recordings dealt at random.

        The windows are cut before the split, so what they leave of the signal is reported
        under the `source` pseudo-split.
        """
        notices.warn(
            "split='random_window' puts overlapping windows of one recording in train and test: "
            "scores are optimistic (leakage); use it only to measure that effect"
        )
        every = np.arange(len(lengths))
        table, between, dropped = cut_windows(
            Segments(every, np.zeros_like(lengths), lengths), self.window, self.hop, self.drop_tail
        )
        self._leave_unused(report, SOURCE, between, dropped)
        parts = random_split(len(table.recording), self.fractions, self.seed, name="random window split")
        return {name: table.take(part) for name, part in parts.items()}

    def _leave_unused(self, report: DataReport, split: str, between: int, dropped: int) -> None:
        report.leave_unused(split, f"between windows (stride {self.hop} > window {self.window})", between, UNIT)
        report.leave_unused(split, TAIL, dropped, UNIT)

    def _warn_missing_classes(
        self, labels: np.ndarray, parts: Mapping[str, np.ndarray], class_names: Sequence[str], hint: str
    ) -> None:
        """Warn for every non-train split that lacks some classes (its scores would skip them)."""
        for name, part in parts.items():
            missing = sorted(set(range(len(class_names))) - set(labels[part].tolist()))
            if missing and name != "train":
                notices.warn(
                    f"split={self.split!r}: {name} has no recording of classes {[class_names[m] for m in missing]} "
                    f"({hint})"
                )
