"""The embedded default: deterministic movie-review-like texts, so that everything runs offline."""

from __future__ import annotations

import numpy as np

from varlen.datasets.text.readers import TextTable

__all__ = ["synthetic_reviews", "synthetic_tables"]

_FILLER = (
    "the a this that it film movie story plot scene actor actress director script cast music camera ending "
    "character characters moment moments time minutes hour year one two first last every some most more "
    "and but or so yet while though because when after before then also still just even really quite "
    "is was are were has had have be been being seems felt looks feels becomes turns makes takes gives "
    "about with from into over under through around between without within along across of on in at to "
    "i we you they he she audience viewers critics fans people everyone nobody someone family friends "
    "dialogue pacing tone style direction performance performances effects editing sequence sequences "
    "drama comedy thriller romance documentary sequel remake adaptation premise setting world city night"
).split()
_POLAR = {
    0: (
        "dull boring tedious bland clumsy lifeless awful weak messy predictable shallow forgettable "
        "tiresome pointless confusing flat stale lazy hollow painful"
    ).split(),
    1: (
        "brilliant moving delightful gripping charming vivid clever witty stunning tender powerful "
        "memorable thrilling elegant warm fresh funny beautiful sharp inspired"
    ).split(),
}


def synthetic_reviews(num_samples: int, seed: int = 0) -> dict[str, list]:
    """Deterministic movie-review-like texts with a learnable binary sentiment label.

    Lengths (in words) are log-normal like real reviews: a median near 20 words and a long
    tail past 150. About one word in eight is a sentiment word, most of them of the label's
    polarity, so the label is learnable but not trivial from any single word.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num_samples)
    lengths = np.clip(rng.lognormal(mean=3.0, sigma=0.7, size=num_samples), 4, 250).astype(int)
    texts = []
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        words = rng.choice(_FILLER, size=length)
        polar = rng.random(length) < 0.125
        polar[rng.integers(length)] = True  # at least one opinion per review
        agrees = rng.random(length) < 0.8
        for pos in np.flatnonzero(polar):
            side = label if agrees[pos] else 1 - label
            words[pos] = rng.choice(_POLAR[side])
        texts.append(" ".join(words))
    return {"text": texts, "label": labels.tolist()}


def synthetic_tables(num_samples: int) -> dict[str, TextTable]:
    """Train (``num_samples`` reviews), validation and test (a fifth each, at least 2).

    Each split has a fixed generator seed of its own (0, 1, 2), independent of the DataModule's
    seed: the data stay the same whatever seed shuffles the batches.
    """
    small = max(num_samples // 5, 2)
    tables = {}
    for split, n, seed in (("train", num_samples, 0), ("val", small, 1), ("test", small, 2)):
        reviews = synthetic_reviews(n, seed)
        tables[split] = TextTable(f"synthetic {split}", reviews["text"], reviews["label"])
    return tables
