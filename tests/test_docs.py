"""The documentation: the README stays short, the site builds with `--strict` (no broken link, anchor, page or API
reference), its API reference covers every public DataModule and model, every link to a page (from the README,
ARCHITECTURE.md, the code, the scripts) names one that exists, and every `python` block of the README and of
the site's pages runs as written, each in a fresh folder and namespace (blocks shown but not run, which need the
network or a whole training, are `py`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
#: the "Bring your own data" levels: each prints its DataModule, level 2 trains one epoch
OWN_DATA = DOCS / "own-data.md"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M)


BLOCKS = [(page, i) for page in PAGES for i in range(len(python_blocks(page)))]


def test_the_readme_is_short_and_says_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "bash scripts/run.sh demo" in text and "bash scripts/run.sh test" in text
    assert "bash scripts/run.sh test" in (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/run.sh docs" not in text.split("## Two commands")[1].split("\n## ")[0], "not a third command"


def test_the_site_builds_strict(tmp_path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"mkdocs build --strict: {time.perf_counter() - start:.1f} s; {done.stderr.strip().splitlines()[-1]}")
    site = tmp_path / "site"
    built = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in DOCS.rglob("*.md"):
        name = page.relative_to(DOCS).with_suffix("").as_posix()
        assert ("index.html" if name == "index" else f"{name}/index.html") in built, name
    # the API reference: every public DataModule and model, generated from its docstring
    import varlen.datamodules
    import varlen.models

    datamodules = (site / "api" / "datamodules" / "index.html").read_text()
    models = (site / "api" / "models" / "index.html").read_text()
    for name in [*varlen.datamodules.SCENARIOS, "VarLenDataModule"]:
        assert f'id="varlen.datamodules.{varlen.datamodules.SCENARIOS.get(name, "base")}.{name}"' in datamodules, name
    for name in [*varlen.models.SCENARIOS, "VarLenModule"]:
        assert f'id="varlen.models.{varlen.models.SCENARIOS.get(name, "base")}.{name}"' in models, name
    # the docstrings render: no Sphinx role or reST literal is left raw on any built page
    raw = {page.relative_to(site).as_posix(): RAW_ON_PAGE.findall(page.read_text()) for page in site.rglob("*.html")}
    assert not {page: found for page, found in raw.items() if found}
    # ARCHITECTURE.md stays at the root, included (not copied) by the site's page
    assert (DOCS / "architecture.md").read_text().strip() == '--8<-- "ARCHITECTURE.md"'
    assert "How a batch flows" in (site / "architecture" / "index.html").read_text()


#: what a docstring written for Sphinx leaves on a page mkdocstrings built, or in `--data.help`: a role, a reST literal
RAW_MARKUP = re.compile(r":(?:py:)?(?:attr|class|func|meth|mod|data|obj|exc|ref):`|(?<!`)``(?!`)")
#: the same on a built page, where Markdown made the role's text a code span: ":class:<code>..."
RAW_ON_PAGE = re.compile(r":(?:py:)?(?:attr|class|func|meth|mod|data|obj|exc|ref):(?:<code>|`)")


def test_docstrings_are_markdown() -> None:
    """One docstring syntax that the site and a terminal both render: Markdown code spans, never Sphinx's."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "src" / "varlen").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if RAW_MARKUP.search(line)
    ]
    assert not found, found[:20]


#: a page named by path anywhere outside the site: `docs/<page>.md` (optionally `#anchor`)
PAGE_NAME = re.compile(r"\bdocs/([\w/-]+\.md)")
#: a Markdown link of the README or ARCHITECTURE.md to a file of the repository
LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)\s]*)?\)")


def test_every_page_named_exists() -> None:
    """The README's and ARCHITECTURE.md's links, and any `docs/<page>.md` a module, script, test or config
    names (an error message pointing to the documentation), point to a file there is."""
    named: list[tuple[str, Path]] = []
    for doc in (README, ROOT / "ARCHITECTURE.md"):
        text = doc.read_text(encoding="utf-8")
        named += [(f"{doc.name}: {link}", ROOT / link) for link in LINK.findall(text)]
        named += [(f"{doc.name}: docs/{page}", DOCS / page) for page in PAGE_NAME.findall(text)]
    for folder in ("varlen", "scripts", "tests", "configs", "examples", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sh", ".yaml", ".md", ""}:
                text = path.read_text(encoding="utf-8", errors="replace")
                named += [(f"{path.relative_to(ROOT)}: docs/{page}", DOCS / page) for page in PAGE_NAME.findall(text)]
    assert named
    missing = [where for where, target in named if not target.exists()]
    assert not missing, missing


def test_the_pages_hold_the_runnable_examples() -> None:
    assert len(python_blocks(OWN_DATA)) == 3 and len(python_blocks(README)) == 2
    assert len(python_blocks(DOCS / "batching.md")) == 1  # the sampler and collate in a plain DataLoader


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
