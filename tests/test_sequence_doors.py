"""The "bring your own data" door (issue 37): your arrays in one call, each field in its dtype; CSV and JSON Lines
tables in; a per-sample transform that replays on resume; the budget's cost as an argument."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

import varlen
from varlen.datamodules.sequence import SequenceDataModule
from varlen.errors import DataError


def arrays(rows: int = 40, seed: int = 0) -> dict:
    """One of each kind: float32 `[T, 3]`, float16 `[T, 2]`, int64 `[T]`, float32 `[T]`, int labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, rows)
    return {
        "signal": [rng.normal(size=(n, 3)).astype(np.float32) for n in lengths],
        "half": [rng.normal(size=(n, 2)).astype(np.float16) for n in lengths],
        "ids": [rng.integers(0, 50, n).astype(np.int64) for n in lengths],
        "level": [rng.normal(size=n).astype(np.float32) for n in lengths],
        "label": [int(k) for k in rng.integers(0, 3, rows)],
    }


def fitted(dm: SequenceDataModule) -> SequenceDataModule:
    dm.prepare_data()
    dm.setup("fit")
    return dm


# -- 1. your arrays in one call ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_write_arrays_round_trips_every_fields_dtype_and_values(suffix: str, tmp_path: Path) -> None:
    columns = arrays()
    path = varlen.write_arrays(tmp_path / "deep" / f"train{suffix}", columns)
    assert path.is_file()
    dm = fitted(SequenceDataModule(train=str(path), val_fraction=0.2, cache_dir=str(tmp_path / "cache")))
    for split in ("train", "val"):
        dataset = dm.dataset(split)
        for i in range(len(dataset)):
            sample, row = dataset[i], int(dataset.positions[i])
            for name in ("signal", "half", "ids", "level"):
                assert sample[name].dtype == columns[name][row].dtype, (name, sample[name].dtype)
                np.testing.assert_array_equal(sample[name], columns[name][row])
            assert dm.class_names[sample["label"]] == str(columns["label"][row])
    batch = next(iter(dm.train_dataloader()))
    dtypes = {name: batch[name].dtype for name in ("signal", "half", "ids", "level")}
    assert dtypes == {"signal": torch.float32, "half": torch.float16, "ids": torch.int64, "level": torch.float32}
    assert batch["signal"].shape[-1] == 3 and batch["half"].shape[-1] == 2


def test_write_arrays_refuses_other_suffixes_and_names_a_bad_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Parquet \(\.parquet, \.pq\) or Arrow IPC"):
        varlen.write_arrays(tmp_path / "x.csv", {"x": [np.zeros(2)]})
    bad = [np.zeros((3, 2), np.float32), np.zeros((2, 4), np.float32)]
    with pytest.raises(DataError, match=r"row 1: column 'x' holds an array of shape \(2, 4\)"):
        varlen.write_arrays(tmp_path / "x.parquet", {"x": bad})
    assert not (tmp_path / "x.parquet").exists()


def test_dtypes_casts_a_field_as_batches_are_made() -> None:
    rng = np.random.default_rng(1)
    wide = [rng.normal(size=(n, 2)) for n in rng.integers(2, 20, 30)]  # float64, as .tolist() or a CSV gives
    dm = fitted(
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"signal": "float32"}, batch_size=8)
    )
    batch = next(iter(dm.train_dataloader()))
    assert batch["signal"].dtype == torch.float32
    rows = dm.dataset("train").positions[batch["index"].numpy()]
    for k, row in enumerate(rows.tolist()):
        n = int(batch["signal_lengths"][k])
        np.testing.assert_array_equal(batch["signal"][k, :n].numpy(), wide[row].astype(np.float32))
    assert dm.dataset("train")[0]["signal"].dtype == np.float32
    with pytest.raises(ValueError, match=r"dtypes name \['sginal'\], which are no served field"):
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"sginal": "float32"})
    with pytest.raises(ValueError, match=r"give a dtype of numbers"):
        SequenceDataModule(train={"signal": wide, "label": [0, 1] * 15}, dtypes={"signal": "U8"})


class CastingMean(pl.LightningModule):
    """A float32 model that casts what it gets (so the fit runs whatever the notice said)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 2)

    def training_step(self, batch, batch_idx):
        keep = batch["signal_mask"].unsqueeze(-1)
        pooled = (batch["signal"].float() * keep).sum(1) / keep.sum(1)
        return torch.nn.functional.cross_entropy(self.head(pooled), batch["labels"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_caught(dm: SequenceDataModule, root: Path) -> list[str]:
    trainer = pl.Trainer(
        max_epochs=2, limit_val_batches=0, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(CastingMean(), datamodule=dm)
    return [str(w.message) for w in caught if "float64" in str(w.message)]


def test_a_float64_field_meeting_a_float32_model_is_said_once_with_the_cast(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    wide = [rng.normal(size=(n, 2)) for n in rng.integers(2, 20, 40)]
    columns = {"signal": wide, "label": [0, 1] * 20}
    told = fit_caught(SequenceDataModule(train=columns, batch_size=4), tmp_path)
    assert len(told) == 1, told
    assert "field(s) ['signal'] are served as float64" in told[0] and "dtypes={'signal': 'float32'}" in told[0]
    assert fit_caught(SequenceDataModule(train=columns, batch_size=4, dtypes={"signal": "float32"}), tmp_path) == []


# -- 8. a per-sample transform, CSV and JSON Lines, the budget's cost --------------------------------------------


def jitter(sample: dict, rng: np.random.Generator) -> dict:
    """Noise on the signal (float64 from numpy: cast back) and a random crop of up to 2 elements."""
    keep = max(1, len(sample["signal"]) - int(rng.integers(0, 3)))
    sample["signal"] = sample["signal"][:keep] + rng.normal(size=sample["signal"][:keep].shape)
    sample["level"] = sample["level"][:keep]
    return sample


def scale_globally(sample: dict) -> dict:
    """A one-argument transform drawing from numpy's global generator (seeded per sample, put back after)."""
    sample["signal"] = sample["signal"] * np.random.uniform(0.5, 1.5)
    return sample


def epoch_batches(dm: SequenceDataModule, epoch: int, split: str = "train", skip: int = 0, state=None) -> dict:
    """`index -> sample's tensors` of one epoch (after `skip` batches, or from a loader's `state`)."""
    loader = dm.train_dataloader() if split == "train" else dm.loader(split)
    loader.batch_sampler.set_epoch(epoch)
    if state is not None:
        loader.load_state_dict(state)
    out, it = {}, iter(loader)
    for _ in range(skip):
        next(it)
    for batch in it:
        for k, i in enumerate(batch["index"].tolist()):
            n = int(batch["signal_lengths"][k])
            out[i] = (batch["signal"][k, :n].clone(), int(batch["level_lengths"][k]))
    return out


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in a)


@pytest.mark.parametrize("transform", [jitter, scale_globally])
def test_a_transform_is_drawn_from_seed_epoch_and_index_whatever_the_workers(transform) -> None:
    columns = arrays(60)
    made = lambda workers: fitted(  # noqa: E731
        SequenceDataModule(train=columns, transform=transform, batch_size=8, num_workers=workers, seed=3)
    )
    plain = fitted(SequenceDataModule(train=columns, batch_size=8, seed=3))
    state = np.random.get_state()[1].copy()
    first, second = epoch_batches(made(0), 0), epoch_batches(made(0), 1)
    assert np.array_equal(np.random.get_state()[1], state)  # the global generator is put back
    assert same(first, epoch_batches(made(2), 0))  # two workers draw what one process draws
    stored = epoch_batches(plain, 0)
    assert first.keys() == stored.keys() and not same(first, stored) and not same(first, second)
    assert all(first[i][0].dtype == torch.float32 and len(first[i][0]) <= len(stored[i][0]) for i in first)
    assert same(epoch_batches(made(0), 0, "val"), epoch_batches(plain, 0, "val"))  # evaluation: as stored


def test_a_resumed_epoch_replays_the_transforms_draws() -> None:
    columns = arrays(60)
    dm = fitted(SequenceDataModule(train=columns, transform=jitter, batch_size=8, seed=5))
    whole = epoch_batches(dm, 2)
    loader = dm.train_dataloader()
    loader.batch_sampler.set_epoch(2)
    it = iter(loader)
    served = {}
    for _ in range(3):
        batch = next(it)
        served.update({i: None for i in batch["index"].tolist()})
    state = loader.state_dict()
    resumed = epoch_batches(
        fitted(SequenceDataModule(train=columns, transform=jitter, batch_size=8, seed=5)), 2, state=state
    )
    assert resumed and set(resumed).isdisjoint(served) and set(resumed) | set(served) == set(whole)
    assert same(resumed, {i: whole[i] for i in resumed})


def lengthen(sample: dict) -> dict:
    sample["signal"] = np.concatenate([sample["signal"], sample["signal"]])
    return sample


def test_a_transform_may_crop_a_size_field_never_lengthen_it_and_must_reach_spawned_workers() -> None:
    columns = arrays(30)
    with pytest.raises(ValueError, match="a streamed split has none yet"):
        SequenceDataModule(train=columns, transform=jitter, stream=".")
    dm = fitted(SequenceDataModule(train=columns, transform=lengthen, batch_size=4))
    with pytest.raises(
        DataError, match=r"transform .*lengthen of sample \d+: size field 'signal' has length \d+ where"
    ):
        next(iter(dm.train_dataloader()))
    spawned = SequenceDataModule(
        train=columns, transform=lambda s: s, batch_size=4, num_workers=1, multiprocessing_context="spawn"
    )
    spawned.setup("fit")
    with pytest.raises(DataError, match=r"transform .*<lambda> cannot be pickled .* spawn loader workers"):
        spawned.train_dataloader()
    import pickle

    dataset = fitted(SequenceDataModule(train=columns, transform=jitter, batch_size=4)).dataset("train")
    from varlen.batching import EpochIndices

    batch = EpochIndices([0, 3, 5], 1)
    copy = pickle.loads(pickle.dumps(dataset))  # what a spawned worker receives
    assert all(
        torch.equal(a, b)
        for a, b in zip(copy.__getitems__(batch).values(), dataset.__getitems__(batch).values(), strict=True)
    )
    assert spawned.hparams["transform"].endswith("<lambda>")


def write_lines(columns: dict, folder: Path) -> tuple[Path, Path]:
    """`columns` as a CSV (each variable-length cell a JSON list) and as JSON Lines (a blank line between)."""
    import csv
    import json

    names = list(columns)
    cell = lambda v: json.dumps(v.tolist()) if isinstance(v, np.ndarray) else v  # noqa: E731
    with open(folder / "table.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows([[cell(columns[n][r]) for n in names] for r in range(len(columns[names[0]]))])
    plain = lambda v: v.tolist() if isinstance(v, np.ndarray) else v  # noqa: E731
    records = [json.dumps({n: plain(columns[n][r]) for n in names}) for r in range(len(columns[names[0]]))]
    (folder / "table.jsonl").write_text("\n\n".join(records) + "\n")
    return folder / "table.csv", folder / "table.jsonl"


def test_csv_and_json_lines_serve_the_batches_parquet_does(tmp_path: Path) -> None:
    columns = arrays(50)
    columns["label"] = [["cat", "dog", "eel"][k] for k in columns["label"]]
    del columns["half"]  # JSON writes float16 values at float32 precision: not the same numbers
    parquet = varlen.write_arrays(tmp_path / "table.parquet", columns)
    paths = write_lines(columns, tmp_path)
    cast = {"signal": "float32", "level": "float32"}
    runs = []
    for path in (parquet, *paths):
        dtypes = None if path == parquet else cast
        dm = fitted(SequenceDataModule(train=str(path), dtypes=dtypes, batch_size=8, cache_dir=str(tmp_path / "c")))
        runs.append(list(dm.train_dataloader()) + list(dm.val_dataloader()))
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for a, b in zip(runs[0], other, strict=True):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


def test_a_bad_csv_or_json_lines_row_is_named_by_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "fields.csv").write_text('x,label\n"[1, 2]",a\n\n"[3, 4]",b,extra\n')
    (tmp_path / "cell.csv").write_text('x,label\n"[1, 2]",a\n"[3,",b\n')
    (tmp_path / "empty.csv").write_text('x,label\n"[1, 2]","a\nb"\n"[]",b\n')
    (tmp_path / "broken.jsonl").write_text('{"x": [1], "label": 0}\n\n{"x": [2], "label": 1,}\n')
    (tmp_path / "typed.jsonl").write_text('{"x": [1], "label": 0}\n{"x": [2], "label": "one"}\n')
    expected = {
        "fields.csv": r"fields\.csv, line 4: not a readable CSV record \(3 fields where the header has 2\)",
        "cell.csv": r"cell\.csv, line 3: column 'x' holds '\[3,', not a JSON list",
        "empty.csv": r"empty\.csv, line 4: empty sequence in column 'x'",
        "broken.jsonl": r"broken\.jsonl, line 3: not a readable JSONL record \(not JSON",
        "typed.jsonl": r"typed\.jsonl, line 2: not a readable JSONL record \(column 'label' holds a string",
    }
    for name, message in expected.items():
        with pytest.raises(DataError, match=message):
            fitted(SequenceDataModule(train=str(tmp_path / name), cache_dir=str(tmp_path / "c")))


def test_sampler_cost_says_what_max_tokens_counts_and_is_checked() -> None:
    columns = arrays(80)
    plans = {}
    for cost in ("padded", "sum"):
        dm = fitted(SequenceDataModule(train=columns, max_tokens=60, sampler_cost=cost, max_shapes=None))
        lengths = dm.dataset("train").lengths
        batches = list(dm.batch_sampler("train", shuffle=True, num_replicas=1, rank=0))
        plans[cost] = [(len(b) * int(lengths[b].max()), int(lengths[b].sum()), len(b)) for b in batches]
        assert dm.hparams["sampler_cost"] == cost
    assert all(padded <= 60 for padded, _, n in plans["padded"] if n > 1)
    assert all(summed <= 60 for _, summed, n in plans["sum"] if n > 1)
    assert any(padded > 60 for padded, _, _ in plans["sum"]) and len(plans["sum"]) < len(plans["padded"])
    for wrong, told in [("packed", "a layout SequenceDataModule has not"), ("summed", r"\('padded', 'sum'\)")]:
        with pytest.raises(ValueError, match=told):
            SequenceDataModule(train=columns, max_tokens=60, sampler_cost=wrong)
    with pytest.raises(ValueError, match="rung_batch_sizes are padded lengths"):
        SequenceDataModule(train=columns, sampler_cost="sum", rung_batch_sizes={32: 4})


# -- issue 40: raw errors that name their cause ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "told"),
    [
        ({"a": 3}, r"rung_batch_sizes\['a'\] = 3: the key 'a' is no whole number"),
        ({16: "b"}, r"rung_batch_sizes\[16\] = 'b': the batch size 'b' is no whole number"),
        ({16.5: 4}, r"the key 16\.5 is no whole number"),
        ({16: 0}, r"rung_batch_sizes\[16\] = 0: .*>= 1"),
    ],
)
def test_a_bad_rung_batch_sizes_entry_is_named_with_the_expected_form(table: dict, told: str) -> None:
    """Before: `{'a': 3}` was a bare `int()` error (invalid literal for int() with base 10)."""
    with pytest.raises(ValueError, match=told + r".*padded length: batch size.*e\.g\. \{16: 512\}"):
        SequenceDataModule(train=arrays(20), rung_batch_sizes=table)


def test_max_tokens_with_another_count_of_values_than_size_axes_is_refused_by_name() -> None:
    """Before: a warning ("36 samples exceed max_tokens=(1, 2, 3)"), then a traceback from the plan."""
    columns = arrays(20)
    told = r"SequenceDataModule: max_tokens=\[1, 2, 3\] has 3 values; the budget takes 1, one per size axis \['signal'"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=told):
            SequenceDataModule(train=columns, max_tokens=[1, 2, 3])
        with pytest.raises(ValueError, match=r"2 values; the budget takes 1, one per size axis \['signal'\]"):
            SequenceDataModule(train=columns, max_tokens=[64, 64])
    both = SequenceDataModule(train=columns, size_field=["signal", "level"], max_tokens=[64, 64])
    assert both.max_tokens == (64, 64)
    assert SequenceDataModule(train=columns, size_field=["signal", "level"], max_tokens=64).max_tokens == 64
    with pytest.raises(ValueError, match=r"takes 1 \(every axis\) or 2, one per size axis \['signal', 'level'\]"):
        SequenceDataModule(train=columns, size_field=["signal", "level"], max_tokens=[64, 64, 64])


def test_a_csv_list_column_with_a_scalar_or_other_nesting_names_the_line(tmp_path: Path) -> None:
    """Before: a scalar first cell left the column unserved ("no variable-length column", or silently with another
    list column), and a later scalar or a list of lists among lists named no line."""
    (tmp_path / "first.csv").write_text('x,label\n5,a\n"[1, 2]",b\n"[3, 4]",a\n')
    (tmp_path / "beside.csv").write_text('x,y,label\n5,"[1]",a\n"[1, 2]","[1]",b\n"[3, 4]","[2]",a\n')
    (tmp_path / "later.csv").write_text('x,label\n"[1, 2]",a\n\n"[3]",b\n7.5,a\n')
    (tmp_path / "nested.csv").write_text('x,label\n"[1, 2]",a\n"[3]",b\n"[[5, 6]]",a\n')
    expected = {
        "first.csv": r"first\.csv, line 2: column 'x' holds '5', not a JSON list, where its other cells are .*\[5\]",
        "beside.csv": r"beside\.csv, line 2: column 'x' holds '5', not a JSON list.*\[5\]",
        "later.csv": r"later\.csv, line 5: column 'x' holds '7\.5', not a JSON list.*\[5\]",
        "nested.csv": r"nested\.csv, line 4: column 'x' holds '\[\[5, 6\]\]', a list of lists where line 2 holds a",
    }
    for name, message in expected.items():
        with pytest.raises(DataError, match=message):
            fitted(SequenceDataModule(train=str(tmp_path / name), cache_dir=str(tmp_path / "c")))
    (tmp_path / "words.csv").write_text('x,note,label\n"[1]",fine,a\n"[2]","[sic] odd",b\n"[3]",5,a\n')
    dm = fitted(SequenceDataModule(train=str(tmp_path / "words.csv"), cache_dir=str(tmp_path / "c")))
    assert list(dm.specs) == ["x"]  # a column of words, one of them starting with '[', is no list column


@pytest.mark.parametrize(
    ("ids", "largest"),
    [(np.uint64(2**63 + 5), "9,223,372,036,854,775,813"), (np.int64(2**40), "1,099,511,627,776")],
    ids=["uint64", "int64"],
)
def test_token_ids_too_large_for_an_embedding_are_refused_by_name(ids: np.integer, largest: str) -> None:
    """Before: vocab_size 9.2e18 (then a TypeError), or 2**40 + 1 (an embedding of terabytes)."""
    columns = {"x": [np.full(n, ids) for n in (3, 4, 5, 6) * 5], "label": [0, 1] * 10}
    told = (
        rf"column 'x' is read as token ids \(integers, one per element\) and its largest is {largest}: an "
        r"embedding of .* rows.*past 16,777,216.*dtypes=\{'x': 'float32'\}"
    )
    with pytest.raises(DataError, match=told):
        SequenceDataModule(train=columns)
    features = SequenceDataModule(train=columns, dtypes={"x": "float32"})
    assert features.vocab_size is None and features.feature_dim == 1


def test_a_cast_that_would_wrap_or_overflow_is_refused_naming_the_row_and_both_ranges(tmp_path: Path) -> None:
    """Before: 130.0 cast to int8 was served as -126, 1e5 cast to float16 as inf, without a word."""
    lengths = np.arange(20) % 6 + 2
    columns = {
        "x": [np.linspace(0.0, 100.0, n) for n in lengths],  # float64, whole and not (ids once cast to ints)
        "scale": np.linspace(1.0, 2e5, 20),  # a fixed field, past float16's 65504 from row 7
        "label": [0, 1] * 10,
    }
    columns["x"][3][1] = 130.0
    told = (
        r"\(in-memory columns\), row 3: column 'x' holds 130\.0, which dtypes=\{'x': 'int8'\} cannot hold \(int8 "
        r"holds -128\.\.127; the column's values as stored span 0\.0\.\.130\.0\): the cast would wrap silently"
    )
    with pytest.raises(DataError, match=told):
        fitted(SequenceDataModule(train=columns, dtypes={"x": "int8"}))
    with pytest.raises(DataError, match=r"row 7: column 'scale' holds 736\d\d\.\d+, .*float16 holds -65504\.\.65504"):
        fitted(SequenceDataModule(train=columns, dtypes={"scale": "float16"}))
    columns["x"][3][1] = 127.5  # int8's 127 once cut: held
    fitted(SequenceDataModule(train=columns, dtypes={"x": "int8", "scale": "float32"}))
    columns["x"][3][1] = np.inf  # a bad row for its own reason (non-finite), not the cast's
    dm = SequenceDataModule(train=columns, dtypes={"x": "int8"}, on_bad="skip")
    with pytest.warns(UserWarning, match="non-finite value"):
        fitted(dm)
    assert dm.report.skipped("non-finite") == 1
    (tmp_path / "wide.csv").write_text('x,label\n"[1, 2]",a\n"[3, 300]",b\n')
    with pytest.raises(DataError, match=r"wide\.csv, line 3: column 'x' holds 300, .*'uint8'"):
        fitted(SequenceDataModule(train=str(tmp_path / "wide.csv"), dtypes={"x": "uint8"}, cache_dir=str(tmp_path)))
