"""Every table reader (text, molecules, captions) reads compressed files and still names a bad byte's line.

Each test compresses the tiny test files into `tmp_path` (`.gz`, `.bz2`, `.xz`, and `.zst`
when pyarrow has the codec) and compares what the reader returns with the plain file's; the
real `HIV.csv.gz` of MoleculeNet is read when `$VARLEN_DATA` holds it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from varlen.datasets import files
from varlen.datasets.molecules import read_table as read_molecules
from varlen.datasets.text import TextColumns
from varlen.datasets.text import read_table as read_text_table
from varlen.datasets.video_text import read_jsonl, read_msrvtt, read_youcook2
from varlen.datasets.video_text.msrvtt import read_test_pairs, read_video_list
from varlen.errors import DataError

DATA = Path(__file__).parent / "data"
CACHE = Path(tempfile.mkdtemp(prefix="varlen-compressed-test-"))


def _zstd(data: bytes) -> bytes:
    return pa.compress(data, codec="zstd", asbytes=True)


#: suffix -> how the test writes it (independently of the readers' code)
WRITERS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
if pa.Codec.is_available("zstd"):
    WRITERS[".zst"] = _zstd
SUFFIXES = list(WRITERS)


def compressed(source: Path | bytes, folder: Path, name: str, suffix: str) -> Path:
    """`source` (a file or its bytes) written to `folder/name + suffix`, compressed."""
    data = source.read_bytes() if isinstance(source, Path) else source
    path = folder / f"{name}{suffix}"
    path.write_bytes(WRITERS[suffix](data))
    return path


def test_the_test_writes_real_compressed_files(tmp_path: Path) -> None:
    """The files the tests read are what the standard tools make (gzip's magic bytes, a different size)."""
    plain = DATA / "text" / "reviews.csv"
    path = compressed(plain, tmp_path, "reviews.csv", ".gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b" and gzip.decompress(path.read_bytes()) == plain.read_bytes()
    assert files.compression(path) == "gzip" and files.table_suffix(path) == ".csv"
    assert files.table_suffix(tmp_path / "HIV.CSV.XZ") == ".csv" and files.compression(plain) is None


# -- text -------------------------------------------------------------------------------------

TEXT_FILES = {
    "reviews.csv": TextColumns("text", None, "label"),
    "reviews.tsv": TextColumns("sentence", None, "label"),
    "reviews.jsonl": TextColumns("text", None, "label"),
    "reviews.json": TextColumns("text", None, "label"),
    "reviews.parquet": TextColumns("text", None, "label"),
}


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("name", list(TEXT_FILES))
def test_text_tables_read_compressed(tmp_path: Path, name: str, suffix: str) -> None:
    columns = TEXT_FILES[name]
    plain = read_text_table(DATA / "text" / name, columns)
    table = read_text_table(compressed(DATA / "text" / name, tmp_path, name, suffix), columns)
    assert len(table) == len(plain) > 10
    assert table.texts == plain.texts and table.labels == plain.labels
    assert np.array_equal(table.rows, plain.rows) and table.name.endswith(f"{name}{suffix}")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_text_bad_byte_in_a_compressed_file_names_its_line(tmp_path: Path, suffix: str) -> None:
    data = b"text,label\n" + b"".join(b"fine %d,pos\n" % i for i in range(3000)) + b"caf\xe9 noir,neg\n"
    path = compressed(data, tmp_path, "latin1.csv", suffix)  # the bad byte is far past the first block
    with pytest.raises(DataError, match=rf"latin1\.csv\{suffix}, line 3002: bytes that are not UTF-8 \(b'\\xe9 no"):
        read_text_table(path, TEXT_FILES["reviews.csv"])


def test_text_a_split_character_at_a_block_end_is_not_an_error(tmp_path: Path) -> None:
    """utf8_blocks cuts blocks at line ends: a two-byte character across a read boundary decodes."""
    data = ("text,label\n" + "é" * 9 + ",pos\n" + "ü,neg\n").encode()
    path = compressed(data, tmp_path, "split.csv", ".gz")
    assert "".join(files.utf8_blocks(path, chunk=12)) == data.decode()
    assert read_text_table(path, TEXT_FILES["reviews.csv"]).texts == ["é" * 9, "ü"]


def test_text_unknown_inner_type_and_empty_compressed_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"notes\.txt\.gz: unsupported file type '\.txt'; .*optionally compressed"):
        read_text_table(compressed(b"a,b\n", tmp_path, "notes.txt", ".gz"), TEXT_FILES["reviews.csv"])
    with pytest.raises(DataError, match=r"empty\.csv\.bz2: the file is empty"):
        read_text_table(compressed(b"\n \n", tmp_path, "empty.csv", ".bz2"), TEXT_FILES["reviews.csv"])


@pytest.mark.parametrize(
    "name, content, kind",
    [("fake.csv.gz", b"text,label\nnot gzip at all,pos\n", "gzip"), ("cut.csv.xz", None, "xz")],
)
def test_a_corrupt_compressed_file_is_refused_naming_it(tmp_path: Path, name: str, content, kind: str) -> None:
    if content is None:  # a truncated download
        content = lzma.compress((DATA / "text" / "reviews.csv").read_bytes())[:-20]
    path = tmp_path / name
    path.write_bytes(content)
    match = rf"{re.escape(name)}: cannot decompress it as {kind} \("
    with pytest.raises(DataError, match=match):
        read_text_table(path, TEXT_FILES["reviews.csv"])
    with pytest.raises(DataError, match=match):
        read_molecules(path, "smiles", ["y"])


# -- molecules ----------------------------------------------------------------------------------

ESOL = ("smiles", ["measured log solubility in mols per litre"])


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_molecule_tables_read_compressed(tmp_path: Path, suffix: str) -> None:
    plain = read_molecules(DATA / "molecules" / "esol_tiny.csv", *ESOL)
    table = read_molecules(compressed(DATA / "molecules" / "esol_tiny.csv", tmp_path, "esol.csv", suffix), *ESOL)
    assert table.smiles == plain.smiles and len(table.smiles) > 10
    assert np.array_equal(table.targets, plain.targets) and np.array_equal(table.rows, plain.rows)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_molecule_bad_byte_in_a_compressed_file_names_its_line(tmp_path: Path, suffix: str) -> None:
    data = b"\xef\xbb\xbfsmiles,y\nCCO,1\nCCN,2\n\nC\x96C,3\n"  # a byte-order mark, a blank line: line 5
    path = compressed(data, tmp_path, "cp1252.csv", suffix)
    with pytest.raises(DataError, match=rf"cp1252\.csv\{suffix}, line 5: bytes that are not UTF-8 \(b'\\x96C,3'"):
        read_molecules(path, "smiles", ["y"])


def test_a_compressed_molecule_table_feeds_the_datamodule(tmp_path: Path) -> None:
    from varlen.datamodules.molecules import MoleculeDataModule

    path = compressed(DATA / "molecules" / "esol_tiny.csv", tmp_path, "esol_tiny.csv", ".gz")
    dm = MoleculeDataModule(dataset="esol", path=str(path), cache_dir=str(CACHE), val_fraction=0.2, test_fraction=0.2)
    dm.prepare_data()
    dm.setup("fit")
    plain = read_molecules(DATA / "molecules" / "esol_tiny.csv", *ESOL)
    assert sum(len(d) for d in dm.datasets.values()) + dm.report.num_skipped == len(plain.smiles)


def test_real_hiv_csv_gz_reads(shared_data: Path, tmp_path: Path) -> None:
    """MoleculeNet's HIV.csv.gz as distributed: the whole table, and the DataModule on its first 300 rows."""
    from varlen.datamodules.molecules import MoleculeDataModule

    path = shared_data / "molecules" / "HIV.csv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    table = read_molecules(path, "smiles", ["HIV_active"], task="classification")
    assert len(table.smiles) == 41127 and table.target_columns == ("HIV_active",)
    assert int(np.nansum(table.targets)) == 1443  # MoleculeNet's active compounds
    assert table.rows[0] == 2 and table.rows[-1] == 41128  # line numbers of the decompressed file
    head = b"".join(gzip.decompress(path.read_bytes()).splitlines(keepends=True)[:301])
    small = compressed(head, tmp_path, "HIV_head.csv", ".gz")
    dm = MoleculeDataModule(dataset="hiv", path=str(small), cache_dir=str(CACHE), on_bad="skip")
    dm.prepare_data()
    dm.setup("fit")
    assert dm.task == "classification" and dm.target_columns == ["HIV_active"]
    assert sum(len(d) for d in dm.datasets.values()) == 299  # line 139 holds an aluminium complex RDKit refuses
    assert dm.report.skipped("RDKit could not sanitise the molecule") == 1


# -- captions ---------------------------------------------------------------------------------


def _same_captions(table, plain) -> None:
    assert table.videos == plain.videos and table.text == plain.text and len(table) > 0
    assert np.array_equal(table.start, plain.start) and np.array_equal(table.rows, plain.rows)
    assert np.array_equal(table.end, plain.end, equal_nan=True) and table.subsets == plain.subsets


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize(
    "reader, name", [(read_youcook2, "youcook2.json"), (read_msrvtt, "msrvtt.json"), (read_jsonl, "captions.jsonl")]
)
def test_caption_files_read_compressed(tmp_path: Path, reader, name: str, suffix: str) -> None:
    plain = reader(DATA / "video_text" / name)
    table = reader(compressed(DATA / "video_text" / name, tmp_path, name, suffix))
    _same_captions(table, plain)
    assert table.source.endswith(f"{name}{suffix}")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_msrvtt_lists_read_compressed(tmp_path: Path, suffix: str) -> None:
    folder = DATA / "video_text" / "msrvtt"
    train = compressed(folder / "MSRVTT_train.9k.csv", tmp_path, "MSRVTT_train.9k.csv", suffix)
    pairs = compressed(folder / "MSRVTT_JSFUSION_test.csv", tmp_path, "MSRVTT_JSFUSION_test.csv", suffix)
    assert read_video_list(train) == read_video_list(folder / "MSRVTT_train.9k.csv") != {}
    assert read_test_pairs(pairs) == read_test_pairs(folder / "MSRVTT_JSFUSION_test.csv") != []
    with pytest.raises(DataError, match=r"a CSV, not the MSR-VTT caption JSON"):  # the inner suffix is what counts
        read_msrvtt(train)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_caption_bad_byte_in_a_compressed_file_names_its_line(tmp_path: Path, suffix: str) -> None:
    good = b'{"video_id": "v", "start": 0, "end": 1, "text": "a"}\n'
    bad = b'{"video_id": "v", "start": 1, "end": 2, "text": "\xff"}\n'
    jsonl = compressed(good * 4 + bad, tmp_path, "c.jsonl", suffix)
    with pytest.raises(DataError, match=rf"c\.jsonl\{suffix}, line 5: bytes that are not UTF-8 \(b'\\xff"):
        read_jsonl(jsonl)
    youcook = compressed(b'{"database":\n {"v": {"annotations": [],\n "x": "\xe9"}}}', tmp_path, "y.json", suffix)
    with pytest.raises(DataError, match=rf"y\.json\{suffix}, line 3: bytes that are not UTF-8"):
        read_youcook2(youcook)
    pairs = compressed(b"key,vid_key,video_id,sentence\nr0,m0,video0,\xe9t\xe9\n", tmp_path, "p.csv", suffix)
    with pytest.raises(DataError, match=rf"p\.csv\{suffix}, line 2: bytes that are not UTF-8"):
        read_test_pairs(pairs)
