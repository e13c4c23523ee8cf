"""The shared data layer on its own: the report, the error family, caches, downloads, the loader guard, the CLI."""

import io
import pickle
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest

from varlen.datasets.download import download_url
from varlen.errors import DataError, DatasetNotFoundError, DownloadError
from varlen.prepare.report import SOURCE, DataReport
from varlen.storage.cache import atomic_write, cache_key, file_hash

ROOT = Path(__file__).resolve().parents[1]

# -- report ---------------------------------------------------------------------------------------


def test_report_raises_under_raise_naming_where_and_why() -> None:
    report = DataReport("raise")
    with pytest.raises(DataError, match=r"a\.csv, row 3: empty text \(pass on_bad='skip'"):
        report.bad("a.csv, row 3", "empty text", item="row")
    assert report.num_skipped == 0


def test_report_counts_skips_by_split_item_and_reason_with_examples() -> None:
    report = DataReport("skip", max_examples=2)
    for row in range(5):
        report.bad(f"a.csv, row {row}", "empty text", item="row", split="train")
    report.bad("b.mat", "not a .mat file", item="recording")
    report.keep("train", 95)
    report.truncate("train", 4, "text")
    report.leave_unused("train", "gap between blocks", 2048, "signal samples")
    report.leave_unused("train", "gap between blocks", 1024, "signal samples")
    assert report.num_skipped == 6
    assert report.skipped("empty") == 5 and report.skipped("mat") == 1
    assert report.split("train").examples[("row", "empty text")] == ["a.csv, row 0: empty text"] * 1 + [
        "a.csv, row 1: empty text"
    ]
    assert report.unused("gap") == 3072 and report.num_truncated == 4
    assert report.split(SOURCE).num_skipped == 1
    table = str(report)
    assert "train" in table and "95" in table and "3,072 signal samples (gap between blocks)" in table
    assert "5 row(s): empty text" in table and "e.g. a.csv, row 0" in table
    assert report.to_dict()["train"]["skipped"] == {"row: empty text": 5}


def test_report_announces_once_and_warns_only_when_something_was_skipped(caplog) -> None:
    quiet = DataReport("skip")
    quiet.keep("train", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.announce("Quiet")
    loud = DataReport("skip")
    loud.bad("x.npy", "NaN at sample 3", item="recording")
    with pytest.warns(UserWarning, match=r"skipped 1 bad item.*x\.npy.*dm\.report"):
        loud.announce("Loud")


def test_bad_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="on_bad"):
        DataReport("ignore")


# -- errors ---------------------------------------------------------------------------------------


def test_dataset_not_found_says_what_where_and_how_and_pickles() -> None:
    error = DatasetNotFoundError("CWRU recordings (*.mat)", ["/data/cwru", "/data/other"], "pass download=True")
    text = str(error)
    assert "CWRU recordings (*.mat) not found" in text and "/data/cwru, /data/other" in text
    assert "To get it: pass download=True" in text
    assert isinstance(error, DataError) and isinstance(error, FileNotFoundError) and isinstance(error, ValueError)
    assert str(pickle.loads(pickle.dumps(error))) == text


def test_download_error_names_url_file_and_the_manual_way() -> None:
    error = DownloadError("https://x.org/a.mat", "/data/a.mat", "URLError: offline")
    assert "https://x.org/a.mat" in str(error) and "put it at /data/a.mat" in str(error)
    assert isinstance(error, OSError) and isinstance(error, DataError)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


# -- caches ---------------------------------------------------------------------------------------


def test_atomic_write_leaves_nothing_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "cache.bin"

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        atomic_write(target, broken)
    assert not target.exists() and list(target.parent.iterdir()) == []
    atomic_write(target, lambda tmp: tmp.write_bytes(b"whole"))
    assert target.read_bytes() == b"whole" and len(list(target.parent.iterdir())) == 1


def test_cache_keys_follow_content_and_version(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("smiles\nCCO\n")
    b.write_text("smiles\nCCO\n")
    assert file_hash(a) == file_hash(b)
    assert cache_key(file_hash(a), "smiles", version="1") == cache_key(file_hash(b), "smiles", version="1")
    assert cache_key(file_hash(a), "smiles", version="1") != cache_key(file_hash(a), "smiles", version="2")
    b.write_text("smiles\nCCN\n")
    assert file_hash(a) != file_hash(b)


# -- downloads ------------------------------------------------------------------------------------


def test_download_offline_says_which_url_and_where_to_put_the_file(tmp_path: Path, monkeypatch) -> None:
    def offline(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError, match=r"https://example\.org/PaviaU\.mat.*name resolution.*put it at") as info:
        download_url("https://example.org/PaviaU.mat", tmp_path / "PaviaU.mat", "md5:00")
    assert info.value.destination == str(tmp_path / "PaviaU.mat")
    assert list(tmp_path.iterdir()) == []


def test_download_checksum_mismatch_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: io.BytesIO(b"not the file"))
    with pytest.raises(DownloadError, match="expected 0123"):
        download_url("https://example.org/a.csv", tmp_path / "a.csv", "sha256:0123")
    assert list(tmp_path.iterdir()) == []
    good = __import__("hashlib").sha256(b"not the file").hexdigest()
    assert download_url("https://example.org/a.csv", tmp_path / "a.csv", f"sha256:{good}").read_bytes() == (
        b"not the file"
    )


# -- the loader's private-API guard ---------------------------------------------------------------


def test_torchdata_private_api_is_the_one_varlen_loader_overrides() -> None:
    """Fails with the method and both signatures if a torchdata release changes what is overridden."""
    from varlen.batching.loader import check_torchdata

    check_torchdata.cache_clear()
    check_torchdata()


def test_a_changed_private_api_is_refused_clearly(monkeypatch) -> None:
    from torchdata.stateful_dataloader import stateful_dataloader

    from varlen.batching import loader

    def _reset(self, loader, first_iter=False):  # a release that dropped prime_prefetch
        pass

    monkeypatch.setattr(stateful_dataloader._StatefulMultiProcessingDataLoaderIter, "_reset", _reset)
    loader.check_torchdata.cache_clear()
    with pytest.raises(RuntimeError, match=r"_reset is \('self', 'loader', 'first_iter'\).*expects"):
        loader.check_torchdata()
    loader.check_torchdata.cache_clear()


# -- the CLI --------------------------------------------------------------------------------------


def test_cli_prints_a_data_error_without_traceback_and_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_folder"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "varlen",
            "fit",
            "--config",
            str(ROOT / "configs" / "bearing_cwru.yaml"),
            f"--data.init_args.root={missing}",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "varlen: error:" in result.stderr and str(missing) in result.stderr
    assert "Traceback" not in result.stderr
