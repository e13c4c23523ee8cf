"""A small synthetic set of random-length float sequences in three classes: what `SequenceDataModule` serves
when no `train` is given (a first run, the shipped config, the tests)."""

from __future__ import annotations

import numpy as np

__all__ = ["SYNTHETIC_CLASSES", "synthetic_sequences"]

SYNTHETIC_CLASSES = ("calm", "wave", "burst")


def synthetic_sequences(count: int = 300, seed: int = 0) -> dict[str, list]:
    """`{"values": [float32 [T] per sample], "label": [class name per sample]}`: T lognormal in 8..400;
    each class has its own level and rhythm under the noise, so a small model learns it in a few epochs."""
    rng = np.random.default_rng([seed, 7])
    labels = rng.integers(len(SYNTHETIC_CLASSES), size=count)
    lengths = np.clip(rng.lognormal(4.0, 0.6, count), 8, 400).astype(np.int64)
    values = []
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        t = np.arange(length)
        signal = 0.5 * label + np.sin(t * (0.15 + 0.35 * label)) * label / 2 + rng.normal(0, 0.5, length)
        values.append(signal.astype(np.float32))
    return {"values": values, "label": [SYNTHETIC_CLASSES[k] for k in labels.tolist()]}
