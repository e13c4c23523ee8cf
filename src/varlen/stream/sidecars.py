"""The files varlen writes beside a LitData dataset's chunks, in one pass from one chunk list.

`varlen optimize` (`varlen.stream.write`) and `varlen index-sizes` (`varlen.stream.index_sizes`)
end here. The chunk list, read once from `index.json`, feeds the draw sidecar's two files first (or an old
sidecar is removed), then the size index: `sizes.arrow`, and last `histograms.arrow`, which records the
checksums of the chunks and of the files written before it. Each file is written once, read back only to be hashed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from varlen.stream.chunks import ChunkList, local_folder
from varlen.stream.draw_index import write_draw_files
from varlen.stream.size_index import checked_sizes, write_size_index

__all__ = ["write_sidecars"]


def write_sidecars(
    dataset_dir: str | Path,
    chunks: ChunkList,
    sizes: np.ndarray,
    axes: Sequence[str],
    *,
    labels: np.ndarray | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
    size_fn: str | None = None,
) -> Path:
    """Write the draw sidecar (`write_draw_table`'s `labels` and `weights`;
    neither: none) and the size index (`write_size_index`'s `sizes`, `axes` and
    `size_fn`) of the LitData dataset in `dataset_dir`, whose `index.json` lists `chunks`; returns the size
    index's folder. Raises their DataErrors, the sizes' before anything is written."""
    dataset_dir = local_folder(dataset_dir)
    sizes = checked_sizes(dataset_dir, sizes, axes, chunks)
    write_draw_files(dataset_dir, sizes, labels, weights or {}, chunks)
    return write_size_index(dataset_dir, sizes, axes, chunks=chunks, size_fn=size_fn)
