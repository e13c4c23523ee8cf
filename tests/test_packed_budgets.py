"""Packed rows keep their budget: the plan fills a row at the texts' real sizes whatever `pad_to_multiple_of`
(which pads the row, never each text), a row is never wider than `max_tokens` (a sample longer than it is bad
input: `on_bad` raises naming it, or skips and counts it), and a streamed packed split says one shape."""

from __future__ import annotations

import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from varlen.datamodules import SequenceDataModule  # noqa: E402
from varlen.datamodules.text import TextClassificationDataModule  # noqa: E402
from varlen.errors import DataError  # noqa: E402


def packed_text(**kwargs) -> TextClassificationDataModule:
    arguments = {"synthetic_samples": 300, "max_tokens": 512, "layout": "packed"} | kwargs
    dm = TextClassificationDataModule(**arguments)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def fill(dm) -> float:
    """Real tokens over the tokens an epoch's packed rows allocate."""
    plan = dm.batch_sampler("train", True).global_plan(0)
    return float(dm.dataset("train").lengths.sum()) / (len(plan) * dm.packing[0])


def test_pad_to_multiple_of_pads_the_row_and_leaves_the_fill_alone() -> None:
    """The plan fills each row at the real sizes: 0.98 without a multiple stays 0.98 at 8, 16 and 64 (was
    0.88 / 0.79 / 0.40: each text costed at its rounded size); the row is `max_tokens` rounded up."""
    plain = fill(packed_text())
    assert plain > 0.95
    for multiple in (8, 16, 64):
        dm = packed_text(pad_to_multiple_of=multiple)
        assert dm.packing[0] == 512
        assert fill(dm) == pytest.approx(plain, abs=0.005), multiple
    odd = packed_text(max_tokens=500, pad_to_multiple_of=64)
    assert odd.packing[0] == 512
    for batch in odd.train_dataloader():
        assert batch["input_ids"].shape == (1, 512) and int(batch["packed_tokens"]) <= 500


def test_a_text_longer_than_the_packed_row_is_refused_by_name_or_skipped_and_counted() -> None:
    """`max_length` 512 over `max_tokens` 256 widened every row to 512 (fill 0.6, one warning). Now the row
    is 256: under `on_bad='raise'` the first longer text is a DataError naming its row and both settings;
    under `'skip'` every longer text is left out and counted (the report's one warning says so)."""
    settings = {"synthetic": "long_reviews", "synthetic_samples": 60, "max_length": 512, "max_tokens": 256}
    with pytest.raises(DataError, match=r"row \d+.*max_tokens=256.*max_length=512"):
        packed_text(**settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm = packed_text(on_bad="skip", **settings)
        dm.batch_sampler("train", True)
    (said,) = [str(w.message) for w in caught]
    assert "longer than max_tokens=256, the packed row" in said
    assert dm.packing[0] == 256
    skipped = dm.report.skipped()
    assert skipped > 0 and dm.report.split("train").num_skipped > 0
    for split in ("train", "val"):
        assert (dm.dataset(split).lengths <= 256).all()
    again = pickle.loads(pickle.dumps(dm.dataset("train")))  # a spawned worker's copy leaves them out too
    np.testing.assert_array_equal(again.lengths, dm.dataset("train").lengths)
    every = packed_text(on_bad="skip", **(settings | {"max_tokens": 512}))
    kept = {split: len(every.dataset(split)) for split in ("train", "val", "test")}
    assert sum(len(dm.dataset(split)) for split in kept) + skipped == sum(kept.values())
    served = 0
    for batch in dm.train_dataloader():
        assert batch["input_ids"].shape == (1, 256)
        served += len(batch["index"])
    assert served == len(dm.dataset("train"))


def token_table(count: int = 120, longest: int = 40) -> dict:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, longest, count)
    return {
        "tokens": [rng.integers(1, 50, n).astype(np.int64) for n in lengths],
        "label": [int(n % 3) for n in lengths],
    }


def test_a_sequence_longer_than_the_packed_row_is_refused_by_name_or_skipped_and_counted() -> None:
    """The sequence DataModule's packed row was as wide as its longest sample; now it is `max_tokens`."""
    table = token_table()
    longer = int(sum(len(t) > 32 for t in table["tokens"]))
    assert longer > 0
    with pytest.raises(DataError, match=r"row \d+.*max_tokens=32"):
        SequenceDataModule(train=table, max_tokens=32, layout="packed", val_fraction=0.2).setup("fit")
    dm = SequenceDataModule(train=table, max_tokens=32, layout="packed", val_fraction=0.2, on_bad="skip")
    dm.setup("fit")
    assert dm.report.skipped() == longer
    assert sum(len(dm.dataset(s)) for s in ("train", "val")) == len(table["tokens"]) - longer
    for batch in dm.train_dataloader():
        assert batch["tokens"].shape == (32,)


# -- a streamed packed split --------------------------------------------------------------------------------


def optimize(out: Path, *argv: str) -> Path:
    from varlen.cli.dispatch import console

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["varlen", "optimize", *argv, "--output", str(out)])
        console()
    return out


@pytest.fixture(scope="module")
def text_stream(tmp_path_factory) -> Path:
    pytest.importorskip("litdata")
    config = ["--config", "configs/text_bert.yaml", "--data.init_args.synthetic_samples=120"]
    return optimize(tmp_path_factory.mktemp("stream") / "text", *config, "--chunk-bytes", "3000", "--num-workers", "1")


def streamed(stream: Path, **kwargs) -> TextClassificationDataModule:
    arguments = {"synthetic_samples": 120, "max_tokens": 256, "layout": "packed", "stream": str(stream)} | kwargs
    dm = TextClassificationDataModule(**arguments)
    dm.stream_window_batches = 4
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_a_streamed_packed_split_takes_one_shape(text_stream: Path) -> None:
    """Every streamed packed batch is `[1, T]`: the shape count, and the warm-up's batches, say one (was 10)."""
    dm = streamed(text_stream)
    sampler = dm.train_dataloader().batch_sampler
    assert sampler.shape_count(0) == 1
    (warm,) = sampler.shape_batches(0)
    batch = dm.collate_fn(dm.dataset("train").__getitems__(warm))
    assert batch["input_ids"].shape == (1, 256) and len(warm) > 1


def test_a_stream_holding_a_text_longer_than_the_row_is_refused_whatever_on_bad(text_stream: Path) -> None:
    """A stream cannot leave a sample out: one longer than `max_tokens` is refused at setup, by name."""
    longest = int(text_stream_sizes(text_stream).max())
    assert longest > 40
    for on_bad in ("raise", "skip"):
        said = rf"{text_stream}: \d+ streamed samples are longer than max_tokens=40, the packed row \(the longest"
        said += rf" {longest}\)"
        with pytest.raises(DataError, match=rf"{said}.*raise max_tokens to at least {longest}, or .*max_length <= 40"):
            streamed(text_stream, max_tokens=40, max_length=40, on_bad=on_bad)


def text_stream_sizes(stream: Path) -> np.ndarray:
    from varlen.stream import SizeIndex

    index = SizeIndex(stream)
    return np.concatenate([np.asarray(index.sizes(c)) for c in range(index.num_chunks)])
