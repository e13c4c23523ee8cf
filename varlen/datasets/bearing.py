"""Bearing-fault vibration recordings: readers, download, a physical simulator and window views.

Three real layouts are read, each into :class:`Recording` objects (one ``[channels, samples]``
float32 buffer per recording):

- CWRU ``.mat`` files (Case Western Reserve University bearing data center): keys
  ``X<NNN>_DE_time`` / ``_FE_time`` / ``_BA_time`` and ``X<NNN>RPM``. Keys are found by pattern
  because real files disagree with their names (some hold another number's keys, some lack the
  RPM or a channel). Labels come from the usual file names (``12k_Drive_End_IR007_0_105.mat``,
  ``normal_0_97.mat``) or from a metadata CSV.
- Paderborn ``.mat`` structs (``N15_M07_F10_KA01_1.mat``): the ``Y`` struct array of channels,
  of which ``vibration_1`` (64 kHz) is the usual one.
- A generic folder of ``.npy`` / ``.csv`` signals listed by a metadata CSV.

:class:`BearingWindows` serves windows as *views* into the recording buffers: a window is one
row of five int64 index arrays (recording, start, length, window index, label), and
``__getitem__`` slices the buffer, so 50%-overlapping windows cost no extra signal memory (a copy
per window would double it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.io
import scipy.signal
from torch.utils.data import Dataset

from varlen.datasets.base import DatasetNotFoundError, SkipReport, download_url

__all__ = [  # DatasetNotFoundError and SkipReport are re-exported: the DataModule and tests import them here
    "CWRU_CLASSES",
    "CWRU_FILES",
    "PADERBORN_CLASSES",
    "BearingDataError",
    "BearingWindows",
    "DatasetNotFoundError",
    "Recording",
    "SkipReport",
    "default_channels",
    "download_cwru",
    "load_recordings",
    "parse_cwru_name",
    "parse_paderborn_name",
    "plan_windows",
    "read_cwru",
    "read_paderborn",
    "resample",
    "simulate_recordings",
]

#: The ten classes of the usual CWRU benchmark: normal plus three drive-end fault sites x three
#: sizes (7, 14, 21 mils). Files outside them get labels that are not in this tuple, so they are
#: reported as unknown labels (an error, or a counted skip) unless ``class_names`` lists them:
#: size-028 faults (``IR028``, ``B028``; CWRU has no 028 outer-race files) and every fan-end
#: fault (``FE_IR007`` ...: a different bearing, the 6203, whose faults are not the drive-end classes).
CWRU_CLASSES = ("normal", "B007", "B014", "B021", "IR007", "IR014", "IR021", "OR007", "OR014", "OR021")
#: Paderborn bearing codes: K0xx healthy, KAxx outer ring, KIxx inner ring, KBxx both.
PADERBORN_CLASSES = ("healthy", "OR", "IR", "OR+IR")
PADERBORN_RATE = 64000
CWRU_CHANNELS = ("DE", "FE", "BA")
CWRU_LOAD_RPM = {0: 1797.0, 1: 1772.0, 2: 1750.0, 3: 1730.0}

#: Where the CWRU bearing data center serves its files (``{number}.mat``).
CWRU_URL = "https://engineering.case.edu/sites/default/files/{number}.mat"
#: The standard 10-class 0 HP set: local file name -> MD5 of the file served at :data:`CWRU_URL`.
#: Computed from the files in ``../shared/data/bearing`` (they match the MD5 list published with
#: the vibdata project for the same numbers).
CWRU_FILES = {
    "normal_0_97.mat": "ee410e7243aefcd8b7120876556464e7",
    "12k_Drive_End_IR007_0_105.mat": "f14821b40412f33018279198da7f9cdc",
    "12k_Drive_End_B007_0_118.mat": "ff0f20588edc64140ae33888fcf1114a",
    "12k_Drive_End_OR007@6_0_130.mat": "e45f73f65cc3de4482d28d758503f2c1",
    "12k_Drive_End_IR014_0_169.mat": "09e41b26825d87e03908add7f01d21aa",
    "12k_Drive_End_B014_0_185.mat": "e9121cec5988ffd8b33b855371e03ba5",
    "12k_Drive_End_OR014@6_0_197.mat": "9109c26832e82a904fd8545eebe4c05c",
    "12k_Drive_End_IR021_0_209.mat": "a6c8deded8d592ded19818d001687abc",
    "12k_Drive_End_B021_0_222.mat": "9e572db7bcdd0690fed770fcd29d07ca",
    "12k_Drive_End_OR021@6_0_234.mat": "e95df8c8a6fc455d9cea5c2ca36fdc38",
}

# SKF 6205-2RS JEM (the CWRU drive-end bearing): 9 balls, ball diameter 0.3126 in, pitch
# diameter 1.537 in, contact angle 0. Fault frequencies in multiples of the shaft frequency.
BALLS, BALL_D, PITCH_D = 9, 0.3126, 1.537
_RATIO = BALL_D / PITCH_D
BPFO = BALLS / 2 * (1 - _RATIO)  # outer race: 3.5848
BPFI = BALLS / 2 * (1 + _RATIO)  # inner race: 5.4152
BSF = PITCH_D / BALL_D * (1 - _RATIO**2)  # ball spin x2 (a spall hits both races): 4.7135
FTF = (1 - _RATIO) / 2  # cage: 0.3983

_CWRU_NAME = re.compile(
    r"^(?P<rate>12|48)k_(?P<end>Drive|Fan)_End_(?P<fault>IR|B|OR)(?P<size>\d{3})(?:@(?P<pos>\d+))?"
    r"_(?P<load>\d)_(?P<number>\d+)$",
    re.IGNORECASE,
)
_CWRU_NORMAL = re.compile(r"^normal_(?P<load>\d)_(?P<number>\d+)$", re.IGNORECASE)
_CWRU_KEY = re.compile(r"^X(?P<number>\d+)_(?P<channel>DE|FE|BA)_time$")
_CWRU_RPM = re.compile(r"^X(?P<number>\d+)RPM$")
_SIMULATED_CLASS = re.compile(r"^(normal|(IR|B|OR)\d{3})$")
_PADERBORN_NAME = re.compile(r"^(?P<condition>N\d\d_M\d\d_F\d\d)_(?P<bearing>K[0ABI]\d\d)_(?P<measurement>\d+)$")


class BearingDataError(ValueError):
    """A recording that cannot be used, with the file (or recording) and the reason."""


@dataclass
class Recording:
    """One vibration recording.

    Attributes:
        signal: ``[channels, samples]`` float32, C-contiguous (the buffer windows are views of).
        sampling_rate: samples per second.
        label: class name.
        name: recording id (unique; the file stem by default).
        condition: operating condition (CWRU: the motor load ``"0"``-``"3"``; Paderborn:
            ``"N15_M07_F10"``), for condition splits.
        rpm: shaft speed when known.
        source: the file it came from.
    """

    signal: np.ndarray
    sampling_rate: float
    label: str
    name: str
    condition: str = ""
    rpm: float | None = None
    source: str = ""


# -- file names ---------------------------------------------------------------------------------


def parse_cwru_name(name: str) -> dict[str, Any] | None:
    """Label and conditions from a usual CWRU file name, or None if it is not one.

    ``12k_Drive_End_OR007@6_0_130.mat`` -> label ``OR007``, load ``0``, 12 kHz, number 130,
    position 6 (o'clock). ``normal_0_97.mat`` -> ``normal`` at 48 kHz (the CWRU baseline rate).
    Fan-end faults get an ``FE_`` prefix (``12k_Fan_End_IR007_0_278.mat`` -> ``FE_IR007``) because
    they sit in the other bearing; with size-028 faults they fall outside :data:`CWRU_CLASSES`.
    """
    stem = Path(name).stem
    if match := _CWRU_NAME.match(stem):
        fault = match["fault"].upper()
        end = match["end"].upper()[0] + "E"
        return {
            "label": f"{'FE_' if end == 'FE' else ''}{fault}{match['size']}",
            "fault": fault,
            "size": int(match["size"]),
            "position": match["pos"],
            "end": end,
            "load": int(match["load"]),
            "sampling_rate": 1000 * int(match["rate"]),
            "number": int(match["number"]),
        }
    if match := _CWRU_NORMAL.match(stem):
        return {
            "label": "normal",
            "fault": "normal",
            "size": 0,
            "position": None,
            "end": "DE",
            "load": int(match["load"]),
            "sampling_rate": 48000,
            "number": int(match["number"]),
        }
    return None


def parse_paderborn_name(name: str) -> dict[str, Any] | None:
    """Label (from the bearing code) and operating condition of a Paderborn file name, or None."""
    match = _PADERBORN_NAME.match(Path(name).stem)
    if not match:
        return None
    code = match["bearing"]
    label = {"0": "healthy", "A": "OR", "I": "IR", "B": "OR+IR"}[code[1]]
    return {"label": label, "condition": match["condition"], "bearing": code, "measurement": int(match["measurement"])}


# -- readers ------------------------------------------------------------------------------------


def _loadmat(path: Path, **kwargs: Any) -> dict[str, Any]:
    try:
        return scipy.io.loadmat(path, **kwargs)
    except Exception as error:  # scipy raises ValueError, TypeError, OSError... on broken files
        raise BearingDataError(f"{path}: not a readable .mat file ({type(error).__name__}: {error})") from error


def read_cwru(path: str | Path, channels: Sequence[str] = ("DE",)) -> tuple[np.ndarray, float | None]:
    """The requested channels of a CWRU ``.mat`` file as ``[C, T]`` float32, and its RPM.

    Keys are matched by pattern. When a file holds several numbers' keys, the number in its name
    wins; a file that holds keys of one other number (a known CWRU quirk) is read as is.

    Raises:
        BearingDataError: unreadable file, no signal keys, or a requested channel absent.
    """
    path = Path(path)
    data = _loadmat(path)
    found: dict[int, dict[str, np.ndarray]] = {}
    rpms: dict[int, float] = {}
    for key, value in data.items():
        if match := _CWRU_KEY.match(key):
            found.setdefault(int(match["number"]), {})[match["channel"]] = value
        elif (match := _CWRU_RPM.match(key)) and np.size(value):
            rpms[int(match["number"])] = float(np.ravel(value)[0])
    if not found:
        keys = sorted(k for k in data if not k.startswith("__"))
        raise BearingDataError(f"{path}: no X<NNN>_<DE|FE|BA>_time keys (keys: {keys})")
    info = parse_cwru_name(path.name) or {}
    number = info.get("number")
    if number not in found:
        if len(found) > 1:
            raise BearingDataError(f"{path}: keys of several recordings {sorted(found)} and none is number {number}")
        number = next(iter(found))
    present = found[number]
    missing = [c for c in channels if c not in present]
    if missing:
        raise BearingDataError(
            f"{path}: channel(s) {missing} absent; this file has {sorted(present)} (keys X{number:03d}_<channel>_time)"
        )
    lengths = {c: np.size(present[c]) for c in channels}
    if len(set(lengths.values())) != 1:
        raise BearingDataError(f"{path}: channels have different lengths {lengths}")
    signal = np.stack([np.ravel(present[c]) for c in channels]).astype(np.float32)
    rpm = rpms.get(number, next(iter(rpms.values())) if len(rpms) == 1 else None)
    return signal, rpm


def read_paderborn(path: str | Path, channels: Sequence[str] = ("vibration_1",)) -> np.ndarray:
    """The requested channels of a Paderborn ``.mat`` struct (field ``Y``) as ``[C, T]`` float32.

    Raises:
        BearingDataError: unreadable file, no struct with a ``Y`` field, or a channel absent.
    """
    path = Path(path)
    data = _loadmat(path, simplify_cells=True)
    structs = [v for k, v in data.items() if not k.startswith("__") and isinstance(v, dict) and "Y" in v]
    if len(structs) != 1:
        raise BearingDataError(f"{path}: expected one struct with a 'Y' field, found {len(structs)}")
    entries = structs[0]["Y"]
    entries = [entries] if isinstance(entries, dict) else list(entries)
    by_name = {str(e.get("Name")): e.get("Data") for e in entries if isinstance(e, dict)}
    missing = [c for c in channels if c not in by_name]
    if missing:
        raise BearingDataError(f"{path}: channel(s) {missing} absent; Y holds {sorted(by_name)}")
    lengths = {c: np.size(by_name[c]) for c in channels}
    if len(set(lengths.values())) != 1:
        raise BearingDataError(f"{path}: channels have different lengths {lengths}")
    return np.stack([np.ravel(np.asarray(by_name[c], dtype=np.float64)) for c in channels]).astype(np.float32)


def read_signal_file(path: str | Path, channels: Sequence[str] | None = None) -> np.ndarray:
    """A generic signal file as ``[C, T]`` float32.

    ``.npy``: ``[T]`` or ``[T, C]`` (time first, like a CSV); ``channels`` are column numbers.
    ``.csv``: one column per channel with a header row; ``channels`` are column names (or
    column numbers, so one folder may mix ``.npy`` and ``.csv`` files).
    ``None``: every channel.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except Exception as error:
            raise BearingDataError(f"{path}: not a readable .npy file ({error})") from error
        array = array[:, None] if array.ndim == 1 else array
        if array.ndim != 2:
            raise BearingDataError(f"{path}: expected [T] or [T, C], got shape {array.shape}")
        if channels is not None:
            picks = [int(c) for c in channels]
            if max(picks, default=-1) >= array.shape[1]:
                raise BearingDataError(f"{path}: channel(s) {picks} requested, file has {array.shape[1]} columns")
            array = array[:, picks]
        return np.ascontiguousarray(array.T, dtype=np.float32)
    if suffix == ".csv":
        try:
            frame = pd.read_csv(path)
        except Exception as error:
            raise BearingDataError(f"{path}: not a readable CSV ({error})") from error
        if channels is not None and all(str(c).isdigit() for c in channels) and not set(channels) & set(frame.columns):
            frame = frame.iloc[:, [int(c) for c in channels]]  # column numbers, as for .npy
        elif channels is not None:
            missing = [c for c in channels if c not in frame.columns]
            if missing:
                raise BearingDataError(f"{path}: channel(s) {missing} absent; columns are {list(frame.columns)}")
            frame = frame[list(channels)]
        try:
            return np.ascontiguousarray(frame.to_numpy(dtype=np.float32).T)
        except ValueError as error:
            raise BearingDataError(f"{path}: non-numeric values ({error})") from error
    raise BearingDataError(f"{path}: unsupported signal file type {suffix!r} (use .npy, .csv or .mat)")


# -- download -----------------------------------------------------------------------------------


def download_cwru(root: str | Path, files: Sequence[str] | None = None) -> list[Path]:
    """Fetch the standard CWRU files into ``root``, each verified against its MD5 checksum.

    Files already present with the right checksum are kept. A download that does not match is
    never left behind as a ``.mat`` file (see :func:`varlen.datasets.base.download_url`), and the
    error names the file and both checksums.
    """
    root = Path(root)
    paths = []
    for name in files or CWRU_FILES:
        number = re.search(r"_(\d+)\.mat$", name)[1]
        paths.append(download_url(CWRU_URL.format(number=number), root / name, f"md5:{CWRU_FILES[name]}"))
    return paths


# -- loading a folder ---------------------------------------------------------------------------


def detect_format(root: Path, metadata: str | Path | None) -> str:
    """``cwru``, ``paderborn`` or ``folder`` from what ``root`` holds."""
    if metadata is not None:
        return "folder"
    mats = sorted(root.glob("*.mat"))
    if mats and all(parse_paderborn_name(p.name) for p in mats):
        return "paderborn"
    return "cwru"


def not_found(root: Path, fmt: str) -> DatasetNotFoundError:
    hint = (
        "pass download=True to fetch the standard 10-class CWRU set, or copy the .mat files from "
        "https://engineering.case.edu/bearingdatacenter/download-data-file"
        if fmt == "cwru"
        else "copy the Paderborn .mat files (https://mb.uni-paderborn.de/kat/datacenter) there"
        if fmt == "paderborn"
        else "list the signal files in a metadata CSV (path,label,sampling_rate[,recording_id,condition])"
    )
    return DatasetNotFoundError(f"no {fmt} recordings found in {root}: {hint}")


def default_channels(path: str | Path) -> list[str]:
    """The channels read from ``path`` when none are given: what its users usually mean.

    CWRU ``.mat``: ``DE`` (the drive-end accelerometer every benchmark uses); Paderborn ``.mat``
    (recognised by its name): ``vibration_1``; ``.csv``: every column; ``.npy``: every column.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".mat":
        return ["vibration_1"] if parse_paderborn_name(path.name) else ["DE"]
    if suffix == ".csv":
        return list(pd.read_csv(path, nrows=0).columns)
    if suffix == ".npy":
        array = np.load(path, mmap_mode="r")
        return [str(c) for c in range(1 if array.ndim == 1 else array.shape[1])]
    raise BearingDataError(f"{path}: unsupported signal file type {suffix!r} (use .npy, .csv or .mat)")


def read_metadata(path: Path) -> pd.DataFrame:
    """The metadata CSV: ``path, label`` and optional ``sampling_rate, recording_id, condition``."""
    try:
        frame = pd.read_csv(path, dtype={"label": str, "recording_id": str, "condition": str})
    except Exception as error:
        raise BearingDataError(f"{path}: not a readable metadata CSV ({error})") from error
    missing = [c for c in ("path", "label") if c not in frame.columns]
    if missing:
        raise BearingDataError(f"{path}: metadata lacks column(s) {missing}; columns are {list(frame.columns)}")
    return frame


def load_recordings(
    root: str | Path,
    fmt: str = "auto",
    channels: Sequence[str] | None = None,
    metadata: str | Path | None = None,
    class_names: Sequence[str] | None = None,
    report: SkipReport | None = None,
) -> list[Recording]:
    """Every recording under ``root``, validated (finite values, known label).

    Args:
        root: the data folder.
        fmt: ``auto``, ``cwru``, ``paderborn`` or ``folder`` (a metadata CSV is needed for folder).
        channels: channels to read (default: ``DE`` for CWRU, ``vibration_1`` for Paderborn,
            every column for generic files).
        metadata: CSV listing files (relative to ``root``) with labels; overrides file-name labels.
        class_names: allowed labels; anything else is bad input (error, or a reported skip).
        report: where bad recordings go (default: raise on the first one).
    """
    root = Path(root)
    report = report or SkipReport(error=BearingDataError)
    fmt = detect_format(root, metadata) if fmt == "auto" else fmt
    if fmt not in ("cwru", "paderborn", "folder"):
        raise ValueError(f"format must be auto, cwru, paderborn or folder, got {fmt!r}")
    rows: list[dict[str, Any]] = []
    if metadata is not None:
        meta_path = Path(metadata) if Path(metadata).is_absolute() else root / metadata
        frame = read_metadata(meta_path)
        for row_number, row in enumerate(frame.to_dict("records"), start=2):
            row = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
            row["where"] = f"{meta_path}:{row_number}"
            rows.append(row)
    else:
        pattern = "*.mat"
        rows = [{"path": p.name, "where": str(p)} for p in sorted(root.glob(pattern))]
    if not rows:
        raise not_found(root, fmt)
    recordings = []
    for row in rows:
        path = root / str(row["path"])
        try:
            recordings.append(_read_row(path, row, fmt, channels))
        except BearingDataError as error:
            report.bad(row["where"], str(error))
    known = set(class_names) if class_names is not None else None
    names: set[str] = set()
    kept = []
    for rec in recordings:
        if rec.name in names:
            raise BearingDataError(f"{rec.source}: duplicate recording id {rec.name!r}")
        names.add(rec.name)
        if known is not None and rec.label not in known:
            report.bad(
                rec.source, f"unknown label {rec.label!r} (classes: {sorted(known)}; list it in class_names to keep it)"
            )
        elif not np.isfinite(rec.signal).all():
            bad = np.argwhere(~np.isfinite(rec.signal))[0]
            report.bad(rec.source, f"non-finite value {rec.signal[tuple(bad)]} at channel {bad[0]}, sample {bad[1]}")
        elif rec.signal.shape[1] == 0:
            report.bad(rec.source, "empty signal")
        else:
            kept.append(rec)
    return kept


def _read_row(path: Path, row: dict[str, Any], fmt: str, channels: Sequence[str] | None) -> Recording:
    if not path.exists():
        raise BearingDataError(f"{path}: file not found")
    suffix = path.suffix.lower()
    label = row.get("label")
    rate = row.get("sampling_rate")
    condition = row.get("condition", "")
    rpm = None
    if suffix == ".mat" and (fmt == "paderborn" or (fmt == "folder" and parse_paderborn_name(path.name))):
        info = parse_paderborn_name(path.name) or {}
        signal = read_paderborn(path, channels or ("vibration_1",))
        rate = rate or PADERBORN_RATE
        label = label or info.get("label")
        condition = condition or info.get("condition", "")
    elif suffix == ".mat":
        info = parse_cwru_name(path.name) or {}
        signal, rpm = read_cwru(path, channels or ("DE",))
        rate = rate or info.get("sampling_rate")
        label = label or info.get("label")
        if not condition and "load" in info:
            condition = str(info["load"])
    else:
        signal = read_signal_file(path, channels)
    if label is None:
        raise BearingDataError(f"{path}: no label (not a usual CWRU/Paderborn name; give it in a metadata CSV)")
    if rate is None:
        raise BearingDataError(f"{path}: no sampling rate (give a sampling_rate column in the metadata CSV)")
    if not float(rate) > 0:
        raise BearingDataError(f"{path}: sampling rate must be positive, got {rate}")
    name = str(row.get("recording_id", path.stem))
    return Recording(signal, float(rate), str(label), name, str(condition), rpm, str(path))


# -- simulator ----------------------------------------------------------------------------------


def simulate_recording(
    label: str,
    sampling_rate: int,
    seconds: float,
    load: int,
    rng: np.random.Generator,
    name: str = "sim",
) -> Recording:
    """A drive-end accelerometer recording of a 6205 bearing with the given fault.

    Physics, simplified: the shaft turns at the load's RPM (CWRU speeds, +-0.3%) and adds its
    1x/2x harmonics; a fault (``IR``, ``B``, ``OR`` + size in mils) strikes once per pass at
    BPFI, BSF or BPFO times the shaft frequency, with 1% slip jitter; each strike rings a
    structural resonance (about 3 kHz, 6% damping) with an amplitude proportional to the fault
    size; inner-race strikes are modulated by the shaft turn (the fault moves through the load
    zone) and ball strikes by the cage. White sensor noise on top.
    """
    n = max(1, int(round(seconds * sampling_rate)))
    rpm = CWRU_LOAD_RPM[load] * (1 + rng.normal(0, 0.003))
    shaft = rpm / 60
    t = np.arange(n) / sampling_rate
    phase = rng.uniform(0, 2 * np.pi, 2)
    x = 0.05 * np.sin(2 * np.pi * shaft * t + phase[0]) + 0.02 * np.sin(4 * np.pi * shaft * t + phase[1])
    x += 0.08 * rng.standard_normal(n)
    if label != "normal":
        fault, size = label[:-3], int(label[-3:])
        rate_multiple = {"IR": BPFI, "B": BSF, "OR": BPFO}[fault]
        period = sampling_rate / (rate_multiple * shaft)
        hits = np.arange(int(n / period) + 1) * period + rng.uniform(0, period)
        hits = hits + rng.normal(0, 0.01 * period, len(hits))
        hits = hits[(hits >= 0) & (hits < n)]
        amplitude = 0.25 * size / 7 * rng.lognormal(0, 0.1) * (1 + 0.1 * rng.standard_normal(len(hits)))
        hit_t = hits / sampling_rate
        if fault == "IR":
            amplitude = amplitude * (1 + 0.6 * np.cos(2 * np.pi * shaft * hit_t + phase[0]))
        elif fault == "B":
            amplitude = amplitude * (1 + 0.6 * np.cos(2 * np.pi * FTF * shaft * hit_t))
        impulses = np.zeros(n)
        np.add.at(impulses, hits.astype(np.int64), amplitude)
        resonance, damping = 3000.0 * (1 + rng.normal(0, 0.02)), 0.06
        k = np.arange(int(6 / (damping * 2 * np.pi * resonance) * sampling_rate) + 1) / sampling_rate
        kernel = np.exp(-damping * 2 * np.pi * resonance * k) * np.sin(2 * np.pi * resonance * k)
        x += scipy.signal.oaconvolve(impulses, kernel)[:n]
    return Recording(x[None, :].astype(np.float32), float(sampling_rate), label, name, str(load), rpm, "simulator")


def simulate_recordings(
    per_class: int = 4,
    seed: int = 0,
    seconds: tuple[float, float] = (2.0, 20.0),
    sampling_rates: Sequence[int] = (12000, 48000),
    class_names: Sequence[str] = CWRU_CLASSES,
) -> list[Recording]:
    """``per_class`` simulated recordings per CWRU class, deterministic in ``seed``.

    Durations are log-normal (median 5 s, long right tail) clipped to ``seconds``; rates drawn
    from ``sampling_rates``; motor loads 0-3 (the condition). ``class_names`` picks the classes
    simulated (``normal`` or a drive-end fault ``IR|B|OR`` + size in mils, e.g. ``OR021``).

    Raises:
        ValueError: a class the simulator has no physics for.
    """
    unknown = [c for c in class_names if not _SIMULATED_CLASS.match(c)]
    if unknown:
        raise ValueError(
            f"the simulator has no model for classes {unknown}: use 'normal' or IR/B/OR + a 3-digit size in mils"
        )
    rng = np.random.default_rng(seed)
    recordings = []
    for label in class_names:
        for i in range(per_class):
            duration = float(np.clip(rng.lognormal(np.log(5.0), 0.7), *seconds))
            rate = int(rng.choice(sampling_rates))
            load = int(rng.integers(0, 4))
            recordings.append(simulate_recording(label, rate, duration, load, rng, name=f"sim_{label}_{i}"))
    return recordings


# -- resampling and windows ---------------------------------------------------------------------


def resample(signal: np.ndarray, rate: float, target: float) -> np.ndarray:
    """``signal`` ``[C, T]`` from ``rate`` to ``target`` Hz by polyphase filtering (float32).

    Raises:
        ValueError: when the ratio is not rational with a small denominator (e.g. 12000.5 Hz).
    """
    if rate == target:
        return np.ascontiguousarray(signal, dtype=np.float32)
    ratio = math.gcd(int(round(rate)), int(round(target)))
    if abs(rate - round(rate)) > 1e-6 or abs(target - round(target)) > 1e-6:
        raise ValueError(f"cannot resample {rate} Hz to {target} Hz: rates must be whole numbers of Hz")
    up, down = int(round(target)) // ratio, int(round(rate)) // ratio
    out = scipy.signal.resample_poly(signal, up, down, axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32)


def plan_windows(
    segment_lengths: np.ndarray, window: int, stride: int, drop_tail: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows of every segment, vectorised.

    A segment of length ``L`` gets full windows at ``0, stride, ...`` and, unless ``drop_tail``,
    one shorter tail window at the next stride position that covers the rest (so no sample is
    lost); a segment shorter than a window is one tail window.

    Returns:
        ``(segment, offset, length)`` per window: the segment it belongs to, its start within
        the segment, its true length (``< window`` for a tail).
    """
    lengths = np.asarray(segment_lengths, dtype=np.int64)
    full = np.where(lengths >= window, (lengths - window) // stride + 1, 0)
    covered = np.where(full > 0, (full - 1) * stride + window, 0)
    tail_start = full * stride
    tail = (~np.bool_(drop_tail)) & (covered < lengths) & (tail_start < lengths)
    counts = full + tail
    segment = np.repeat(np.arange(len(lengths)), counts)
    first = np.cumsum(counts) - counts
    ordinal = np.arange(int(counts.sum())) - np.repeat(first, counts)
    offset = ordinal * stride
    length = np.where(ordinal < full[segment], window, lengths[segment] - offset)
    return segment, offset, length.astype(np.int64)


class BearingWindows(Dataset):
    """Windows of recordings, served as views into one buffer per recording.

    Memory: the buffers (shared with the other splits) plus five int64 per window (recording,
    start, length, window index, label). A sample's ``signal`` is
    ``buffers[r][:, start:start + length]``: a view, never a copy.

    Args:
        buffers: ``[C, T]`` float32 per recording (all recordings; indexed by ``recording``).
        labels: class index per recording.
        recording: recording index per window.
        starts: start sample per window (in the recording's resampled time line).
        lengths: true length per window (a tail window is shorter).
        window_index: the window's position among its recording's windows in this split.

    Samples: ``index``, ``signal`` ``[C, length]`` float32 view, ``label``, ``recording_id``,
    ``window_index``, ``start``.
    """

    def __init__(
        self,
        buffers: Sequence[np.ndarray],
        labels: np.ndarray,
        recording: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        window_index: np.ndarray,
    ) -> None:
        self.buffers = buffers
        self.recording_labels = np.asarray(labels, dtype=np.int64)
        self.recording = np.asarray(recording, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.window_index = np.asarray(window_index, dtype=np.int64)
        self.labels = self.recording_labels[self.recording]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r, start, length = int(self.recording[i]), int(self.starts[i]), int(self.lengths[i])
        return {
            "index": int(i),
            "signal": self.buffers[r][:, start : start + length],
            "label": int(self.labels[i]),
            "recording_id": r,
            "window_index": int(self.window_index[i]),
            "start": start,
        }

    def nbytes(self) -> int:
        """Bytes this dataset refers to: the buffers of its recordings plus its index arrays.

        An accounting figure, not a measurement: tests check views with ``np.shares_memory``
        and held memory with ``tracemalloc``.
        """
        used = np.unique(self.recording)
        index = self.recording.nbytes + self.starts.nbytes + self.lengths.nbytes + self.window_index.nbytes
        return int(sum(self.buffers[r].nbytes for r in used.tolist()) + index + self.labels.nbytes)
