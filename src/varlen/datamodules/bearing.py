"""Bearing-fault vibration windows: leak-free splits, views not copies, recording-grouped batches.

The two mistakes this DataModule makes impossible by default:

- *Leakage*: overlapping windows of one recording in both train and test give near-100%
  accuracy that collapses in the field. Splits are by time block (non-overlapping blocks of
  each recording separated by a gap of at least one window, for CWRU-like data where each class
  has one recording), by whole recording, or by operating condition. The leaky random window
  split exists only to measure the effect, and warns.
- *Copies*: windows are spans of one flat buffer holding every recording
  (`RecordingBuffer`; each recording's signal is a view of it),
  so 50%-overlapping windows hold the signal once, not twice, and a batch is one gather.

Where the data lives: `prepare_data` (one process per node) reads and resamples the recordings
once into an Arrow table in `cache_dir/bearing`, named by the content of the files and settings
(`recordings`); `setup` in every rank maps it, splits it, and maps
each split's windows and the train statistics from small tables beside it
(`window_tables`). A loader worker, under any start method, maps the
same files: nothing is copied per process, and batches are standardized as they are gathered.

Across operating conditions (`split="condition"`: train on one motor load, test on another),
validation is carved from the train conditions by time blocks unless `val_conditions` are
given, and the test conditions stay whole; `augment` shifts, resamples (speed), scales and
noises training windows (drawn from (seed, epoch, window), so a resumed run replays them).

Reading and checking files is `BearingSource`'s job; splits
come from `varlen.prepare.splits`; this module wires them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from varlen.batching import BucketBatchSampler, EpochBatchSampler
from varlen.datamodules.arguments import keep
from varlen.datamodules.base import VarLenDataModule
from varlen.datamodules.weighting import check_sample_weights
from varlen.datasets.bearing.augment import WindowAugment
from varlen.datasets.bearing.collate import BearingCollator
from varlen.datasets.bearing.dataset import BearingWindows
from varlen.datasets.bearing.formats import CWRU_CLASSES, Recording
from varlen.datasets.bearing.rates import rate_problem, warn_outliers
from varlen.datasets.bearing.recordings import (
    RecordingTable,
    build_recordings,
    open_recordings,
    recordings_key,
    recordings_path,
)
from varlen.datasets.bearing.source import BearingSource
from varlen.datasets.bearing.splits import OTHER, UNIT, WindowSplit, check_split_arguments, window_geometry
from varlen.datasets.bearing.storage import RecordingBuffer
from varlen.datasets.bearing.synthetic import iter_simulated
from varlen.datasets.bearing.window_tables import mapped_statistics, mapped_windows
from varlen.datasets.bearing.windows import train_statistics
from varlen.errors import DataError
from varlen.prepare.report import SOURCE, DataReport
from varlen.storage.cache import default_cache_dir

__all__ = ["BearingDataModule"]

Split = Literal["time_block", "recording", "condition", "random_window"]
ITEM = "recording"


class BearingDataModule(VarLenDataModule):
    """Windows of vibration recordings (CWRU, Paderborn, a folder, or the built-in simulator).

    `prepare_data` loads the recordings and resamples them to one rate (polyphase) into the
    cache; `build` maps them, splits them without leakage, standardizes every channel with
    statistics of the train split only (as batches are gathered), and builds one
    `BearingWindows` per split over the same flat buffer. Samples no
    window covers are counted in `report` per split (unit `"signal samples"`): gaps
    between split blocks, samples between windows when the stride exceeds the window, tails
    dropped by `drop_tail`.

    Batch:
        signals: [B, C, L] float32, the windows (C channels, train-standardized), zeros after each one's length
        mask: [B, L] bool, True = a real signal sample
        lengths: [B] int64, each window's length (L is the batch's longest, rounded up to pad_to_multiple_of)
        labels: [B] int64, the class of each window's recording
        recording_ids: [B] int64, each window's recording (a recording's windows vote together)
        window_index: [B] int64, each window's position among its recording's windows in the split
        starts: [B] int64, each window's first signal sample in its recording
        index: [B] int64, each window's position in its split

    Args:
        root: data folder; None runs the built-in simulator (offline, deterministic in `seed`).
        data_format: `auto` (Paderborn names -> paderborn, a metadata CSV -> folder, else
            cwru), `cwru`, `paderborn` or `folder`.
        metadata: CSV in `root` (or absolute) with `path,label` and optional
            `sampling_rate,recording_id,condition`; its labels override file-name labels.
        download: fetch the standard 10-class CWRU files into `root` (MD5-checked; CWRU only).
        channels: channels to read (CWRU `DE`/`FE`/`BA`, Paderborn `vibration_1`, CSV
            column names, `.npy` column numbers); default: DE, vibration_1, all columns.
        class_names: the classes, in label-index order; default: the 10 CWRU classes, the 4
            Paderborn classes, or the sorted labels of the metadata CSV (refused when they mix
            numbers with words or spell one number two ways). Other labels are bad input.
        sampling_rate: common rate every recording is resampled to; None: keep the rates (they
            must all agree). It, and every recording's own rate, must lie in 1 kHz..1 MHz
            (`RATE_RANGE`: a rate in kHz is refused, a
            recording's as bad input); a recording resampled by a factor more than 4x away from the
            others' median factor is warned about.
        window_length: window length in samples (at `sampling_rate`).
        stride: hop between windows in samples; default half a window (50% overlap).
        window_seconds: window length in seconds (overrides `window_length`).
        stride_seconds: hop in seconds (overrides `stride`).
        drop_tail: drop each segment's last, shorter window (default: keep it, padded, so no
            signal is lost); the dropped samples are counted in `report`.
        normalize: standardize every channel with the train split's mean and std.
        split: `time_block` (default; blocks of each recording), `recording` (whole
            recordings, stratified), `condition` (`test_conditions` held out) or
            `random_window` (LEAKY: overlapping windows of one recording land in several
            splits; for measuring the leakage effect only).
        val_fraction: share of each recording (time_block) or of the recordings (recording) for
            validation.
        test_fraction: the same for test.
        gap: samples left out between two blocks of different splits (default: one window);
            counted in `report`.
        test_conditions: conditions held out for test with `split="condition"` (e.g. `["3"]`
            for CWRU load 3).
        val_conditions: conditions for validation, taken from the recordings not held out for
            test (they must not overlap `test_conditions`); default: the last time block of
            each train recording (`val_fraction` of it, after a gap), the test recordings whole.
        train_conditions: conditions to train on with `split="condition"` (default: every
            condition not held out); recordings of other conditions are left out, counted in
            `report` (`source`, unit `"signal samples"`).
        grouping: `shuffle` (windows of all recordings mixed) or `recording` (every batch
            holds windows of one recording only, batches in random order).
        sample_weights: `"balanced"`: the training sampler draws windows by inverse class
            frequency of the training split, so each class (e.g. CWRU's normal recordings, longer
            than the fault ones) is served equally often per epoch; None: every window once.
            There is no per-window weight column here. Validation and test serve every window once.
        augment: augment training windows: random shifts within their block, speed changes,
            amplitude scaling, white noise, drawn from (seed, epoch, window) (evaluation is never
            augmented).
        augment_shift: most samples a training window moves either way (default: one stride).
        augment_scale: amplitude factors uniform in `[1 - augment_scale, 1 + augment_scale]`.
        augment_noise: largest standard deviation of the added noise, drawn per window in
            `[0, augment_noise]` (units of the normalized signal).
        augment_speed: training windows are read resampled at a speed factor uniform in
            `[1 - augment_speed, 1 + augment_speed]`, so every frequency scales as with another
            shaft speed (CWRU's loads 0-3 HP span 3.7%).
        simulated_per_class: simulator recordings per class (per class and load with
            `simulated_loads`).
        simulated_seconds: simulator duration range in seconds.
        simulated_loads: None (default): each simulated recording at a random load 0-3 that sets
            its speed only; a list (e.g. `[0, 1, 2, 3]`): every class under every load, with
            what a load changes (speed, impact and shaft amplitudes, noise, resonance), for
            cross-condition splits.
        cache_dir: where the recordings at the common rate, the windows and the train statistics
            are written once and mapped from (None: `$VARLEN_CACHE` or `~/.cache/varlen`; the
            files go in its `bearing` folder).

    The base's arguments are `VarLenDataModule`'s (`max_tokens` budgets
    `windows x window length` per batch; neither it nor `batch_size` set: 64 windows per batch; `on_bad`
    meets a bad recording: NaN/inf, shorter than one window, unknown label, missing channel, corrupt file,
    empty). A source in `sources` (e.g. `[{name: rig2, root: /data/rig2}]`) has its own data arguments
    and inherits the others. Recordings are not streamed (no `stream`).
    """

    mask_keys = ("mask",)
    source_arguments = ("root", "data_format", "metadata", "download", "simulated_per_class")
    default_batching = (64, None)
    size_axes = (UNIT,)  # a window's length, in samples of the signal
    fixed_arguments = ("stream",)
    #: arguments kept as given, each an attribute of the same name
    kept_arguments = (
        "metadata download sampling_rate window_length stride window_seconds stride_seconds drop_tail normalize split"
        " val_fraction test_fraction gap augment grouping simulated_per_class cache_dir"
    )
    normalization: tuple[np.ndarray, np.ndarray] | None = None  # the training split's, set by setup
    store: RecordingBuffer | None = None
    windowing: WindowSplit | None = None  # the split in samples, once the rate is known (setup)

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
        train_conditions: list[str] | None = None,
        grouping: Literal["shuffle", "recording"] = "shuffle",
        sample_weights: Literal["balanced"] | None = None,
        augment: bool = False,
        augment_shift: int | None = None,
        augment_scale: float = 0.1,
        augment_noise: float = 0.05,
        augment_speed: float = 0.0,
        simulated_per_class: int = 4,
        simulated_seconds: tuple[float, float] = (2.0, 20.0),
        simulated_loads: list[int] | None = None,
        cache_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(stream=None, **kwargs)  # the recordings are read whole, not streamed
        keep(self, locals(), self.kept_arguments)
        vars(self).update(bearing_arguments(locals(), type(self).__name__, self.seed, self.shuffle))
        self._known_now(root, data_format, metadata, download, channels, class_names)

    def _known_now(self, root, data_format, metadata, download, channels, class_names) -> None:
        """What is known before any recording is read: the format, channels and classes (the CLI links them),
        read cheaply, and the collate."""
        self.source = None if root is None else BearingSource.open(root, data_format, metadata, channels, class_names)
        self.data_format = "simulator" if self.source is None else self.source.data_format
        if download and self.data_format != "cwru":
            raise ValueError(f"download=True fetches the CWRU files only; {root} is read as {self.data_format}")
        self.channels = self.source.channels if self.source else list(channels or ["DE"])
        self.class_names = self.source.class_names if self.source else list(class_names or CWRU_CLASSES)
        self.num_classes = len(self.class_names)
        self.in_channels = len(self.channels)
        self.collate_fn = BearingCollator(self.pad_to_multiple_of)
        self.recordings: list[Recording] = []  # read by setup
        self.recording_names: list[str] = []

    # -- data -----------------------------------------------------------------------------------

    @property
    def cache_folder(self) -> Path:
        """Where this scenario's tables are: `<cache_dir>/bearing`."""
        return Path(self.cache_dir or default_cache_dir()) / "bearing"

    def prepare_data(self) -> None:
        """Fetch the CWRU files when `download=True`, then build the recordings table unless it is
        there (Lightning calls this once per node, before setup)."""
        if self.download and self.source is not None:
            self.source.download()
        self.recording_table()

    def recording_table(self) -> RecordingTable:
        """The recordings at the common rate, mapped from the cache; built there first when absent
        (or cut short, of another format or of other inputs: then with a warning)."""
        content = self.source.fingerprint() if self.source is not None else self._simulated_settings()
        key = recordings_key(content, self.sampling_rate)
        path = recordings_path(self.cache_folder, key)
        table = open_recordings(path, key)
        if table is None:
            build_recordings(path, key, self._read, self.sampling_rate)
            table = open_recordings(path, key)
        return table

    def _simulated_settings(self) -> dict[str, object]:
        loads = self.simulated_loads
        settings = (self.simulated_per_class, self.seed, list(self.simulated_seconds), loads, self.class_names)
        return {"simulator": settings}

    def _read(self, report: DataReport) -> Iterable[Recording]:
        """The raw recordings, one at a time: simulated, or read and validated by the source (bad ones to
        `report`). What `build_recordings` stores."""
        if self.source is None:
            seconds, loads = self.simulated_seconds, self.simulated_loads
            return iter_simulated(
                self.simulated_per_class, self.seed, seconds, class_names=self.class_names, loads=loads
            )
        return self.source.iter_load(report)

    def load(self) -> list[Recording]:
        """The raw recordings, read now (not the cache), at their own rates (bad ones to `report`)."""
        return list(self._read(self.report))

    def build(self, stage: str | None) -> dict[str, BearingWindows]:
        """Mapped recordings (bad ones replayed into the report) -> usable ones -> leak-free splits ->
        windows over the shared buffer."""
        table = self.recording_table()
        every = table.recordings()
        recordings = self._usable(table, every)
        self.recordings = recordings
        self.recording_names = [r.name for r in recordings]
        labels = np.array([self.class_names.index(r.label) for r in recordings], dtype=np.int64)
        self.recording_labels = labels
        row = {r.name: i for i, r in enumerate(every)}  # names are unique
        store = self.store = table.store(np.array([row[r.name] for r in recordings], dtype=np.int64))
        for rec, view in zip(recordings, store.buffers, strict=True):
            rec.signal = view
        lengths = [r.signal.shape[1] for r in recordings]
        conditions = [r.condition for r in recordings]
        tables, bounds = self.windowing.windows(lengths, labels, conditions, self.report, self.class_names)
        folder = self.cache_folder
        mapped = {
            name: mapped_windows(folder, t, bounds[name] if name == "train" else None) for name, t in tables.items()
        }
        if self.normalize:
            statistics = functools.partial(train_statistics, store.buffers, tables["train"])
            self.normalization = mapped_statistics(folder, table.key, mapped["train"], statistics)
        augment = self._window_augment() if self.augment else None
        return {
            name: BearingWindows.from_table(
                store,
                labels,
                windows,
                pad_to_multiple_of=self.pad_to_multiple_of,
                augment=augment if name == "train" else None,
                normalization=self.normalization,
            )
            for name, windows in mapped.items()
        }

    def _usable(self, table: RecordingTable, every: list[Recording]) -> list[Recording]:
        """The recordings the split can use. The bad ones found while the table was built are replayed
        into the report (raised or counted under this DataModule's `on_bad`), then those of other
        conditions and those too short for the split are left out (counted).

        Raises:
            DataError: no recording is left.
        """
        for where, problem in table.skipped:
            self.report.bad(where, problem, item=ITEM)
        rates = {r.sampling_rate for r in every}
        self.rate = float(self.sampling_rate or next(iter(rates), 0.0))
        warn_outliers([r.name for r in every], table.source_rates.tolist(), self.rate)
        recordings = self._of_conditions(every)
        if recordings:
            self.window, self.hop, gap = window_geometry(
                self.rate, self.window_length, self.stride, self.window_seconds, self.stride_seconds, self.gap
            )
            self.windowing = WindowSplit(
                self.split,
                self.val_fraction,
                self.test_fraction,
                self.window,
                self.hop,
                gap,
                self.drop_tail,
                self.seed,
                tuple(self.test_conditions),
                None if self.val_conditions is None else tuple(self.val_conditions),
            )
            recordings = self._drop_short(recordings)
        if not recordings:
            raise DataError(
                f"no usable recordings in {self.root or 'the simulator'}: {self.report.num_skipped} skipped as bad "
                f"input, none left (see dm.report)\n{self.report}"
            )
        return recordings

    # -- what a checkpoint carries -----------------------------------------------------------

    state_must_match = ("class_names", "channels", "sampling_rate")
    state_restored = ("normalization",)

    def data_state(self) -> dict[str, object]:
        """Classes, channels and rate the model was trained on; window length; the train statistics."""
        state = {
            "class_names": self.class_names,
            "channels": self.channels,
            "sampling_rate": self.rate,
            "window_length": self.window,
        }
        if self.normalization is not None:
            state["normalization"] = list(self.normalization)
        return state

    def restore_data_state(self, state: Mapping[str, object]) -> None:
        """Standardise every split with the checkpoint's train statistics instead of this data's
        (batches are standardized as they are gathered: the two vectors are replaced)."""
        if self.normalization is None or "normalization" not in state:
            return
        self.normalization = tuple(np.asarray(v, dtype=np.float32) for v in state["normalization"])
        for dataset in self.datasets.values():
            dataset.normalization = self.normalization

    def _window_augment(self) -> WindowAugment:
        shift, scale, noise, speed = self.augment_args
        return WindowAugment(self.seed, self.hop if shift is None else int(shift), scale, noise, speed)

    def _of_conditions(self, recordings: list[Recording]) -> list[Recording]:
        """With `train_conditions`, only the recordings of a named condition (the others counted as unused)."""
        if self.train_conditions is None:
            return recordings
        present = sorted({r.condition for r in recordings})
        absent = sorted(set(self.train_conditions) - set(present))
        if absent:
            raise DataError(f"train_conditions {absent}: no recording of those conditions (present: {present})")
        named = set(self.train_conditions + self.test_conditions + (self.val_conditions or []))
        other = sum(r.signal.shape[1] for r in recordings if r.condition not in named)
        self.report.leave_unused(SOURCE, OTHER, other, UNIT)
        return [r for r in recordings if r.condition in named]

    def _drop_short(self, recordings: list[Recording]) -> list[Recording]:
        """The recordings the split can use; the others are bad input (too short for it)."""
        kept = []
        for rec in recordings:
            length = rec.signal.shape[1]
            reason = self.windowing.unusable(length, rec.condition)
            if reason is None:
                kept.append(rec)
            else:
                self.report.bad(f"{rec.where} ({length} samples at {self.rate:g} Hz)", reason, item=ITEM)
        return kept

    # -- sampler --------------------------------------------------------------------------------

    def sampler_class(self, split: str) -> type[BucketBatchSampler]:
        """With `augment`, training batches carry their epoch (for the draws); evaluation uses the plain sampler."""
        return EpochBatchSampler if self.augment and split == "train" else BucketBatchSampler

    def sampler_groups(self, dataset: BearingWindows) -> np.ndarray | None:
        """With `grouping="recording"`, the recording of every window: a batch then holds one recording."""
        return np.asarray(dataset.recording) if self.grouping == "recording" else None


def bearing_arguments(given: Mapping[str, Any], owner: str, seed: int, shuffle: bool) -> dict[str, Any]:
    """A bearing DataModule's arguments (`given`: its `__init__`'s locals) that are checked together or kept
    in another form: split and rate refused where they contradict, conditions as strings, augmentation checked."""
    names = ("split", "grouping", "test_fraction", "gap", "test_conditions", "val_conditions", "train_conditions")
    check_split_arguments(*(given[name] for name in names))
    rate = given["sampling_rate"]
    if rate is not None and rate_problem(rate):
        raise ValueError(f"sampling_rate={rate}: {rate_problem(rate)}")
    shift, *augment = (given[name] for name in ("augment_shift", "augment_scale", "augment_noise", "augment_speed"))
    WindowAugment(seed, shift or 0, *augment)  # refuse bad values now
    conditions = {name: given[name] for name in ("val_conditions", "train_conditions")}
    loads = given["simulated_loads"]
    return {
        "sample_weights": check_sample_weights(given["sample_weights"], owner, shuffle, columns=False),
        "root": Path(given["root"]) if given["root"] is not None else None,
        "test_conditions": [str(c) for c in given["test_conditions"] or []],
        **{name: None if value is None else [str(c) for c in value] for name, value in conditions.items()},
        "augment_args": (shift, *augment),
        "simulated_seconds": tuple(given["simulated_seconds"]),
        "simulated_loads": None if loads is None else [int(x) for x in loads],
    }
