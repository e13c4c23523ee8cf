"""Write tiny hyperspectral files in the real formats (seeded). Run from anywhere: `python data.py`.

* `tiny_v5.mat` (cube `tiny_cube` [16, 14, 12] int16) + `tiny_v5_gt.mat` (`tiny_gt` [16, 14]):
  MATLAB v5, as the EHU scenes ship.
* `tiny_v73.mat` / `tiny_v73_gt.mat`: the same arrays as MATLAB v7.3 (HDF5 with a 512-byte
  MATLAB header, arrays stored transposed, as MATLAB writes them).
* `tiny_envi.hdr` + `tiny_envi.img`: ENVI BSQ, wavelengths in micrometers.
* `tiny.npy` / `tiny_gt.npy`.
* `tiny_TR.mat` / `tiny_TS.mat`: external train / test maps (top rows of each parcel / the rest).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
from scipy.io import savemat

HERE = Path(__file__).parent
H, W, B = 16, 14, 12
WAVELENGTHS_NM = np.linspace(450.0, 2400.0, B)


def arrays(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.zeros((H, W), dtype=np.uint8)
    labels[1:7, 1:6] = 1
    labels[1:7, 8:13] = 2
    labels[9:15, 1:6] = 3
    labels[9:15, 8:13] = 1
    curves = np.stack([np.linspace(1000, 3000, B) * (1 + 0.3 * c) for c in range(4)])
    cube = curves[labels] + rng.normal(0, 50, (H, W, B))
    return cube.astype(np.int16), labels


def write_mat73(path: Path, name: str, array: np.ndarray) -> None:
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset(name, data=np.ascontiguousarray(array.T))
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by: varlen tests HDF5 schema 1.00 ."
    with open(path, "r+b") as f:
        f.write(header.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM")


def write_envi(path_hdr: Path, cube: np.ndarray) -> None:
    path_img = path_hdr.with_suffix(".img")
    cube.transpose(2, 0, 1).astype("<i2").tofile(path_img)  # BSQ: band, row, column
    wl = ", ".join(f"{w / 1000:.4f}" for w in WAVELENGTHS_NM)
    path_hdr.write_text(
        "ENVI\ndescription = {varlen tiny test cube}\n"
        f"samples = {W}\nlines = {H}\nbands = {B}\nheader offset = 0\nfile type = ENVI Standard\n"
        "data type = 2\ninterleave = bsq\nbyte order = 0\nwavelength units = Micrometers\n"
        f"wavelength = {{{wl}}}\n"
    )


def main() -> None:
    cube, labels = arrays()
    savemat(HERE / "tiny_v5.mat", {"tiny_cube": cube})
    savemat(HERE / "tiny_v5_gt.mat", {"tiny_gt": labels})
    write_mat73(HERE / "tiny_v73.mat", "tiny_cube", cube)
    write_mat73(HERE / "tiny_v73_gt.mat", "tiny_gt", labels)
    write_envi(HERE / "tiny_envi.hdr", cube)
    np.save(HERE / "tiny.npy", cube)
    np.save(HERE / "tiny_gt.npy", labels)
    train, test = labels.copy(), labels.copy()
    in_train = np.zeros((H, W), dtype=bool)
    in_train[[1, 2, 3, 9, 10]] = True  # the top rows of every parcel train, the rest tests
    train[~in_train] = 0
    test[in_train] = 0
    savemat(HERE / "tiny_TR.mat", {"TRtiny": train})
    savemat(HERE / "tiny_TS.mat", {"TStiny": test})


if __name__ == "__main__":
    main()
