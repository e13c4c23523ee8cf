"""What a weighted draw needs of a streamed split, written beside its size index (`varlen optimize`,
`varlen index-sizes --label-fn / --weight-fn`) and read as a weighted size index (`weighted_index`)."""

from __future__ import annotations

import csv
import json
import multiprocessing
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import stream_items

from varlen.batching.plan import SIZE_GRID
from varlen.datamodules.weighting import balanced_weights
from varlen.errors import DataError
from varlen.stream import SizeIndex, write_size_index
from varlen.stream.draw_index import DRAW, DRAW_TOTALS, DrawTable, WeightedSizeIndex, weighted_index, write_draw_table
from varlen.stream.size_index import FOLDER, record_files

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


@pytest.fixture(scope="module")
def litdata():
    return pytest.importorskip("litdata")


def reviews(folder: Path, n: int = 150) -> str:
    """`n` texts of varied length, classes a / b / c (one in ten c), weight columns `w` and `v`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "reviews.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["text", "label", "w", "v"])
        writer.writeheader()
        for i in range(n):
            label = "c" if i % 10 == 0 else "ab"[i % 2]
            words = " ".join(["word"] * (3 + (i * 7) % 40))
            writer.writerow({"text": f"review {i}: {words}", "label": label, "w": 0.25 + i % 5, "v": i % 3})
    return str(path)


@pytest.fixture(scope="module")
def written(litdata, tmp_path_factory):
    """A text DataModule drawing by column `w`, its training split written as chunks (with column `v` too)."""
    from varlen.datamodules.text import TextClassificationDataModule
    from varlen.stream.write import write_split

    root = tmp_path_factory.mktemp("draw")
    dm = TextClassificationDataModule(train_file=reviews(root), max_tokens=400, sample_weights="w")
    dm.prepare_data()
    dm.setup("fit")
    out = root / "chunks"
    done = write_split(dm, out, chunk_bytes=3000, num_workers=1, start_method=START, weight_columns=("v",))
    assert done.classes == 3 and done.weight_columns == ("v", "w")
    assert "for weighted draws, per sample: classes (3), weight column 'v', weight column 'w'" in done.lines()
    return dm, out


def cells(index: SizeIndex, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's chunk and size bin on `axis`."""
    chunk_of = np.repeat(np.arange(index.num_chunks), index.samples_per_chunk)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)])[:, axis]
    return chunk_of, np.searchsorted(SIZE_GRID, sizes, side="left")


def test_optimize_writes_each_samples_class_and_weights(written) -> None:
    dm, out = written
    train = dm.dataset("train")
    index, draw = SizeIndex(out), DrawTable(out)
    assert index.num_chunks > 3 and draw.key == index.key and draw.columns == ("v", "w") and draw.classes == 3
    labels = np.concatenate([draw.labels(c) for c in range(index.num_chunks)])
    assert labels.dtype == np.int32 and np.array_equal(labels, dm.class_labels(train))
    w = np.concatenate([draw.values(c, "w") for c in range(index.num_chunks)])
    assert w.dtype == np.float32 and np.allclose(w, dm.train_weights(), rtol=1e-7, atol=0)
    v = np.concatenate([draw.values(c, "v") for c in range(index.num_chunks)])
    assert np.array_equal(v, dm.weight_column(train, "v"))
    # the aggregates are the bincounts of the per-sample values, per chunk and size bin
    chunk_of, bins = cells(index)
    grid = (index.num_chunks, len(SIZE_GRID))
    for c in range(3):
        wanted = np.bincount(chunk_of * grid[1] + bins, labels == c, minlength=np.prod(grid)).reshape(grid)
        assert np.array_equal(draw.class_counts(0)[:, c], wanted)
    assert draw.class_counts(0).dtype == index.histograms(0).dtype
    for column, values in (("w", w), ("v", v)):
        sums = np.bincount(chunk_of * grid[1] + bins, values.astype(np.float64), minlength=np.prod(grid))
        assert np.allclose(draw.weight_sums(column, 0), sums.reshape(grid), rtol=1e-12, atol=0)
    # a few bytes a sample
    assert (out / FOLDER / DRAW).stat().st_size < 2048 * index.num_chunks + 12 * len(
        train
    ) + 4096  # a batch header a chunk


def test_the_weighted_index_draws_as_the_in_memory_datamodule(written) -> None:
    dm, out = written
    train = dm.dataset("train")
    chunk_of, bins = cells(SizeIndex(out))
    for sample_weights, wanted in (
        ("balanced", balanced_weights(dm.class_labels(train), "train")),
        ("w", dm.train_weights()),
    ):
        index = weighted_index(out, sample_weights, "TextClassificationDataModule")
        weights = np.concatenate([index.weights(c) for c in range(index.num_chunks)])
        assert weights.dtype == np.float64 and np.allclose(weights, wanted, rtol=1e-7, atol=0)
        if sample_weights == "balanced":
            assert np.array_equal(weights, wanted)  # the same formula, to the bit
        grid = (index.num_chunks, len(SIZE_GRID))
        sums = np.bincount(chunk_of * grid[1] + bins, weights, minlength=np.prod(grid)).reshape(grid)
        histograms = index.weight_histograms(0)
        assert histograms.shape == grid and histograms.dtype == np.float64
        assert np.allclose(histograms, sums, rtol=1e-12, atol=1e-15)
        assert np.array_equal(index.weight_histograms("tokens"), histograms)
        # the size index's, delegated; pickled as plain values
        plain = SizeIndex(out)
        assert index.key == plain.key and index.axes == plain.axes and np.array_equal(index.edges, plain.edges)
        assert np.array_equal(index.histograms(0), plain.histograms(0)) and index.num_chunks == plain.num_chunks
        assert np.array_equal(index.samples_per_chunk, plain.samples_per_chunk)
        assert np.array_equal(index.sizes(1), plain.sizes(1))
        index.check()
        reduced = index.__reduce__()
        assert reduced[0] is WeightedSizeIndex and all(isinstance(a, str) for a in reduced[1])
        again = pickle.loads(pickle.dumps(index))
        assert np.array_equal(again.weights(2), index.weights(2)) and again.key == index.key
    plain = SizeIndex(out)  # a SizeIndex given, not its folder
    v = np.concatenate([weighted_index(plain, "v").weights(c) for c in range(plain.num_chunks)])
    assert np.array_equal(v, dm.weight_column(train, "v"))


def fake_dataset(folder: Path, samples: list[int]) -> Path:
    """A LitData `index.json` listing chunks of `samples` items (no chunk files: the indexes read none)."""
    chunks = [{"filename": f"chunk-0-{c}.bin", "chunk_size": n, "chunk_bytes": 100 * n} for c, n in enumerate(samples)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.json").write_text(json.dumps({"chunks": chunks, "config": {}}))
    return folder


def test_a_missing_stale_or_lacking_sidecar_is_refused(tmp_path: Path) -> None:
    folder = fake_dataset(tmp_path / "data", [4, 6, 5])
    sizes = np.arange(1, 16).reshape(15, 1) * 3
    write_size_index(folder, sizes, ["tokens"])
    with pytest.raises(DataError, match=r"has no sample classes or weights .*written by an older varlen optimize.*"
                                         r"write the chunks again .*varlen optimize"):  # fmt: skip
        weighted_index(folder, "balanced", "Owner")
    write_draw_table(folder, sizes, None, {"w": np.ones(15)})
    with pytest.raises(
        DataError, match=r"Owner: .*sample_weights='balanced', but its chunks were written without class"
    ):
        weighted_index(folder, "balanced", "Owner")
    with pytest.raises(DataError, match=r"sample_weights='x', but .* without that weight column \(written: 'w'\)"):
        weighted_index(folder, "x", "Owner")
    assert weighted_index(folder, "w").weight_histograms(0).sum() == 15
    # the dataset appended to and its size index rebuilt: the sidecar describes other chunks
    fake_dataset(folder, [4, 6, 5, 2])
    write_size_index(folder, np.arange(1, 18).reshape(17, 1), ["tokens"])
    with pytest.raises(DataError, match=r"written for other chunks than the size index describes .*varlen optimize"):
        weighted_index(folder, "w")
    # nothing to write (no classes, no columns) removes an old sidecar
    write_draw_table(folder, np.arange(1, 18), None, {})
    assert not (folder / FOLDER / DRAW).exists() and not (folder / FOLDER / DRAW_TOTALS).exists()
    write_draw_table(folder, np.arange(1, 18), np.full(17, -1), {})
    with pytest.raises(DataError, match="no sample has a label"):
        weighted_index(folder, "balanced")


def test_bad_weight_values_are_named(tmp_path: Path) -> None:
    folder = fake_dataset(tmp_path / "data", [4, 6, 5])
    sizes = np.arange(1, 16)
    write_size_index(folder, sizes, ["tokens"])
    values = np.ones(15)
    values[7] = -1
    with pytest.raises(DataError, match=r"item 7's weight 'w' is -1, not finite and >= 0"):
        write_draw_table(folder, sizes, None, {"w": values})
    with pytest.raises(DataError, match=r"item 3 has class -2"):
        write_draw_table(folder, sizes, np.array([0, 1, 0, -2] + [0] * 11), {})
    write_draw_table(folder, sizes, None, {"w": np.zeros(15)})
    with pytest.raises(DataError, match=r"'w' is 0 on every training sample"):
        weighted_index(folder, "w")
    # a value damaged in the file (NaN): named by its chunk, item and sample, when the index is made
    values[7] = 12345.5
    write_draw_table(folder, sizes, None, {"w": values})
    path = folder / FOLDER / DRAW
    data = path.read_bytes()
    assert data.count(np.float32(12345.5).tobytes()) == 1
    damaged = tmp_path / "damaged"
    shutil.copytree(folder, damaged)
    (damaged / FOLDER / DRAW).write_bytes(data.replace(np.float32(12345.5).tobytes(), np.float32(-3).tobytes()))
    with pytest.raises(DataError, match=r"draw.arrow is corrupt: its checksum is .* the size index recorded when it "
                                         r"was written: write the chunks again .*varlen optimize"):  # fmt: skip
        weighted_index(damaged, "w")  # the size index recorded the sidecar's checksum when it was written
    record_files(damaged)  # ... a tool that rewrote that record too: the value is still named when the sidecar opens
    with pytest.raises(DataError, match=r"draw.arrow: chunk 1 \(chunk-0-1.bin\), item 3 \(sample 7\): its 'weight:w' "
                                         r"is -3, not finite and >= 0: write the chunks again"):  # fmt: skip
        weighted_index(damaged, "w")
    weights = np.concatenate([weighted_index(folder, "w").weights(c) for c in (0, 1, 2)])
    assert np.array_equal(weights, values.astype(np.float32))


def varlen(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    from varlen.cli.dispatch import console

    monkeypatch.setattr(sys, "argv", ["varlen", *argv])
    console()


def test_index_sizes_writes_classes_and_weights_from_functions(litdata, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "plain"
    litdata.optimize(stream_items.make_item, list(range(50)), str(out), chunk_size=8, num_workers=1, start_method=START)
    varlen(monkeypatch, "index-sizes", str(out), "--size-fn", "stream_items:item_sizes", "--axes", "tokens,rows",
           "--label-fn", "stream_items:label_of", "--weight-fn", "w=stream_items:weight_of")  # fmt: skip
    items = [stream_items.make_item(i) for i in range(50)]
    labels = np.array([-1 if (label := stream_items.label_of(item)) is None else label for item in items])
    index = weighted_index(out, "balanced")
    weights = np.concatenate([index.weights(c) for c in range(index.num_chunks)])
    assert np.array_equal(weights, balanced_weights(labels, "plain"))
    assert np.allclose(
        index.weight_histograms("rows").sum(axis=1), [w.sum() for w in np.split(weights, range(8, 50, 8))]
    )
    column = weighted_index(out, "w")
    wanted = [stream_items.weight_of(item) for item in items]
    assert np.array_equal(np.concatenate([column.weights(c) for c in range(column.num_chunks)]), wanted)
    from varlen.stream.index_sizes import index_sizes

    with pytest.raises(DataError, match=r"chunk 1 \(chunk-0-1.bin\), item 5 \(item 13 of all\): the label function "
                                         r"gave -2, not a class id"):  # fmt: skip
        index_sizes(out, stream_items.item_sizes, label_fn=stream_items.bad_label)
    # rebuilt without label or weight functions: no sidecar, and a weighted draw names the options
    index_sizes(out, stream_items.item_sizes)
    with pytest.raises(DataError, match=r"--label-fn"):
        weighted_index(out, "balanced")


@pytest.mark.parametrize("weights", ["balanced", "v"])
def test_a_streamed_split_is_drawn_by_its_sample_weights(written, weights) -> None:
    """`sample_weights` on a stream: each class (or each weight column value) served in its weight's share,
    as the in-memory DataModule serves it, from the sidecar (the size index's chunks never read to plan)."""
    from varlen.datamodules.text import TextClassificationDataModule

    memory, out = written
    dm = TextClassificationDataModule(
        train_file=memory.train_file, stream=str(out), max_tokens=400, sample_weights=weights
    )
    dm.prepare_data()
    dm.setup("fit")
    served = []
    for epoch in (0, 1, 2):
        loader = dm.train_dataloader()
        loader.batch_sampler.set_epoch(epoch)
        served.append(np.concatenate([batch["index"].numpy() for batch in loader]))
    ids = np.concatenate(served)
    assert all(len(epoch) == len(memory.dataset("train")) for epoch in served)
    labels = memory.class_labels(memory.dataset("train"))  # the memory DataModule's own draw is by column w
    train = memory.dataset("train")
    want = balanced_weights(labels, "train") if weights == "balanced" else memory.weight_column(train, "v")
    for value in (0, 1, 2) if weights == "balanced" else (0.0, 1.0, 2.0):
        chosen = labels == value if weights == "balanced" else want == value
        share = want[chosen].sum() / want.sum()  # 1/3 a class when balanced; 0 for v == 0
        got = np.isin(ids, np.flatnonzero(chosen)).mean()
        assert abs(got - share) <= 2.576 * np.sqrt(share * (1 - share) / len(ids)) + 1e-9, (value, got, share)


def test_sample_weights_on_chunks_without_that_column_are_refused_at_setup(written) -> None:
    from varlen.datamodules.text import TextClassificationDataModule

    memory, out = written
    dm = TextClassificationDataModule(train_file=memory.train_file, stream=str(out), max_tokens=400,
                                      sample_weights="label")  # fmt: skip
    dm.prepare_data()
    with pytest.raises(DataError, match="label"):
        dm.setup("fit")


def test_a_streamed_state_saved_under_other_sample_weights_is_refused(written) -> None:
    """The chunks' size index is the same whatever the weights: the plan's state must still tell the draws apart."""
    from varlen.stream.sampler import StreamMixtureSampler

    _, out = written

    def sampler(weights):
        return StreamMixtureSampler([out], names=["main"], sample_weights=[weights], max_tokens=400)

    saved = sampler("balanced")
    iter(saved).__next__()
    state = saved.state_dict()
    sampler("balanced").load_state_dict(state)  # the same draw: accepted
    for other in (None, "v"):
        with pytest.raises(ValueError, match="plan state was saved with plan"):
            sampler(other).load_state_dict(state)


def test_a_streamed_sample_whose_label_is_not_its_sidecar_class_is_refused(written, tmp_path: Path) -> None:
    """A sidecar of the right key whose classes are another labelling's (written again, so its checksums hold)
    draws other samples: a weighted stream compares each decoded sample's label with it, naming the chunk,
    the sample and the command that writes the sidecar again."""
    from varlen.datamodules.text import TextClassificationDataModule

    memory, out = written
    copy = Path(shutil.copytree(out, tmp_path / "relabelled"))
    index = SizeIndex(copy)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)])
    labels = memory.class_labels(memory.dataset("train"))
    sample = int(index.samples_per_chunk[:2].sum()) + 1
    other = labels.copy()
    other[sample] = (labels[sample] + 1) % 3
    write_draw_table(copy, sizes, other, {"w": memory.train_weights()})
    dm = TextClassificationDataModule(
        train_file=memory.train_file, stream=str(copy), max_tokens=400, sample_weights="balanced"
    )
    dm.prepare_data()
    dm.setup("fit")
    train = dm.dataset("train")
    assert train[0]["index"] == 0  # the other chunks read
    with pytest.raises(DataError) as caught:
        train[sample]
    message = str(caught.value)
    where = f"chunk 2 ({index.chunks.names[2]}), item 1 (sample {sample})"
    assert f"{where}: its label is class {labels[sample]}" in message
    assert f"its draw sidecar ({copy}/{FOLDER}/{DRAW}) says class {other[sample]}" in message, message
    assert "varlen optimize --config CONFIG --output DIR" in message
