"""Generated features and the embedded synthetic corpus (offline, learnable, YouCook2-like shapes).

Frames are generated on demand from `(seed, video)`, so nothing is held in memory and every
loader worker sees the same frames; they are finite by construction (no scan needed).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from varlen.datasets.video_text.captions import CaptionTable
from varlen.datasets.video_text.features import frame_ranges
from varlen.prepare.splits import stream

__all__ = ["SentenceFeatures", "SyntheticFeatures", "synthetic_corpus", "write_msrvtt_files"]


def _seed_of(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha1(repr(parts).encode()).digest()[:8], "little")


class _SegmentFeatures:
    """Synthetic frames: noise everywhere, plus each segment's own vector on the frames it spans."""

    checks_finite = False

    def __init__(self, durations: Mapping[str, float], fps: float, dim: int, noise: float, seed: int) -> None:
        self.durations = dict(durations)
        self.fps = float(fps)
        self.dim = int(dim)
        self.noise = float(noise)
        self.seed = int(seed)
        self.source = f"<synthetic features, seed {seed}>"

    def __contains__(self, video_id: str) -> bool:
        return video_id in self.durations

    def shape(self, video_id: str) -> tuple[int, int]:
        return max(1, int(np.ceil(self.durations[video_id] * self.fps))), self.dim

    def segments(self, video_id: str) -> tuple[np.ndarray, np.ndarray]:
        """`(spans [S, 2] seconds, vectors [S, D])` painted onto the frames."""
        raise NotImplementedError

    def load(self, video_id: str) -> np.ndarray:
        frames, dim = self.shape(video_id)
        rng = np.random.default_rng(_seed_of(self.seed, video_id))
        out = (self.noise * rng.standard_normal((frames, dim))).astype(np.float32)
        spans, vectors = self.segments(video_id)
        if len(spans):
            first, last = frame_ranges(spans[:, 0], spans[:, 1], self.fps, frames)
            per_frame = np.zeros((frames + 1, dim), np.float32)  # difference array: +v at start, -v at end
            np.add.at(per_frame, first, vectors)
            np.add.at(per_frame, last, -vectors)
            out += np.cumsum(per_frame, axis=0)[:frames]
        return out


class SyntheticFeatures(_SegmentFeatures):
    """Frames of the synthetic corpus: each segment shows its latent step's embedding."""

    def __init__(
        self,
        spans: Mapping[str, np.ndarray],
        steps: Mapping[str, np.ndarray],
        step_embeddings: np.ndarray,
        durations: Mapping[str, float],
        fps: float,
        noise: float,
        seed: int,
    ) -> None:
        super().__init__(durations, fps, step_embeddings.shape[1], noise, seed)
        self.spans = dict(spans)
        self.steps = dict(steps)
        self.step_embeddings = np.asarray(step_embeddings, np.float32)

    def segments(self, video_id: str) -> tuple[np.ndarray, np.ndarray]:
        return self.spans[video_id], self.step_embeddings[self.steps[video_id]]


class SentenceFeatures(_SegmentFeatures):
    """Synthetic frames for real annotations: each segment shows the mean of its words' vectors.

    Every word maps to a fixed random vector (seeded by the word), so the features carry what the
    sentence says and a model can learn to align real YouCook2 sentences with "video". Videos
    without a known duration have no features (the dataset reports them).
    """

    def __init__(self, table: CaptionTable, fps: float, dim: int, noise: float, seed: int) -> None:
        durations = {v: d for v, d in zip(table.videos, table.durations, strict=True) if np.isfinite(d)}
        super().__init__(durations, fps, dim, noise, seed)
        self._rows: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._words: dict[str, np.ndarray] = {}  # word -> vector, filled on first use (per worker)
        order = np.argsort(table.video, kind="stable")
        bounds = np.searchsorted(table.video[order], np.arange(len(table.videos) + 1))
        for k, vid in enumerate(table.videos):
            rows = order[bounds[k] : bounds[k + 1]]
            spans = np.stack([table.start[rows], table.end[rows]], 1) if len(rows) else np.zeros((0, 2))
            self._rows[vid] = (spans, [table.text[r] for r in rows])

    def word_vector(self, word: str) -> np.ndarray:
        """The word's fixed random vector, seeded by the word; cached (a seeded RNG per word is slow)."""
        vector = self._words.get(word)
        if vector is None:
            v = np.random.default_rng(_seed_of(self.seed, "word", word)).standard_normal(self.dim)
            vector = self._words[word] = (v / np.sqrt(self.dim)).astype(np.float32)
        return vector

    def segments(self, video_id: str) -> tuple[np.ndarray, np.ndarray]:
        spans, texts = self._rows[video_id]
        spans = np.nan_to_num(spans, nan=self.durations[video_id])
        vectors = np.zeros((len(texts), self.dim), np.float32)
        for k, text in enumerate(texts):
            words = [w for w in text.lower().split() if w.isalpha()] or ["<empty>"]
            vectors[k] = 2.0 * np.mean([self.word_vector(w) for w in words], axis=0) * np.sqrt(len(words))
        return spans, vectors


_SYLLABLES = ["ba", "ko", "ri", "mu", "te", "sa", "no", "li", "pe", "da", "fu", "gi", "ha", "jo", "ve", "zu"]


def _pseudo_words(count: int, rng: np.random.Generator) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < count:
        syllables = 2 if count <= 0.8 * len(_SYLLABLES) ** 2 else 3  # short words, few word pieces
        words["".join(rng.choice(_SYLLABLES, syllables))] = None
    return list(words)


def synthetic_corpus(
    num_videos: int = 600,
    num_steps: int = 32,
    dim: int = 32,
    fps: float = 1.0,
    noise: float = 1.0,
    seed: int = 0,
) -> tuple[CaptionTable, SyntheticFeatures]:
    """A learnable video-text corpus with YouCook2-like ragged shapes (the embedded default).

    Each video follows a recipe: a sequence of latent steps (3 to 16 of them, long-tailed, median
    about 7); each step lasts a lognormal number of seconds (median about 12 s, so frames per
    segment vary), with gaps between steps. A segment's frames are its step's embedding plus
    noise; its caption draws words mostly from the step's own vocabulary of pseudo-words (plus
    shared filler words), so captions align with segments by content, not position.

    Returns:
        The caption table (subset "" for every video) and the matching feature store.
    """
    rng = stream(seed, "synthetic video-text corpus")
    step_embeddings = rng.standard_normal((num_steps, dim)).astype(np.float32)
    vocab = _pseudo_words(num_steps * 6 + 12, rng)
    step_words = [vocab[6 * k : 6 * k + 6] for k in range(num_steps)]
    filler = vocab[num_steps * 6 :]
    counts = np.clip(np.round(rng.lognormal(np.log(7), 0.4, num_videos)), 3, 16).astype(int)
    records, durations, spans, steps = [], {}, {}, {}
    for v in range(num_videos):
        vid = f"syn{v:05d}"
        chosen = rng.choice(num_steps, size=counts[v], replace=False)
        lengths = np.clip(rng.lognormal(np.log(12), 0.6, counts[v]), 2, 90)
        gaps = rng.uniform(1, 15, counts[v] + 1)
        starts = np.cumsum(np.concatenate([[gaps[0]], (lengths + gaps[1:])[:-1]]))
        starts, ends = np.round(starts, 1), np.round(starts + lengths, 1)
        durations[vid] = float(np.ceil(ends[-1] + gaps[-1]))
        spans[vid] = np.stack([starts, ends], 1)
        steps[vid] = chosen
        for k, step in enumerate(chosen):
            n_words = int(np.clip(rng.lognormal(np.log(5), 0.4), 2, 16))
            own = rng.random(n_words) < 0.7
            words = np.where(own, rng.choice(step_words[step], n_words), rng.choice(filler, n_words))
            records.append((vid, float(starts[k]), float(ends[k]), " ".join(words), k))
    table = CaptionTable.from_records(records, durations=durations, source=f"<synthetic corpus, seed {seed}>")
    features = SyntheticFeatures(spans, steps, step_embeddings, durations, fps, noise, seed)
    return table, features


def _msrvtt_sentence(rng: np.random.Generator, topic: np.ndarray, concepts: list[str], filler: list[str]) -> str:
    """Two of the video's three concepts among 4 to 9 filler words, in a random order."""
    words = [concepts[c] for c in rng.choice(topic, 2, replace=False)]
    words += list(rng.choice(filler, int(rng.integers(4, 10))))
    return " ".join(rng.permutation(words))


def _write_lists(folder: Path, ids: list[str], splits: list[str], pairs: list[tuple[str, str]]) -> dict[str, Path]:
    """The two train lists (9k: all but the test pairs' videos; 7k: the JSON's train split) and the pairs."""
    tested = {vid for vid, _ in pairs}
    lists = {
        "MSRVTT_train.9k.csv": [vid for vid in ids if vid not in tested],
        "MSRVTT_train.7k.csv": [vid for vid, split in zip(ids, splits, strict=True) if split == "train"],
    }
    for name, listed in lists.items():
        (folder / name).write_text("video_id\n" + "".join(f"{vid}\n" for vid in listed))
    with (folder / "MSRVTT_JSFUSION_test.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["key", "vid_key", "video_id", "sentence"])
        writer.writerows([f"ret{k}", vid.replace("video", "msr"), vid, text] for k, (vid, text) in enumerate(pairs))
    return {"train_list": folder / "MSRVTT_train.9k.csv", "test_pairs": folder / "MSRVTT_JSFUSION_test.csv"}


def write_msrvtt_files(
    folder: str | os.PathLike,
    num_videos: int = 3000,
    num_test: int = 1000,
    captions_per_video: int = 20,
    dim: int = 64,
    num_concepts: int = 400,
    noise: float = 1.0,
    seed: int = 0,
    shuffle_features: bool = False,
) -> dict[str, Path]:
    """MSR-VTT-shaped files with synthetic features, in the layouts of CLIP4Clip's `msrvtt_data.zip`.

    Writes `MSRVTT_data.json` (`videos` with `split` train / validate / test, `sentences`),
    `MSRVTT_train.9k.csv` (every video but the test pairs'), `MSRVTT_train.7k.csv` (the JSON's
    train videos), `MSRVTT_JSFUSION_test.csv` (one sentence for each of `num_test` videos) and
    `features.h5` (`[T, dim]` per video, 10 to 30 frames). Each video shows three concepts (of
    `num_concepts` pseudo-words): every frame is the sum of their embeddings plus `noise`, and
    each caption names two of them among filler words, so captions and features share content.
    `shuffle_features`: store each video's frames under another video's id (a control that
    keeps every shape and statistic but the pairing).

    Returns:
        The paths by DataModule argument: `annotations`, `train_list`, `test_pairs`, `features`.
    """
    import h5py

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = stream(seed, "synthetic MSR-VTT files")
    vocab = _pseudo_words(num_concepts + 40, rng)
    concepts, filler = vocab[:num_concepts], vocab[num_concepts:]
    embeddings = rng.standard_normal((num_concepts, dim)).astype(np.float32) / np.sqrt(3.0)
    ids = [f"video{v}" for v in range(num_videos)]
    test = np.zeros(num_videos, bool)
    test[rng.choice(num_videos, num_test, replace=False)] = True
    splits = np.where(test, "test", np.where(rng.random(num_videos) < 0.05, "validate", "train")).tolist()
    topics = [rng.choice(num_concepts, 3, replace=False) for _ in ids]
    frames = rng.integers(10, 31, num_videos)
    videos = [
        {"video_id": vid, "start time": 0.0, "end time": float(t), "split": split, "id": v}
        for v, (vid, split, t) in enumerate(zip(ids, splits, frames, strict=True))
    ]
    texts = [[_msrvtt_sentence(rng, topic, concepts, filler) for _ in range(captions_per_video)] for topic in topics]
    sentences = [{"caption": t, "video_id": vid} for vid, own in zip(ids, texts, strict=True) for t in own]
    for k, sentence in enumerate(sentences):
        sentence["sen_id"] = k
    paths = {"annotations": folder / "MSRVTT_data.json", "features": folder / "features.h5"}
    paths["annotations"].write_text(json.dumps({"videos": videos, "sentences": sentences}))
    paths |= _write_lists(folder, ids, splits, [(ids[v], texts[v][0]) for v in np.flatnonzero(test)])
    owner = rng.permutation(num_videos) if shuffle_features else np.arange(num_videos)
    with h5py.File(paths["features"], "w") as f:
        for vid, w in zip(ids, owner.tolist(), strict=True):
            noisy = noise * rng.standard_normal((int(frames[w]), dim))
            f[vid] = (embeddings[topics[w]].sum(0) + noisy).astype(np.float32)
    return paths
