"""MoleculeNet-style CSV tables: presets, downloads, and reading with errors that name the file and line.

A table is a CSV with one SMILES column and one or more numeric target columns (ESOL, FreeSolv,
Lipophilicity, QM9 subsets, HIV, BBBP...). Everything wrong with the *table* (missing file,
undecodable bytes, no header, no rows, a missing column, a target that is not a finite number, a
classification target that is not 0/1) raises a `DataError` naming the file
and line, under either `on_bad` policy: such a table is broken, not one bad molecule. Molecules
RDKit cannot use are the items `on_bad="skip"` leaves out (see `.graphs`). A table may be
compressed (`HIV.csv.gz`, `.bz2`, `.xz`, `.zst`: `varlen.datasets.files`); lines are then
counted in the decompressed text.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from varlen.datasets.download import download_url
from varlen.datasets.files import read_text
from varlen.errors import DataError, DatasetNotFoundError, DownloadError
from varlen.storage.cache import default_cache_dir

__all__ = [
    "DEEPCHEM_URL",
    "MISSING_VALUES",
    "MOLECULENET",
    "TASKS",
    "MoleculeNetSpec",
    "MoleculeTable",
    "moleculenet_file",
    "packaged_esol",
    "read_table",
    "table_path",
]

DEEPCHEM_URL = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/"
TASKS = ("regression", "classification")
#: strings read as a missing target (besides the empty string)
MISSING_VALUES = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "None", "null"})


@dataclass(frozen=True)
class MoleculeNetSpec:
    """Where a MoleculeNet table lives and how to read it.

    Attributes:
        filename: file name on the DeepChem bucket (and in `root`).
        smiles_column: the SMILES column.
        target_columns: the target columns (several = multi-task).
        task: `"regression"` or `"classification"`.
        checksum: `"sha256:<hex>"` or `"md5:<hex>"` of the file, or None (not verified).
        checksum_source: where the checksum comes from (it is shown when verification fails).
        split: the split the DataModule uses when none is given: `"scaffold_balanced"` for the
            classification presets (a deterministic scaffold split of BBBP leaves one class only
            in val and test), `"random"` for the others.
    """

    filename: str
    smiles_column: str
    target_columns: tuple[str, ...]
    task: str
    checksum: str | None
    checksum_source: str = ""
    split: str = "random"

    @property
    def url(self) -> str:
        return DEEPCHEM_URL + self.filename


#: the tables `download=True` knows. ESOL and FreeSolv checksums were computed from the copies
#: in the project's shared data folder (no network here to re-check the bucket); Lipophilicity,
#: HIV and BBBP use the md5 sums that TorchDrug publishes for the same DeepChem files.
MOLECULENET: dict[str, MoleculeNetSpec] = {
    "esol": MoleculeNetSpec(
        "delaney-processed.csv",
        "smiles",
        ("measured log solubility in mols per litre",),
        "regression",
        "sha256:e91dc7027cbaeec3872a45b2522c46676e483c123b1c97172839d858a2f26d9c",
        "local copy of delaney-processed.csv",
    ),
    "freesolv": MoleculeNetSpec(
        "SAMPL.csv",
        "smiles",
        ("expt",),
        "regression",
        "sha256:a82c5da54d7615f02d77d327a602e152fb3ed604fc093c49fb806bff2fd2149d",
        "local copy of SAMPL.csv",
    ),
    "lipo": MoleculeNetSpec(
        "Lipophilicity.csv", "smiles", ("exp",), "regression", "md5:85a0e1cb8b38b0dfc3f96ff47a57f0ab", "TorchDrug"
    ),
    "hiv": MoleculeNetSpec(
        "HIV.csv",
        "smiles",
        ("HIV_active",),
        "classification",
        "md5:9ad10c88f82f1dac7eb5c52b668c30a7",
        "TorchDrug",
        split="scaffold_balanced",
    ),
    "bbbp": MoleculeNetSpec(
        "BBBP.csv",
        "smiles",
        ("p_np",),
        "classification",
        "md5:66286cb9e6b148bd75d80c870df580fb",
        "TorchDrug",
        split="scaffold_balanced",
    ),
    "qm9": MoleculeNetSpec(
        "qm9.csv",
        "smiles",
        ("mu", "alpha", "homo", "lumo", "gap", "r2", "zpve", "cv", "u0", "u298", "h298", "g298"),
        "regression",
        None,
    ),
}


def packaged_esol() -> Path:
    """Path of the ESOL table shipped inside the package (Delaney 2004, via MoleculeNet)."""
    return Path(str(resources.files("varlen.datasets") / "data" / "esol.csv"))


def _spec(name: str) -> MoleculeNetSpec:
    if name not in MOLECULENET:
        raise ValueError(f"unknown MoleculeNet table {name!r}; known: {sorted(MOLECULENET)}")
    return MOLECULENET[name]


def moleculenet_file(name: str, root: str | Path, download: bool = False) -> Path:
    """The local file of MoleculeNet table `name` under `root`, downloaded (and verified) if asked.

    Raises:
        DatasetNotFoundError: the file is absent and `download` is False.
        DownloadError: the download failed or does not match the preset's checksum.
    """
    spec = _spec(name)
    path = Path(root).expanduser() / spec.filename
    if path.is_file():
        return path
    if not download:
        raise DatasetNotFoundError(
            f"MoleculeNet table {name!r} ({spec.filename})",
            path,
            f"pass download=True, or download {spec.url} into {path.parent}, or give path= to your own copy",
        )
    try:
        return download_url(spec.url, path, spec.checksum)
    except DownloadError as error:
        if spec.checksum_source and "expected" in error.reason:
            raise DownloadError(
                error.url, error.destination, f"{error.reason} (checksum from {spec.checksum_source})"
            ) from error
        raise


def table_path(
    dataset: str | None,
    path: str | Path | None = None,
    root: str | Path | None = None,
    download: bool = False,
    cache_dir: str | Path | None = None,
) -> Path:
    """The CSV to read: `path`, else the packaged ESOL, else preset `dataset`'s file under `root`.

    `root` defaults to `<cache_dir>/molecules/raw`. A `path` that does not exist raises
    `DatasetNotFoundError` with the preset's URL when a preset is named.
    """
    if path is not None:
        path = Path(path).expanduser()
        if path.is_file():
            return path
        if dataset is None:
            fetch = "give path= a CSV file with a SMILES column, or name a preset (dataset=...) with download=True"
            raise DatasetNotFoundError(f"molecule table {path.name}", path, fetch)
        spec = _spec(dataset)
        fetch = f"download {spec.url} to {path}, or pass path=None with download=True"
        raise DatasetNotFoundError(f"MoleculeNet table {dataset!r} ({path.name})", path, fetch)
    if dataset is None:
        raise ValueError("give path= (a CSV file) or dataset= (a MoleculeNet preset)")
    if dataset == "esol" and not download and root is None:
        return packaged_esol()
    if root is None:
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        root = root / "molecules" / "raw"
    return moleculenet_file(dataset, root, download=download)


# -- reading tables -------------------------------------------------------------------------


@dataclass
class MoleculeTable:
    """A MoleculeNet-style table after reading and validation.

    Attributes:
        path: the CSV file.
        smiles: stripped SMILES, one per data row.
        targets: float32 `[N, T]`, NaN where a value is missing.
        rows: the file's line number of each molecule (1 = the header), for errors and the report.
        target_columns: the target column names.
    """

    path: Path
    smiles: list[str]
    targets: np.ndarray
    rows: np.ndarray
    target_columns: tuple[str, ...]


def _frame(path: Path, smiles_column: str, target_columns: Sequence[str]) -> pd.DataFrame:
    """The CSV as strings, header stripped, checked to hold the wanted columns."""
    text = read_text(path)
    expected = f"a CSV header with {smiles_column!r} and {list(target_columns)}"
    if not text.strip():
        raise DataError(f"{path}: the file is empty (expected {expected})")
    try:
        # blank lines are read (then dropped) so that row numbers stay the file's line numbers
        frame = pd.read_csv(
            io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True, skip_blank_lines=False
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise DataError(f"{path}: not a readable CSV ({error})") from error
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in (smiles_column, *target_columns) if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: column(s) {missing} not found; the header has {list(frame.columns)}")
    return frame


def _targets(path: Path, frame: pd.DataFrame, rows: np.ndarray, columns: Sequence[str]) -> np.ndarray:
    """float32 `[N, T]` targets; missing-value strings become NaN, anything else non-finite is refused."""
    targets = np.empty((len(frame), len(columns)), dtype=np.float32)
    for j, column in enumerate(columns):
        text = frame[column].str.strip()
        absent = text.isin(MISSING_VALUES).to_numpy()
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused just below
            values = pd.to_numeric(text.where(~absent), errors="coerce").to_numpy(np.float64).astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(values) & ~absent)  # text, inf, or beyond float32
        if bad.size:
            i = int(bad[0])
            raise DataError(
                f"{path}, line {rows[i]}: target {column!r} is {text.iloc[i]!r}, not a finite number "
                f"({bad.size} such row(s) in this column)"
            )
        targets[:, j] = values
    return targets


def _check_binary(path: Path, targets: np.ndarray, rows: np.ndarray, columns: Sequence[str]) -> None:
    """Classification targets are 0/1 per task (ROC-AUC and the BCE loss assume it)."""
    bad = np.argwhere(~np.isnan(targets) & (targets != 0) & (targets != 1))
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise DataError(
            f"{path}, line {rows[i]}: target {columns[j]!r} is {targets[i, j]:g}; classification targets must be "
            f"0 or 1 ({len(bad)} such value(s))"
        )


def read_table(
    path: str | Path, smiles_column: str, target_columns: Sequence[str], task: str = "regression"
) -> MoleculeTable:
    """Read and check a MoleculeNet-style CSV, plain or compressed (`.gz`, `.bz2`, `.xz`, `.zst`).

    Stray whitespace around SMILES, headers and values is removed (MoleculeNet files have
    trailing spaces and CRLF line ends). Empty cells and `nan`/`NA`-like strings are missing
    targets (masked in the loss); blank lines are skipped but counted, so errors name the line an
    editor shows.

    Raises:
        DatasetNotFoundError: no such file.
        DataError: undecodable bytes, an empty file, a header without rows, a missing column, a
            target that is not a finite number, a classification target other than 0/1.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(f"molecule table {path.name}", path, "give path= an existing CSV file")
    if not target_columns:
        raise DataError(f"{path}: give at least one target column")
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    frame = _frame(path, smiles_column, target_columns)
    rows = np.arange(len(frame), dtype=np.int64) + 2  # line 1 is the header
    blank = (frame.apply(lambda column: column.str.strip()) == "").all(axis=1).to_numpy()
    frame, rows = frame[~blank], rows[~blank]
    if len(frame) == 0:
        raise DataError(f"{path}: the table has a header but no rows")
    targets = _targets(path, frame, rows, target_columns)
    if task == "classification":
        _check_binary(path, targets, rows, target_columns)
    return MoleculeTable(path, frame[smiles_column].str.strip().tolist(), targets, rows, tuple(target_columns))
