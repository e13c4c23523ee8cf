"""The bring-your-own-data example (examples/sensor_sequences.py) passes varlen's own contract."""

import json
import os
import sys
from pathlib import Path

import pytest

from varlen.testing import BadInput, DataModuleContract

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.sensor_sequences import SensorClassifier, SensorDataModule, write_example  # noqa: E402

DATA = ROOT / "examples" / "sensor.jsonl"


@pytest.fixture(autouse=True)
def importable_examples(monkeypatch) -> None:
    """The DDP test's subprocesses import `examples.*` too (and this checkout's varlen first)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT)]))


class TestSensorExampleContract(DataModuleContract):
    config = str(ROOT / "examples" / "sensor.yaml")
    cli_overrides = (f"--data.init_args.path={DATA}",)

    def make_datamodule(self, **overrides):
        return SensorDataModule(**{"path": str(DATA), **overrides})

    def make_model(self, datamodule):
        return SensorClassifier(num_classes=datamodule.num_classes)

    def bad_input(self, case: str, tmp_path: Path):
        good = [json.loads(line) for line in DATA.read_text().splitlines()[:40]]
        path = tmp_path / "bad.jsonl"

        def write(records, extra: str = "") -> dict:
            path.write_text("\n".join(json.dumps(r) for r in records) + "\n" + extra)
            return {"path": str(path)}

        if case == "missing_source":
            return BadInput({"path": str(tmp_path / "absent.jsonl")}, "sensor recordings not found")
        if case == "unreadable_file":
            return BadInput(write(good, "{not json\n"), r"bad\.jsonl, line 41: not a JSON object", "not a JSON object")
        if case == "empty_source":
            path.write_text("")
            return BadInput({"path": str(path)}, "no usable recording")
        if case == "non_finite":
            return BadInput(write([*good, {**good[0], "values": [1.0, float("nan")]}]), "line 41", "non-finite")
        if case == "empty_sample":
            return BadInput(write([*good, {**good[0], "values": []}]), "line 41.*empty", "empty")
        if case == "unknown_label":
            return BadInput(write([*good, {**good[0], "label": "swim"}]), "line 41: unknown label", "unknown label")
        return None


def test_write_example_is_deterministic(tmp_path: Path) -> None:
    a, b = write_example(tmp_path / "a.jsonl", 20), write_example(tmp_path / "b.jsonl", 20)
    assert a.read_text() == b.read_text() and len(a.read_text().splitlines()) == 20
