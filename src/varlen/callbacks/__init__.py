"""Lightning callbacks that `varlen fit` adds to a run, and your own Trainer in one call (`fit_callbacks`): one
line per epoch (`progress`), the resumable `last.ckpt` kept at intervals and at an interruption (`resumable`)."""

from varlen.callbacks.fit import fit_callbacks

__all__ = ["fit_callbacks"]
