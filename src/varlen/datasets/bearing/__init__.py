# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Bearing-fault vibration recordings: formats, readers, a physical simulator, window views, collate.

Public entry points (what a DataModule of one's own is built from): the readers
`read_cwru`, `read_paderborn`, `read_signal_file` and `download_cwru`;
`BearingSource` (a folder's format and its validated `Recording` list), the class
lists `CWRU_CLASSES` and `PADERBORN_CLASSES`; `simulate_recordings` (the
simulator); `WindowSplit` (the leak-free split); `WindowAugment`;
`BearingWindows` and `BearingCollator`. Helpers stay in their submodules:

- `formats`: `Recording`, the CWRU / Paderborn names and classes.
- `readers`: CWRU `.mat`, Paderborn `.mat` structs, `.npy` /
  `.csv` signals, the metadata CSV, the verified CWRU download.
- `source`: `BearingSource`, a folder's format, defaults and
  validated recordings (bad ones through a `DataReport`).
- `synthetic`: the embedded simulator (loads with their effects).
- `splits`: `WindowSplit`, the split policy (time blocks,
  recordings, conditions) and the window geometry.
- `windows`: resampling, window tables, unused samples, statistics.
- `recordings`: the recordings at the common rate, built once per
  node into one Arrow table in the cache folder (bad ones beside them, for the report), mapped by
  every process.
- `window_tables`: each split's windows and the train statistics as
  small mapped tables named by their content.
- `storage`: `RecordingBuffer`
  (every recording in one flat buffer, a mapped column, pickled as its path), windows as
  `Ragged` spans of it, the one-gather batch read (standardized).
- `augment`: seeded (seed, epoch, window) shifts, scaling, noise of training windows.
- `dataset`: `BearingWindows`, windows as views, fetched a batch at once.
- `collate`: `BearingCollator`, which names the batch's fields.
"""

from varlen._extras import require

require("bearing")  # first: names the extra when its packages are missing

from varlen.datasets.bearing.augment import WindowAugment
from varlen.datasets.bearing.collate import BearingCollator
from varlen.datasets.bearing.dataset import BearingWindows
from varlen.datasets.bearing.formats import CWRU_CLASSES, PADERBORN_CLASSES, Recording
from varlen.datasets.bearing.readers import download_cwru, read_cwru, read_paderborn, read_signal_file
from varlen.datasets.bearing.source import BearingSource
from varlen.datasets.bearing.splits import WindowSplit
from varlen.datasets.bearing.synthetic import simulate_recordings

__all__ = [
    "CWRU_CLASSES",
    "PADERBORN_CLASSES",
    "BearingCollator",
    "BearingSource",
    "BearingWindows",
    "Recording",
    "WindowAugment",
    "WindowSplit",
    "download_cwru",
    "read_cwru",
    "read_paderborn",
    "read_signal_file",
    "simulate_recordings",
]
