"""The stream extra's first step: LitData chunks written from a config (`varlen optimize`), the size index
beside them (per chunk: sizes, histograms over the plan's grid, the chunk list's key), `varlen index-sizes`
for chunks written elsewhere, and the refusals: a changed dataset, a bad size function, an untested litdata.

Tests that write or read chunks need litdata (the `stream` extra) and skip without it; writers start with
`fork` here, where the platform has it (LitData's default, spawn, re-imports varlen in each writer)."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import stream_items

from varlen import _extras
from varlen.batching.plan import GROWTH, SIZE_GRID, geometric_edges
from varlen.errors import DataError
from varlen.stream import ChunkList, SizeIndex, write_size_index
from varlen.stream.size_index import FOLDER

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
STARTS = ["--start-method", START] if START else []
TEXT = ["--config", "configs/text_bert.yaml", "--data.init_args.synthetic_samples=60"]
ESOL = ["--config", "configs/molecules_esol.yaml"]


@pytest.fixture
def litdata():
    return pytest.importorskip("litdata")


def fake_dataset(folder: Path, samples: list[int]) -> Path:
    """A LitData `index.json` listing chunks of `samples` items (no chunk files: the size index reads none)."""
    chunks = [
        {"filename": f"chunk-0-{c}.bin", "chunk_size": n, "chunk_bytes": 100 * n + c} for c, n in enumerate(samples)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.json").write_text(json.dumps({"chunks": chunks, "config": {}}))
    return folder


def varlen(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """The `varlen` console script, in this process."""
    from varlen.cli.dispatch import console

    monkeypatch.setattr(sys, "argv", ["varlen", *argv])
    console()


def datamodule(argv: list[str]):
    from varlen.cli.dispatch import DataOnlyCLI, main

    dm = main(argv, run=False, cli_class=DataOnlyCLI).datamodule
    dm.prepare_data()
    dm.setup("fit")
    return dm


def concatenated(index: SizeIndex) -> np.ndarray:
    return np.concatenate([index.sizes(c) for c in range(index.num_chunks)])


# -- the size index ---------------------------------------------------------------------------------


def test_the_size_index_round_trip(tmp_path: Path) -> None:
    """Sizes per chunk as written (int32 views), histograms over the plan's grid that count each chunk's
    sizes, the axes, and a pickle that maps the same files."""
    rng = np.random.default_rng(0)
    samples = [5, 0, 12, 1, 30]
    sizes = np.column_stack([rng.integers(0, 5000, sum(samples)), rng.integers(1, 40, sum(samples))])
    sizes[0] = [0, 1]
    folder = write_size_index(fake_dataset(tmp_path, samples), sizes, ["tokens", "rows"])
    assert folder == tmp_path / FOLDER

    index = SizeIndex(tmp_path)
    assert index.num_chunks == 5 and index.samples_per_chunk.tolist() == samples
    assert index.axes == ("tokens", "rows") and np.array_equal(index.edges, SIZE_GRID)
    ends = np.cumsum(samples)
    for c, (start, end) in enumerate(zip(ends - samples, ends, strict=True)):
        got = index.sizes(c)
        assert got.dtype == np.int32 and got.shape == (samples[c], 2) and not got.flags.writeable
        assert np.array_equal(got, sizes[start:end])
    for axis, name in enumerate(index.axes):
        table = index.histograms(name)
        assert table.dtype == np.uint16 and table.shape == (5, len(SIZE_GRID))
        assert np.array_equal(table, index.histograms(axis))
        assert table.sum(axis=1).tolist() == samples
        for c in range(5):
            bins = np.searchsorted(SIZE_GRID, index.sizes(c)[:, axis], side="left")
            assert np.array_equal(table[c], np.bincount(bins, minlength=len(SIZE_GRID)))
            # a bin's edge is its sizes rounded up: every size is at most its edge, over the previous edge
            values = index.sizes(c)[:, axis]
            assert np.all(SIZE_GRID[bins] >= values) and np.all(SIZE_GRID[bins[bins > 0] - 1] < values[bins > 0])
    assert table[0, 1] == 1  # the item of sizes [0, 1]: rows of 1 in the bin of edge 1
    copy = pickle.loads(pickle.dumps(index))
    assert np.array_equal(copy.sizes(4), index.sizes(4)) and copy.key == index.key
    index.check()  # the dataset's own index.json
    with pytest.raises(IndexError):
        index.sizes(5)


def test_the_grid_is_the_plans_every_small_size_then_5_percent_steps() -> None:
    assert SIZE_GRID[:22].tolist() == list(range(22)) and SIZE_GRID[-1] >= 2**31 - 1
    assert np.array_equal(SIZE_GRID[1:], geometric_edges(1, 2**31 - 1))  # bucketize's grid, from 1
    ratios = SIZE_GRID[22:] / SIZE_GRID[21:-1]
    assert np.all(ratios <= GROWTH + 1 / SIZE_GRID[21:-1]) and np.all(ratios > 1)
    assert not SIZE_GRID.flags.writeable


def test_a_chunk_of_65536_items_or_more_counts_in_uint32(tmp_path: Path) -> None:
    write_size_index(fake_dataset(tmp_path, [3, 70_000]), np.full(70_003, 7), ["tokens"])
    table = SizeIndex(tmp_path).histograms()
    assert table.dtype == np.uint32 and table[1, 7] == 70_000 and table[0, 7] == 3


def test_sizes_that_do_not_fit_the_chunks_are_refused(tmp_path: Path) -> None:
    fake_dataset(tmp_path, [4, 4])
    with pytest.raises(DataError, match=r"index.json lists 8 items in 2 chunks, but 7 sizes were given"):
        write_size_index(tmp_path, np.ones(7, int), ["tokens"])
    with pytest.raises(DataError, match=r"item 2 has sizes \[2147483648\], over the int32"):
        write_size_index(tmp_path, np.array([1, 1, 2**31, 1, 1, 1, 1, 1]), ["tokens"])
    with pytest.raises(DataError, match=r"lengths of sample 3 is negative"):
        write_size_index(tmp_path, np.array([1, 1, 1, -1, 1, 1, 1, 1]), ["tokens"])
    with pytest.raises(DataError, match=rf"{tmp_path} has no size index .*varlen index-sizes {tmp_path} --size-fn"):
        SizeIndex(tmp_path)
    with pytest.raises(DataError, match=r"s3://bucket/data: give a local folder; .* then copy the whole folder"):
        write_size_index("s3://bucket/data", np.ones(8, int), ["tokens"])


def test_a_size_index_of_two_builds_or_cut_short_is_refused(tmp_path: Path) -> None:
    folder = write_size_index(fake_dataset(tmp_path, [4, 4]), np.arange(8), ["tokens"])
    old_histograms = (folder / "histograms.arrow").read_bytes()
    write_size_index(fake_dataset(tmp_path, [8]), np.arange(8), ["tokens"])
    (folder / "histograms.arrow").write_bytes(old_histograms)
    with pytest.raises(DataError, match=r"sizes.arrow and histograms.arrow were written for different chunk lists; "):
        SizeIndex(tmp_path)
    (folder / "sizes.arrow").write_bytes((folder / "sizes.arrow").read_bytes()[:100])
    with pytest.raises(DataError, match=rf"{folder / 'sizes.arrow'} is unreadable .*rebuild it with varlen index"):
        SizeIndex(tmp_path)


def test_check_names_what_changed_and_how_to_rebuild(tmp_path: Path) -> None:
    """An index.json that lists more chunks (appended to) or other chunks (rewritten) is refused with the
    dataset folder, the difference and the rebuild command."""
    write_size_index(fake_dataset(tmp_path, [4] * 10), np.arange(40), ["tokens"], size_fn="mine.sizes:tokens")
    index = SizeIndex(tmp_path)
    appended = fake_dataset(tmp_path / "appended", [4] * 12)
    with pytest.raises(DataError) as caught:
        index.check(appended / "index.json")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}: the size index does not describe this dataset")
    assert "(index.json lists 12 chunks, the size index 10)" in message
    assert message.endswith(f"varlen index-sizes {tmp_path} --size-fn mine.sizes:tokens --axes tokens")
    rewritten = json.loads((tmp_path / "index.json").read_text())
    rewritten["chunks"][3]["chunk_size"] = 5
    with pytest.raises(DataError, match=r"chunk 3: index.json lists chunk-0-3.bin \(5 samples, 403 bytes\), "):
        index.check(rewritten)
    assert ChunkList.from_index(rewritten, "x").key != index.key


# -- litdata: the version check, varlen optimize, varlen index-sizes ---------------------------------------


def test_check_litdata_refuses_an_untested_version(litdata, monkeypatch: pytest.MonkeyPatch) -> None:
    from varlen.stream.engine import check_litdata

    for version in ("0.3.0", "0.2.75", "1.0"):
        monkeypatch.setattr(litdata, "__version__", version)
        check_litdata.cache_clear()
        with pytest.raises(RuntimeError) as caught:
            check_litdata()
        assert str(caught.value).startswith(
            f"litdata {version} is outside the range varlen's streaming was tested with (>=0.2.76,<0.3): "
        )
        assert "pip install 'litdata>=0.2.76,<0.3'" in str(caught.value)
    monkeypatch.setattr(litdata, "__version__", "0.2.99.dev3")
    check_litdata.cache_clear()
    check_litdata()
    monkeypatch.undo()
    check_litdata.cache_clear()


def test_without_the_extra_streaming_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from varlen.stream.engine import check_litdata

    monkeypatch.setitem(_extras.FEATURES, "stream", ("streaming from LitData chunks", ("no_such_litdata",)))
    check_litdata.cache_clear()
    with pytest.raises(_extras.MissingExtraError) as caught:
        check_litdata()
    assert str(caught.value) == (
        "varlen's streaming from LitData chunks (the stream extra) needs no_such_litdata, which is not installed: "
        "pip install 'varlen[stream]'"
    )
    monkeypatch.undo()
    check_litdata.cache_clear()


def decoded(folder: Path, positions: list[int]) -> list[dict]:
    from litdata import StreamingDataset

    dataset = StreamingDataset(str(folder), shuffle=False)
    return [dataset[p] for p in positions]


def test_varlen_optimize_writes_the_text_training_split(litdata, tmp_path, monkeypatch, capsys) -> None:
    """Chunks of every training sample in order, the size index equal to the DataModule's sampler_lengths, and
    decoded items that are the samples and collate as they do."""
    out = tmp_path / "text"
    options = ["--chunk-bytes", "3000", "--num-workers", "2", *STARTS]
    varlen(monkeypatch, "optimize", *TEXT, "--output", str(out), *options)
    dm = datamodule(TEXT)
    train = dm.dataset("train")
    printed = capsys.readouterr().out
    index = SizeIndex(out)
    assert index.num_chunks > 2 and index.axes == ("tokens",)
    assert {name.split("-")[1] for name in index.chunks.names} == {"0", "1"}  # two writers, in sample order
    assert f"wrote {len(train)} samples in {index.num_chunks} LitData chunks" in printed
    assert f"{out / FOLDER}" in printed
    assert np.array_equal(concatenated(index)[:, 0], dm.sampler_lengths(train))
    index.check()
    positions = [0, int(index.samples_per_chunk[0]), len(train) // 2, len(train) - 1]
    items = decoded(out, positions)
    for position, item in zip(positions, items, strict=True):
        assert item["index"] == position and item["label"] == train[position]["label"]
        assert np.array_equal(item["input_ids"], train[position]["input_ids"])
    batch = dm.collate_fn(items)
    assert batch["index"].tolist() == positions
    assert np.array_equal(batch["input_ids"].numpy(), dm.collate_fn([train[p] for p in positions])["input_ids"].numpy())


def test_varlen_optimize_writes_molecules(litdata, tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "esol"
    varlen(monkeypatch, "optimize", *ESOL, "--output", str(out), "--chunk-bytes", "200000", *STARTS)
    dm = datamodule(ESOL)
    train = dm.dataset("train")
    index = SizeIndex(out)
    assert index.num_chunks > 1 and index.samples_per_chunk.sum() == len(train)
    assert np.array_equal(concatenated(index)[:, 0], dm.sampler_lengths(train))
    assert index.histograms().sum() == len(train)
    positions = [3, int(index.samples_per_chunk[0]), len(train) - 1]
    items = decoded(out, positions)
    for position, item in zip(positions, items, strict=True):
        assert item["index"] == position
        for key in ("x", "edge_index", "edge_attr", "y"):
            assert np.array_equal(item[key], train[position][key]), key
    graphs = dm.collate_fn(items)
    assert graphs.num_graphs == 3 and graphs.x.shape[0] == sum(len(item["x"]) for item in items)
    # a second write into the same folder is refused (exit 2, as fit on bad data)
    with pytest.raises(SystemExit) as exit:
        varlen(monkeypatch, "optimize", *ESOL, "--output", str(out), *STARTS)
    assert exit.value.code == 2
    assert f"varlen: error: {out} already holds a LitData dataset (index.json)" in capsys.readouterr().err


@pytest.fixture
def plain_dataset(litdata, tmp_path: Path) -> Path:
    """50 items written by plain `litdata.optimize` (7 chunks of 8 and one of 2)."""

    out = tmp_path / "plain"
    litdata.optimize(stream_items.make_item, list(range(50)), str(out), chunk_size=8, num_workers=1, start_method=START)
    return out


def test_index_sizes_of_a_plain_litdata_dataset(plain_dataset: Path, monkeypatch, capsys) -> None:

    size_fn = ["--size-fn", "stream_items:item_sizes", "--axes", "tokens,rows"]
    varlen(monkeypatch, "index-sizes", str(plain_dataset), *size_fn)
    assert f"size index written: {plain_dataset / FOLDER}" in capsys.readouterr().out
    index = SizeIndex(plain_dataset)
    assert index.samples_per_chunk.tolist() == [8] * 6 + [2] and index.axes == ("tokens", "rows")
    wanted = np.array([stream_items.item_sizes(stream_items.make_item(i)) for i in range(50)])
    assert np.array_equal(concatenated(index), wanted)
    assert np.array_equal(index.sizes(2), wanted[16:24])
    index.check()
    assert index.size_fn == "stream_items:item_sizes"


def test_a_bad_size_function_names_the_chunk_and_the_item(plain_dataset: Path, monkeypatch, capsys) -> None:
    from varlen.stream.index_sizes import index_sizes

    where = rf"{plain_dataset}: chunk 1 \(chunk-0-1.bin\), item 5 \(item 13 of all\): the size function"
    with pytest.raises(DataError, match=where + r" .*failing_size.* failed: KeyError\('no such field'\)"):
        index_sizes(plain_dataset, stream_items.failing_size)
    with pytest.raises(DataError, match=where + r" gave -1, not a whole number from 0 to 2147483647"):
        index_sizes(plain_dataset, stream_items.negative_size)
    with pytest.raises(DataError, match=r"item 1 \(item 1 of all\): the size function gave \(3, 2\), not a whole"):
        index_sizes(plain_dataset, lambda item: (3, 2) if item["index"] == 1 else 3)
    assert not (plain_dataset / FOLDER).exists()  # nothing written
    # the CLI: exit 2 with the message (as fit on bad data); a size function that is not there is a usage error
    with pytest.raises(SystemExit) as exit:
        varlen(monkeypatch, "index-sizes", str(plain_dataset), "--size-fn", "stream_items:negative_size")
    assert exit.value.code == 2
    assert "varlen: error: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        varlen(monkeypatch, "index-sizes", str(plain_dataset), "--size-fn", "stream_items:nothing")
    assert exit.value.code == 2 and "--size-fn 'stream_items:nothing'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        varlen(monkeypatch, "index-sizes", str(plain_dataset.parent), "--size-fn", "stream_items:item_sizes")
    assert exit.value.code == 2
    assert f"varlen: error: {plain_dataset.parent} has no index.json: not a LitData dataset" in capsys.readouterr().err


def test_an_appended_dataset_is_refused(plain_dataset: Path, litdata) -> None:
    """The dataset grows by litdata.optimize(mode="append") after its index was written: check refuses it."""
    from varlen.stream.index_sizes import index_sizes

    index_sizes(plain_dataset, stream_items.item_sizes, name="stream_items:item_sizes")
    litdata.optimize(
        stream_items.make_item,
        list(range(50, 60)),
        str(plain_dataset),
        chunk_size=8,
        num_workers=1,
        start_method=START,
        mode="append",
        verbose=False,
    )
    with pytest.raises(DataError) as caught:
        SizeIndex(plain_dataset).check()
    assert "(index.json lists 9 chunks, the size index 7)" in str(caught.value)
    assert str(caught.value).endswith(
        f"varlen index-sizes {plain_dataset} --size-fn stream_items:item_sizes --axes size0,size1"
    )


def test_chunks_out_of_sample_order_are_refused(litdata, tmp_path: Path) -> None:
    """write_split relies on LitData writing the samples in order: a dataset whose item 0 is another sample
    is refused before any size index is written."""
    from varlen.stream.write import check_order

    out = tmp_path / "reversed"
    reverse = list(range(49, -1, -1))
    litdata.optimize(stream_items.make_item, reverse, str(out), chunk_size=8, num_workers=1, start_method=START)
    with pytest.raises(DataError, match=rf"{out}: item 0 of the written chunks is sample 49: this LitData \("):
        check_order(out, 50)
