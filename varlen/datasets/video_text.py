"""Video-text alignment data: readers, feature stores, tokenisation, segmentation and a synthetic default.

A video has its own number of segments, each segment its own number of frames, and each caption
its own number of tokens: two ragged axes on each side. Everything here keeps the data unpadded;
:mod:`varlen.datamodules.video_text` pads per batch and builds the cross-modal masks.

Inputs:

- **captions with timestamps**, one row per caption (a :class:`CaptionTable`), read from the
  YouCook2 annotation JSON (:func:`read_youcook2`), MSR-VTT-style caption files with one or many
  captions per whole video (:func:`read_msrvtt`), or a generic JSONL with
  ``{"video_id", "start", "end", "text"}`` per line (:func:`read_jsonl`);
- **precomputed visual features** ``[T, D]`` per video at ``fps`` frames per second: a folder of
  ``<video_id>.npy`` files, one ``.npz`` or one HDF5 file keyed by video id (:func:`open_features`),
  or synthetic features (:class:`SyntheticFeatures`, :class:`SentenceFeatures`).

Bad input raises a :class:`VideoTextDataError` naming the file, video and row; with
``errors="skip"`` the offending rows / videos are dropped instead, counted in the dataset's
``skipped`` report and announced with one warning.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from torch.utils.data import Dataset

from varlen.datasets import text as _text
from varlen.datasets.base import DatasetNotFoundError, SkipReport
from varlen.datasets.text import warn_truncated

YOUCOOK2_URL = "http://youcook2.eecs.umich.edu/static/YouCookII/youcookii_annotations_trainval.tar.gz"

Segmentation = Literal["annotated", "fixed"]
Errors = Literal["raise", "skip"]


class VideoTextDataError(ValueError):
    """Bad video-text input; the message names the file, video and row and what is wrong."""


# -- captions ---------------------------------------------------------------------------------


@dataclass
class CaptionTable:
    """Captions with timestamps, one row per caption, plus per-video metadata.

    Attributes:
        videos: video ids; row ``video[k]`` indexes this list.
        durations: seconds per video (NaN when the source does not say; then the features do).
        subsets: split name per video as the source names it ("training", "validate", ...) or "".
        video: ``[R]`` video index of each caption row.
        start, end: ``[R]`` seconds.
        text: ``[R]`` caption strings.
        source: file the table was read from (for error messages).
        rows: ``[R]`` row number in the source (line or annotation position), for error messages.
    """

    videos: list[str]
    durations: np.ndarray
    subsets: list[str]
    video: np.ndarray
    start: np.ndarray
    end: np.ndarray
    text: list[str]
    source: str = "<memory>"
    rows: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.durations = np.asarray(self.durations, dtype=np.float64)
        self.video = np.asarray(self.video, dtype=np.int64)
        self.start = np.asarray(self.start, dtype=np.float64)
        self.end = np.asarray(self.end, dtype=np.float64)
        self.rows = np.arange(len(self.text)) if self.rows is None else np.asarray(self.rows, dtype=np.int64)

    @classmethod
    def from_records(
        cls,
        records: Iterable[tuple[str, float, float, str, int]],
        durations: Mapping[str, float] | None = None,
        subsets: Mapping[str, str] | None = None,
        source: str = "<memory>",
        extra_videos: Sequence[str] = (),
    ) -> CaptionTable:
        """Build from ``(video_id, start, end, text, row)`` records (videos in first-seen order)."""
        ids: dict[str, int] = {v: i for i, v in enumerate(dict.fromkeys(extra_videos))}
        video, start, end, text, rows = [], [], [], [], []
        for vid, s, e, t, r in records:
            video.append(ids.setdefault(vid, len(ids)))
            start.append(s)
            end.append(e)
            text.append(t)
            rows.append(r)
        videos = list(ids)
        durations = durations or {}
        subsets = subsets or {}
        return cls(
            videos=videos,
            durations=np.array([durations.get(v, np.nan) for v in videos], dtype=np.float64),
            subsets=[subsets.get(v, "") for v in videos],
            video=np.asarray(video, dtype=np.int64),
            start=np.asarray(start, dtype=np.float64),
            end=np.asarray(end, dtype=np.float64),
            text=text,
            source=source,
            rows=np.asarray(rows, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.text)

    def where(self, row: int) -> str:
        """Human-readable location of caption row ``row``, for error messages."""
        return f"{self.source}, video {self.videos[self.video[row]]!r}, row {int(self.rows[row])}"


def _missing(path: Path, what: str) -> DatasetNotFoundError:
    hint = f" Download {YOUCOOK2_URL} and extract it there." if "youcook" in path.name.lower() else ""
    return DatasetNotFoundError(f"{what} not found at {path}.{hint}")


def read_youcook2(path: str | os.PathLike) -> CaptionTable:
    """Read the YouCook2 annotation JSON (``database[vid].annotations[*].segment / .sentence``).

    Keeps ``duration`` and ``subset`` ("training" / "validation") per video. A video with an empty
    ``annotations`` list is kept (with no rows) so that the dataset can report it.
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "YouCook2 annotation JSON")
    try:
        database = json.loads(path.read_text())["database"]
    except (json.JSONDecodeError, KeyError) as err:
        raise VideoTextDataError(
            f"{path}: not a YouCook2 annotation file (expected {{'database': ...}}): {err}"
        ) from err
    records = []
    for vid, entry in database.items():
        for k, ann in enumerate(entry.get("annotations", [])):
            try:
                (s, e), sentence = ann["segment"], ann["sentence"]
                records.append((vid, float(s), float(e), str(sentence), k))
            except (KeyError, TypeError, ValueError) as err:
                raise VideoTextDataError(
                    f"{path}, video {vid!r}, annotation {k}: needs segment [start, end] in seconds and sentence, "
                    f"got {ann!r}"
                ) from err
    durations = {}
    for v, entry in database.items():
        if "duration" in entry:
            durations[v] = _seconds(entry["duration"], f"{path}, video {v!r}: duration")
    return CaptionTable.from_records(
        records,
        durations=durations,
        subsets={v: str(e.get("subset", "")) for v, e in database.items()},
        source=str(path),
        extra_videos=list(database),
    )


def _seconds(value: Any, where: str) -> float:
    """A time in seconds, or an error naming where it came from."""
    try:
        seconds = float(value)
    except (TypeError, ValueError) as err:
        raise VideoTextDataError(f"{where} must be a number of seconds, got {value!r}") from err
    if not np.isfinite(seconds):
        raise VideoTextDataError(f"{where} must be a finite number of seconds, got {value!r}")
    return seconds


def read_msrvtt(path: str | os.PathLike) -> CaptionTable:
    """Read MSR-VTT-style captions: every caption describes its whole video.

    Accepts the MSR-VTT ``videodatainfo`` JSON (``videos[*]`` with ``video_id``, ``start time``,
    ``end time``, ``split``; ``sentences[*]`` with ``video_id``, ``caption``) or a JSON list of
    ``{"video_id", "caption"}`` (no durations: they come from the features). Each caption spans
    ``[0, duration]``; one or many captions per video.
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "MSR-VTT caption file")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise VideoTextDataError(f"{path}: not valid JSON ({err})") from err
    videos = data.get("videos", []) if isinstance(data, dict) else []
    sentences = data.get("sentences", []) if isinstance(data, dict) else data
    durations, subsets = {}, {}
    for k, v in enumerate(videos):
        if not isinstance(v, dict) or "video_id" not in v:
            raise VideoTextDataError(f"{path}, videos[{k}]: needs a video_id, got {v!r}")
        if "start time" in v and "end time" in v:
            where = f"{path}, video {v['video_id']!r}"
            start = _seconds(v["start time"], f"{where}: start time")
            durations[v["video_id"]] = _seconds(v["end time"], f"{where}: end time") - start
        subsets[v["video_id"]] = str(v.get("split", ""))
    records = []
    for k, s in enumerate(sentences):
        if not isinstance(s, dict) or "video_id" not in s or "caption" not in s:
            raise VideoTextDataError(f"{path}, sentence {k}: needs video_id and caption, got {s!r}")
        records.append((s["video_id"], 0.0, np.nan, str(s["caption"]), k))  # end: the video's duration
    table = CaptionTable.from_records(
        records, durations=durations, subsets=subsets, source=str(path), extra_videos=[v["video_id"] for v in videos]
    )
    return table


def read_jsonl(path: str | os.PathLike) -> CaptionTable:
    """Read a generic JSONL: one ``{"video_id", "start", "end", "text"}`` object per line.

    Optional keys: ``duration`` (seconds) and ``subset`` per line (the last one seen per video wins).
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "caption JSONL")
    records, durations, subsets = [], {}, {}
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                vid, s, e, t = obj["video_id"], float(obj["start"]), float(obj["end"]), obj["text"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                got = line.strip()[:80]
                raise VideoTextDataError(
                    f"{path}, line {line_no}: expected {{video_id, start, end, text}}, got {got!r} ({err})"
                ) from err
            if "duration" in obj:
                durations[vid] = _seconds(obj["duration"], f"{path}, line {line_no}: duration")
            if "subset" in obj:
                subsets[vid] = str(obj["subset"])
            records.append((str(vid), s, e, str(t), line_no))
    return CaptionTable.from_records(records, durations=durations, subsets=subsets, source=str(path))


READERS = {"youcook2": read_youcook2, "msrvtt": read_msrvtt, "jsonl": read_jsonl}


# -- features ---------------------------------------------------------------------------------


class FeatureStore(Protocol):
    """Per-video features ``[T, D]`` at ``fps`` frames per second, keyed by video id.

    ``dim`` is the store's feature size ``D``: the one most of its videos have (a store is
    judged by its majority, so one odd file is reported as bad instead of making every good
    video look wrong).
    """

    fps: float
    source: str

    @property
    def dim(self) -> int: ...

    def __contains__(self, video_id: str) -> bool: ...

    def shape(self, video_id: str) -> tuple[int, int]:
        """``(T, D)`` without loading the frames."""
        ...

    def load(self, video_id: str) -> np.ndarray:
        """The ``[T, D]`` float32 frames."""
        ...


def _majority_dim(shapes: Iterable[tuple[int, ...]], source: str) -> int:
    """The most common last axis of ``shapes`` (ties: the smallest), or an error when there is none."""
    counts = Counter(int(shape[-1]) for shape in shapes if len(shape) == 2)
    if not counts:
        raise VideoTextDataError(f"{source}: holds no [T, D] features")
    return min(counts, key=lambda d: (-counts[d], d))


def _npy_member_shape(member) -> tuple[int, ...]:
    """Shape of a ``.npy`` stream from its header alone, with numpy's own header readers.

    Format 3.0 only changes the header's text encoding (UTF-8 instead of Latin-1, for
    non-Latin-1 field names), so its header reads like 2.0's.
    """
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, _ = np.lib.format.read_array_header_1_0(member)
    elif version in ((2, 0), (3, 0)):
        shape, _, _ = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return tuple(shape)


class NpyFolderFeatures:
    """A folder of ``<video_id>.npy`` arrays ``[T, D]`` (memory-mapped: shapes cost a header read)."""

    def __init__(self, folder: str | os.PathLike, fps: float) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise DatasetNotFoundError(f"feature folder {self.folder} not found (expected <video_id>.npy files)")
        self.fps = float(fps)
        self.source = str(self.folder)

    def _path(self, video_id: str) -> Path:
        return self.folder / f"{video_id}.npy"

    def __contains__(self, video_id: str) -> bool:
        return self._path(video_id).is_file()

    def shape(self, video_id: str) -> tuple[int, int]:
        return _check_2d(np.load(self._path(video_id), mmap_mode="r").shape, self._path(video_id))

    @functools.cached_property
    def dim(self) -> int:
        """The majority feature size over every file's header."""
        shapes = [np.load(path, mmap_mode="r").shape for path in sorted(self.folder.glob("*.npy"))]
        return _majority_dim(shapes, f"{self.folder} (<video_id>.npy files)")

    def load(self, video_id: str) -> np.ndarray:
        return np.asarray(np.load(self._path(video_id)), dtype=np.float32)


class NpzFeatures:
    """One ``.npz`` archive with an array ``[T, D]`` per video id (shapes read from member headers)."""

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DatasetNotFoundError(f"feature archive {self.path} not found")
        self.fps = float(fps)
        self.source = str(self.path)
        self._archive = None  # opened on first load, once per process (see _open)
        self._pid: int | None = None
        self._shapes: dict[str, tuple[int, ...]] = {}
        with zipfile.ZipFile(self.path) as zf:
            for name in zf.namelist():
                with zf.open(name) as member:
                    try:
                        self._shapes[name.removesuffix(".npy")] = _npy_member_shape(member)  # not the data
                    except ValueError as err:
                        raise VideoTextDataError(f"{self.path}[{name}]: not a readable .npy member ({err})") from err
        self.dim = _majority_dim(self._shapes.values(), str(self.path))

    def __getstate__(self) -> dict[str, Any]:  # the open archive does not pickle (spawned workers)
        return {**self.__dict__, "_archive": None, "_pid": None}

    def _open(self):
        # A forked loader worker inherits the parent's open archive, and with it the file offset
        # that every process then moves: reads interleave and fail their CRC. One per process.
        if self._archive is None or self._pid != os.getpid():
            self._archive, self._pid = np.load(self.path), os.getpid()
        return self._archive

    def __contains__(self, video_id: str) -> bool:
        return video_id in self._shapes

    def shape(self, video_id: str) -> tuple[int, int]:
        return _check_2d(self._shapes[video_id], f"{self.path}[{video_id}]")

    def load(self, video_id: str) -> np.ndarray:
        return np.asarray(self._open()[video_id], dtype=np.float32)


class HDF5Features:
    """One HDF5 file with a dataset ``[T, D]`` per video id; opened lazily in each worker."""

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        import h5py

        self.path = Path(path)
        if not self.path.is_file():
            raise DatasetNotFoundError(f"feature file {self.path} not found")
        self.fps = float(fps)
        self.source = str(self.path)
        with h5py.File(self.path, "r") as f:
            self._shapes = {k: tuple(f[k].shape) for k in f.keys()}
        self.dim = _majority_dim(self._shapes.values(), str(self.path))
        self._file = None
        self._pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:  # an open h5py file does not pickle: reopen per worker
        return {**self.__dict__, "_file": None, "_pid": None}

    def __contains__(self, video_id: str) -> bool:
        return video_id in self._shapes

    def shape(self, video_id: str) -> tuple[int, int]:
        return _check_2d(self._shapes[video_id], f"{self.path}[{video_id}]")

    def load(self, video_id: str) -> np.ndarray:
        if self._file is None or self._pid != os.getpid():  # HDF5 handles must not cross a fork
            import h5py

            self._file, self._pid = h5py.File(self.path, "r"), os.getpid()
        return np.asarray(self._file[video_id][()], dtype=np.float32)


def _check_2d(shape: tuple[int, ...], where: Any) -> tuple[int, int]:
    if len(shape) != 2:
        raise VideoTextDataError(f"{where}: features must be [T, D], got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def open_features(path: str | os.PathLike, fps: float) -> FeatureStore:
    """A feature store by path: a folder of ``.npy``, a ``.npz``, or an ``.h5`` / ``.hdf5`` file."""
    path = Path(path)
    if path.is_dir():
        return NpyFolderFeatures(path, fps)
    if path.suffix == ".npz":
        return NpzFeatures(path, fps)
    if path.suffix in {".h5", ".hdf5"}:
        return HDF5Features(path, fps)
    if not path.exists():
        raise DatasetNotFoundError(f"features not found at {path} (a folder of <video_id>.npy, a .npz or an .h5)")
    raise VideoTextDataError(f"{path}: unknown feature format (use a folder of .npy, a .npz or an .h5/.hdf5)")


def _seed_of(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha1(repr(parts).encode()).digest()[:8], "little")


class _SegmentFeatures:
    """Synthetic frames: noise everywhere, plus each segment's own vector on the frames it spans.

    Generated on demand from ``(seed, video)``, so nothing is held in memory and every loader
    worker sees the same frames.
    """

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
        """``(spans [S, 2] seconds, vectors [S, D])`` painted onto the frames."""
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
    sentence says and a model can learn to align real YouCook2 sentences with "video".
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


# -- the synthetic default --------------------------------------------------------------------

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
    rng = np.random.default_rng([seed, 7])
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
        ends = starts + lengths
        starts, ends = np.round(starts, 1), np.round(ends, 1)
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


# -- tokenisation -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def load_tokenizer(name_or_path: str | None = None):
    """The text scenario's :func:`varlen.datasets.text.load_tokenizer` (same offline default), cached.

    Cached per process: DataModules built again (CLI subcommands, tests) reuse the same object
    instead of reading the tokenizer files again.
    """
    return _text.load_tokenizer(name_or_path)


@dataclass
class Tokenized:
    """Unpadded token ids of many captions: caption ``k`` is ``ids[offsets[k]:offsets[k + 1]]``.

    Attributes:
        ids: all token ids, concatenated.
        offsets: ``[N + 1]``.
        truncated: how many captions were longer than ``max_length`` and were cut.
    """

    ids: np.ndarray
    offsets: np.ndarray
    truncated: int = 0

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def tokenize_captions(
    texts: Sequence[str],
    tokenizer,
    max_length: int = 32,
    cache_dir: str | os.PathLike | None = None,
    source: str = "captions",
) -> Tokenized:
    """Tokenise all captions in batched calls of the tokenizer; keep the ids unpadded.

    Captions are encoded untruncated first so that truncation is counted (and warned about
    once, through :func:`varlen.datasets.text.warn_truncated`); only the captions over
    ``max_length`` are encoded again with truncation (the tokenizer keeps its special tokens).
    With ``cache_dir`` the result is stored as ``.npz`` under a key of (tokenizer, max_length,
    captions), so a second run skips the tokenizer.
    """
    cache = None
    result = None
    if cache_dir is not None:
        key = hashlib.sha1(
            json.dumps([tokenizer.name_or_path, len(tokenizer), max_length, list(texts)]).encode()
        ).hexdigest()[:20]
        cache = Path(cache_dir) / f"captions-{key}.npz"
        if cache.is_file():
            with np.load(cache) as f:
                result = Tokenized(f["ids"], f["offsets"], int(f["truncated"]) if "truncated" in f else 0)
    if result is None:
        texts = list(texts)
        encoded = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        long = [k for k, e in enumerate(encoded) if len(e) > max_length]
        if long:
            cut = tokenizer([texts[k] for k in long], add_special_tokens=True, truncation=True, max_length=max_length)
            for k, ids in zip(long, cut["input_ids"], strict=True):
                encoded[k] = ids
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.fromiter((t for e in encoded for t in e), dtype=np.int64, count=int(offsets[-1]))
        result = Tokenized(ids, offsets, len(long))
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, ids=ids, offsets=offsets, truncated=np.int64(len(long)))
    warn_truncated(result.truncated, len(result.offsets) - 1, max_length, source)
    return result


# -- segmentation and the dataset -------------------------------------------------------------


def frame_ranges(start: np.ndarray, end: np.ndarray, fps: float, num_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """First and one-past-last frame of each ``[start, end)`` span in seconds; at least one frame."""
    first = np.clip(np.floor(np.asarray(start) * fps).astype(np.int64), 0, num_frames - 1)
    last = np.clip(np.ceil(np.asarray(end) * fps).astype(np.int64), first + 1, num_frames)
    return first, last


def _concat_ranges(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """``concatenate([arange(a, b) for a, b in zip(first, last)])`` without the loop."""
    counts = last - first
    offsets = np.repeat(first - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(int(counts.sum())) + offsets


def _subsample(first: np.ndarray, last: np.ndarray, cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices of each segment, at most ``cap`` per segment (evenly spaced); and the counts."""
    counts = last - first
    if cap is None or counts.max(initial=0) <= cap:
        return _concat_ranges(first, last), counts
    kept = np.minimum(counts, cap)
    seg = np.repeat(np.arange(len(first)), kept)
    pos = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    # evenly spaced picks inside each segment
    picks = first[seg] + (pos * counts[seg]) // kept[seg]
    return picks, kept


class VideoTextDataset(Dataset):
    """Videos with their segments and captions, one sample per video, unpadded.

    Video segments are the annotated segments (``segmentation="annotated"``: one caption per
    segment, a diagonal alignment) or fixed-duration cuts of the whole video
    (``segmentation="fixed"``; captions keep their own spans). A segment's features are its
    frames' mean (``frames=False``) or the frames themselves, at most
    ``max_frames_per_segment`` evenly spaced ones (``frames=True``).

    A sample is a dict of numpy arrays:

    - ``index``: position in this dataset;
    - ``video`` ``[S_v, D]`` float32 (pooled), or ``frames`` ``[F_total, D]`` with
      ``frame_counts`` ``[S_v]`` (frames of each segment, in order);
    - ``video_times`` ``[S_v, 2]`` and ``text_times`` ``[S_t, 2]`` (start, end seconds);
    - ``text_ids`` ``[L_total]`` int64 and ``token_counts`` ``[S_t]`` (tokens of each caption).

    ``lengths`` ``[N, 2]``: real elements per sample (video segments, or frames when
    ``frames=True``; caption tokens in total). ``shapes`` ``[N, 4]``: the axes a padded batch
    takes its maxima over, per video: (segments, its longest segment in frames (1 when
    pooled), captions, its longest caption in tokens). The DataModule budgets on these.

    Args:
        table: captions with timestamps.
        features: the feature store.
        tokenized: token ids of ``table.text`` (same row order).
        videos: indices into ``table.videos`` that form this split (default: all).
        segmentation, segment_duration, frames, max_frames_per_segment: see above.
        errors: ``"raise"`` on bad input (default) or ``"skip"`` bad rows / videos, counted in
            :attr:`skipped` (a :class:`~varlen.datasets.base.SkipReport`) and warned about once.
        feature_dim: expected feature size; default: the store's (majority) ``dim``. A video
            with another size raises (or is skipped).
    """

    def __init__(
        self,
        table: CaptionTable,
        features: FeatureStore,
        tokenized: Tokenized,
        videos: Sequence[int] | np.ndarray | None = None,
        segmentation: Segmentation = "annotated",
        segment_duration: float = 10.0,
        frames: bool = False,
        max_frames_per_segment: int | None = 32,
        errors: Errors = "raise",
        feature_dim: int | None = None,
    ) -> None:
        if segmentation not in ("annotated", "fixed"):
            raise ValueError(f"segmentation must be 'annotated' or 'fixed', got {segmentation!r}")
        if segment_duration <= 0:
            raise ValueError(f"segment_duration must be > 0, got {segment_duration}")
        self.table = table
        self.features = features
        self.fps = float(features.fps)
        self.segmentation = segmentation
        self.segment_duration = float(segment_duration)
        self.frames = frames
        self.max_frames_per_segment = max_frames_per_segment
        self.errors = errors
        self.skipped = SkipReport(on_bad=errors, error=VideoTextDataError, option="errors")
        self.feature_dim = int(features.dim if feature_dim is None else feature_dim)
        videos = np.arange(len(table.videos)) if videos is None else np.asarray(videos, dtype=np.int64)
        self._build(videos, tokenized)
        self.skipped.warn(f"video-text entries from {table.source} (see dataset.skipped)")

    def _fail(self, reason: str, where: str) -> None:
        """Raise :class:`VideoTextDataError` naming ``where``, or count the skip under ``reason``."""
        self.skipped.bad(where, reason)

    def _build(self, videos: np.ndarray, tokenized: Tokenized) -> None:
        table = self.table
        n_rows = len(table)
        in_split = np.zeros(len(table.videos), bool)
        in_split[videos] = True
        row_ok = in_split[table.video] if n_rows else np.zeros(0, bool)
        # per-video facts: frames, dimension, duration
        shapes: dict[int, tuple[int, int]] = {}
        video_ok = np.zeros(len(table.videos), bool)
        has_rows = np.bincount(table.video, minlength=len(table.videos)) > 0
        for v in videos.tolist():
            vid = table.videos[v]
            if vid not in self.features:
                where = f"{table.source}, video {vid!r}"
                self._fail(f"captions refer to a video with no features in {self.features.source}", where)
                continue
            shape = self.features.shape(vid)
            where = f"{self.features.source}, video {vid!r}"
            if shape[1] != self.feature_dim:
                self._fail(f"feature dimension {shape[1]} differs from the expected {self.feature_dim}", where)
                continue
            if shape[0] <= 0:
                self._fail("video has no feature frames (T = 0)", where)
                continue
            if not has_rows[v]:
                self._fail("video has no segments (no captions)", f"{table.source}, video {vid!r}")
                continue
            shapes[v] = shape
            video_ok[v] = True
        frames_of = np.array([shapes.get(v, (0, 0))[0] for v in range(len(table.videos))], dtype=np.int64)
        feature_end = frames_of / self.fps  # seconds the features cover
        duration = np.where(np.isfinite(table.durations), table.durations, feature_end)
        # whole-video captions (MSR-VTT) end where the video ends
        end = np.where(np.isnan(table.end), duration[table.video] if n_rows else table.end, table.end)
        start = table.start
        # one frame of slack for rounding (a 12.4 s annotation on 12 frames at 1 fps is fine)
        tolerance = 1.0 / self.fps
        video_of = table.video if n_rows else np.zeros(0, np.int64)
        with np.errstate(invalid="ignore"):
            checks = [
                (~np.isfinite(start) | ~np.isfinite(end), "timestamps are not finite numbers"),
                (start < 0, "segment starts before 0 s"),
                (end <= start, "segment end is not after its start"),
                (end > duration[video_of] + tolerance, "segment ends past the video's end"),
                # the annotated duration may promise more than the features hold: frame ranges
                # would then be clamped to the last frame and the segment filled with other frames
                (end > feature_end[video_of] + tolerance, "segment ends past the end of the video's features"),
                (np.array([not t.strip() for t in table.text], bool), "caption is empty"),
            ]
        keep = row_ok & video_ok[video_of] if n_rows else row_ok
        for bad, reason in checks:
            for r in np.flatnonzero(bad & keep).tolist():
                v = table.video[r]
                detail = (
                    f"start={start[r]:g} s, end={end[r]:g} s, duration={duration[v]:g} s, "
                    f"{frames_of[v]} feature frames at {self.fps:g} fps"
                )
                self._fail(reason, f"{table.where(r)} ({detail})")
            keep &= ~bad
        # a video whose every caption was skipped has no segments left
        alive = np.bincount(table.video[keep], minlength=len(table.videos)) > 0
        for v in np.flatnonzero(video_ok & ~alive).tolist():
            self._fail(
                "video has no segments left after skipping its bad captions",
                f"{table.source}, video {table.videos[v]!r}",
            )
        self.video_ids = [table.videos[v] for v in videos.tolist() if video_ok[v] and alive[v]]
        order_videos = np.array([v for v in videos.tolist() if video_ok[v] and alive[v]], dtype=np.int64)
        # caption rows grouped by video (in split order), sorted by start inside a video
        position = np.full(len(table.videos), -1, np.int64)
        position[order_videos] = np.arange(len(order_videos))
        rows = np.flatnonzero(keep)
        rows = rows[np.lexsort((start[rows], position[table.video[rows]]))]
        self.rows = rows
        self.text_start, self.text_end = start[rows], end[rows]
        captions_per_video = np.bincount(position[table.video[rows]], minlength=len(order_videos))
        self.text_offsets = np.concatenate([[0], np.cumsum(captions_per_video)])
        # token ids of the kept captions, packed in this order
        tok_first, tok_len = tokenized.offsets[rows], tokenized.lengths[rows]
        self.token_counts = tok_len
        self.token_ids = tokenized.ids[_concat_ranges(tok_first, tok_first + tok_len)]
        self.token_offsets = np.concatenate([[0], np.cumsum(tok_len)])
        # video segments
        self.num_frames = frames_of[order_videos]
        self.duration = duration[order_videos]
        if self.segmentation == "annotated":
            self.video_start, self.video_end = self.text_start, self.text_end
            self.segment_offsets = self.text_offsets
        else:
            cuts = np.maximum(1, np.ceil(self.duration / self.segment_duration).astype(np.int64))
            self.segment_offsets = np.concatenate([[0], np.cumsum(cuts)])
            k = np.arange(int(cuts.sum())) - np.repeat(self.segment_offsets[:-1], cuts)
            self.video_start = k * self.segment_duration
            self.video_end = np.minimum((k + 1) * self.segment_duration, np.repeat(self.duration, cuts))
        segments = np.diff(self.segment_offsets)
        seg_video = np.repeat(np.arange(len(order_videos)), segments)
        first, last = frame_ranges(self.video_start, self.video_end, self.fps, np.repeat(self.num_frames, segments))
        self.frame_first, self.frame_last = first, last
        n_videos = len(order_videos)
        captions = np.diff(self.text_offsets)
        tokens = np.add.reduceat(tok_len, self.text_offsets[:-1]) if len(rows) else np.zeros(0, np.int64)
        longest_caption = np.maximum.reduceat(tok_len, self.text_offsets[:-1]) if len(rows) else tokens
        if self.frames:
            per_seg = last - first
            if self.max_frames_per_segment is not None:
                per_seg = np.minimum(per_seg, self.max_frames_per_segment)
            video_size = np.bincount(seg_video, weights=per_seg, minlength=n_videos).astype(np.int64)
            longest_segment = np.maximum.reduceat(per_seg, self.segment_offsets[:-1]) if n_videos else video_size
        else:
            video_size, longest_segment = segments, np.ones(n_videos, np.int64)
        self.lengths = np.stack([video_size, tokens], axis=1).astype(np.int64)
        self.shapes = np.stack([segments, longest_segment, captions, longest_caption], axis=1).astype(np.int64)

    def __len__(self) -> int:
        return len(self.video_ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} videos")
        vid = self.video_ids[i]
        feats = self.features.load(vid)
        if feats.ndim != 2 or feats.shape[1] != self.feature_dim:
            raise VideoTextDataError(
                f"{self.features.source}, video {vid!r}: features of shape {feats.shape}, "
                f"expected [T, {self.feature_dim}]"
            )
        finite = np.isfinite(feats).all(axis=1)
        if not finite.all():  # NaN would spread through pooling and attention to the whole batch
            raise VideoTextDataError(
                f"{self.features.source}, video {vid!r}: features hold NaN or inf in frame(s) "
                f"{np.flatnonzero(~finite)[:10].tolist()}"
            )
        seg = slice(self.segment_offsets[i], self.segment_offsets[i + 1])
        cap = slice(self.text_offsets[i], self.text_offsets[i + 1])
        first, last = self.frame_first[seg], self.frame_last[seg]
        sample: dict[str, Any] = {"index": i}
        if self.frames:
            picks, counts = _subsample(first, last, self.max_frames_per_segment)
            sample["frames"] = feats[picks]
            sample["frame_counts"] = counts
        else:
            cumulative = np.concatenate(
                [np.zeros((1, feats.shape[1]), np.float64), np.cumsum(feats, 0, dtype=np.float64)]
            )
            sample["video"] = ((cumulative[last] - cumulative[first]) / (last - first)[:, None]).astype(np.float32)
        sample["video_times"] = np.stack([self.video_start[seg], self.video_end[seg]], 1).astype(np.float32)
        sample["text_times"] = np.stack([self.text_start[cap], self.text_end[cap]], 1).astype(np.float32)
        sample["token_counts"] = self.token_counts[cap]
        sample["text_ids"] = self.token_ids[self.token_offsets[cap.start] : self.token_offsets[cap.stop]]
        return sample
