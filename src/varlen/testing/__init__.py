"""The contract every varlen DataModule and model keeps, as a pytest base class.

Each scenario's tests subclass `DataModuleContract` and implement `make_datamodule`
and `make_model` (and, for the bad-input matrix, `DataModuleContract.bad_input`); the
shared tests then check coverage, equal rank counts, budgets on collated batches, resumption,
per-sample outputs, padding invariance, the report, bad input, the CLI and a real 2-process DDP
run whose metrics must equal one process's. Use it for your own DataModules too.
`StepCounter` and `ValidationRecorder` record what each rank did, for DDP tests.
"""

from varlen.testing.contract import DataModuleContract
from varlen.testing.hooks import BAD_INPUT_CASES, BadInput
from varlen.testing.runs import StepCounter, ValidationRecorder, batch_indices, ddp_fit, run_cli

__all__ = [
    "BAD_INPUT_CASES",
    "BadInput",
    "DataModuleContract",
    "StepCounter",
    "ValidationRecorder",
    "batch_indices",
    "ddp_fit",
    "run_cli",
]
