"""`varlen verify PATH` (issue 40, item 5): every chunk, sidecar, size index and cache table hashed against the
checksum recorded when it was written, the once-per-node marker ignored and nothing rebuilt: a table of files, a
summary line, exit 0 when every file is ok, 1 on any other, 2 on a bad path. Needs litdata for the stream."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import stream_items
from faults import flip_bytes

import varlen.storage.checksums as checksums
from varlen.batching import Ragged
from varlen.cli.scrub import main
from varlen.storage.cache import cache_key
from varlen.storage.tables import open_table, write_table

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lightning", "transformers", "torch_geometric", "litdata", "rdkit", "jsonargparse")
PROBE = """
import json, sys
sys.argv = ["varlen", *sys.argv[1:]]
import varlen.cli.console
try:
    varlen.cli.console.main()
except SystemExit as exit_:
    code = exit_.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(%r)))
print(json.dumps({"code": code, "heavy": heavy}))
"""
KEY = cache_key("inputs", version="t1")


def varlen_verify(*args: str) -> tuple[int, str, str]:
    """`varlen verify ARGS` as the console script runs it, in a new process: status, stdout (less the probe's
    line), stderr; the probe fails the test if the command imported Lightning, a scenario's library or litdata."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE % json.dumps(HEAVY), "verify", *args], capture_output=True, text=True, env=env
    )
    *printed, result = done.stdout.strip().splitlines()
    result = json.loads(result)
    assert result["heavy"] == [], result
    return result["code"], "\n".join(printed), done.stderr


def keep_mtime_flip(path: Path, count: int = 4) -> None:
    """Bytes flipped under the file's old modification time (a failing disk): the marker cannot tell."""
    before = path.stat()
    flip_bytes(path, count=count)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def attributes(path: Path) -> list[str]:
    """The extended attributes of `path` (none where the file system keeps none)."""
    try:
        return os.listxattr(path)
    except (AttributeError, OSError):
        return []


def row(out: str, name: str) -> list[str]:
    """The table row of file `name`, split into its cells."""
    return next(re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.split(None, 1)[0] == name)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """60 labelled items in 8 chunks, their size index and draw sidecar."""
    litdata = pytest.importorskip("litdata")
    from varlen.stream.index_sizes import index_sizes

    out = tmp_path_factory.mktemp("scrub") / "stream"
    start = "fork" if "fork" in __import__("multiprocessing").get_all_start_methods() else None
    litdata.optimize(stream_items.labelled_item, list(range(60)), str(out), chunk_size=8, num_workers=1,
                     start_method=start)  # fmt: skip
    index_sizes(out, stream_items.item_sizes, axes=("tokens", "rows"), label_fn=stream_items.label_of,
                weight_fns={"w": stream_items.weight_of})  # fmt: skip
    return out


def test_verify_a_stream_clean_then_tampered_under_the_same_mtime(written: Path, tmp_path: Path, capsys) -> None:
    """Clean: every file ok, exit 0, no marker left. A chunk a read verified (and marked) then flipped under the same
    mtime, which a read serves, a flipped draw sidecar and a removed chunk: each named, exit 1."""
    from varlen.stream.dataset import StreamedDataset

    stream = Path(shutil.copytree(written, tmp_path / "stream"))
    assert main([str(stream)]) == 0
    out = capsys.readouterr().out
    names = json.loads((stream / "index.json").read_text())["chunks"]
    files = ["index.json", "varlen_sizes/histograms.arrow", "varlen_sizes/draw.arrow", "varlen_sizes/draw_totals.arrow"]
    for name in [*files, "varlen_sizes/sizes.arrow", *(chunk["filename"] for chunk in names)]:
        assert row(out, name)[3] == "ok", out
    assert row(out, names[0]["filename"])[1:3] == ["chunk", f"{names[0]['chunk_bytes']:,}"]
    summary = out.splitlines()[-1]
    assert summary.startswith(f"{stream}: 13 files, ") and summary.endswith(": 13 ok"), summary
    assert not any(checksums.MARKER in attributes(stream / c["filename"]) for c in names)  # nothing marked
    assert main([str(stream / "varlen_sizes" / "sizes.arrow")]) == 0  # a size index's file: the whole index
    assert len(capsys.readouterr().out.splitlines()) == 6  # the header, its 4 files, the summary

    dataset = StreamedDataset(stream, stream_items.sizes_of)
    assert [item["index"] for item in dataset.__getitems__(range(60))] == list(range(60))  # verified, marked
    keep_mtime_flip(stream / names[2]["filename"])
    assert StreamedDataset(stream, stream_items.sizes_of)[17]["index"] == 17  # served: the marker's blind spot
    flip_bytes(stream / "varlen_sizes" / "draw.arrow")
    (stream / names[5]["filename"]).unlink()
    code, out, err = varlen_verify(str(stream))
    assert (code, err) == (1, "")
    chunk = row(out, names[2]["filename"])
    assert chunk[3] == "MISMATCH" and chunk[4].startswith("its checksum is xxh3_64:"), out
    assert row(out, "varlen_sizes/draw.arrow")[3] == "MISMATCH"
    assert row(out, names[5]["filename"])[1:4] == ["chunk", "-", "missing"]
    assert row(out, names[3]["filename"])[3] == "ok"
    summary = out.splitlines()[-1]
    assert ": 10 ok, 2 MISMATCH, 1 missing. Write it again: " in summary
    assert "varlen optimize --config CONFIG --output DIR" in summary, summary
    assert main([str(stream), "--quiet"]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 5  # the header, the 3 files not ok, the summary


def columns(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tokens = Ragged.from_arrays([rng.integers(0, 1000, rng.integers(1, 30)).astype(np.int32) for _ in range(n)])
    return {"tokens": tokens, "length": tokens.lengths, "features": rng.normal(size=(n, 4)).astype(np.float32)}


def test_verify_a_cache_clean_then_tampered(tmp_path: Path, capsys) -> None:
    """Every varlen table of a cache folder (subfolders too) against its data's checksum: a table a read verified then
    flipped under the same mtime, one cut short and one of an older varlen (no checksum) are named; other files are
    counted, not checked; nothing is rebuilt."""
    cache = tmp_path / "cache"
    paths = [write_table(cache / sub / f"t{i}.arrow", columns(200, i), version="t1", key=KEY)
             for i, sub in enumerate(("text", "text", "molecules"))]  # fmt: skip
    (cache / "video-text").mkdir()
    (cache / "video-text" / "report.json").write_text("{}")
    assert main([str(cache)]) == 0
    out = capsys.readouterr().out
    assert [row(out, f"{p.parent.name}/{p.name}")[1:4] for p in paths] == [
        ["table", f"{p.stat().st_size:,}", "ok"] for p in paths
    ]
    assert out.splitlines()[-1].endswith(
        ": 3 ok; 1 other file not checked (no checksum recorded: video-text/report.json)"
    )

    assert open_table(paths[0], version="t1", key=KEY) is not None  # a read verified it (and marked it)
    keep_mtime_flip(paths[0], count=16)
    assert open_table(paths[0], version="t1", key=KEY) is not None  # served: the marker's blind spot
    paths[1].write_bytes(paths[1].read_bytes()[:-100])
    old = pa.record_batch({"x": pa.array(np.arange(10))}).replace_schema_metadata({b"varlen.version": b"t1"})
    with pa.OSFile(str(cache / "old.arrow"), "wb") as sink, pa.ipc.new_stream(sink, old.schema) as writer:
        writer.write_batch(old)
    before = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    assert main([str(cache)]) == 1
    out = capsys.readouterr().out
    assert row(out, "text/t0.arrow")[3] == "MISMATCH" and row(out, "text/t1.arrow")[3] == "unreadable"
    assert row(out, "old.arrow")[3:] == ["unrecorded", "no checksum (an older varlen's: rebuilt when read)"]
    assert row(out, "molecules/t2.arrow")[3] == "ok"
    summary = out.splitlines()[-1]
    assert ": 1 ok, 1 MISMATCH, 1 unreadable, 1 unrecorded; 1 other file not checked " in summary, summary
    assert summary.endswith("Remove the files named: the next run builds them again")
    assert {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()} == before  # nothing rebuilt or removed
    assert main([str(paths[2])]) == 0 and "molecules" not in capsys.readouterr().out.splitlines()[1]


def test_a_bad_path_is_one_line_and_status_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    for path, said in (
        (tmp_path / "gone", "does not exist"),
        (tmp_path / "empty", "holds no stream (index.json), no size index and no varlen table"),
        (tmp_path / "notes.txt", "is no varlen table: give a stream folder (holding index.json), a cache folder"),
        ("s3://bucket/stream", "give a local folder or file"),
    ):
        assert main([str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"varlen verify: error: {path}")
        assert said in captured.err and len(captured.err.splitlines()) == 1
