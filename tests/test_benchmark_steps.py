"""scripts/benchmark_steps.py: every scenario and layout trains a few timed steps (`--quick`), and a
row names the device its steps ran on and takes its peak memory from there."""

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import matplotlib.image
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_steps", ROOT / "scripts" / "benchmark_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_step_benchmark_measures_every_scenario_and_layout(capsys, tmp_path, monkeypatch) -> None:
    module = load_script()
    fit = pl.Trainer.fit

    def fit_then_move(self, model, *args, **kwargs):
        # what fit's teardown does on a GPU (moves the model back to the CPU), seen on a CPU: the
        # model ends on a device the steps never ran on, so a row labelled from it would say "meta"
        fit(self, model, *args, **kwargs)
        model.to("meta")

    monkeypatch.setattr(pl.Trainer, "fit", fit_then_move)
    rows = module.main(["--quick", "--out", str(tmp_path)])
    expected = [(name, layout or "default") for name, (_, layouts, _) in module.SCENARIOS.items() for layout in layouts]
    assert [(name, row["layout"]) for name, row in rows] == expected
    for name, row in rows:
        assert row["steps"] == 2 and math.isfinite(row["step_ms"]) and row["step_ms"] > 0, (name, row)
        assert 0 < row["efficiency"] <= 1 and row["real_per_s"] > 0 and row["batch_mib"] > 0, (name, row)
        assert row["device"] == "cpu" and math.isfinite(row["peak_mib"]) and row["peak_mib"] > 0, (name, row)
    table = capsys.readouterr().out
    assert table.count("| layout | device |") == len(module.SCENARIOS)
    assert "| meta |" not in table
    image = matplotlib.image.imread(tmp_path / "steps_cpu.png")
    assert image.ndim == 3 and np.ptp(image) > 0


def test_step_timer_reports_cuda_peak_of_the_device_the_steps_ran_on(monkeypatch) -> None:
    """A fake CUDA run: the steps run on cuda:1, then the model goes back to the CPU (fit's teardown).
    The row must say cuda and give the allocator's peak on cuda:1, reset before the timed steps,
    never the host's RSS."""
    module = load_script()
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: calls.append(("sync", device)))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: calls.append(("peak", device)) or 3 * 2**20)
    monkeypatch.setattr(module, "reset_peak_rss", lambda: calls.append(("reset", "rss")))
    monkeypatch.setattr(module, "peak_rss_kib", lambda: calls.append(("peak", "rss")) or 10**9)

    gpu = torch.device("cuda", 1)
    pl_module = SimpleNamespace(device=gpu)
    stats = SimpleNamespace(real=6, padded=8)
    trainer = SimpleNamespace(datamodule=SimpleNamespace(batch_stats=lambda batch: stats))
    batch = {"x": torch.zeros(2, 4)}
    timer = module.StepTimer(warmup=1)
    timer.on_train_start(trainer, pl_module)
    for index in range(3):
        if index == 1:
            assert ("reset", gpu) not in calls  # not during the warm-up
        timer.on_train_batch_start(trainer, pl_module, batch, index)
        timer.on_train_batch_end(trainer, pl_module, None, batch, index)
    timer.on_train_end(trainer, pl_module)
    pl_module.device = torch.device("cpu")  # fit's teardown

    assert timer.report() == {"device": "cuda", "peak_mib": 3.0}
    assert calls.index(("reset", gpu)) < calls.index(("peak", gpu))
    assert not [call for call in calls if call[1] == "rss"]
    assert all(device == gpu for _, device in calls)
    assert len(timer.times) == 2 and (timer.real, timer.allocated) == (12, 16)
