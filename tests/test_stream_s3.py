"""Streaming from object storage, offline: a moto S3 server on 127.0.0.1 (a free port, started and
stopped by a fixture) holds chunks `varlen optimize` wrote; a DataModule streams them through
LitData's S3 reader. Its samples and batches are the local folder's, a store rewritten under its size
index or lacking one is refused by name, and a 2-process DDP fit that stops mid-epoch resumes with
the batches of an uninterrupted run on every rank. A store that cannot be reached fails within the
stream's timeout, `AWS_ENDPOINT_URL` serves as `storage_options.endpoint_url`, an index rebuilt in
the store is fetched again, a damaged chunk is said to be so at once, and nothing of LitData's or
botocore's reaches stderr. Needs litdata and moto (the stream and dev extras)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from varlen.errors import DataError

pytest.importorskip("litdata")
pytest.importorskip("moto")

from test_stream_read import SAMPLES, TEXT, optimize, same_sample, text_dm  # noqa: E402

HERE = Path(__file__).parent
BUCKET = "varlen-test"
SMALL = 40


@pytest.fixture(scope="module")
def s3() -> dict:
    """A moto S3 server on a free loopback port with one bucket: LitData's `storage_options` for it."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "region_name": "us-east-1",
    }
    boto3.client("s3", **options).create_bucket(Bucket=BUCKET)
    yield options
    server.stop()


def upload(options: dict, folder: Path, prefix: str, skip: tuple[str, ...] = ()) -> str:
    """Copy a local dataset folder to `s3://BUCKET/prefix` (as `aws s3 cp --recursive` would); its URL."""
    import boto3

    client = boto3.client("s3", **options)
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and not name.startswith(skip):
            client.upload_file(str(path), BUCKET, f"{prefix}/{name}")
    return f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def text_local(tmp_path_factory) -> Path:
    return optimize(tmp_path_factory.mktemp("s3") / "text", *TEXT, "--chunk-bytes", "3000", "--num-workers", "1")


@pytest.fixture(scope="module")
def text_url(s3: dict, text_local: Path) -> str:
    return upload(s3, text_local, "text")


def test_a_stream_from_s3_serves_the_local_folders_samples_and_batches(
    s3: dict, text_local: Path, text_url: str, tmp_path: Path
) -> None:
    stream = {"url": text_url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}
    remote, local = text_dm(stream), text_dm(text_local)
    train = remote.dataset("train")
    assert train.url == text_url and len(train) == SAMPLES
    pairs = zip(train.__getitems__(range(SAMPLES)), local.dataset("train"), strict=True)
    assert all(same_sample(a, b) for a, b in pairs)
    for epoch in (0, 1):
        served = []
        for dm in (remote, local):
            loader = dm.train_dataloader()
            loader.batch_sampler.set_epoch(epoch)
            served.append([batch["index"].tolist() for batch in loader])
        assert served[0] == served[1]  # the plan of the fetched size index: the local folder's
        assert sorted(i for b in served[0] for i in b) == list(range(SAMPLES))
    chunks = list((tmp_path / "cache" / "chunks").rglob("chunk-*.bin"))
    assert len(chunks) == train.index.num_chunks  # LitData downloaded every chunk into the cache, and kept them
    # a second DataModule keeps the fetched index (nothing changed in the store)
    fetched = Path(train.index_dir) / "varlen_sizes" / "sizes.arrow"
    before = fetched.stat().st_mtime_ns
    assert text_dm(stream).dataset("train").index_dir == train.index_dir and fetched.stat().st_mtime_ns == before


def test_a_store_rewritten_under_its_size_index_or_without_one_is_refused(
    s3: dict, text_local: Path, tmp_path: Path
) -> None:
    def stream(url: str) -> dict:
        return {"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}

    bare = upload(s3, text_local, "bare", skip=("varlen_sizes",))
    with pytest.raises(DataError, match=rf"{bare} has no size index \({bare}/varlen_sizes/sizes.arrow is missing\)"):
        text_dm(stream(bare))
    nothing = f"s3://{BUCKET}/nothing"
    with pytest.raises(DataError, match=rf"{nothing} has no index.json: not a LitData dataset"):
        text_dm(stream(nothing))
    # appended to: index.json lists one chunk more than the size index was written for
    rewritten = upload(s3, text_local, "rewritten")
    index = json.loads((text_local / "index.json").read_text())
    index["chunks"].append(dict(index["chunks"][-1], filename="chunk-9-9.bin"))
    import boto3

    boto3.client("s3", **s3).put_object(Bucket=BUCKET, Key="rewritten/index.json", Body=json.dumps(index).encode())
    with pytest.raises(DataError, match=r"the size index does not describe this dataset \(index.json lists 7 chunks"):
        text_dm(stream(rewritten))


@pytest.fixture(scope="module")
def small_url(s3: dict, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("s3") / "small"
    optimize(folder, *TEXT[:2], f"--data.init_args.synthetic_samples={SMALL}", "--chunk-bytes", "3000",
             "--num-workers", "1")  # fmt: skip
    return upload(s3, folder, "small")


def test_a_ddp_fit_of_a_streamed_mixture_from_s3_resumes_mid_epoch_with_the_uninterrupted_batches(
    s3: dict, text_url: str, small_url: str, tmp_path: Path
) -> None:
    """Two sources in the store, half of every epoch each (the small one drawn with replacement), on two
    processes: equal batches per rank, each source's share, and a resume inside an epoch that trains on
    the uninterrupted run's batches."""

    def stream(url: str) -> dict:
        return {"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}

    small = {"name": "small", "stream": stream(small_url), "synthetic_samples": SMALL}
    data = json.dumps({"stream": stream(text_url), "sources": [small], "source_weights": [1, 1]})
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONPATH": path}

    def run(out: Path, resume: str | None = None) -> list[list]:
        out.mkdir()
        command = [sys.executable, str(HERE / "ddp_stream_fit.py"), str(out), data, str(SAMPLES), "2"]
        subprocess.run(command + ([resume] if resume else []), check=True, env=env, timeout=600)
        return [json.loads((out / f"batches{rank}.json").read_text()) for rank in range(2)]

    full = run(tmp_path / "full")
    assert len(full[0]) == len(full[1])  # every rank as many batches
    per_epoch = sum(epoch == 0 for epoch, _ in full[0])
    half = (SAMPLES + SMALL) // 2
    for epoch in (0, 1):
        served = np.array([i for rank in full for e, batch in rank if e == epoch for i in batch])
        main = served[served < SAMPLES]  # the mixture numbers the main source's samples first
        assert len(served) == SAMPLES + SMALL and len(main) == half  # each source half of the epoch
        assert len(np.unique(main)) == half  # the main source without replacement
    step = next(s for s in range(2, len(full[0]), 2) if s % per_epoch)  # a checkpoint inside an epoch
    resumed = run(tmp_path / "resumed", str(tmp_path / "full" / "ckpt" / f"step={step}.ckpt"))
    assert resumed[0] == full[0][step:] and resumed[1] == full[1][step:]
    assert np.mean([len(b) for _, b in full[0]]) > 1


def test_a_chunk_read_that_fails_is_read_again_and_counted(
    s3: dict, text_url: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    """A transient failure (here: the store's GET of chunk 1 fails once) is made again, logged with the
    chunk's URL and counted; a chunk the store keeps failing to serve is a DataError once the stream's
    timeout has passed, saying how often it was tried and the last error."""
    from varlen.stream import store

    stream = {"url": text_url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}
    dm = text_dm(stream)
    train = dm.dataset("train")
    monkeypatch.setattr(store, "FIRST_PAUSE_S", 0.01)
    get, failures = store._get, {"left": 1}

    def flaky(remote, *args):
        if remote.endswith(train.names[1]) and failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("connection reset by peer")
        return get(remote, *args)

    monkeypatch.setattr(store, "_get", flaky)
    first = int(train.index.samples_per_chunk[0])
    with caplog.at_level("WARNING", logger="varlen.stream.store"):
        items = train.__getitems__([first, first + 1])
    assert [item["index"] for item in items] == [first, first + 1] and train.retries == 1
    assert f"{text_url}/{train.names[1]} could not be read (ConnectionError: connection reset by peer" in caplog.text

    def down(remote, *args):
        if remote.endswith(train.names[2]):
            raise ConnectionError("connection refused")
        return get(remote, *args)

    monkeypatch.setattr(store, "_get", down)
    train.source = dataclasses.replace(train.source, timeout=0.5)
    with pytest.raises(
        DataError, match=r"chunk-0-2.bin could not be read: the store did not answer within 0.5 s"
    ) as caught:
        train.__getitems__([int(train.offsets[2])])
    assert "tries, the last: ConnectionError: connection refused" in str(caught.value)
    assert train.retries > 2  # the one above, and those for chunk 2


def test_retries_in_loader_workers_are_counted_in_the_report(
    s3: dict, text_url: str, tmp_path: Path, monkeypatch
) -> None:
    """A forked loader worker's retry (the store's GET of chunk 0 fails once in it) reaches
    `dm.report`: the count is shared by the dataset and the workers started with it."""
    from varlen.stream import store

    if "fork" not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("needs the fork start method (the failure is patched into the worker by inheritance)")
    stream = {"url": text_url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}
    dm = text_dm(stream, num_workers=1, multiprocessing_context="fork")
    monkeypatch.setattr(store, "FIRST_PAUSE_S", 0.01)
    get, failures = store._get, {"left": 1}

    def flaky(remote, *args):
        if remote.endswith(dm.dataset("train").names[0]) and failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("connection reset by peer")
        return get(remote, *args)

    monkeypatch.setattr(store, "_get", flaky)
    served = sorted(i for batch in dm.train_dataloader() for i in batch["index"].tolist())
    assert served == list(range(SAMPLES)) and failures["left"] == 1  # the worker failed, not this process
    assert dm.report.retries("train") == 1 and dm.report.to_dict()["train"]["retried"] == 1
    assert "train streamed: 1 chunk read(s) retried so far" in str(dm.report)


def closed_port() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (a port bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_an_unreachable_store_fails_within_its_timeout_naming_the_url_and_the_endpoint(
    s3: dict, text_url: str, tmp_path: Path
) -> None:
    """A closed port answers nothing: the index fetch in setup, and a chunk read after the store went
    away, each end with a DataError within the stream's timeout (LitData's client would retry 1000 times)."""
    closed = closed_port()
    stream = {"url": text_url, "storage_options": dict(s3, endpoint_url=closed), "timeout": 3}
    started = time.monotonic()
    with pytest.raises(DataError) as caught:
        text_dm(dict(stream, cache_dir=str(tmp_path / "cache")))
    assert time.monotonic() - started < 30
    message = str(caught.value)
    assert f"{text_url}/index.json" in message and f"endpoint {closed}" in message
    assert "did not answer within 3 s" in message and "EndpointConnectionError" in message
    # set up while the store answered; its chunks are then read from a closed port
    train = text_dm(dict(stream, storage_options=s3, cache_dir=str(tmp_path / "cache"))).dataset("train")
    train.source = dataclasses.replace(train.source, storage_options=dict(s3, endpoint_url=closed))
    started = time.monotonic()
    with pytest.raises(DataError, match=rf"{text_url}/{train.names[0]} could not be read: the store did not answer"):
        train[0]
    assert time.monotonic() - started < 30 and train.retries > 0


def test_aws_endpoint_url_serves_as_the_mappings_endpoint_without_third_party_output(
    s3: dict, text_url: str, text_local: Path, tmp_path: Path, monkeypatch, capfd
) -> None:
    """MinIO and moto users set `AWS_ENDPOINT_URL`: the store is read through it as through
    `storage_options.endpoint_url`, the batches are the local folder's, and nothing of LitData's,
    botocore's or obstore's reaches stderr."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["aws_secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3["region_name"])
    remote = text_dm({"url": text_url, "cache_dir": str(tmp_path / "cache")})
    local = text_dm(text_local)
    served = [[batch["index"].tolist() for batch in dm.train_dataloader()] for dm in (remote, local)]
    assert served[0] == served[1] and remote.dataset("train").retries == 0
    assert_quiet(capfd.readouterr().err)


def assert_quiet(err: str) -> None:
    """Nothing of LitData's, botocore's or obstore's on stderr (LitData prints its download thread's crash)."""
    for noise in ("Traceback", "CRASHED", "Debug source", "botocore", "obstore"):
        assert noise not in err, err[-3000:]


def test_a_size_index_and_data_state_rebuilt_in_the_store_are_fetched_again(
    s3: dict, text_local: Path, tmp_path: Path
) -> None:
    """The local copy of a store's size index is keyed on the store's files, not on the chunk list: after
    the index is rebuilt in the store as the error said, the same cache_dir reads the new one; the data
    state is fetched every time."""
    import boto3

    from varlen.stream import SizeIndex, write_size_index

    tampered = Path(shutil.copytree(text_local, tmp_path / "tampered"))
    index = SizeIndex(tampered)
    sizes = np.concatenate([index.sizes(c) for c in range(index.num_chunks)]).copy()
    sizes[0, 0] += 1
    write_size_index(tampered, sizes, index.axes)
    url = upload(s3, text_local, "rebuilt", skip=("varlen_sizes",))
    upload(s3, tampered / "varlen_sizes", "rebuilt/varlen_sizes")
    stream = {"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}
    with pytest.raises(DataError, match=r"its size index says"):
        text_dm(stream).dataset("train")[0]
    upload(s3, text_local / "varlen_sizes", "rebuilt/varlen_sizes")  # rebuilt in the store
    train = text_dm(stream).dataset("train")
    assert [item["index"] for item in train.__getitems__(range(SAMPLES))] == list(range(SAMPLES))
    state = json.loads((text_local / "varlen_sizes" / "data_state.json").read_text())
    body = json.dumps(dict(state, class_names=["1", "0"])).encode()
    boto3.client("s3", **s3).put_object(Bucket=BUCKET, Key="rebuilt/varlen_sizes/data_state.json", Body=body)
    with pytest.raises(DataError, match=r"written with class_names=\['1', '0'\]"):
        text_dm(stream)


def test_a_damaged_chunk_in_the_store_is_reported_as_damaged_at_once(
    s3: dict, text_local: Path, tmp_path: Path, capfd
) -> None:
    """A chunk cut short, or whose bytes were flipped, downloads fine and is then reported as damaged,
    naming the chunk and how to write it again: not read again, not waited for, not called unreachable."""
    import boto3

    url = upload(s3, text_local, "damaged")
    names = json.loads((text_local / "index.json").read_text())["chunks"]
    client = boto3.client("s3", **s3)
    first = (text_local / names[1]["filename"]).read_bytes()
    client.put_object(Bucket=BUCKET, Key=f"damaged/{names[1]['filename']}", Body=first[: len(first) // 2])
    flipped = bytearray((text_local / names[2]["filename"]).read_bytes())
    middle = len(flipped) // 2
    flipped[middle : middle + 40] = bytes(b ^ 0xFF for b in flipped[middle : middle + 40])
    client.put_object(Bucket=BUCKET, Key=f"damaged/{names[2]['filename']}", Body=bytes(flipped))
    train = text_dm({"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache"), "timeout": 5})
    train = train.dataset("train")
    for chunk, detail in ((1, f"{len(first) // 2} bytes where index.json says {len(first)}"), (2, "")):
        started = time.monotonic()
        with pytest.raises(DataError) as caught:
            train[int(train.offsets[chunk])]
        assert time.monotonic() - started < 30
        message = str(caught.value)
        assert f"chunk {chunk} ({names[chunk]['filename']})" in message and "is damaged" in message, message
        assert detail in message and "varlen optimize --config CONFIG --output DIR" in message, message
    assert train.retries == 0 and train[0]["index"] == 0  # the other chunks still read
    assert_quiet(capfd.readouterr().err)


def test_a_damaged_copy_of_the_size_index_or_a_chunk_in_the_cache_is_fetched_again(
    s3: dict, text_local: Path, tmp_path: Path, caplog
) -> None:
    """A node's cached copy of the store's size index (kept while the store's is unchanged) or of a chunk, whose
    bytes changed since (a disk, a tool), fails its checksum and is fetched again with a warning: the run goes
    on. A copy the store itself serves damaged is refused, naming the store's file and the command."""
    import logging

    import boto3
    from faults import flip_bytes

    from varlen.stream.source import StreamSource

    url = upload(s3, text_local, "recached")
    stream = {"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache")}
    train = text_dm(stream).dataset("train")
    assert train[0]["index"] == 0
    copy, chunk = Path(train.index_dir) / "varlen_sizes", Path(train._open().input_dir.path) / train.names[0]
    for name in ("histograms.arrow", "sizes.arrow"):
        flip_bytes(copy / name)
    flip_bytes(chunk, count=4, at=0.9)
    logger = logging.getLogger("varlen.stream.source")
    logger.addHandler(caplog.handler)  # the varlen logger may not propagate (the console script's)
    try:
        train = text_dm(stream).dataset("train")
    finally:
        logger.removeHandler(caplog.handler)
    for name in ("histograms.arrow", "sizes.arrow"):
        assert (copy / name).read_bytes() == (text_local / "varlen_sizes" / name).read_bytes()
        assert f"{copy / name} is corrupt: its checksum is" in caplog.text
    assert f"fetching it again from {url}" in caplog.text
    assert [item["index"] for item in train.__getitems__(range(SAMPLES))] == list(range(SAMPLES))
    assert chunk.read_bytes() == (text_local / train.names[0]).read_bytes()  # fetched again, not refused
    damaged = bytearray((text_local / "varlen_sizes" / "sizes.arrow").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    client = boto3.client("s3", **s3)
    client.put_object(Bucket=BUCKET, Key="recached/varlen_sizes/sizes.arrow", Body=bytes(damaged))
    with pytest.raises(DataError, match=rf"{url}/varlen_sizes/sizes.arrow is damaged in the store .* is corrupt: its "
                                         r"checksum .*varlen optimize --config CONFIG --output DIR"):  # fmt: skip
        StreamSource.parse(stream, "test").fetched()


def test_third_party_debug_logs_stay_off_a_console_logging_at_debug(s3: dict, text_url: str, tmp_path: Path) -> None:
    """A script that logs everything at DEBUG to stderr (`logging.basicConfig`) keeps its own lines,
    and gets none of botocore's, urllib3's or LitData's: their loggers are set to WARNING, not the root."""
    script = f"""
import logging
logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
from varlen.datamodules.text import TextClassificationDataModule as Text
from varlen.stream.dataset import StreamedDataset
from varlen.stream.source import StreamSource
source = StreamSource.parse({{"url": {text_url!r}, "cache_dir": {str(tmp_path / "cache")!r}}}, "script")
train = StreamedDataset(source, Text.sample_sizes)
assert [item["index"] for item in train.__getitems__(range(len(train)))] == list(range(len(train)))
logging.getLogger("mine").debug("read every item")
"""
    env = {**os.environ, "AWS_ENDPOINT_URL": s3["endpoint_url"], "AWS_ACCESS_KEY_ID": "testing"}
    env.update(AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1", PYTHONPATH=str(HERE.parent))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mine: read every item" in done.stderr
    names = {line.split(":")[0] for line in done.stderr.splitlines() if ": " in line}
    assert not {name for name in names if name.startswith(("botocore", "boto3", "s3transfer", "urllib3", "litdata"))}
    assert_quiet(done.stderr)


def test_a_compressed_chunk_changed_in_the_store_is_refused_as_damaged(s3: dict, tmp_path: Path) -> None:
    """Chunks compressed inside their files (LitData's zstd) are fetched by varlen and checked as written before
    LitData decodes them, as uncompressed ones are: a byte flipped in the store's copy is named, not served."""
    pytest.importorskip("zstd", reason="LitData's zstd compression needs the zstd package")
    import boto3
    import litdata
    import stream_items

    from varlen.stream.dataset import StreamedDataset
    from varlen.stream.index_sizes import index_sizes
    from varlen.stream.source import StreamSource

    local = tmp_path / "zstd"
    litdata.optimize(stream_items.make_item, list(range(40)), str(local), chunk_size=8, num_workers=1,
                     start_method="fork", compression="zstd")  # fmt: skip
    index_sizes(local, stream_items.item_sizes, axes=("tokens", "rows"))
    url = upload(s3, local, "zstd")
    name = json.loads((local / "index.json").read_text())["chunks"][2]["filename"]
    flipped = bytearray((local / name).read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    boto3.client("s3", **s3).put_object(Bucket=BUCKET, Key=f"zstd/{name}", Body=bytes(flipped))
    source = {"url": url, "storage_options": s3, "cache_dir": str(tmp_path / "cache"), "timeout": 5}
    dataset = StreamedDataset(StreamSource.parse(source, "test"), stream_items.sizes_of)
    assert [item["index"] for item in dataset.__getitems__(range(16))] == list(range(16))
    with pytest.raises(DataError, match=rf"chunk 2 \({name}\), item 0 \(sample 16\) could not be read: the chunk is "
                                         r"damaged \(corrupt: its checksum"):  # fmt: skip
        dataset[17]
    assert dataset[8]["index"] == 8
