"""Streamed bytes checked against what the size index recorded when it was written: a chunk changed after
`varlen optimize` (same size), a draw sidecar of other class ids, or with ids, weights it cannot hold, is
refused naming the file and the command that writes it again; each file is hashed once per node; a size
index written before checksums were recorded opens with one warning. Needs litdata (the `stream` extra)."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import stream_items
from faults import flip_bytes

import varlen.storage.checksums as checksums
from varlen.errors import DataError
from varlen.stream import SizeIndex
from varlen.stream.draw_index import DRAW, DRAW_TOTALS, weighted_index, write_draw_table
from varlen.stream.integrity import CHECKSUM, CHUNK_CHECKSUM, FILES
from varlen.stream.size_index import FOLDER, HISTOGRAMS, SIZES, record_files

litdata = pytest.importorskip("litdata")

from varlen.datamodules.streaming import sample_labels  # noqa: E402
from varlen.stream.dataset import StreamedDataset  # noqa: E402
from varlen.stream.index_sizes import index_sizes  # noqa: E402

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
ITEMS = 60


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """60 labelled items in 8 chunks (7 of 8, one of 4), their size index and draw sidecar (classes, `w`)."""
    out = tmp_path_factory.mktemp("integrity") / "plain"
    litdata.optimize(stream_items.labelled_item, list(range(ITEMS)), str(out), chunk_size=8, num_workers=1,
                     start_method=START)  # fmt: skip
    index_sizes(out, stream_items.item_sizes, axes=("tokens", "rows"), label_fn=stream_items.label_of,
                weight_fns={"w": stream_items.weight_of})  # fmt: skip
    return out


@pytest.fixture
def copy(written: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(written, tmp_path / "copy"))


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files this process hashes from now on (none verified in it yet, as in a new process)."""
    made: list[str] = []
    real = checksums.file_checksum
    monkeypatch.setattr(checksums, "file_checksum", lambda path: made.append(Path(path).name) or real(path))
    monkeypatch.setattr(checksums, "_VERIFIED", set())
    return made


def read_all(folder: Path, labels=None) -> list[dict]:
    dataset = StreamedDataset(folder, stream_items.sizes_of, labels)
    return dataset.__getitems__(range(len(dataset)))


def test_the_size_index_records_each_chunk_and_the_files_beside_it(written: Path) -> None:
    index = SizeIndex(written)
    folder = written / FOLDER
    assert index.recorded == {name: checksums.file_checksum(folder / name) for name in (SIZES, DRAW, DRAW_TOTALS)}
    for chunk, name in enumerate(index.chunks.names):
        assert index.chunk_checksum(chunk) == checksums.file_checksum(written / name)
    assert [item["index"] for item in read_all(written, sample_labels)] == list(range(ITEMS))


def test_a_chunk_changed_after_it_was_written_is_refused_naming_it_and_varlen_optimize(copy: Path) -> None:
    """Bytes flipped in a chunk (its size unchanged, so index.json cannot tell) are found before it is decoded."""
    name = SizeIndex(copy).chunks.names[2]
    size = (copy / name).stat().st_size
    flip_bytes(copy / name, count=4)  # token ids: served with changed values before checksums
    assert (copy / name).stat().st_size == size
    dataset = StreamedDataset(copy, stream_items.sizes_of)
    with pytest.raises(DataError) as caught:
        dataset[17]
    message = str(caught.value)
    assert f"chunk 2 ({name}), item 0 (sample 16) could not be read: the chunk is damaged (corrupt: its " in message
    assert "checksum is xxh3_64:" in message and "varlen optimize --config CONFIG --output DIR" in message, message
    assert dataset[15]["index"] == 15 and dataset[24]["index"] == 24  # the other chunks still read


def test_a_sidecar_of_other_class_ids_is_refused_naming_it_and_the_command(copy: Path, tmp_path: Path) -> None:
    """A draw.arrow of the right key (the same chunks) holding another labelling changes who is drawn: the
    size index recorded the one written with it."""
    other = Path(shutil.copytree(copy, tmp_path / "other"))
    index = SizeIndex(other)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)])
    write_draw_table(other, sizes, np.arange(ITEMS) % 2, {"w": np.ones(ITEMS)})
    shutil.copyfile(other / FOLDER / DRAW, copy / FOLDER / DRAW)
    path = copy / FOLDER / DRAW
    with pytest.raises(DataError, match=rf"{re.escape(str(path))} is corrupt: its checksum is xxh3_64:\w+, not the "
                                         r"xxh3_64:\w+ the size index recorded .*: write the chunks again with this "
                                         r"configuration \(varlen optimize --config CONFIG --output DIR\), or, for "
                                         r"chunks written elsewhere, .*varlen index-sizes"):  # fmt: skip
        weighted_index(copy, "balanced")


def rewrite_draw(folder: Path, column: str, chunk: int, item: int, value: float) -> None:
    """`draw.arrow` written again with `column`'s `item` in `chunk` set to `value` (its schema and
    key kept), and recorded in the size index: what a tool that rewrote both would leave."""
    path = folder / FOLDER / DRAW
    reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    values = batches[chunk].column(column).to_numpy().copy()
    values[item] = value
    arrays = list(batches[chunk].columns)
    at = reader.schema.get_field_index(column)
    arrays[at] = pa.array(values, arrays[at].type)
    batches[chunk] = pa.record_batch(arrays, schema=reader.schema)
    scratch = path.with_suffix(".new")
    with pa.OSFile(str(scratch), "wb") as sink, pa.ipc.new_file(sink, reader.schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    scratch.replace(path)
    record_files(folder)


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("class", 3, "'class' is 3, not a class id from -1 to 2"),  # past the classes: an IndexError at a batch
        ("class", -2, "'class' is -2, not a class id from -1 to 2"),  # another class's weight (-2 wraps around)
        ("weight:w", -1.0, "'weight:w' is -1, not finite and >= 0"),
        ("weight:w", np.nan, "'weight:w' is nan, not finite and >= 0"),
        ("weight:w", np.inf, "'weight:w' is inf, not finite and >= 0"),
    ],
)
def test_a_sidecar_holding_what_it_cannot_is_refused_when_it_opens(copy: Path, column, value, said) -> None:
    rewrite_draw(copy, column, 1, 2, value)
    name = SizeIndex(copy).chunks.names[1]
    where = re.escape(f"{copy / FOLDER / DRAW}: chunk 1 ({name}), item 2 (sample 10): its {said}")
    for sample_weights in ("balanced", "w"):  # whichever the draw reads
        with pytest.raises(DataError, match=rf"{where}: write the chunks again .*varlen optimize"):
            weighted_index(copy, sample_weights)


def test_a_decoded_label_that_is_not_its_sidecar_class_is_refused(copy: Path) -> None:
    index = SizeIndex(copy)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)])
    labels = np.array([item["label"] for item in read_all(copy)])
    other = labels.copy()
    other[42] = (labels[42] + 1) % 3
    write_draw_table(copy, sizes, other, {"w": np.ones(ITEMS)})  # its checksums recorded again: they hold
    assert read_all(copy)[42]["index"] == 42  # without sample_labels, nothing compared
    with pytest.raises(DataError) as caught:
        read_all(copy, sample_labels)
    message = str(caught.value)
    assert f"chunk 5 ({index.chunks.names[5]}), item 2 (sample 42): its label is class {labels[42]}" in message
    assert f"its draw sidecar ({copy}/{FOLDER}/{DRAW}) says class {other[42]}" in message
    assert "varlen optimize --config CONFIG --output DIR" in message


def _marks_files(folder: Path) -> bool:
    probe = folder / "probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.varlen.probe", b"1")
    except (AttributeError, OSError):
        return False
    return True


def test_each_file_is_hashed_once_per_node(copy: Path, hashed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first open on a node hashes the size index and each chunk once; the next epoch, another dataset
    of the same process, and another process of the node (a rank, a spawned worker) hash none."""
    chunks = SizeIndex(copy).chunks.names
    read_all(copy, sample_labels)
    assert sorted(hashed) == sorted([SIZES, DRAW_TOTALS, DRAW, *chunks])
    dataset = StreamedDataset(copy, stream_items.sizes_of, sample_labels)
    dataset.cache_bytes = 0  # every chunk decoded again, as in a later epoch
    for _ in range(2):
        dataset.__getitems__(range(ITEMS))
    assert len(hashed) == len(chunks) + 3
    if not _marks_files(copy):
        pytest.skip(f"{copy}'s file system keeps no extended attributes: every process hashes once")
    assert checksums.MARKER in os.listxattr(copy / chunks[0])
    monkeypatch.setattr(checksums, "_VERIFIED", set())  # another process of the node
    read_all(copy, sample_labels)
    assert len(hashed) == len(chunks) + 3
    flip_bytes(copy / chunks[3], count=4)  # written since: hashed again, and refused
    monkeypatch.setattr(checksums, "_VERIFIED", set())
    with pytest.raises(DataError, match=rf"chunk 3 \({chunks[3]}\).* is damaged \(corrupt: its checksum"):
        read_all(copy)
    assert hashed[-1] == chunks[3]


def test_an_index_written_before_checksums_opens_with_one_warning(copy: Path) -> None:
    """An index of an older varlen (no checksums recorded) is read unverified, with a warning once per
    folder that names the command that writes it again; its sidecar's values are still checked."""
    path = copy / FOLDER / HISTOGRAMS
    table = pa.ipc.open_file(pa.memory_map(str(path), "r")).get_batch(0)
    metadata = {k: v for k, v in table.schema.metadata.items() if k not in (CHECKSUM, FILES)}
    table = table.drop_columns([CHUNK_CHECKSUM]).replace_schema_metadata(metadata)
    scratch = path.with_suffix(".new")
    with pa.OSFile(str(scratch), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(table)
    scratch.replace(path)  # not in place: the table read from it is a map of the file
    with pytest.warns(UserWarning, match=r"records no checksums \(written by an older varlen\): its chunks, sizes "
                                         r"and draw sidecar are read unverified\. Write it again to verify them: "
                                         r"varlen optimize .*varlen index-sizes"):  # fmt: skip
        index = SizeIndex(copy)
    assert index.recorded is None and index.chunk_checksum(0) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [item["index"] for item in read_all(copy, sample_labels)] == list(range(ITEMS))
        assert weighted_index(copy, "w").weights(1)[2] == stream_items.weight_of({"index": 10})
    record_files(copy)  # an older index is not given records it cannot vouch for
    assert SizeIndex(copy).recorded is None
    rewrite_draw(copy, "class", 1, 2, 7)
    with pytest.raises(DataError, match=r"item 2 \(sample 10\): its 'class' is 7, not a class id from -1 to 2"):
        weighted_index(copy, "balanced")


def keep_mtime_flip(path: Path, count: int = 1) -> None:
    """Bytes of `path` flipped in place under its old modification time: what a failing disk does, which
    the once-per-node marker (inode, size, mtime) cannot tell from the file it verified."""
    before = path.stat()
    flip_bytes(path, count=count)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


@pytest.fixture
def compressed(tmp_path: Path) -> Path:
    """The 60 items written by `litdata.optimize(compression="zstd")` (its default: each chunk compressed
    inside its file, read in place), with their size index."""
    pytest.importorskip("zstd", reason="LitData's zstd compression needs the zstd package")
    out = tmp_path / "zstd"
    litdata.optimize(stream_items.labelled_item, list(range(ITEMS)), str(out), chunk_size=8, num_workers=1,
                     start_method=START, compression="zstd")  # fmt: skip
    index_sizes(out, stream_items.item_sizes, axes=("tokens", "rows"))
    return out


def test_a_compressed_chunk_changed_after_it_was_written_is_refused_naming_it(compressed: Path, hashed) -> None:
    """A compressed chunk's bytes are checked as an uncompressed one's (its size in index.json, the checksum the
    size index recorded of the file as written) before LitData decodes it: a flipped byte was served as a value."""
    name = SizeIndex(compressed).chunks.names[2]
    keep_mtime_flip(compressed / name)
    dataset = StreamedDataset(compressed, stream_items.sizes_of)
    with pytest.raises(DataError) as caught:
        dataset[17]
    message = str(caught.value)
    assert f"chunk 2 ({name}), item 0 (sample 16) could not be read: the chunk is damaged (corrupt: its " in message
    assert "varlen optimize --config CONFIG --output DIR" in message, message
    assert name in hashed
    assert dataset[15]["index"] == 15 and dataset[24]["index"] == 24  # the other chunks still read


def test_verify_always_finds_a_flip_under_the_same_mtime_after_the_first_check(copy: Path, hashed) -> None:
    """Once verified, a file is not hashed again in the process (nor on the node, where it takes the marker):
    a flip that keeps its inode, size and mtime is served. A stream's `verify: always` hashes each chunk at
    every read from disk, and the size index and sidecar at every open."""
    from varlen.stream.source import StreamSource

    assert [item["index"] for item in read_all(copy)] == list(range(ITEMS))
    name = SizeIndex(copy).chunks.names[3]
    keep_mtime_flip(copy / name, count=4)
    served = StreamedDataset(copy, stream_items.sizes_of)
    assert served[25]["index"] == 25  # the marker's blind spot: what docs/data.md says
    hashed.clear()
    dataset = StreamedDataset(StreamSource(str(copy), verify="always"), stream_items.sizes_of, sample_labels)
    assert SIZES in hashed  # opened again: hashed again
    with pytest.raises(DataError, match=rf"chunk 3 \({name}\), item 0 \(sample 24\) could not be read: the chunk is "
                                         r"damaged \(corrupt: its checksum"):  # fmt: skip
        dataset[25]
    assert dataset[0]["index"] == 0
    dataset._chunks.clear()  # a later epoch reads it from disk again: hashed again
    count = hashed.count(SizeIndex(copy).chunks.names[0])
    assert dataset[0]["index"] == 0 and hashed.count(SizeIndex(copy).chunks.names[0]) == count + 1
    with pytest.raises(ValueError, match=r"stream's verify must be 'once' .* or 'always' .*, got 'sometimes'"):
        StreamSource.parse({"url": str(copy), "verify": "sometimes"}, "test")
    assert StreamSource.parse({"url": str(copy), "verify": "always"}, "test").verify == "always"


def test_chunks_compressed_whole_are_refused_naming_the_way_out(tmp_path: Path) -> None:
    """LitData decompresses a chunk compressed whole (`compression_level="chunk"`) beside itself and removes the
    file as written, so it cannot be checked against what was written: refused before any is read, the folder
    left as it is."""
    pytest.importorskip("zstd", reason="LitData's zstd compression needs the zstd package")
    out = tmp_path / "whole"
    litdata.optimize(stream_items.labelled_item, list(range(ITEMS)), str(out), chunk_size=8, num_workers=1,
                     start_method=START, compression="zstd", compression_level="chunk")  # fmt: skip
    files = sorted(path.name for path in out.iterdir())
    said = r"compressed whole \(compression_level='chunk', zstd\): .* varlen optimize --compression zstd"
    with pytest.raises(DataError, match=rf"{re.escape(str(out))}: its chunks are {said}"):
        index_sizes(out, stream_items.item_sizes, axes=("tokens", "rows"))
    assert sorted(path.name for path in out.iterdir()) == files  # nothing decompressed, nothing removed
    from varlen.stream.size_index import write_size_index

    write_size_index(out, np.ones((ITEMS, 2)), ("tokens", "rows"))
    with pytest.raises(DataError, match=rf"{re.escape(str(out))}: its chunks are {said}"):
        StreamedDataset(out, stream_items.sizes_of)
    assert sorted(path.name for path in out.iterdir()) == [*files, FOLDER]


def test_varlen_optimize_compression_writes_chunks_checked_as_written(tmp_path: Path, capsys) -> None:
    """`varlen optimize --compression zstd`: chunks compressed inside their files, whose checksums the size index
    records as written; they stream as the uncompressed ones, and one changed since is refused."""
    pytest.importorskip("zstd", reason="LitData's zstd compression needs the zstd package")
    import json

    from test_stream_read import optimize

    from varlen.datamodules.sequence import SequenceDataModule

    sequences = ["--config", "configs/sequence.yaml", "--data.init_args.synthetic=100"]
    with pytest.raises(SystemExit) as ended:
        optimize(tmp_path / "gzip", *sequences, "--compression", "gzip")
    assert ended.value.code == 2
    assert (
        "--compression: compression 'gzip': give zstd, or zstd:LEVEL with LEVEL from 1 to 22" in capsys.readouterr().err
    )
    out = optimize(
        tmp_path / "zstd", *sequences, "--chunk-bytes", "2000", "--num-workers", "1", "--compression", "zstd:3"
    )
    assert "LitData chunks (zstd:3)" in capsys.readouterr().out
    config = json.loads((out / "index.json").read_text())["config"]
    assert (config["compression"], config["compression_level"]) == ("zstd:3", "batch")
    index = SizeIndex(out)
    assert index.num_chunks > 2
    assert [index.chunk_checksum(c) for c in range(index.num_chunks)] == [
        checksums.file_checksum(out / name) for name in index.chunks.names
    ]
    dataset = StreamedDataset(out, SequenceDataModule.sample_sizes)
    assert [item["index"] for item in dataset.__getitems__(range(len(dataset)))] == list(range(len(dataset)))
    flip_bytes(out / index.chunks.names[1], count=1)
    dataset = StreamedDataset(out, SequenceDataModule.sample_sizes)
    with pytest.raises(DataError, match=rf"chunk 1 \({index.chunks.names[1]}\), item 0 .* is damaged \(corrupt: its"):
        dataset.__getitems__(range(len(dataset)))
