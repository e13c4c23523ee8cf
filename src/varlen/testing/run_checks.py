"""The contract's checks on the model and on whole runs: per-sample outputs, padding, the CLI, DDP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from varlen.datamodules.base import VarLenDataModule
from varlen.models.base import VarLenModule
from varlen.testing.hooks import ContractHooks
from varlen.testing.runs import ddp_fit

__all__ = ["ModelChecks", "RunChecks"]


class ModelChecks(ContractHooks):
    """Each output row belongs to its sample, and padding does not change it."""

    def test_forward_is_per_sample(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        """Permuting a batch permutes its outputs: row `i` belongs to sample `i`."""
        picks = list(range(min(6, len(datamodule.dataset("val")))))
        if len(picks) < 2:
            pytest.skip("needs two validation samples")
        order = picks[::-1]
        batch = self.collate(datamodule, "val", picks)
        flipped = self.collate(datamodule, "val", order)
        with torch.no_grad():
            output, output_flipped = model(batch), model(flipped)
        assert output.shape[0] == len(picks)
        for j, i in enumerate(order):
            torch.testing.assert_close(
                self.real_output(output_flipped, flipped, j),
                self.real_output(output, batch, i),
                atol=self.invariance_atol,
                rtol=1e-4,
            )
        assert not torch.allclose(self.real_output(output, batch, 0), self.real_output(output, batch, order[0]))

    def test_padding_does_not_change_outputs(self, datamodule: VarLenDataModule, model: VarLenModule) -> None:
        """A sample's output in a batch with the longest and shortest samples equals its output alone."""
        dataset = datamodule.dataset("val")
        sizes = np.asarray(datamodule.sampler_lengths(dataset)).reshape(len(dataset), -1)[:, 0]
        # the shortest and longest samples together: the shortest is mostly padding
        picks = list(dict.fromkeys([int(np.argmin(sizes)), int(np.argmax(sizes)), *range(min(4, len(dataset)))]))
        batch = self.collate(datamodule, "val", picks)
        with torch.no_grad():
            together = model(batch)
            for i, index in enumerate(picks):
                alone_batch = self.collate(datamodule, "val", [index])
                alone = self.real_output(model(alone_batch), alone_batch, 0)
                torch.testing.assert_close(
                    self.real_output(together, batch, i), alone, atol=self.invariance_atol, rtol=1e-4
                )


class RunChecks(ContractHooks):
    """The command line runs, logs and maps predictions back; a 2-process fit equals one process."""

    def _cli(self, subcommand: str, tmp_path: Path, *extra: str):
        if self.config is None:
            pytest.skip("no config for this scenario")
        from varlen.cli.dispatch import main

        args = [
            subcommand,
            "--config",
            self.config,
            "--trainer.accelerator=cpu",
            f"--trainer.default_root_dir={tmp_path}",
            *self.cli_overrides,
            *extra,
        ]
        return main(args)

    @pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
    def test_cli_runs_and_logs(self, subcommand: str, tmp_path: Path) -> None:
        cli = self._cli(subcommand, tmp_path, "--trainer.fast_dev_run=1")
        trainer = cli.trainer
        if subcommand == "fit":
            assert trainer.global_step == 1
        prefix = {"fit": "val/", "validate": "val/", "test": "test/"}[subcommand]
        logged = [k for k in trainer.callback_metrics if k.startswith(prefix)]
        assert f"{prefix}loss" in logged, sorted(trainer.callback_metrics)
        assert all(torch.isfinite(trainer.callback_metrics[k]) for k in logged)

    def test_cli_predictions_map_back_to_samples(self, tmp_path: Path) -> None:
        cli = self._cli("predict", tmp_path, "--trainer.fast_dev_run=1")
        predictions = cli.trainer.predict_loop.predictions
        assert predictions, "predict returned nothing"
        dm = cli.datamodule
        dataset = dm.dataset("predict" if "predict" in dm.datasets else dm.predict_split)
        for output in predictions:
            index = output["index"]
            assert index.ndim == 1 and len(set(index.tolist())) == len(index)
            assert all(0 <= i < len(dataset) for i in index.tolist())
            for name, value in output.items():
                if torch.is_tensor(value) and value.ndim:
                    assert value.shape[0] == len(index), (name, tuple(value.shape))
            for i in index.tolist()[:3]:
                assert int(dataset[i]["index"]) == i

    # -- DDP ------------------------------------------------------------------------------

    def test_ddp_fit_covers_all_and_metrics_equal_one_process(self, tmp_path: Path) -> None:
        """Two processes from an empty cache: equal steps, every sample once, and the validation
        metrics of the trained weights equal to what one process computes from them."""
        if self.config is None:
            pytest.skip("no config for this scenario")
        overrides = self.ddp_overrides(tmp_path)
        records = ddp_fit(self.config, tmp_path, overrides)
        assert records[0]["batches"] == records[1]["batches"] == records[0]["num_training_batches"] > 0
        assert records[0]["global_step"] == records[1]["global_step"]
        served = sorted(records[0]["indices"] + records[1]["indices"])
        from varlen.cli.dispatch import main

        one = main(
            [
                "validate",
                "--config",
                self.config,
                "--trainer.accelerator=cpu",
                "--trainer.devices=1",
                "--trainer.logger=false",
                "--trainer.limit_val_batches=null",
                f"--trainer.default_root_dir={tmp_path / 'one'}",
                *overrides,
                f"--ckpt_path={tmp_path / 'steps' / 'validated.ckpt'}",
            ]
        )
        assert served == list(range(len(one.datamodule.dataset("train"))))
        two = json.loads((tmp_path / "steps" / "val_metrics.json").read_text())
        single = {k: float(v) for k, v in one.trainer.callback_metrics.items() if k.startswith("val/")}
        assert two and set(two) == set(single), (sorted(two), sorted(single))
        for name, value in two.items():
            assert value == pytest.approx(single[name], rel=1e-4, abs=1e-6), (name, value, single[name])
