"""What a recording is, and how the known layouts (CWRU, Paderborn) name their files, keys and classes.

Labels and operating conditions come from the usual file names (`12k_Drive_End_IR007_0_105.mat`,
`normal_0_97.mat`, `N15_M07_F10_KA01_1.mat`) unless a metadata CSV gives them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CWRU_CHANNELS",
    "CWRU_CLASSES",
    "CWRU_FILES",
    "CWRU_PAGE",
    "CWRU_URL",
    "METADATA_COLUMNS",
    "PADERBORN_CLASSES",
    "PADERBORN_PAGE",
    "PADERBORN_RATE",
    "Recording",
    "parse_cwru_name",
    "parse_paderborn_name",
]

#: The ten classes of the usual CWRU benchmark: normal plus three drive-end fault sites x three
#: sizes (7, 14, 21 mils). Files outside them get labels that are not in this tuple, so they are
#: reported as unknown labels (an error, or a counted skip) unless `class_names` lists them:
#: size-028 faults (`IR028`, `B028`; CWRU has no 028 outer-race files) and every fan-end
#: fault (`FE_IR007` ...: a different bearing, the 6203, whose faults are not the drive-end classes).
CWRU_CLASSES = ("normal", "B007", "B014", "B021", "IR007", "IR014", "IR021", "OR007", "OR014", "OR021")
#: Paderborn bearing codes: K0xx healthy, KAxx outer ring, KIxx inner ring, KBxx both.
PADERBORN_CLASSES = ("healthy", "OR", "IR", "OR+IR")
PADERBORN_RATE = 64000
CWRU_CHANNELS = ("DE", "FE", "BA")
#: The columns of a metadata CSV: `path` and `label` are required.
METADATA_COLUMNS = "path,label[,sampling_rate,recording_id,condition]"

#: Where the CWRU bearing data center serves its files (`{number}.mat`).
CWRU_URL = "https://engineering.case.edu/sites/default/files/{number}.mat"
#: The CWRU page that lists every file, for fetching by hand.
CWRU_PAGE = "https://engineering.case.edu/bearingdatacenter/download-data-file"
PADERBORN_PAGE = "https://mb.uni-paderborn.de/kat/datacenter"
#: The standard 10-class 0 HP set: local file name -> MD5 of the file served at `CWRU_URL`.
#: Computed from the files in `../shared/data/bearing` (they match the MD5 list published with
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

_CWRU_NAME = re.compile(
    r"^(?P<rate>12|48)k_(?P<end>Drive|Fan)_End_(?P<fault>IR|B|OR)(?P<size>\d{3})(?:@(?P<pos>\d+))?"
    r"_(?P<load>\d)_(?P<number>\d+)$",
    re.IGNORECASE,
)
_CWRU_NORMAL = re.compile(r"^normal_(?P<load>\d)_(?P<number>\d+)$", re.IGNORECASE)
_PADERBORN_NAME = re.compile(r"^(?P<condition>N\d\d_M\d\d_F\d\d)_(?P<bearing>K[0ABI]\d\d)_(?P<measurement>\d+)$")


@dataclass
class Recording:
    """One vibration recording.

    Attributes:
        signal: `[channels, samples]` float32, C-contiguous (the buffer windows are views of).
        sampling_rate: samples per second.
        label: class name.
        name: recording id (unique; the file stem by default).
        condition: operating condition (CWRU: the motor load `"0"`-`"3"`; Paderborn:
            `"N15_M07_F10"`), for condition splits.
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

    @property
    def where(self) -> str:
        """What names this recording in messages: its file, else its id."""
        return self.source if self.source not in ("", "simulator") else f"simulated recording {self.name}"


def parse_cwru_name(name: str) -> dict[str, Any] | None:
    """Label and conditions from a usual CWRU file name, or None if it is not one.

    `12k_Drive_End_OR007@6_0_130.mat` -> label `OR007`, load `0`, 12 kHz, number 130,
    position 6 (o'clock). `normal_0_97.mat` -> `normal` at 48 kHz (the CWRU baseline rate).
    Fan-end faults get an `FE_` prefix (`12k_Fan_End_IR007_0_278.mat` -> `FE_IR007`) because
    they sit in the other bearing; with size-028 faults they fall outside `CWRU_CLASSES`.
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
