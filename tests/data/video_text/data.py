"""Writes tiny fake video-text files in the real formats (seeded): run `python data.py` here.

- ``youcook2.json``: the YouCook2 annotation layout (``database[vid]`` with ``duration``,
  ``subset``, ``annotations[*].segment / .sentence``), 6 training + 3 validation videos.
- ``features/<vid>.npy``: ``[T, 8]`` float32 features at 1 fps for those videos.
- ``features.npz`` and ``features.h5``: the same features keyed by video id.
- ``msrvtt.json``: MSR-VTT ``videodatainfo`` layout, several captions per whole video.
- ``captions.jsonl``: the generic ``video_id, start, end, text`` layout.
"""

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


if __name__ == "__main__":
    main()
