"""The documentation: the README stays short, the site builds with ``--strict`` (no broken link, page or API
reference), and every ``python`` block of the README and of the site's pages runs as written, each in a fresh
folder and namespace (blocks shown but not run, which need the network or a whole training, are ``py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: the "Bring your own data" levels: each prints its DataModule, level 2 trains one epoch
OWN_DATA = ROOT / "docs" / "own-data.md"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M)


BLOCKS = [(page, i) for page in PAGES for i in range(len(python_blocks(page)))]


def test_the_readme_is_short_and_says_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "bash scripts/run.sh demo" in text and "bash scripts/run.sh test" in text
    assert "bash scripts/run.sh test" in (ROOT / ".ci" / "run").read_text()


def test_the_site_builds_strict(tmp_path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in (ROOT / "docs").rglob("*.md"):
        name = page.relative_to(ROOT / "docs").with_suffix("").as_posix()
        assert ("index.html" if name == "index" else f"{name}/index.html") in built, name
    assert "VarLenDataModule" in (tmp_path / "site" / "api" / "index.html").read_text()


def test_the_pages_hold_the_runnable_examples() -> None:
    assert len(python_blocks(OWN_DATA)) == 3 and len(python_blocks(ROOT / "README.md")) == 2


@pytest.mark.parametrize(("page", "index"), BLOCKS, ids=[f"{p.relative_to(ROOT)}#{i + 1}" for p, i in BLOCKS])
def test_a_python_block_runs_as_written(page: Path, index: int, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VARLEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for folder in ("configs",):  # blocks may name the shipped configs, relative to the checkout
        shutil.copytree(ROOT / folder, tmp_path / folder)
    code = python_blocks(page)[index]
    namespace = {"__name__": f"docs_block_{index}"}
    exec(compile(code, f"{page.relative_to(ROOT)} (python block {index + 1})", "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out
    dm = namespace.get("dm")
    if dm is not None:  # a DataModule example says which it built, and serves batches
        assert type(dm).__name__ in printed
        assert len(dm.dataset("train")) > 0
    if page == OWN_DATA and "trainer" in namespace:  # level 2 trains one epoch: every planned batch
        assert namespace["trainer"].global_step == len(dm.train_dataloader()) > 0
    assert os.getcwd() == str(tmp_path)
