"""Bearing-fault vibration windows: leak-free splits, views not copies, recording-grouped batches.

The two mistakes this DataModule makes impossible by default:

- *Leakage*: overlapping windows of one recording in both train and test give near-100%
  accuracy that collapses in the field. Splits are by time block (non-overlapping blocks of
  each recording separated by a gap of at least one window, for CWRU-like data where each class
  has one recording), by whole recording, or by operating condition. The leaky random window
  split exists only to measure the effect, and warns.
- *Copies*: windows are views into one buffer per recording (:class:`BearingWindows`), so
  50%-overlapping windows hold the signal once, not twice.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from varlen.batching import lengths_to_mask, round_up
from varlen.datamodules.base import VarLenDataModule, stratified_split
from varlen.datasets.bearing import (
    CWRU_CLASSES,
    PADERBORN_CLASSES,
    BearingDataError,
    BearingWindows,
    DatasetNotFoundError,
    Recording,
    SkipReport,
    default_channels,
    detect_format,
    download_cwru,
    load_recordings,
    plan_windows,
    read_metadata,
    resample,
    simulate_recordings,
)

Split = Literal["time_block", "recording", "condition", "random_window"]
#: per split: (recording, start, length, window_index) per window
WindowTable = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
log = logging.getLogger(__name__)


class BearingCollate:
    """Pads windows to the batch's longest (only tail windows are shorter) and stacks the rest.

    Returns a dict: ``signals`` ``[B, C, W]`` float32 (zeros after each window's length),
    ``lengths`` ``[B]``, ``mask`` ``[B, W]`` bool keep-mask (True = real sample, the varlen
    convention), ``labels``, ``recording_ids``, ``window_index``, ``starts`` and ``index``.
    A class (not a closure) so it pickles into loader workers.

    Args:
        pad_to_multiple_of: round ``W`` up to this multiple.
    """

    def __init__(self, pad_to_multiple_of: int | None = None) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        lengths = np.array([s["signal"].shape[1] for s in samples], dtype=np.int64)
        width = round_up(int(lengths.max()), self.pad_to_multiple_of)
        signals = np.zeros((len(samples), samples[0]["signal"].shape[0], width), dtype=np.float32)
        # The core pad_sequences pads the LEADING axis ([T, ...]); windows are ragged on their
        # LAST axis ([C, W]), and the model wants [B, C, W]. Transposing in and out would add a
        # strided copy of the whole batch, so each window is written into its row directly: one
        # slice copy per window, the same thing pad_sequences does for long rows.
        for row, sample in zip(signals, samples, strict=True):
            row[:, : sample["signal"].shape[1]] = sample["signal"]
        lengths_t = torch.from_numpy(lengths)
        return {
            "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),
            "signals": torch.from_numpy(signals),
            "lengths": lengths_t,
            "mask": lengths_to_mask(lengths_t, width),
            "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
            "recording_ids": torch.tensor([s["recording_id"] for s in samples], dtype=torch.long),
            "window_index": torch.tensor([s["window_index"] for s in samples], dtype=torch.long),
            "starts": torch.tensor([s["start"] for s in samples], dtype=torch.long),
        }


class BearingDataModule(VarLenDataModule):
    """Windows of vibration recordings (CWRU, Paderborn, a folder, or the built-in simulator).

    ``setup`` loads the recordings, resamples them to one rate (polyphase), splits them without
    leakage, normalises every channel with statistics of the train split only, and builds one
    :class:`~varlen.datasets.bearing.BearingWindows` per split over the same buffers.

    Args:
        root: data folder; None runs the built-in simulator (offline, deterministic in ``seed``).
        data_format: ``auto`` (Paderborn names -> paderborn, a metadata CSV -> folder, else
            cwru), ``cwru``, ``paderborn`` or ``folder``.
        metadata: CSV in ``root`` (or absolute) with ``path,label`` and optional
            ``sampling_rate,recording_id,condition``; its labels override file-name labels.
        download: fetch the standard 10-class CWRU files into ``root`` (MD5-checked).
        channels: channels to read (CWRU ``DE``/``FE``/``BA``, Paderborn ``vibration_1``, CSV
            column names, ``.npy`` column numbers); default: DE, vibration_1, all columns.
        class_names: the classes, in label-index order; default: the 10 CWRU classes, the 4
            Paderborn classes, or the sorted labels of the metadata CSV. Other labels are bad input.
        sampling_rate: common rate every recording is resampled to; None: keep the rates (they
            must all agree).
        window_length: window length in samples (at ``sampling_rate``).
        stride: hop between windows in samples; default half a window (50% overlap).
        window_seconds: window length in seconds (overrides ``window_length``).
        stride_seconds: hop in seconds (overrides ``stride``).
        drop_tail: drop each segment's last, shorter window (default: keep it, padded, so no
            signal is lost). Samples dropped that way are counted in :attr:`unused_samples`
            and warned about.
        normalize: standardise every channel with the train split's mean and std.
        split: ``time_block`` (default; blocks of each recording), ``recording`` (whole
            recordings, stratified), ``condition`` (``test_conditions`` held out) or
            ``random_window`` (LEAKY: overlapping windows of one recording land in several
            splits; for measuring the leakage effect only).
        val_fraction: share of each recording (time_block) or of the recordings (recording) for
            validation.
        test_fraction: the same for test.
        gap: samples left out between two blocks of different splits (default: one window);
            counted in :attr:`unused_samples` and logged.
        test_conditions: conditions held out for test with ``split="condition"`` (e.g. ``["3"]``
            for CWRU load 3).
        val_conditions: conditions for validation, taken from the recordings not held out for
            test (they must not overlap ``test_conditions``); default: the last time block of
            each train recording.
        grouping: ``shuffle`` (windows of all recordings mixed) or ``recording`` (every batch
            holds windows of one recording only, batches in random order).
        on_bad: ``raise`` on the first bad recording (NaN/inf, shorter than one window, unknown
            label, missing channel, corrupt file) or ``skip`` it, counted in :attr:`report`
            with a warning.
        simulated_per_class: simulator recordings per class.
        simulated_seconds: simulator duration range in seconds.
    """

    mask_keys = ("mask",)

    def __init__(
        self,
        root: str | None = None,
        data_format: Literal["auto", "cwru", "paderborn", "folder"] = "auto",
        metadata: str | None = None,
        download: bool = False,
        channels: list[str] | None = None,
        class_names: list[str] | None = None,
        sampling_rate: int | None = 12000,
        window_length: int = 2048,
        stride: int | None = None,
        window_seconds: float | None = None,
        stride_seconds: float | None = None,
        drop_tail: bool = False,
        normalize: bool = True,
        split: Split = "time_block",
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        gap: int | None = None,
        test_conditions: list[str] | None = None,
        val_conditions: list[str] | None = None,
        grouping: Literal["shuffle", "recording"] = "shuffle",
        on_bad: Literal["raise", "skip"] = "raise",
        simulated_per_class: int = 4,
        simulated_seconds: tuple[float, float] = (2.0, 20.0),
        batch_size: int | None = 64,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            max_tokens=max_tokens,
            shuffle=shuffle,
            seed=seed,
            num_buckets=num_buckets,
            pad_to_multiple_of=pad_to_multiple_of,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        if split not in ("time_block", "recording", "condition", "random_window"):
            raise ValueError(f"split must be time_block, recording, condition or random_window, got {split!r}")
        if grouping not in ("shuffle", "recording"):
            raise ValueError(f"grouping must be shuffle or recording, got {grouping!r}")
        if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"need 0 < val_fraction, test_fraction and their sum < 1; got {val_fraction}, {test_fraction}"
            )
        if gap is not None and gap < 0:
            raise ValueError(f"gap must be >= 0 samples (a negative gap makes splits overlap), got {gap}")
        if split == "condition" and not test_conditions:
            raise ValueError("split='condition' needs test_conditions (e.g. ['3'] to test on CWRU load 3)")
        overlap = sorted({str(c) for c in test_conditions or []} & {str(c) for c in val_conditions or []})
        if overlap:
            raise ValueError(
                f"conditions {overlap} are in both val_conditions and test_conditions: the same recordings "
                "would be validated and tested on"
            )
        self.root = Path(root) if root is not None else None
        self.metadata = metadata
        self.download = download
        self.sampling_rate = sampling_rate
        self.window_length = window_length
        self.stride = stride
        self.window_seconds = window_seconds
        self.stride_seconds = stride_seconds
        self.drop_tail = drop_tail
        self.normalize = normalize
        self.split = split
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.gap = gap
        self.test_conditions = [str(c) for c in test_conditions or []]
        self.val_conditions = [str(c) for c in val_conditions] if val_conditions is not None else None
        self.grouping = grouping
        self.on_bad = on_bad
        self.simulated_per_class = simulated_per_class
        self.simulated_seconds = tuple(simulated_seconds)
        self.data_format = self._resolve_format(data_format)
        if self.data_format == "folder" and metadata is None:
            raise ValueError("data_format='folder' needs metadata= (a CSV listing path,label,sampling_rate per file)")
        self.channels = list(channels) if channels is not None else self._default_channels()
        self.class_names = list(class_names) if class_names is not None else self._default_classes()
        self.num_classes = len(self.class_names)
        self.in_channels = len(self.channels)
        self.collate_fn = BearingCollate(pad_to_multiple_of)
        self.report = SkipReport(on_bad, error=BearingDataError)
        self.recordings: list[Recording] = []
        self.recording_names: list[str] = []
        self.normalization: tuple[np.ndarray, np.ndarray] | None = None
        #: samples of the kept recordings that no window covers, by cause (set by ``setup``)
        self.unused_samples: dict[str, int] = {"gap": 0, "stride": 0, "dropped_tail": 0}

    # -- cheap things the CLI links at instantiation ------------------------------------------

    def _resolve_format(self, data_format: str) -> str:
        if self.root is None:
            return "simulator"
        if data_format != "auto":
            return data_format
        if self.root.is_dir():
            return detect_format(self.root, self.metadata)
        return "folder" if self.metadata is not None else "cwru"

    def _metadata_path(self) -> Path:
        path = Path(self.metadata)
        return path if path.is_absolute() else self.root / path

    def _default_channels(self) -> list[str]:
        if self.data_format in ("simulator", "cwru"):
            return ["DE"]
        if self.data_format == "paderborn":
            return ["vibration_1"]
        # a generic folder: what the first listed file's format usually means (all columns of a
        # .npy/.csv, DE of a CWRU .mat, vibration_1 of a Paderborn .mat)
        return default_channels(self.root / str(read_metadata(self._metadata_path())["path"].iloc[0]))

    def _default_classes(self) -> list[str]:
        if self.metadata is not None:
            return sorted(read_metadata(self._metadata_path())["label"].astype(str).unique())
        if self.data_format == "paderborn":
            return list(PADERBORN_CLASSES)
        return list(CWRU_CLASSES)

    @property
    def skipped(self) -> int:
        """How many recordings were left out as bad input (reasons and examples: :attr:`report`)."""
        return self.report.total

    # -- setup ----------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Fetch the CWRU files when ``download=True`` (Lightning calls this once, before setup)."""
        if self.download and self.root is not None and self.data_format == "cwru":
            download_cwru(self.root)

    def load(self) -> list[Recording]:
        """The raw recordings (simulated, or read and validated from ``root``)."""
        if self.root is None:
            return simulate_recordings(
                self.simulated_per_class, self.seed, self.simulated_seconds, class_names=self.class_names
            )
        if not self.root.is_dir():
            raise DatasetNotFoundError(
                f"data folder {self.root} does not exist; "
                + ("pass download=True to fetch CWRU" if self.data_format == "cwru" else "create it")
            )
        fmt = "folder" if self.metadata is not None else self.data_format
        return load_recordings(self.root, fmt, self.channels, self.metadata, self.class_names, self.report)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:  # idempotent: Lightning calls setup once per stage
            return
        recordings = self.load()
        if not recordings:
            self.report.warn("recordings")
            raise ValueError(f"no usable recordings in {self.root} (skipped: {self.report.examples})")
        rates = {r.sampling_rate for r in recordings}
        if self.sampling_rate is None and len(rates) > 1:
            raise ValueError(f"recordings have sampling rates {sorted(rates)}; set sampling_rate to resample them")
        target = float(self.sampling_rate or next(iter(rates)))
        for rec in recordings:  # replace each native buffer by the resampled one (no second copy kept)
            rec.signal, rec.sampling_rate = resample(rec.signal, rec.sampling_rate, target), target
        self.rate = target
        self.window = int(round(self.window_seconds * target)) if self.window_seconds else int(self.window_length)
        stride = int(round(self.stride_seconds * target)) if self.stride_seconds else self.stride
        self.hop = int(stride) if stride else max(1, self.window // 2)
        self.gap_samples = self.window if self.gap is None else int(self.gap)
        if self.window < 1 or self.hop < 1:
            raise ValueError(f"window ({self.window}) and stride ({self.hop}) must be >= 1 sample")
        recordings = self._drop_short(recordings)
        self.report.warn("recordings")
        if not recordings:
            raise ValueError(f"no usable recordings left (skipped: {self.report.examples})")
        self.recordings = recordings
        self.recording_names = [r.name for r in recordings]
        labels = np.array([self.class_names.index(r.label) for r in recordings], dtype=np.int64)
        self.recording_labels = labels
        buffers = [r.signal for r in recordings]
        self._segment_samples = self._dropped_tail = self._between_windows = 0
        tables = self._split_windows(recordings, labels)
        self._report_unused(sum(r.signal.shape[1] for r in recordings))
        if self.normalize:
            self.normalization = self._normalise(buffers, tables["train"])
        self.datasets = {name: BearingWindows(buffers, labels, *table) for name, table in tables.items()}

    def _needed_length(self) -> int:
        """Shortest recording the split can use: one window, or all time blocks and gaps."""
        if self.split == "time_block" or (self.split == "condition" and self.val_conditions is None):
            held = (self.val_fraction + self.test_fraction) if self.split == "time_block" else self.val_fraction
            blocks = 2 if self.split == "time_block" else 1
            return int(np.ceil((self.window + blocks * (self.gap_samples + 1)) / (1 - held)))
        return self.window

    def _drop_short(self, recordings: list[Recording]) -> list[Recording]:
        needed = self._needed_length()
        kept = []
        for rec in recordings:
            length = rec.signal.shape[1]
            if length < self.window:
                self.report.bad(
                    rec.source or rec.name,
                    f"{length} samples at {self.rate:g} Hz, shorter than one window ({self.window})",
                )
            elif length < needed and (self.split == "time_block" or rec.condition not in self.test_conditions):
                self.report.bad(
                    rec.source or rec.name,
                    f"{length} samples at {self.rate:g} Hz is too short for a {self.split} split "
                    f"(needs {needed}: a window per block plus gaps of {self.gap_samples})",
                )
            else:
                kept.append(rec)
        return kept

    # -- splits -----------------------------------------------------------------------------------

    def _time_blocks(self, lengths: np.ndarray, fractions: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per block (first = train, then each fraction in order): (start, end) per recording.

        Blocks are contiguous, in time order, separated by ``gap_samples`` left unused.
        """
        ends = lengths.copy()
        blocks = []
        for fraction in reversed(fractions):
            size = np.maximum(1, np.round(lengths * fraction).astype(np.int64))
            blocks.append((ends - size, ends))
            ends = ends - size - self.gap_samples
        blocks.append((np.zeros_like(ends), ends))
        return blocks[::-1]

    def _windows(self, recs: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> WindowTable:
        """Windows of the segments ``[starts, ends)`` of recordings ``recs``; counts what they leave out."""
        sizes = ends - starts
        segment, offset, length = plan_windows(sizes, self.window, self.hop, self.drop_tail)
        reach = np.zeros(len(sizes), dtype=np.int64)  # end of each segment's last window
        np.maximum.at(reach, segment, offset + length)
        # windows start every hop samples: each covers min(length, hop) new samples, the last its length
        last = np.append(segment[1:] != segment[:-1], True) if len(segment) else np.zeros(0, bool)
        union = np.bincount(segment, np.where(last, length, np.minimum(length, self.hop)), minlength=len(sizes))
        self._segment_samples += int(sizes.sum())
        after_last = int((sizes - reach).sum())  # a dropped tail, or (no tail dropped) a stride past the end
        self._dropped_tail += after_last if self.drop_tail else 0
        self._between_windows += int((reach - union).sum()) + (0 if self.drop_tail else after_last)
        return recs[segment], starts[segment] + offset, length, (offset // self.hop)

    def _report_unused(self, total: int) -> None:
        """Count the samples no window covers (gaps between split blocks, strides longer than a
        window, dropped tails) and say so once."""
        self.unused_samples = {
            "gap": total - self._segment_samples,
            "stride": self._between_windows,
            "dropped_tail": self._dropped_tail,
        }
        unused = sum(self.unused_samples.values())
        causes = {
            "gap": f"in gaps between {self.split} blocks",
            "stride": f"between windows (stride {self.hop} > window {self.window})",
            "dropped_tail": "in tails dropped by drop_tail=True",
        }
        detail = ", ".join(f"{n:,} {causes[k]}" for k, n in self.unused_samples.items() if n)
        message = f"windows leave {unused:,} of {total:,} samples unused ({100 * unused / max(total, 1):.2f}%)"
        message += f": {detail}" if detail else ""
        if self._dropped_tail or self._between_windows:
            warnings.warn(message, stacklevel=3)
        else:
            log.info(message)

    def _warn_missing_classes(self, labels: np.ndarray, parts: Mapping[str, np.ndarray], hint: str) -> None:
        """Warn for every non-train split that lacks some classes (its scores would skip them)."""
        for name, part in parts.items():
            missing = sorted(set(range(self.num_classes)) - set(labels[part].tolist()))
            if missing and name != "train":
                warnings.warn(
                    f"split={self.split!r}: {name} has no recording of classes "
                    f"{[self.class_names[m] for m in missing]} ({hint})",
                    stacklevel=3,
                )

    def _split_windows(self, recordings: list[Recording], labels: np.ndarray) -> dict[str, WindowTable]:
        lengths = np.array([r.signal.shape[1] for r in recordings], dtype=np.int64)
        every = np.arange(len(recordings))
        zero = np.zeros_like(lengths)
        if self.split == "time_block":
            train, val, test = self._time_blocks(lengths, (self.val_fraction, self.test_fraction))
            return {
                "train": self._windows(every, *train),
                "val": self._windows(every, *val),
                "test": self._windows(every, *test),
            }
        if self.split == "recording":
            kept, test = stratified_split(labels, self.test_fraction, self.seed)
            train_pos, val_pos = stratified_split(
                labels[kept], self.val_fraction / (1 - self.test_fraction), self.seed + 1
            )
            parts = {"train": kept[train_pos], "val": kept[val_pos], "test": test}
            for name, part in parts.items():
                if len(part) == 0:
                    raise ValueError(f"split='recording' leaves no recording for {name}; use split='time_block'")
            self._warn_missing_classes(
                labels, parts, "too few recordings per class; split='time_block' keeps every class in every split"
            )
            return {name: self._windows(part, zero[part], lengths[part]) for name, part in parts.items()}
        if self.split == "condition":
            conditions = np.array([r.condition for r in recordings])
            test = np.flatnonzero(np.isin(conditions, self.test_conditions))
            rest = np.setdiff1d(every, test)
            if len(test) == 0 or len(rest) == 0:
                raise ValueError(
                    f"test_conditions {self.test_conditions} select {len(test)} of {len(recordings)} recordings "
                    f"(conditions present: {sorted(set(conditions.tolist()))})"
                )
            tables = {"test": self._windows(test, zero[test], lengths[test])}
            if self.val_conditions is not None:  # val from the recordings not held out for test
                val = rest[np.isin(conditions[rest], self.val_conditions)]
                train = np.setdiff1d(rest, val)
                if len(val) == 0 or len(train) == 0:
                    raise ValueError(
                        f"val_conditions {self.val_conditions} leave {len(val)} val / {len(train)} train recordings"
                    )
                tables["val"] = self._windows(val, zero[val], lengths[val])
                tables["train"] = self._windows(train, zero[train], lengths[train])
                parts = {"train": train, "val": val, "test": test}
            else:
                train_block, val_block = self._time_blocks(lengths[rest], (self.val_fraction,))
                tables["train"] = self._windows(rest, *train_block)
                tables["val"] = self._windows(rest, *val_block)
                parts = {"train": rest, "val": rest, "test": test}
            self._warn_missing_classes(
                labels, parts, "no recording of those classes under these conditions; their scores are not measured"
            )
            return tables
        # random_window: leaky on purpose (to measure the leakage effect)
        warnings.warn(
            "split='random_window' puts overlapping windows of one recording in train and test: "
            "scores are optimistic (leakage); use it only to measure that effect",
            stacklevel=2,
        )
        table = self._windows(every, zero, lengths)
        order = np.random.default_rng(self.seed).permutation(len(table[0]))
        n_test = int(round(len(order) * self.test_fraction))
        n_val = int(round(len(order) * self.val_fraction))
        parts = {"test": order[:n_test], "val": order[n_test : n_test + n_val], "train": order[n_test + n_val :]}
        return {name: tuple(column[np.sort(part)] for column in table) for name, part in parts.items()}

    def _normalise(self, buffers: list[np.ndarray], train: WindowTable) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel mean/std over the samples the train windows cover (each counted once);
        applied in place to every buffer, so val and test see train statistics only."""
        recording, starts, lengths, _ = train
        channels = buffers[0].shape[0]
        total, square, count = np.zeros(channels), np.zeros(channels), 0
        for r in np.unique(recording).tolist():
            mine = recording == r
            edges = np.zeros(buffers[r].shape[1] + 1, dtype=np.int64)
            np.add.at(edges, starts[mine], 1)
            np.add.at(edges, starts[mine] + lengths[mine], -1)
            covered = np.cumsum(edges[:-1]) > 0
            values = buffers[r][:, covered].astype(np.float64)
            total += values.sum(axis=1)
            square += (values**2).sum(axis=1)
            count += values.shape[1]
        mean = total / count
        std = np.sqrt(np.maximum(square / count - mean**2, 0.0))
        std = np.where(std > 0, std, 1.0)
        for buffer in buffers:
            buffer -= mean[:, None].astype(np.float32)
            buffer /= std[:, None].astype(np.float32)
        return mean.astype(np.float32), std.astype(np.float32)

    # -- sampler --------------------------------------------------------------------------------

    def sampler_groups(self, dataset: BearingWindows) -> np.ndarray | None:
        """With ``grouping="recording"``, the recording of every window: a batch then holds one recording."""
        return np.asarray(dataset.recording) if self.grouping == "recording" else None
