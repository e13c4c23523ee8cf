"""The README's "Bring your own data" snippets run as written, each in a fresh folder and interpreter namespace."""

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Bring your own data"


def section_blocks() -> list[str]:
    """The Python blocks of the README's section, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], flags=re.S)


def test_the_section_has_a_snippet_per_level() -> None:
    assert len(section_blocks()) == 3


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_level_runs_as_written(level: int, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VARLEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = section_blocks()[level - 1]
    namespace = {"__name__": f"readme_level_{level}"}
    exec(compile(code, f"README.md ({SECTION}, level {level})", "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out
    dm = namespace["dm"]
    assert type(dm).__name__ in printed, "each level prints its DataModule"
    assert len(dm.dataset("train")) > 0
    if "trainer" in namespace:  # level 2 trains one epoch: every planned batch of the training split
        assert namespace["trainer"].global_step == len(dm.train_dataloader()) > 0
    assert os.getcwd() == str(tmp_path)
