"""Readers of the bearing file layouts, each returning `[channels, samples]` float32 or a clear error.

- CWRU `.mat` files: keys `X<NNN>_DE_time` / `_FE_time` / `_BA_time` and `X<NNN>RPM`,
  found by pattern because real files disagree with their names (some hold another number's
  keys, some lack the RPM or a channel).
- Paderborn `.mat` structs: the `Y` struct array of channels, of which `vibration_1`
  (64 kHz) is the usual one.
- Generic `.npy` / `.csv` signals, listed by a metadata CSV.

Every failure is a `DataError` whose message starts with the file; no
scipy, numpy or pandas error reaches the user. `download_cwru` fetches the standard files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.io

from varlen.datasets.bearing.formats import (
    CWRU_FILES,
    CWRU_URL,
    METADATA_COLUMNS,
    parse_cwru_name,
    parse_paderborn_name,
)
from varlen.datasets.download import download_url
from varlen.errors import DataError

__all__ = [
    "default_channels",
    "download_cwru",
    "read_cwru",
    "read_metadata",
    "read_paderborn",
    "read_signal_file",
]

_CWRU_KEY = re.compile(r"^X(?P<number>\d+)_(?P<channel>DE|FE|BA)_time$")
_CWRU_RPM = re.compile(r"^X(?P<number>\d+)RPM$")
SIGNAL_SUFFIXES = (".npy", ".csv", ".mat")


def _loadmat(path: Path, **kwargs: Any) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return scipy.io.loadmat(path, **kwargs)
    except Exception as error:  # scipy raises ValueError, TypeError, OSError... on broken files
        raise DataError(f"{path}: not a readable .mat file ({type(error).__name__}: {error})") from error


def _stack(path: Path, arrays: dict[str, Any]) -> np.ndarray:
    """Equal-length channels as one `[C, T]` float32 array."""
    lengths = {c: int(np.size(a)) for c, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise DataError(f"{path}: channels have different lengths {lengths}")
    try:
        return np.stack([np.ravel(np.asarray(a, dtype=np.float64)) for a in arrays.values()]).astype(np.float32)
    except (TypeError, ValueError) as error:
        raise DataError(f"{path}: channels are not numeric ({error})") from error


def read_cwru(path: str | Path, channels: Sequence[str] = ("DE",)) -> tuple[np.ndarray, float | None]:
    """The requested channels of a CWRU `.mat` file as `[C, T]` float32, and its RPM.

    Keys are matched by pattern. When a file holds several numbers' keys, the number in its name
    wins; a file that holds keys of one other number (a known CWRU quirk) is read as is.

    Raises:
        DataError: unreadable file, no signal keys, or a requested channel absent.
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
        raise DataError(f"{path}: no X<NNN>_<DE|FE|BA>_time keys (keys: {keys})")
    number = (parse_cwru_name(path.name) or {}).get("number")
    if number not in found:
        if len(found) > 1:
            raise DataError(f"{path}: keys of several recordings {sorted(found)} and none is number {number}")
        number = next(iter(found))
    present = found[number]
    missing = [c for c in channels if c not in present]
    if missing:
        raise DataError(f"{path}: channel(s) {missing} absent; the file has {sorted(present)}")
    signal = _stack(path, {c: present[c] for c in channels})
    rpm = rpms.get(number, next(iter(rpms.values())) if len(rpms) == 1 else None)
    return signal, rpm


def read_paderborn(path: str | Path, channels: Sequence[str] = ("vibration_1",)) -> np.ndarray:
    """The requested channels of a Paderborn `.mat` struct (field `Y`) as `[C, T]` float32.

    Raises:
        DataError: unreadable file, no struct with a `Y` field, or a channel absent.
    """
    path = Path(path)
    data = _loadmat(path, simplify_cells=True)
    structs = [v for k, v in data.items() if not k.startswith("__") and isinstance(v, dict) and "Y" in v]
    if len(structs) != 1:
        raise DataError(f"{path}: expected one struct with a 'Y' field, found {len(structs)}")
    entries = structs[0]["Y"]
    entries = [entries] if isinstance(entries, dict) else list(entries)
    by_name = {str(e.get("Name")): e.get("Data") for e in entries if isinstance(e, dict)}
    missing = [c for c in channels if c not in by_name]
    if missing:
        raise DataError(f"{path}: channel(s) {missing} absent; Y holds {sorted(by_name)}")
    return _stack(path, {c: by_name[c] for c in channels})


def _read_npy(path: Path, channels: Sequence[str] | None) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as error:  # ValueError, OSError, EOFError... on broken files
        raise DataError(f"{path}: not a readable .npy file ({type(error).__name__}: {error})") from error
    array = array[:, None] if array.ndim == 1 else array
    if array.ndim != 2:
        raise DataError(f"{path}: expected [T] or [T, C], got shape {array.shape}")
    if channels is not None:
        picks = [int(c) for c in channels]
        if max(picks, default=-1) >= array.shape[1]:
            raise DataError(f"{path}: channel(s) {picks} requested, file has {array.shape[1]} columns")
        array = array[:, picks]
    try:
        return np.ascontiguousarray(array.T, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise DataError(f"{path}: values of dtype {array.dtype} are not numeric ({error})") from error


def _read_csv(path: Path, channels: Sequence[str] | None) -> np.ndarray:
    try:
        frame = pd.read_csv(path)
    except Exception as error:  # EmptyDataError, ParserError, UnicodeDecodeError...
        raise DataError(f"{path}: not a readable CSV ({type(error).__name__}: {error})") from error
    if channels is not None and all(str(c).isdigit() for c in channels) and not set(channels) & set(frame.columns):
        if max(int(c) for c in channels) >= frame.shape[1]:
            raise DataError(f"{path}: channel(s) {list(channels)} requested, file has {frame.shape[1]} columns")
        frame = frame.iloc[:, [int(c) for c in channels]]  # column numbers, as for .npy
    elif channels is not None:
        missing = [c for c in channels if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: channel(s) {missing} absent; columns are {list(frame.columns)}")
        frame = frame[list(channels)]
    try:
        return np.ascontiguousarray(frame.to_numpy(dtype=np.float32).T)
    except ValueError as error:
        raise DataError(f"{path}: non-numeric values ({error})") from error


def read_signal_file(path: str | Path, channels: Sequence[str] | None = None) -> np.ndarray:
    """A generic signal file as `[C, T]` float32.

    `.npy`: `[T]` or `[T, C]` (time first, like a CSV); `channels` are column numbers.
    `.csv`: one column per channel with a header row; `channels` are column names (or
    column numbers, so one folder may mix `.npy` and `.csv` files).
    `None`: every channel.

    Raises:
        DataError: a missing, unreadable or unsupported file, or a channel it lacks.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _read_npy(path, channels)
    if suffix == ".csv":
        return _read_csv(path, channels)
    raise DataError(f"{path}: unsupported signal file type {suffix!r} (use {', '.join(SIGNAL_SUFFIXES)})")


def default_channels(path: str | Path) -> list[str]:
    """The channels read from `path` when none are given: what its users usually mean.

    CWRU `.mat`: `DE` (the drive-end accelerometer every benchmark uses); Paderborn `.mat`
    (recognised by its name): `vibration_1`; `.csv` and `.npy`: every column.

    Raises:
        DataError: the file is missing, unreadable or of an unsupported type.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".mat":
        return ["vibration_1"] if parse_paderborn_name(path.name) else ["DE"]
    if suffix not in SIGNAL_SUFFIXES:
        raise DataError(f"{path}: unsupported signal file type {suffix!r} (use {', '.join(SIGNAL_SUFFIXES)})")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        if suffix == ".csv":
            return [str(c) for c in pd.read_csv(path, nrows=0).columns]
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as error:
        raise DataError(f"{path}: not a readable {suffix} file ({type(error).__name__}: {error})") from error
    return [str(c) for c in range(1 if array.ndim == 1 else array.shape[1])]


def read_metadata(path: str | Path) -> pd.DataFrame:
    """The metadata CSV: `path, label` and optional `sampling_rate, recording_id, condition`; its index
    is each row's line in the file less 2 (the header is line 1; blank lines are read, then dropped, so
    that messages name the line an editor shows, as the molecule reader does).

    Raises:
        DataError: an unreadable file, a required column missing, or no rows.
    """
    path = Path(path)
    try:
        types = {"label": str, "recording_id": str, "condition": str}
        frame = pd.read_csv(path, dtype=types, skip_blank_lines=False).dropna(how="all")
    except pd.errors.EmptyDataError as error:
        raise DataError(f"{path}: the metadata CSV is empty (expected columns {METADATA_COLUMNS})") from error
    except Exception as error:  # ParserError, UnicodeDecodeError, OSError...
        raise DataError(f"{path}: not a readable metadata CSV ({type(error).__name__}: {error})") from error
    missing = [c for c in ("path", "label") if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: metadata lacks column(s) {missing}; columns are {list(frame.columns)}")
    if frame.empty:
        raise DataError(f"{path}: the metadata CSV lists no recordings (a header and no rows)")
    return frame


def download_cwru(root: str | Path, files: Sequence[str] | None = None) -> list[Path]:
    """Fetch the standard CWRU files into `root`, each verified against its MD5 checksum.

    Files already present with the right checksum are kept. A download that does not match is
    never left behind as a `.mat` file (see `varlen.datasets.download.download_url`).

    Raises:
        DownloadError: a file could not be fetched or does not match its checksum.
        ValueError: a name that is not one of `CWRU_FILES`.
    """
    root = Path(root)
    names = list(files or CWRU_FILES)
    unknown = [n for n in names if n not in CWRU_FILES]
    if unknown:
        raise ValueError(f"unknown CWRU file(s) {unknown}; known: {sorted(CWRU_FILES)}")
    paths = []
    for name in names:
        number = re.search(r"_(\d+)\.mat$", name)[1]
        paths.append(download_url(CWRU_URL.format(number=number), root / name, f"md5:{CWRU_FILES[name]}"))
    return paths
