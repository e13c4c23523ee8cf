"""The files varlen writes beside a LitData dataset's chunks, in one pass from one chunk list.

``varlen optimize`` (:mod:`varlen.stream.write`) and ``varlen index-sizes`` (:mod:`varlen.stream.index_sizes`)
both end here, once every item's sizes (and class and weights) are known. The chunk list, read once from
``index.json``, feeds each writer in turn: the draw sidecar first (:func:`~varlen.stream.draw_index.write_draw_files`:
``draw.arrow`` and ``draw_totals.arrow``, or an old sidecar removed), then the size index
(:func:`~varlen.stream.size_index.write_size_index`): ``sizes.arrow``, and last ``histograms.arrow``, which records
the checksums of the chunks, of ``sizes.arrow`` and of the sidecar written before it. Each file is written once and
read back only to be hashed.
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
    """Write the size index and the draw sidecar of the LitData dataset in ``dataset_dir``, whose ``index.json``
    lists ``chunks``; returns the size index's folder.

    Args:
        sizes, axes, size_fn: :func:`~varlen.stream.size_index.write_size_index`'s.
        labels, weights: :func:`~varlen.stream.draw_index.write_draw_table`'s (neither: no sidecar).

    Raises:
        DataError: the sizes, labels or weights are not what the size index or the sidecar hold (naming the item).
    """
    dataset_dir = local_folder(dataset_dir)
    sizes = checked_sizes(dataset_dir, sizes, axes, chunks)  # before anything is written
    write_draw_files(dataset_dir, sizes, labels, weights or {}, chunks)
    return write_size_index(dataset_dir, sizes, axes, chunks=chunks, size_fn=size_fn)
