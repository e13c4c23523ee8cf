"""Benchmark: padding on both ragged axes and collate time on YouCook2's real shapes.

The shapes are real: every YouCook2 train+val video's number of segments, each segment's
duration (frames at ``--fps``, at most ``--max-frames`` per segment) and each sentence's token
count under the default tokenizer. Features are synthetic (YouCook2 ships none), ``--dim`` wide.

Compared, over one epoch of the same samples:

- ``varlen``: the DataModule's sampler (:class:`~varlen.batching.BucketBatchSampler` on
  :func:`~varlen.datasets.video_text.budget_sizes`: a 2-D budget that bounds the padded
  ``[B, S_v, F]`` and ``[B, S_t, L]`` tensors, one segment-count class per batch) and
  :class:`~varlen.datasets.video_text.VideoTextCollator` (batch maxima, vectorised,
  alignment masks included);
- the same sampler on *total* sizes (frames, tokens), for comparison;
- random batches of the same mean size with the same collate (what the sampler alone buys);
- random batches padded to the dataset-wide maxima of segments, frames and tokens, filled
  segment by segment (the usual first implementation; it builds no alignment mask).

Padding efficiency = real elements / elements in the padded tensor, per axis: video frames
(``[B, S_v, F]``) and text tokens (``[B, S_t, L]``). Collate time is measured on samples already
loaded, so it is the collate alone.

    python scripts/benchmark_video_text.py [--annotations PATH] [--dim 128] [--fps 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from varlen.batching import BucketBatchSampler
from varlen.datamodules.video_text import VideoTextDataModule
from varlen.datasets.video_text import VideoTextCollator, budget_sizes

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "video_text" / "youcookii_annotations_trainval.json"


class PadEverythingCollate:
    """Pads every batch to the dataset-wide maxima with a loop over samples and segments."""

    def __init__(self, max_segments: int, max_frames: int, max_captions: int, max_tokens: int, pad_id: int) -> None:
        self.shape = (max_segments, max_frames, max_captions, max_tokens)
        self.pad_id = pad_id

    def __call__(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        s_v, f, s_t, length = self.shape
        dim = samples[0]["frames"].shape[1]
        video = torch.zeros(len(samples), s_v, f, dim)
        frame_mask = torch.zeros(len(samples), s_v, f, dtype=torch.bool)
        ids = torch.full((len(samples), s_t, length), self.pad_id, dtype=torch.long)
        text_mask = torch.zeros(len(samples), s_t, length, dtype=torch.bool)
        for b, s in enumerate(samples):
            start = 0
            for k, n in enumerate(s["frame_counts"].tolist()):
                video[b, k, :n] = torch.from_numpy(s["frames"][start : start + n])
                frame_mask[b, k, :n] = True
                start += n
            start = 0
            for k, n in enumerate(s["token_counts"].tolist()):
                ids[b, k, :n] = torch.from_numpy(s["text_ids"][start : start + n])
                text_mask[b, k, :n] = True
                start += n
        return {"video": video, "frame_mask": frame_mask, "text_ids": ids, "text_mask": text_mask}


def random_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]


def padding(batches: list[list[int]], samples: list[dict], collate) -> dict[str, float]:
    """Real and padded elements on each axis over one epoch of ``batches``."""
    real_v = pad_v = real_t = pad_t = 0
    largest = np.zeros(2, np.int64)
    for batch in batches:
        out = collate([samples[i] for i in batch])
        real_v += int(out["frame_mask"].sum())
        pad_v += out["frame_mask"].numel()
        real_t += int(out["text_mask"].sum())
        pad_t += out["text_mask"].numel()
        if len(batch) > 1:
            largest = np.maximum(largest, [out["frame_mask"].numel(), out["text_mask"].numel()])
    return {
        "largest": largest,
        "batches": len(batches),
        "mean_batch": float(np.mean([len(b) for b in batches])),
        "video_eff": real_v / pad_v,
        "text_eff": real_t / pad_t,
        "padded_mb": (pad_v * samples[0]["frames"].shape[1] * 4 + pad_t * 8) / 2**20,
    }


def collate_times(methods: list[tuple], samples: list[dict], repeats: int) -> list[float]:
    """Mean collate µs per batch of each method; the passes alternate between methods so that a
    noisy neighbour on a shared machine slows them all alike; each batch keeps its best pass."""
    best = [np.full(len(batches), np.inf) for _, batches, _ in methods]
    for _ in range(repeats):
        for m, (_, batches, collate) in enumerate(methods):
            for k, batch in enumerate(batches):
                chosen = [samples[i] for i in batch]
                start = time.perf_counter()
                collate(chosen)
                best[m][k] = min(best[m][k], time.perf_counter() - start)
    return [1e6 * float(b.mean()) for b in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--annotations", default=str(DEFAULT))
    parser.add_argument("--dim", type=int, default=128, help="feature width")
    parser.add_argument("--fps", type=float, default=1.0)
    parser.add_argument("--max-frames", type=int, default=32, help="frames kept per segment")
    parser.add_argument(
        "--budget", type=int, nargs=2, default=[2048, 2048], help="(video frames, text tokens) padded, per batch"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per method (best per batch kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dm = VideoTextDataModule(
        source="youcook2",
        annotations=args.annotations,
        fps=args.fps,
        frames=True,
        max_frames_per_segment=args.max_frames,
        synthetic_dim=args.dim,
        max_tokens=tuple(args.budget),
        max_caption_tokens=64,
    )
    dm.setup()
    datasets = [dm.dataset(s) for s in ("train", "val", "test")]
    samples = [ds[i] for ds in datasets for i in range(len(ds))]
    lengths = np.concatenate([ds.lengths for ds in datasets])  # real elements (totals)
    shapes = np.concatenate([ds.shapes for ds in datasets])  # (S_v, longest F, S_t, longest L) per video
    sizes, groups = budget_sizes(shapes, frames=True)  # what the DataModule's sampler budgets on
    padded = np.stack([shapes[:, 0] * shapes[:, 1], shapes[:, 2] * shapes[:, 3]], 1)  # each video padded alone
    for i, s in enumerate(samples):
        s["index"] = i
    segments = np.array([len(s["frame_counts"]) for s in samples])
    frames = np.concatenate([s["frame_counts"] for s in samples])
    tokens = np.concatenate([s["token_counts"] for s in samples])
    print(
        f"YouCook2 train+val: {len(samples)} videos, {len(frames)} segments; segments/video median "
        f"{np.median(segments):.0f} (max {segments.max()}), frames/segment median {np.median(frames):.0f} "
        f"(max {frames.max()}, cap {args.max_frames}), tokens/sentence median {np.median(tokens):.0f} "
        f"(max {tokens.max()}); features {args.dim}-d at {args.fps} fps\n"
    )
    shaped = BucketBatchSampler(sizes, max_tokens=tuple(args.budget), shuffle=True, seed=args.seed, groups=groups)
    varlen_batches = list(shaped)
    totals_budget = tuple(int(b * lengths[:, d].mean() / padded[:, d].mean()) for d, b in enumerate(args.budget))
    totals_batches = list(BucketBatchSampler(lengths, max_tokens=totals_budget, shuffle=True, seed=args.seed))
    batch_size = int(round(len(samples) / len(varlen_batches)))
    rand = random_batches(len(samples), batch_size, args.seed)
    collate = VideoTextCollator(dm.pad_token_id)
    naive = PadEverythingCollate(segments.max(), frames.max(), segments.max(), tokens.max(), dm.pad_token_id)
    methods = [
        ("varlen: sampler on padded-tensor bounds + batch-max collate", varlen_batches, collate),
        ("varlen sampler on total sizes + batch-max collate", totals_batches, collate),
        ("random batches + batch-max collate", rand, collate),
        ("random batches + pad-everything collate", rand, naive),
    ]
    times = collate_times(methods, samples, args.repeats)
    rows = [
        {"method": name, **padding(batches, samples, fn), "collate_us": t}
        for (name, batches, fn), t in zip(methods, times, strict=True)
    ]
    base = rows[-1]
    ceiling = lengths.sum(0) / padded.sum(0)
    print(f"Ceiling (every video padded alone, no batch padding): video {ceiling[0]:.1%}, text {ceiling[1]:.1%}\n")
    print(
        "| method | batches | mean batch | video padding eff. | text padding eff. | padded MB / epoch "
        "| largest batch tensor / budget (video, text) | collate µs / batch | collate speed-up |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["largest"] / np.asarray(args.budget)
        print(
            f"| {r['method']} | {r['batches']} | {r['mean_batch']:.1f} | {r['video_eff']:.1%} | {r['text_eff']:.1%} "
            f"| {r['padded_mb']:.0f} | {ratio[0]:.2f}, {ratio[1]:.2f} | {r['collate_us']:.0f} "
            f"| {base['collate_us'] / r['collate_us']:.1f}x |"
        )
    print(
        f"\nvarlen vs pad-everything: video efficiency x{rows[0]['video_eff'] / base['video_eff']:.1f}, "
        f"text efficiency x{rows[0]['text_eff'] / base['text_eff']:.1f}, "
        f"padded memory x{base['padded_mb'] / rows[0]['padded_mb']:.1f} smaller, "
        f"collate x{base['collate_us'] / rows[0]['collate_us']:.1f} faster"
    )


if __name__ == "__main__":
    main()
