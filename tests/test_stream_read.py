"""The stream extra's reading step: a DataModule's training split read from chunks `varlen optimize` wrote
(`stream:`), its items equal to the DataModule's samples, streamed epochs that serve every sample once within
the budget (with and without workers), a Lightning fit that resumes mid-epoch exactly, and the refusals: a
tampered size index, a folder without one. Needs litdata (the `stream` extra): skipped without it."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import shutil
import sys
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest

from varlen.errors import DataError

pytest.importorskip("litdata")

from ddp_stream_fit import Counting  # noqa: E402  (the least model a fit needs)

from varlen.stream import SizeIndex, write_size_index  # noqa: E402
from varlen.stream.dataset import StreamedDataset  # noqa: E402
from varlen.stream.size_index import FOLDER  # noqa: E402

START = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
STARTS = ["--start-method", START] if START else []
SAMPLES, MAX_TOKENS = 120, 400
TEXT = ["--config", "configs/text_bert.yaml", f"--data.init_args.synthetic_samples={SAMPLES}"]
ESOL = ["--config", "configs/molecules_esol.yaml"]


def optimize(out: Path, *argv: str) -> Path:
    """`varlen optimize` (the console script, in this process) into `out`."""
    from varlen.cli.dispatch import console

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["varlen", "optimize", *argv, "--output", str(out), *STARTS])
        console()
    return out


@pytest.fixture(scope="module")
def text_stream(tmp_path_factory) -> Path:
    return optimize(tmp_path_factory.mktemp("stream") / "text", *TEXT, "--chunk-bytes", "3000", "--num-workers", "2")


def text_dm(stream: Path | dict | None, **kwargs):
    """The config's text DataModule (the synthetic reviews), streamed from `stream` (a folder, or a
    mapping with a URL) or not, set up."""
    from varlen.datamodules.text import TextClassificationDataModule

    arguments = {"synthetic_samples": SAMPLES, "batch_size": None, "max_tokens": MAX_TOKENS} | kwargs
    stream = stream if stream is None or isinstance(stream, dict) else str(stream)
    dm = TextClassificationDataModule(stream=stream, **arguments)
    dm.stream_window_batches = 4  # several windows in a small split
    dm.prepare_data()
    dm.setup("fit")
    return dm


def same_sample(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def test_streamed_items_are_the_datamodules_samples(text_stream: Path) -> None:
    """Every item, read one at a time and as a batch across chunks in any order, is `dataset[i]`; the
    dataset pickles as its folder; val stays the DataModule's own."""
    plain, streamed = text_dm(None), text_dm(text_stream)
    train, read = plain.dataset("train"), streamed.dataset("train")
    assert isinstance(read, StreamedDataset) and len(read) == len(train)
    assert read.index.num_chunks > 2
    for i in range(len(train)):
        assert same_sample(read[i], train[i]), i
    ids = [len(train) - 1, 0, int(read.offsets[1]), 5, len(train) // 2]  # chunks out of order
    assert all(same_sample(a, train[i]) for a, i in zip(read.__getitems__(ids), ids, strict=True))
    copy = pickle.loads(pickle.dumps(read))
    assert copy._stream is None and len(pickle.dumps(read)) < 1000  # the folder and a function's name
    assert same_sample(copy[7], train[7])
    assert np.array_equal(read.lengths, plain.sampler_lengths(train))
    assert len(streamed.dataset("val")) == len(plain.dataset("val")) and streamed.dataset("val") is not read


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_streamed_epoch_serves_every_sample_once_within_the_budget(text_stream: Path, num_workers: int) -> None:
    extra = {"multiprocessing_context": START} if num_workers else {}
    dm = text_dm(text_stream, num_workers=num_workers, **extra)
    loader = dm.train_dataloader()
    sampler = loader.batch_sampler
    assert type(sampler).__name__ == "StreamBatchSampler"
    epochs = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        planned = list(sampler)
        batches = [batch["index"].tolist() for batch in loader]
        assert batches == planned and len(batches) == len(sampler) == len(loader)  # workers serve the plan
        for batch in loader if epoch == 0 else ():
            rows, width = batch["input_ids"].shape
            assert rows * width <= MAX_TOKENS and batch["attention_mask"].sum(1).min() > 0
        served = np.concatenate(batches)
        assert np.array_equal(np.sort(served), np.arange(len(dm.dataset("train"))))
        epochs.append(batches)
    assert epochs[0] != epochs[1]  # a new order every epoch, the same count


@pytest.mark.skipif(START != "fork", reason="the decode recorder reaches workers by fork")
def test_each_loader_worker_decodes_only_the_chunks_of_its_own_windows(text_stream: Path, monkeypatch) -> None:
    """With `num_workers=2` the plan serves a rank's batches in two lanes, one per worker: every chunk is
    decoded by one worker, but for the window the lanes' boundary cuts (each worker decoded every chunk
    before); the batches are the plan's."""
    from torch.utils.data import DataLoader, get_worker_info

    decode = StreamedDataset._decode

    def recorded(self, chunk):
        self.decoded = (*getattr(self, "decoded", ()), chunk)
        return decode(self, chunk)

    def chunks_decoded(items):  # the collate: this worker's chunks decoded so far
        worker = get_worker_info()
        return worker.id, worker.dataset.decoded, [item["index"] for item in items]

    monkeypatch.setattr(StreamedDataset, "_decode", recorded)
    dm = text_dm(text_stream, num_workers=2, multiprocessing_context=START)
    sampler = dm.train_dataloader().batch_sampler
    plan = sampler.plan.layout
    assert sampler.plan.lanes == 2 and plan.num_windows >= 3
    loader = DataLoader(dm.dataset("train"), batch_sampler=sampler, collate_fn=chunks_decoded, num_workers=2,
                        multiprocessing_context=START)  # fmt: skip
    decoded, batches = {}, []
    for worker, chunks, batch in loader:
        decoded[worker] = chunks
        batches.append(batch)
    assert batches == list(sampler)
    assert all(len(set(chunks)) == len(chunks) for chunks in decoded.values())  # each decoded once
    both = set(decoded[0]) & set(decoded[1])
    bounds = plan.window_segments
    windows = [set(plan.seg_chunk[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert set(decoded[0]) | set(decoded[1]) == set(range(dm.dataset("train").index.num_chunks))
    assert any(both <= window for window in windows), (decoded, windows)


@pytest.mark.skipif("spawn" not in multiprocessing.get_all_start_methods(), reason="no spawn here")
def test_spawned_workers_read_the_stream_as_the_plan_says(text_stream: Path) -> None:
    """A spawned worker receives the dataset as its folder and the size function's name, and opens its own reader."""
    dm = text_dm(text_stream, num_workers=2, multiprocessing_context="spawn", persistent_workers=True)
    loader = dm.train_dataloader()
    assert [batch["index"].tolist() for batch in loader] == list(loader.batch_sampler)


def test_lightning_rebuilds_the_streamed_sampler_for_its_rank(text_stream: Path) -> None:
    """Under DDP Lightning rebuilds the batch sampler with its saved arguments and the injected
    DistributedSampler: the rebuilt one serves rank 1 of 2's batches, and set_epoch lands on it."""
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    dm = text_dm(text_stream)
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()
    injected = DistributedSampler(dm.dataset("train"), num_replicas=2, rank=1, shuffle=False)
    rebuilt = _update_dataloader(loader, injected).batch_sampler
    assert type(rebuilt).__name__ == "StreamBatchSampler" and (rebuilt.num_replicas, rebuilt.rank) == (2, 1)
    injected.set_epoch(3)
    mine = dm.batch_sampler("train", True, num_replicas=2, rank=1)
    mine.set_epoch(3)
    assert list(rebuilt) == list(mine) and len(rebuilt) == len(mine)


class Recorder(pl.Callback):
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append((trainer.current_epoch, batch["index"].tolist()))


def fit(stream: Path, root: Path, ckpt_path: Path | None = None, every: int | None = None, **data):
    recorder = Recorder()
    callbacks: list = [recorder]
    if every:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1, filename="{step}")
        )
    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=bool(every), callbacks=callbacks, num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    dm = text_dm(stream, **data)
    trainer.fit(Counting(), datamodule=dm, ckpt_path=ckpt_path)
    return recorder.batches


def test_a_lightning_fit_on_the_stream_resumes_mid_epoch_exactly(text_stream: Path, tmp_path: Path) -> None:
    full = fit(text_stream, tmp_path / "ckpt", every=3)
    per_epoch = len(full) // 2
    assert per_epoch > 4 and [e for e, _ in full] == [0] * per_epoch + [1] * per_epoch
    saved = [s for s in range(3, 2 * per_epoch, 3) if s % per_epoch]  # checkpoints inside an epoch
    first, second = max(s for s in saved if s < per_epoch), min(s for s in saved if s > per_epoch)
    resumed = fit(text_stream, tmp_path / "again", ckpt_path=tmp_path / "ckpt" / f"step={first}.ckpt")
    assert resumed == full[first:]
    later = fit(text_stream, tmp_path / "later", ckpt_path=tmp_path / "ckpt" / f"step={second}.ckpt")
    assert later == full[second:]  # inside the second epoch too


@pytest.mark.skipif(START is None, reason="no fork here")
def test_a_fit_with_loader_workers_resumes_mid_epoch_exactly(text_stream: Path, tmp_path: Path) -> None:
    """Two workers, so two lanes: the checkpoint's loader state and the plan's lanes give the uninterrupted
    run's batches, the worker dealing each lane's batches as before."""
    workers = {"num_workers": 2, "multiprocessing_context": START, "persistent_workers": True}
    full = fit(text_stream, tmp_path / "ckpt", every=5, **workers)
    per_epoch = len(full) // 2
    assert 5 < per_epoch and per_epoch % 5
    resumed = fit(text_stream, tmp_path / "again", ckpt_path=tmp_path / "ckpt" / "step=5.ckpt", **workers)
    assert resumed == full[5:]


def test_a_tampered_size_index_names_the_chunk_and_the_sample(text_stream: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(text_stream, tmp_path / "copy"))
    index = SizeIndex(copy)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)]).copy()
    chunk, item = 1, 2
    sample = int(index.samples_per_chunk[:chunk].sum()) + item
    sizes[sample, 0] += 1
    write_size_index(copy, sizes, index.axes)  # the same chunk list: only the decoded sizes can tell
    dm = text_dm(copy)
    name = SizeIndex(copy).chunks.names[chunk]
    with pytest.raises(DataError) as caught:
        dm.dataset("train").__getitems__([0, sample])
    message = str(caught.value)
    assert f"chunk {chunk} ({name}), item {item} (sample {sample})" in message
    assert f"its sizes are [{sizes[sample, 0] - 1}] (tokens), its size index says [{sizes[sample, 0]}]" in message
    assert f"varlen index-sizes {copy}" in message
    assert dm.dataset("train")[0]["index"] == 0  # the other samples still read


def test_a_stream_without_a_size_index_names_the_command_that_builds_it(text_stream: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(text_stream, tmp_path / "copy"))
    shutil.rmtree(copy / FOLDER)
    with pytest.raises(DataError, match=rf"{copy} has no size index .* build it with varlen index-sizes {copy}"):
        text_dm(copy)
    from varlen.datamodules.text import TextClassificationDataModule

    with pytest.raises(ValueError, match=r"stream='ftp://host/text': LitData reads \['s3://'"):
        TextClassificationDataModule(stream="ftp://host/text")
    with pytest.raises(
        ValueError, match=r"stream takes \['url', 'storage_options', 'cache_dir', 'timeout', 'verify'\], not \['endp"
    ):
        TextClassificationDataModule(stream={"url": "s3://bucket/text", "endpoint": "http://127.0.0.1:1"})
    with pytest.raises(ValueError, match=r"stream's timeout must be a number of seconds > 0, got '1m'"):
        TextClassificationDataModule(stream={"url": "s3://bucket/text", "timeout": "1m"})


def test_a_streamed_esol_epoch_collates_into_pyg_batches(tmp_path: Path) -> None:
    from torch_geometric.data import Batch

    from varlen.cli.dispatch import DataOnlyCLI, main

    out = optimize(tmp_path / "esol", *ESOL, "--chunk-bytes", "200000")
    dm = main([*ESOL, f"--data.init_args.stream={out}"], run=False, cli_class=DataOnlyCLI).datamodule
    dm.prepare_data()
    dm.setup("fit")
    train, served = dm.dataset("train"), []
    assert isinstance(train, StreamedDataset) and SizeIndex(out).num_chunks > 1
    for batch in dm.train_dataloader():
        assert isinstance(batch, Batch)
        assert batch.x.shape[0] + batch.edge_attr.shape[0] <= dm.max_tokens  # atoms + directed edges, summed
        served.extend(batch["index"].tolist())
    assert sorted(served) == list(range(len(train)))


def test_a_missing_chunk_and_settings_a_stream_cannot_serve_are_refused(text_stream: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(text_stream, tmp_path / "copy"))
    index = SizeIndex(copy)
    (copy / index.chunks.names[2]).unlink()
    dm = text_dm(copy)
    first = int(index.samples_per_chunk[:2].sum())  # a chunk is decoded whole: its first item fails
    sample = first + 1
    with pytest.raises(DataError, match=rf"chunk 2 \({index.chunks.names[2]}\), item 0 \(sample {first}\) could not"):
        dm.dataset("train")[sample]
    with pytest.raises(ValueError, match=r"source\(s\) \[.more.\] do not: streamed and in-memory sources"):
        text_dm(text_stream, sources=[{"name": "more", "synthetic_samples": 40}])
    with pytest.raises(ValueError, match=r"stream needs shuffle=True"):
        text_dm(text_stream, shuffle=False)


def test_varlen_inspect_shows_a_streamed_training_split(text_stream: Path, monkeypatch, capsys) -> None:
    """The plan inspected is the streamed one on 2 ranks: every sample once, the sampler's count per rank."""
    from varlen.cli.dispatch import console

    argv = [*TEXT, f"--data.init_args.stream={text_stream}", "--data.init_args.batch_size=null"]
    argv += [f"--data.init_args.max_tokens={MAX_TOKENS}", "--world-size", "2"]
    monkeypatch.setattr(sys, "argv", ["varlen", "inspect", *argv])
    console()
    printed = capsys.readouterr().out
    dm = text_dm(text_stream)
    dm.stream_window_batches = None  # the config's: the plan's default window
    sampler = dm.batch_sampler("train", True, num_replicas=2, rank=0)
    plan = sampler.global_plan(0)
    assert np.array_equal(np.sort(plan.order), np.arange(SAMPLES))
    assert len(plan) == 2 * len(sampler)
    assert f"samples {SAMPLES};" in printed
    assert f"batches per epoch {len(plan)} ({len(sampler)} per rank on 2)" in printed


def test_chunks_written_with_other_classes_are_refused(text_stream: Path) -> None:
    written = json.loads((text_stream / FOLDER / "data_state.json").read_text())
    assert written["class_names"] == ["0", "1"] and written["vocab_size"] > 0
    with pytest.raises(
        DataError, match=r"written with class_names=\['0', '1'\] where TextClassificationDataModule has \['1', '0'\]"
    ):
        text_dm(text_stream, class_names=["1", "0"])


def test_a_streamed_text_datamodule_leaves_its_training_source_untokenised(text_stream: Path, tmp_path: Path) -> None:
    """The stream serves the training split and validation has its own source: only val and test are
    tokenised (the same samples as without a stream), and the training split is the stream's."""
    streamed = text_dm(text_stream, cache_dir=str(tmp_path / "streamed"))
    built = sorted(path.name for path in (tmp_path / "streamed" / "text").glob("*.arrow"))
    assert any("-val-" in name for name in built) and not any("-train-" in name for name in built), built
    plain = text_dm(None, cache_dir=str(tmp_path / "plain"))
    for split in ("val", "test"):
        ours, theirs = streamed.dataset(split), plain.dataset(split)
        assert len(ours) == len(theirs) and all(same_sample(ours[i], theirs[i]) for i in range(len(ours)))
    assert isinstance(streamed.dataset("train"), StreamedDataset) and streamed.report.split("train").kept == SAMPLES


def test_a_text_stream_needs_no_local_training_file(tmp_path: Path) -> None:
    """Chunks written from a training file serve a DataModule that has only the validation file: the
    classes come from the chunks' data state, validation is the file's, every sample is served."""
    from varlen.datamodules.text import TextClassificationDataModule

    words = "good bad fine plot actor scene long short dull bright".split()
    for name, n in (("train", 90), ("val", 20)):
        lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 9)) + f"\t{'pos' if i % 3 else 'neg'}"
                 for i in range(n)]  # fmt: skip
        (tmp_path / f"{name}.tsv").write_text("sentence\tlabel\n" + "\n".join(lines) + "\n")
    files = [
        f"--data.init_args.train_file={tmp_path / 'train.tsv'}",
        f"--data.init_args.val_file={tmp_path / 'val.tsv'}",
    ]
    columns = {"text_column": "sentence", "label_column": "label", "batch_size": None, "max_tokens": MAX_TOKENS}
    out = optimize(tmp_path / "chunks", "--config", "configs/text_bert.yaml", *files,
                   "--data.init_args.text_column=sentence", "--data.init_args.label_column=label")  # fmt: skip
    dm = TextClassificationDataModule(val_file=str(tmp_path / "val.tsv"), stream=str(out), **columns)
    assert dm.class_names == ["neg", "pos"]  # read from the chunks, not from a training file
    dm.prepare_data()
    dm.setup("fit")
    served = sorted(i for batch in dm.train_dataloader() for i in batch["index"].tolist())
    assert served == list(range(90))
    plain = TextClassificationDataModule(
        train_file=str(tmp_path / "train.tsv"), val_file=str(tmp_path / "val.tsv"), **columns
    )
    plain.prepare_data()
    plain.setup("fit")
    assert all(same_sample(a, b) for a, b in zip(dm.dataset("val"), plain.dataset("val"), strict=True))
    with pytest.raises(ValueError, match=r"a stream without a train_file needs a val_file"):
        TextClassificationDataModule(test_file=str(tmp_path / "val.tsv"), stream=str(out), **columns)
    with pytest.raises(ValueError, match=r"val_file/test_file need a train_file \(or a stream"):
        TextClassificationDataModule(val_file=str(tmp_path / "val.tsv"), **columns)


def test_a_streamed_epoch_takes_at_most_max_shapes_each_batch_padded_to_its_rung(text_stream: Path) -> None:
    """The shape policy on a stream: rungs that are edges of the size grid, fitted from the size index; every
    batch padded to its rung within the budget; the epoch's shapes the plan's own (counted from the windows'
    histograms) and within max_shapes; one batch of each shape found for the warm-up, nothing decoded."""
    dm = text_dm(text_stream, max_shapes=5)
    (rungs,) = dm.rungs
    dataset = dm.dataset("train")
    assert set(rungs.lengths) <= set(dataset.index.edges.tolist())
    loader = dm.train_dataloader()
    sampler = loader.batch_sampler
    served = set()
    for batch in loader:
        rows, width = batch["input_ids"].shape
        assert width == rungs.round(int(batch["attention_mask"].sum(1).max())) and (rows * width <= MAX_TOKENS)
        served.add((rows, width))
    assert served == sampler.plan.shapes(0) and sampler.shape_count(0) <= 5
    warm = sampler.shape_batches(0)
    assert {tuple(dm.collate_fn(dataset.__getitems__(b))["input_ids"].shape) for b in warm} == served
    exact = text_dm(text_stream, max_shapes=None)
    assert exact.rungs is None and exact.train_dataloader().batch_sampler.shape_count(0) > 5


def test_a_streamed_epoch_packs_each_batch_in_one_row(text_stream: Path) -> None:
    """`layout="packed"` on a stream: every sample once an epoch, each batch one row of `max_tokens` with
    its texts' offsets, positions restarting at each text."""
    dm = text_dm(text_stream, layout="packed")
    width = dm.packing[0]
    served = []
    for batch in dm.train_dataloader():
        cu = batch["cu_seqlens"]
        assert batch["input_ids"].shape == batch["position_ids"].shape == (1, width)
        assert len(cu) == len(batch["index"]) + 1 and batch["packed_tokens"] == int(cu[-1]) <= width
        assert (batch["position_ids"][0, cu[:-1].long()] == 0).all()
        served.extend(batch["index"].tolist())
    assert sorted(served) == list(range(len(dm.dataset("train"))))
