# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Bearing-fault vibration recordings: formats, readers, a physical simulator, window views, collate.

- :mod:`~varlen.datasets.bearing.formats`: :class:`Recording`, the CWRU / Paderborn names and classes.
- :mod:`~varlen.datasets.bearing.readers`: CWRU ``.mat``, Paderborn ``.mat`` structs, ``.npy`` /
  ``.csv`` signals, the metadata CSV, the verified CWRU download.
- :mod:`~varlen.datasets.bearing.source`: :class:`BearingSource`, a folder's format, defaults and
  validated recordings (bad ones through a :class:`~varlen.report.DataReport`).
- :mod:`~varlen.datasets.bearing.synthetic`: the embedded simulator.
- :mod:`~varlen.datasets.bearing.windows`: resampling, window tables, unused samples, statistics.
- :mod:`~varlen.datasets.bearing.storage`: :class:`RecordingBuffer` (every recording in one flat
  buffer), windows as :class:`~varlen.batching.ragged.Ragged` spans of it, the one-gather batch read.
- :mod:`~varlen.datasets.bearing.augment`: seeded (seed, epoch, window) shifts, scaling, noise of training windows.
- :mod:`~varlen.datasets.bearing.dataset`: :class:`BearingWindows`, windows as views, fetched a batch at once.
- :mod:`~varlen.datasets.bearing.collate`: :class:`BearingCollator`, which names the batch's fields.
"""

from varlen._extras import require

require("bearing")  # first: names the extra when its packages are missing

from varlen.datasets.bearing.augment import WindowAugment
from varlen.datasets.bearing.collate import BearingCollator
from varlen.datasets.bearing.dataset import BearingWindows, WindowBatch
from varlen.datasets.bearing.formats import (
    CWRU_CLASSES,
    CWRU_FILES,
    CWRU_URL,
    PADERBORN_CLASSES,
    Recording,
    parse_cwru_name,
    parse_paderborn_name,
)
from varlen.datasets.bearing.readers import (
    default_channels,
    download_cwru,
    read_cwru,
    read_metadata,
    read_paderborn,
    read_signal_file,
)
from varlen.datasets.bearing.source import BearingSource, resolve_format
from varlen.datasets.bearing.storage import RecordingBuffer, gather_windows
from varlen.datasets.bearing.synthetic import (
    SPEED_ONLY,
    LoadEffects,
    load_effects,
    simulate_recording,
    simulate_recordings,
)
from varlen.datasets.bearing.windows import (
    Segments,
    WindowTable,
    cut_windows,
    normalize,
    plan_windows,
    renormalize,
    resample,
    train_statistics,
    uncovered_between_segments,
)

__all__ = [
    "CWRU_CLASSES",
    "CWRU_FILES",
    "CWRU_URL",
    "PADERBORN_CLASSES",
    "SPEED_ONLY",
    "BearingCollator",
    "BearingSource",
    "BearingWindows",
    "LoadEffects",
    "Recording",
    "RecordingBuffer",
    "Segments",
    "WindowAugment",
    "WindowBatch",
    "WindowTable",
    "cut_windows",
    "default_channels",
    "download_cwru",
    "gather_windows",
    "load_effects",
    "normalize",
    "renormalize",
    "parse_cwru_name",
    "parse_paderborn_name",
    "plan_windows",
    "read_cwru",
    "read_metadata",
    "read_paderborn",
    "read_signal_file",
    "resample",
    "resolve_format",
    "simulate_recording",
    "simulate_recordings",
    "train_statistics",
    "uncovered_between_segments",
]
