"""Lightning callbacks that `varlen fit` adds to a run: one line per epoch (`progress`) and the resumable
`last.ckpt` kept at intervals and at an interruption (`resumable`)."""
