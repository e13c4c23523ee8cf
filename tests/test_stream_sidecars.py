"""The files beside a dataset's chunks written in one pass from one chunk list (`varlen.stream.sidecars`): each
written once, `histograms.arrow` last, recording the checksums of the others, which open verified."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import varlen.stream.chunks as chunks_module
import varlen.stream.size_index as size_index
from varlen.errors import DataError
from varlen.stream.chunks import ChunkList
from varlen.stream.draw_index import DRAW, DRAW_TOTALS, DrawTable
from varlen.stream.sidecars import write_sidecars
from varlen.stream.size_index import FOLDER, HISTOGRAMS, SIZES, SizeIndex

NAMES, SAMPLES = ("chunk-0-0.bin", "chunk-0-1.bin"), (3, 2)


def dataset(folder: Path) -> Path:
    """A LitData dataset's `index.json` and two chunk files (bytes nobody decodes here)."""
    listed = [{"filename": name, "chunk_size": n, "chunk_bytes": 10} for name, n in zip(NAMES, SAMPLES, strict=True)]
    (folder / "index.json").write_text(json.dumps({"chunks": listed}))
    for name in NAMES:
        (folder / name).write_bytes(b"x" * 10)
    return folder


def test_each_file_is_written_once_and_the_last_records_the_others(tmp_path, monkeypatch) -> None:
    folder, written, reads = dataset(tmp_path), Counter(), Counter()
    atomic, parse = size_index.atomic_write, chunks_module.parse_index_json

    def counted_write(path, write, **kwargs):
        written[Path(path).name] += 1
        return atomic(path, write, **kwargs)

    def counted_parse(path, where):
        reads[Path(path).name] += 1
        return parse(path, where)

    monkeypatch.setattr(size_index, "atomic_write", counted_write)
    monkeypatch.setattr(chunks_module, "parse_index_json", counted_parse)
    listed = ChunkList.read(folder)
    labels, weights = np.array([0, 1, 0, -1, 1]), {"w": np.array([1.0, 2.0, 0.5, 0.0, 3.0])}
    assert write_sidecars(folder, listed, np.arange(5), ["size"], labels=labels, weights=weights) == folder / FOLDER
    assert written == {SIZES: 1, DRAW: 1, DRAW_TOTALS: 1, HISTOGRAMS: 1} and reads == {"index.json": 1}
    index = SizeIndex(folder)  # histograms.arrow against itself, sizes.arrow against its record
    assert set(index.recorded) == {SIZES, DRAW, DRAW_TOTALS} and index.key == listed.key
    draw = DrawTable(folder, index)  # both files against the record
    assert draw.labels(1).tolist() == [-1, 1] and draw.values(0, "w").tolist() == [1.0, 2.0, 0.5]
    assert index.sizes(0)[:, 0].tolist() == [0, 1, 2] and all(index.chunk_checksum(c) for c in (0, 1))


def test_without_labels_or_weights_an_old_sidecar_is_removed_and_not_recorded(tmp_path) -> None:
    folder = dataset(tmp_path)
    listed = ChunkList.read(folder)
    write_sidecars(folder, listed, np.arange(5), ["size"], weights={"w": np.ones(5)})
    write_sidecars(folder, listed, np.arange(5), ["size"])
    assert not (folder / FOLDER / DRAW).exists() and not (folder / FOLDER / DRAW_TOTALS).exists()
    assert set(SizeIndex(folder).recorded) == {SIZES}


def test_bad_sizes_are_refused_before_anything_is_written(tmp_path) -> None:
    folder = dataset(tmp_path)
    with pytest.raises(DataError, match="lists 5 items in 2 chunks, but 4 sizes were given"):
        write_sidecars(folder, ChunkList.read(folder), np.arange(4), ["size"], labels=np.zeros(4, np.int64))
    assert not (folder / FOLDER).exists()
