"""The embedded default: deterministic movie-review-like texts, so that everything runs offline.

Two kinds: short reviews (`synthetic_reviews`, SST-2-like lengths) and long ones
(`synthetic_long_reviews`, IMDB-like lengths) whose opinions are few and mostly late in
the text, so that truncating to the first `max_length` tokens loses most of the signal.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from varlen.datasets.text.readers import TextTable

__all__ = [
    "SYNTHETIC_KINDS",
    "iter_long_reviews",
    "iter_reviews",
    "iter_synthetic",
    "opinion_votes",
    "synthetic_labels",
    "synthetic_long_reviews",
    "synthetic_name",
    "synthetic_reviews",
    "synthetic_splits",
    "synthetic_tables",
]

#: the synthetic sets a DataModule can use
SYNTHETIC_KINDS = ("reviews", "long_reviews")

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


def synthetic_labels(num_samples: int, seed: int = 0) -> np.ndarray:
    """The labels `synthetic_reviews` and `synthetic_long_reviews` give (their first draw),
    without writing a text: what the class list needs."""
    return np.random.default_rng(seed).integers(0, 2, num_samples)


def iter_reviews(num_samples: int, seed: int = 0) -> Iterator[tuple[str, int]]:
    """`synthetic_reviews` one `(text, label)` at a time (the same texts: one generator stream)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num_samples)
    lengths = np.clip(rng.lognormal(mean=3.0, sigma=0.7, size=num_samples), 4, 250).astype(int)
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        words = rng.choice(_FILLER, size=length)
        polar = rng.random(length) < 0.125
        polar[rng.integers(length)] = True  # at least one opinion per review
        agrees = rng.random(length) < 0.8
        for pos in np.flatnonzero(polar):
            side = label if agrees[pos] else 1 - label
            words[pos] = rng.choice(_POLAR[side])
        yield " ".join(words), label


def synthetic_reviews(num_samples: int, seed: int = 0) -> dict[str, list]:
    """Deterministic movie-review-like texts with a learnable binary sentiment label.

    Lengths (in words) are log-normal like real reviews: a median near 20 words and a long
    tail past 150. About one word in eight is a sentiment word, most of them of the label's
    polarity, so the label is learnable but not trivial from any single word.
    """
    return _collect(iter_reviews(num_samples, seed))


def _collect(reviews: Iterator[tuple[str, int]]) -> dict[str, list]:
    texts, labels = [], []
    for text, label in reviews:
        texts.append(text)
        labels.append(label)
    return {"text": texts, "label": labels}


def iter_long_reviews(
    num_samples: int, seed: int = 0, median_words: int = 300, words_per_opinion: float = 40.0, agreement: float = 0.75
) -> Iterator[tuple[str, int]]:
    """`synthetic_long_reviews` one `(text, label)` at a time (the same texts)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num_samples)
    lengths = np.clip(rng.lognormal(np.log(median_words), 0.6, num_samples), 60, 1500).astype(int)
    for label, length in zip(labels.tolist(), lengths.tolist(), strict=True):
        words = rng.choice(_FILLER, size=length)
        count = max(1, rng.poisson(length / words_per_opinion))
        where = np.unique((length * np.sqrt(rng.random(count))).astype(int).clip(0, length - 1))
        agrees = rng.random(len(where)) < agreement
        for pos, agree in zip(where.tolist(), agrees.tolist(), strict=True):
            words[pos] = rng.choice(_POLAR[label if agree else 1 - label])
        yield " ".join(words), label


def synthetic_long_reviews(
    num_samples: int, seed: int = 0, median_words: int = 300, words_per_opinion: float = 40.0, agreement: float = 0.75
) -> dict[str, list]:
    """Deterministic long reviews whose sentiment is spread thinly over the whole text.

    Lengths (in words, about one MiniLM token each) are log-normal around `median_words`
    (from 60 to 1,500). A review holds about one opinion word per `words_per_opinion` words
    (one at least), placed with a density that grows along the text (a plot summary first, the
    verdict later: the first 40% of a review holds about 16% of its opinions); each agrees with
    the label with probability `agreement`. Reading the whole review, a majority vote of its
    opinions is right about 9 times in 10; reading the first 128 tokens, far less often (see
    `opinion_votes`).
    """
    return _collect(iter_long_reviews(num_samples, seed, median_words, words_per_opinion, agreement))


def opinion_votes(texts: list[str], first_words: int | None = None) -> np.ndarray:
    """The label a majority vote of the opinion words gives each text (ties: 1), over its first
    `first_words` words (None: all): the reference a classifier of the synthetic reviews can reach."""
    polar = {w: side for side, words in _POLAR.items() for w in words}
    votes = []
    for text in texts:
        sides = [polar[w] for w in text.split()[:first_words] if w in polar]
        votes.append(int(2 * sum(sides) >= len(sides)))
    return np.asarray(votes, dtype=np.int64)


def synthetic_splits(num_samples: int) -> dict[str, tuple[int, int]]:
    """`split -> (reviews, generator seed)` of `synthetic_tables`: validation and test a fifth of
    the training set (2 at least); the seeds fixed (0, 1, 2), independent of the DataModule's seed."""
    small = max(num_samples // 5, 2)
    return {"train": (num_samples, 0), "val": (small, 1), "test": (small, 2)}


def synthetic_name(kind: str, split: str) -> str:
    """What messages call a synthetic split."""
    return f"synthetic {kind} {split}" if kind != "reviews" else f"synthetic {split}"


def iter_synthetic(kind: str, num_samples: int, seed: int) -> Iterator[tuple[str, int]]:
    """The reviews of `kind` one `(text, label)` at a time."""
    if kind not in SYNTHETIC_KINDS:
        raise ValueError(f"synthetic kind must be one of {SYNTHETIC_KINDS}, got {kind!r}")
    return iter_reviews(num_samples, seed) if kind == "reviews" else iter_long_reviews(num_samples, seed)


def synthetic_tables(num_samples: int, kind: str = "reviews") -> dict[str, TextTable]:
    """Train (`num_samples` reviews), validation and test (a fifth each, at least 2).

    Each split has a fixed generator seed of its own (0, 1, 2), independent of the DataModule's
    seed: the data stay the same whatever seed shuffles the batches.

    Args:
        num_samples: training reviews.
        kind: `"reviews"` (short, `synthetic_reviews`) or `"long_reviews"`
            (`synthetic_long_reviews`).
    """
    tables = {}
    for split, (n, seed) in synthetic_splits(num_samples).items():
        reviews = _collect(iter_synthetic(kind, n, seed))
        tables[split] = TextTable(synthetic_name(kind, split), reviews["text"], reviews["label"])
    return tables
