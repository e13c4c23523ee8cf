"""Each split's windows, and the train statistics, as small Arrow tables that every process maps.

A split's windows are a pure, vectorised function of the recordings' lengths and the split
settings, but they are one row per window: O(corpus). Every rank computes them in `setup` (the
report's counts of unused signal come from there), `mapped_windows` writes them once to the
cache folder under a key of their own content (a file that is there is not written again) and
returns the mapped file, so a dataset pickled to a loader worker carries its path, not its rows.

The train statistics (mean and std per channel) need a pass over the train signal:
`mapped_statistics` keys them by the recordings and the train windows and computes them once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from varlen.datasets.bearing.windows import WindowTable
from varlen.storage.cache import array_hash, cache_key
from varlen.storage.tables import MappedTable, open_table, write_table

__all__ = ["VERSION", "WINDOW_COLUMNS", "mapped_statistics", "mapped_windows"]

#: the format of the windows and statistics tables; a file of another version is written again
VERSION = "bearing-windows-1"
#: the per-window columns, in `WindowTable`'s order
WINDOW_COLUMNS = ("recording", "start", "length", "window_index")


def _mapped(path: Path, columns: dict[str, np.ndarray], key: str) -> MappedTable:
    table = open_table(path, version=VERSION, key=key)
    return table if table is not None else MappedTable(write_table(path, columns, version=VERSION, key=key))


def mapped_windows(folder: str | Path, windows: WindowTable, bounds: np.ndarray | None = None) -> MappedTable:
    """`windows` (and the `[N, 2]` span each may move within, when given) as a mapped table.

    Its columns: `WINDOW_COLUMNS` (int64) and `bounds`; the file is named by their content.
    """
    columns = {name: np.asarray(values, np.int64) for name, values in zip(WINDOW_COLUMNS, windows, strict=True)}
    if bounds is not None:
        columns["bounds"] = np.asarray(bounds, np.int64).reshape(-1, 2)
    key = cache_key(list(columns), array_hash(*columns.values()), version=VERSION)
    return _mapped(Path(folder) / f"windows-{key}.arrow", columns, key)


def mapped_statistics(
    folder: str | Path,
    recordings_key: str,
    train: MappedTable,
    compute: Callable[[], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """The train statistics `(mean, std)` per channel, as float32: read from the cache folder, or
    `compute()`-d (float64) and written there once.

    Args:
        folder: the cache folder.
        recordings_key: the key of the recordings table they are computed over.
        train: the mapped train windows (`mapped_windows`), whose key names them.
        compute: what computes them (e.g. `train_statistics`).
    """
    key = cache_key("statistics", recordings_key, train.key, version=VERSION)
    path = Path(folder) / f"statistics-{key}.arrow"
    table = open_table(path, version=VERSION, key=key)
    if table is None:
        mean, std = compute()
        table = MappedTable(write_table(path, {"mean": mean, "std": std}, version=VERSION, key=key))
    return tuple(np.array(table.numpy(name), dtype=np.float32) for name in ("mean", "std"))
