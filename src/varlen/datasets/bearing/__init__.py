# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""Bearing-fault vibration recordings: formats, readers, a physical simulator, window views, collate.

Public entry points (what a DataModule of one's own is built from): the readers
:func:`read_cwru`, :func:`read_paderborn`, :func:`read_signal_file` and :func:`download_cwru`;
:class:`BearingSource` (a folder's format and its validated :class:`Recording` list), the class
lists :data:`CWRU_CLASSES` and :data:`PADERBORN_CLASSES`; :func:`simulate_recordings` (the
simulator); :class:`WindowSplit` (the leak-free split); :class:`WindowAugment`;
:class:`BearingWindows` and :class:`BearingCollator`. Helpers stay in their submodules:

- :mod:`~varlen.datasets.bearing.formats`: :class:`Recording`, the CWRU / Paderborn names and classes.
- :mod:`~varlen.datasets.bearing.readers`: CWRU ``.mat``, Paderborn ``.mat`` structs, ``.npy`` /
  ``.csv`` signals, the metadata CSV, the verified CWRU download.
- :mod:`~varlen.datasets.bearing.source`: :class:`BearingSource`, a folder's format, defaults and
  validated recordings (bad ones through a :class:`~varlen.prepare.report.DataReport`).
- :mod:`~varlen.datasets.bearing.synthetic`: the embedded simulator (loads with their effects).
- :mod:`~varlen.datasets.bearing.splits`: :class:`WindowSplit`, the split policy (time blocks,
  recordings, conditions) and the window geometry.
- :mod:`~varlen.datasets.bearing.windows`: resampling, window tables, unused samples, statistics.
- :mod:`~varlen.datasets.bearing.recordings`: the recordings at the common rate, built once per
  node into one Arrow table in the cache folder (bad ones beside them, for the report), mapped by
  every process.
- :mod:`~varlen.datasets.bearing.window_tables`: each split's windows and the train statistics as
  small mapped tables named by their content.
- :mod:`~varlen.datasets.bearing.storage`: :class:`~varlen.datasets.bearing.storage.RecordingBuffer`
  (every recording in one flat buffer, a mapped column, pickled as its path), windows as
  :class:`~varlen.batching.ragged.Ragged` spans of it, the one-gather batch read (standardized).
- :mod:`~varlen.datasets.bearing.augment`: seeded (seed, epoch, window) shifts, scaling, noise of training windows.
- :mod:`~varlen.datasets.bearing.dataset`: :class:`BearingWindows`, windows as views, fetched a batch at once.
- :mod:`~varlen.datasets.bearing.collate`: :class:`BearingCollator`, which names the batch's fields.
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
