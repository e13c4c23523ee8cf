"""`varlen tune --write` gives back the user's file: every line whose value tune did not change kept byte for
byte (comments, the first line's included, key order, quoting, layout), the picked values set in place."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml
from sleepy import SleepyData

from varlen.tune import tune_command
from varlen.tune.yaml_edit import HEADER, edited_yaml

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))

COMMENTED = """\
# my run: the first line is a comment
seed_everything: 7  # an inline comment
trainer:
  max_epochs: 3
  callbacks:
    - class_path: my.Callback   # a dash offset the file chose
data:
  class_path: toy.ToyDataModule
  init_args:
    seed: 5
    num_workers: 0       # tune sets this
    multiprocessing_context: 'fork'  # single-quoted on purpose
    on_bad: "raise"      # double-quoted, untouched
    batch_size: null
    # a commented-out option, kept where it is

# the model, last
model:
  lr: 1.0e-03
"""


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines `after` dropped from `before`, and those it added (a line diff)."""
    diff = list(difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True)))
    return [d[2:] for d in diff if d.startswith("- ")], [d[2:] for d in diff if d.startswith("+ ")]


def picked(text: str, **init_args) -> dict:
    wanted = yaml.safe_load(text)
    wanted["data"]["init_args"].update(init_args)
    return wanted


def test_only_the_lines_of_changed_values_change_and_quotes_comments_and_order_stay() -> None:
    wanted = picked(COMMENTED, num_workers=2, multiprocessing_context="spawn", prefetch_factor=4, pin_memory=False)
    out = edited_yaml(COMMENTED, wanted, f"{HEADER} (a note):\n--data.init_args.num_workers=2")
    assert yaml.safe_load(out) == wanted
    removed, added = changed_lines(COMMENTED, out)
    assert removed == [
        "    num_workers: 0       # tune sets this\n",
        "    multiprocessing_context: 'fork'  # single-quoted on purpose\n",
    ]
    assert added == [
        f"# {HEADER} (a note):\n",
        "# --data.init_args.num_workers=2\n",
        "    num_workers: 2       # tune sets this\n",  # the comment stays at its column
        "    multiprocessing_context: 'spawn' # single-quoted on purpose\n",  # the quotes and the column stay
        "    prefetch_factor: 4\n",  # new keys after the mapping's last entry, before the comments after it
        "    pin_memory: false\n",
    ]
    lines = out.splitlines()
    assert lines.index("    pin_memory: false") < lines.index("    # a commented-out option, kept where it is")


def test_written_again_the_old_header_is_replaced_and_an_unchanged_pick_changes_nothing() -> None:
    wanted = picked(COMMENTED, num_workers=2)
    once = edited_yaml(COMMENTED, wanted, f"{HEADER} (first):\n--data.init_args.num_workers=2")
    twice = edited_yaml(once, wanted, f"{HEADER} (second):\n--data.init_args.num_workers=2")
    assert twice == once.replace("(first)", "(second)")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_comes_back_byte_identical_when_nothing_changes(path: Path) -> None:
    text = path.read_text()
    assert edited_yaml(text, yaml.safe_load(text)) == text


def test_a_string_pyyaml_would_read_otherwise_is_quoted_and_a_flow_mapping_stays_flow() -> None:
    text = "data: {init_args: {seed: 1}}  # flow\n"
    out = edited_yaml(text, {"data": {"init_args": {"seed": 1, "name": "yes", "n": None}}})
    # the comment keeps its column where it can, else one space after the value
    assert out == 'data: {init_args: {seed: 1, name: "yes", n: null}} # flow\n'
    assert yaml.safe_load(out)["data"]["init_args"]["name"] == "yes"


def build(rest, with_model):
    dm = SleepyData(0.01, batches=30)
    dm.setup("fit")
    return dm, None


def test_tune_write_keeps_the_users_file_and_sets_the_pick_and_the_command_lines_values(tmp_path, capsys) -> None:
    config, extra, written = tmp_path / "c.yaml", tmp_path / "more.yaml", tmp_path / "tuned.yaml"
    config.write_text(COMMENTED)
    extra.write_text("trainer:\n  max_epochs: 4\n")
    args = ["--config", str(config), "--config", str(extra), "--trainer.devices=1", "--data.init_args.seed=6"]
    timing = ["--workers", "0", "--max-batches", "12", "--setting-seconds", "2"]
    assert tune_command([*args, *timing, "--write", str(written)], build) == 0
    out = written.read_text()
    removed, added = changed_lines(COMMENTED, out)
    # the later file's and the command line's values, and the pick's (0 workers: no start method)
    assert removed == [
        "  max_epochs: 3\n",
        "    seed: 5\n",
        "    multiprocessing_context: 'fork'  # single-quoted on purpose\n",
    ]
    assert added[0].startswith(f"# {HEADER} (") and added[1].startswith("# --data.init_args.num_workers=0 ")
    assert "  max_epochs: 4\n" in added and "    seed: 6\n" in added and "  devices: 1\n" in added
    assert "    multiprocessing_context: null    # single-quoted on purpose\n" in added
    data = yaml.safe_load(out)
    assert data["data"]["init_args"]["num_workers"] == 0 and data["data"]["init_args"]["persistent_workers"] is False
    assert out.splitlines()[2] == "# my run: the first line is a comment"


def test_a_data_section_given_as_a_class_name_keeps_it(tmp_path) -> None:
    from varlen.tune.config import write_config

    source, written = tmp_path / "c.yaml", tmp_path / "out.yaml"
    source.write_text("# short form\ndata: toy.ToyDataModule  # the class alone\n")
    write_config(written, yaml.safe_load(source.read_text()), {"num_workers": 2}, f"{HEADER}:", source)
    assert yaml.safe_load(written.read_text())["data"] == {
        "class_path": "toy.ToyDataModule",
        "init_args": {"num_workers": 2},
    }
    assert written.read_text().startswith(f"# {HEADER}:\n# short form\n")
