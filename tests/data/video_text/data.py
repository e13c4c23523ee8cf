"""Writes tiny fake video-text files in the real formats (seeded): run `python data.py` here.

- `youcook2.json`: the YouCook2 annotation layout (`database[vid]` with `duration`,
  `subset`, `annotations[*].segment / .sentence`), 6 training + 3 validation videos.
- `features/<vid>.npy`: `[T, 8]` float32 features at 1 fps for those videos.
- `features.npz` and `features.h5`: the same features keyed by video id.
- `msrvtt.json`: MSR-VTT `videodatainfo` layout, several captions per whole video.
- `captions.jsonl`: the generic `video_id, start, end, text` layout.
- `msrvtt/`: MSR-VTT's four retrieval files (CLIP4Clip's `msrvtt_data.zip` layouts) for 13
  videos, see `msrvtt`, and `features.npz`: `[T, 16]` features whose content is each
  video's topic, so that retrieval metrics on them can be worked out by hand.
"""

import csv
import json
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).parent
DIM = 8
WORDS = ["add", "the", "onion", "stir", "salt", "pan", "oil", "cut", "bread", "mix", "water", "boil", "pour", "egg"]


def main() -> None:
    rng = np.random.default_rng(0)
    database, features = {}, {}
    for v in range(9):
        vid = f"vid{v:02d}"
        n = int(rng.integers(1, 6))
        starts = np.sort(rng.choice(np.arange(0, 40, 4), n, replace=False)).astype(int)
        ends = starts + rng.integers(1, 4, n)
        duration = float(ends.max() + rng.integers(1, 5))
        annotations = [
            {"segment": [int(s), int(e)], "id": k, "sentence": " ".join(rng.choice(WORDS, int(rng.integers(2, 7))))}
            for k, (s, e) in enumerate(zip(starts, ends, strict=True))
        ]
        database[vid] = {
            "duration": duration,
            "subset": "training" if v < 6 else "validation",
            "recipe_type": "101",
            "annotations": annotations,
            "video_url": f"https://www.youtube.com/watch?v={vid}",
        }
        features[vid] = rng.standard_normal((int(np.ceil(duration)), DIM)).astype(np.float32)
    (HERE / "youcook2.json").write_text(json.dumps({"database": database}, indent=1))
    (HERE / "features").mkdir(exist_ok=True)
    for vid, x in features.items():
        np.save(HERE / "features" / f"{vid}.npy", x)
    np.savez(HERE / "features.npz", **features)
    with h5py.File(HERE / "features.h5", "w") as f:
        for vid, x in features.items():
            f.create_dataset(vid, data=x)
    videos = [
        {"video_id": vid, "start time": 0.0, "end time": e["duration"], "split": "train" if i < 6 else "test", "id": i}
        for i, (vid, e) in enumerate(database.items())
    ]
    sentences = [
        {"video_id": vid, "caption": " ".join(rng.choice(WORDS, int(rng.integers(3, 8)))), "sen_id": k}
        for k, vid in enumerate(vid for vid in database for _ in range(int(rng.integers(1, 4))))
    ]
    (HERE / "msrvtt.json").write_text(json.dumps({"videos": videos, "sentences": sentences}, indent=1))
    with (HERE / "captions.jsonl").open("w") as f:
        for vid, entry in database.items():
            for a in entry["annotations"]:
                start, end = a["segment"]
                f.write(json.dumps({"video_id": vid, "start": start, "end": end, "text": a["sentence"]}) + "\n")


#: the words a caption's content is made of (one feature dimension each) and the rest of a sentence
TOPIC_WORDS = [
    "dog", "car", "guitar", "kitchen", "soccer", "rain", "piano", "horse",
    "boat", "dance", "cat", "train", "beach", "snow", "robot", "chef",
]  # fmt: skip
FILLER = ["a", "the", "man", "woman", "is", "with", "and", "shows", "near", "some"]
#: the JSON's split of video0..video12, as MSR-VTT's own (train / validate / test)
MSRVTT_SPLITS = ["train"] * 7 + ["validate"] + ["test"] * 5
TRAIN_9K = [f"video{v}" for v in range(9)]  # every video but the test pairs' (as the real 9k list)
TRAIN_7K = [f"video{v}" for v in range(7)]  # the JSON's train split (as the real 7k list)
TEST_PAIRS = [f"video{v}" for v in range(9, 13)]  # 1k-A-like: one sentence for each of 4 test videos
CAPTIONS_PER_VIDEO = 3


def msrvtt_topics(rng: np.random.Generator) -> list[list[int]]:
    """Three topic words per video: disjoint ones for the test pairs' videos (words 0-11), seeded others."""
    topics = [sorted(rng.choice(len(TOPIC_WORDS), 3, replace=False).tolist()) for _ in range(9)]
    return topics + [[3 * k, 3 * k + 1, 3 * k + 2] for k in range(4)]


def _sentence(rng: np.random.Generator, topic: list[int]) -> str:
    """Each topic word once, in a shuffled order, between filler words (its bag of topic words = the topic)."""
    words = [TOPIC_WORDS[w] for w in rng.permutation(topic)]
    return " ".join(f"{rng.choice(FILLER)} {w}" for w in words) + f" {rng.choice(FILLER)}"


def msrvtt() -> None:
    """MSRVTT_data.json, MSRVTT_train.9k.csv, MSRVTT_train.7k.csv, MSRVTT_JSFUSION_test.csv and features.npz.

    Every frame of a video is the indicator of its topic words, and each of its captions holds
    each topic word once: a caption's bag of topic words equals its video's features. The test
    pairs' videos have disjoint topics.
    """
    rng = np.random.default_rng(12)
    folder = HERE / "msrvtt"
    folder.mkdir(exist_ok=True)
    topics = msrvtt_topics(rng)
    frames = rng.integers(6, 16, len(topics))
    videos, sentences, features = [], [], {}
    for v, (topic, split, length) in enumerate(zip(topics, MSRVTT_SPLITS, frames, strict=True)):
        vid = f"video{v}"
        url, times = f"https://www.youtube.com/watch?v={vid}", {"start time": 3.0, "end time": 3.0 + float(length)}
        category = int(rng.integers(20))
        videos.append({"category": category, "url": url, "video_id": vid, **times, "split": split, "id": v})
        sentences += [{"caption": _sentence(rng, topic), "video_id": vid} for _ in range(CAPTIONS_PER_VIDEO)]
        indicator = np.zeros(len(TOPIC_WORDS), np.float32)
        indicator[topic] = 1.0
        features[vid] = np.tile(indicator, (int(length), 1))
    for k, s in enumerate(sentences):
        s["sen_id"] = k
    info = {"contributor": "varlen tests", "year": "2016"}
    (folder / "MSRVTT_data.json").write_text(json.dumps({"info": info, "videos": videos, "sentences": sentences}))
    for name, listed in (("MSRVTT_train.9k.csv", TRAIN_9K), ("MSRVTT_train.7k.csv", TRAIN_7K)):
        (folder / name).write_text("video_id\n" + "".join(f"{vid}\n" for vid in listed))
    first = {s["video_id"]: s["caption"] for s in reversed(sentences)}  # each test video's first JSON caption
    with (folder / "MSRVTT_JSFUSION_test.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["key", "vid_key", "video_id", "sentence"])
        for k, vid in enumerate(TEST_PAIRS):
            writer.writerow([f"ret{k}", vid.replace("video", "msr"), vid, first[vid]])
    np.savez(folder / "features.npz", **features)


if __name__ == "__main__":
    main()
    msrvtt()
