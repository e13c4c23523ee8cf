"""Writes the tiny fake bearing files the tests read, in the real layouts (seeded; run from anywhere).

- `cwru/`: CWRU `.mat` files with the real quirks: the 48 kHz normal baseline without a BA
  channel, a file holding another number's keys (X119 in ..._118.mat), a file without RPM.
- `paderborn/`: Paderborn `.mat` structs (`Y` struct array of named channels, 64 kHz).
- `folder/`: `.npy` and `.csv` signals at 8 and 16 kHz with `metadata.csv`.
"""

from pathlib import Path

import numpy as np
import scipy.io

HERE = Path(__file__).resolve().parent
RNG = np.random.default_rng(0)


def cwru() -> None:
    out = HERE / "cwru"
    out.mkdir(exist_ok=True)

    def signal(n: int) -> np.ndarray:
        return RNG.normal(0, 0.1, (n, 1)).round(4)

    scipy.io.savemat(  # the 48 kHz normal baseline: DE and FE only, like the real normal_0_97.mat
        out / "normal_0_97.mat",
        {"X097_DE_time": signal(2400), "X097_FE_time": signal(2400), "X097RPM": np.array([[1796]], np.uint16)},
    )
    scipy.io.savemat(
        out / "12k_Drive_End_IR007_0_105.mat",
        {
            "X105_DE_time": signal(1300),
            "X105_FE_time": signal(1300),
            "X105_BA_time": signal(1300),
            "X105RPM": np.array([[1797]], np.uint16),
        },
    )
    scipy.io.savemat(  # another number's keys, as some real files have
        out / "12k_Drive_End_B007_0_118.mat",
        {"X119_DE_time": signal(1250), "X119_FE_time": signal(1250), "X119RPM": np.array([[1772]], np.uint16)},
    )
    scipy.io.savemat(  # no RPM key
        out / "12k_Drive_End_OR007@6_1_131.mat", {"X131_DE_time": signal(1400), "X131_FE_time": signal(1400)}
    )


def paderborn() -> None:
    out = HERE / "paderborn"
    out.mkdir(exist_ok=True)
    fields = [("Name", "O"), ("Type", "O"), ("Unit", "O"), ("Raster", "O"), ("Data", "O")]
    for stem, n in [("N15_M07_F10_K001_1", 2600), ("N15_M07_F10_KA01_1", 2400), ("N09_M07_F10_KI01_1", 2500)]:
        y = np.zeros((1, 3), dtype=fields)
        channels = [
            ("force", "Mech_4kHz", 160),
            ("phase_current_1", "HostService", n),
            ("vibration_1", "HostService", n),
        ]
        for i, (name, raster, length) in enumerate(channels):
            y[0, i] = (name, "Unknown", "N" if name == "force" else "A", raster, RNG.normal(0, 1, (1, length)).round(4))
        info = np.zeros((1, 1), dtype=[("Info", "O"), ("X", "O"), ("Y", "O"), ("Description", "O")])
        info[0, 0] = ("measurement", np.zeros((1, 0)), y, stem)
        scipy.io.savemat(out / f"{stem}.mat", {stem: info})


def folder() -> None:
    out = HERE / "folder"
    out.mkdir(exist_ok=True)
    np.save(out / "a.npy", RNG.normal(0, 1, (1200, 2)).astype(np.float32).round(3))
    np.save(out / "b.npy", RNG.normal(0, 1, (2600, 2)).astype(np.float32).round(3))
    c = RNG.normal(0, 1, (1300, 2)).round(3)
    (out / "c.csv").write_text("x,y\n" + "\n".join(f"{u},{v}" for u, v in c))
    (out / "metadata.csv").write_text(
        "path,label,sampling_rate,recording_id,condition\n"
        "a.npy,healthy,8000,rec_a,low\n"
        "b.npy,faulty,16000,rec_b,high\n"
        "c.csv,faulty,8000,rec_c,low\n"
    )


if __name__ == "__main__":
    cwru()
    paderborn()
    folder()
