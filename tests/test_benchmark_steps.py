"""scripts/benchmark_steps.py --quick: every scenario and layout trains a few timed steps."""

import importlib.util
import math
from pathlib import Path

import matplotlib.image
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_quick_step_benchmark_measures_every_scenario_and_layout(capsys, tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("benchmark_steps", ROOT / "scripts" / "benchmark_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--quick", "--out", str(tmp_path)])
    expected = [(name, layout or "default") for name, (_, layouts, _) in module.SCENARIOS.items() for layout in layouts]
    assert [(name, row["layout"]) for name, row in rows] == expected
    for name, row in rows:
        assert row["steps"] == 2 and math.isfinite(row["step_ms"]) and row["step_ms"] > 0, (name, row)
        assert 0 < row["efficiency"] <= 1 and row["real_per_s"] > 0 and row["batch_mib"] > 0, (name, row)
    table = capsys.readouterr().out
    assert table.count("| layout | device |") == len(module.SCENARIOS)
    image = matplotlib.image.imread(tmp_path / "steps_cpu.png")
    assert image.ndim == 3 and np.ptp(image) > 0
