"""The contract every varlen DataModule and its model keep, as one pytest base class of its parts."""

from __future__ import annotations

from varlen.testing.loader_checks import LoaderChecks
from varlen.testing.run_checks import ModelChecks, RunChecks
from varlen.testing.state_checks import BadInputChecks, CheckpointChecks

__all__ = ["DataModuleContract"]


# pytest collects a class's inherited tests base by base from the last base to the first: the
# parts are listed last-run first, so the checks run loaders, checkpoint, bad input, model, runs
class DataModuleContract(RunChecks, ModelChecks, BadInputChecks, CheckpointChecks, LoaderChecks):
    """Shared tests for a varlen DataModule and its model. Subclass and fill in the hooks.

    Hooks:
        make_datamodule(**overrides): a small DataModule (seconds to set up).
        make_model(datamodule): a small model fitting it.
        bad_input(case, tmp_path): a `BadInput` for each case of `BAD_INPUT_CASES`
            that applies (None for one that does not: the test says so and skips).
        real_output(output, batch, i): sample `i`'s output restricted to its real region
            (default: `output[i]`), for the per-sample tests.
        collated_cost(batch): what the budget bounds, measured on a collated batch: one value per
            budget axis (default: the element count of each mask in `mask_keys`).
        budget_overrides(): arguments that switch the DataModule to a token budget.
        config / cli_overrides: the YAML and the arguments that make the CLI tests tiny.
        ddp_overrides(tmp_path): arguments for the 2-process fit (tiny data, a fresh cache folder).
    """
