"""The `varlen` commands and their lines in `varlen --help`: one list, read by the light entry
(`varlen.cli.console`) and by the dispatcher (`varlen.cli.dispatch`)."""

__all__ = ["LIGHT", "SUMMARIES", "TRAINER"]

#: every `varlen` command and its line in `varlen --help`, in that order (varlen.cli.dispatch.COMMANDS runs them)
SUMMARIES = {
    "fit": "Train a model on a DataModule (a config names both).",
    "validate": "One validation epoch (of a checkpoint: --ckpt_path).",
    "test": "One test epoch (of a checkpoint: --ckpt_path).",
    "predict": "The model's outputs on the DataModule's predict_split.",
    "inspect": "A config's batches and padding, without training.",
    "optimize": "A config's training split as LitData chunks.",
    "index-sizes": "The size index of LitData chunks written elsewhere.",
    "verify": "Every stored file hashed against its checksum.",
    "tune": "Loader settings measured here; --budget: max_tokens.",
}
#: the commands that import no torch model, Lightning or scenario: run by `varlen.cli.console` itself
LIGHT = ("verify",)
#: the commands LightningCLI runs (the Trainer's method of their name); varlen.cli.dispatch.RUNS runs the others
TRAINER = ("fit", "validate", "test", "predict")
