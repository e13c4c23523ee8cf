"""Benchmark: video-text batches on YouCook2's real shapes, padded and packed, and the aligner's step on them.

The shapes are real: every YouCook2 train+val video's number of segments, each segment's
duration (frames at `--fps`, at most `--max-frames` per segment) and each sentence's token
count under the default tokenizer. Features are synthetic (YouCook2 ships none), `--dim` wide.
Every table compares methods in the same run (ratios, not absolute times, are the result).

`--part padding`: real / allocated elements on each side over one epoch, and the time to
assemble a batch, of

- `varlen padded`: the DataModule's padded sampler (`budget_sizes`:
  a 2-D budget that bounds the padded `[B, S_v, F]` and `[B, S_t, L]` tensors, one
  segment-count class per batch) and collate, fetched with `dataset.__getitems__`;
- `varlen packed`: `layout="packed"`: the sampler sums real frames and tokens, the collate
  lays them back to back (nothing allocated that is not real);
- the padded sampler on *total* sizes; random batches of the same mean size with the padded
  collate (what the sampler alone buys); per-sample dicts (`dataset[i]`, loaded beforehand)
  through the same collate; and random batches padded to the dataset-wide maxima, filled segment
  by segment (the usual first implementation; it builds no alignment mask).

Efficiency = real elements / elements the batch tensors hold, per side: video frames
(`frame_mask`, or the rows of the packed `video`) and text tokens. Assembly time: from the
stored fields (or the loaded dicts) to the batch dict, alignment included.

`--part steps`: the aligner's CPU train step (forward, backward, AdamW) on batches of both
layouts under the same budget: step time, real elements per second and the epoch it implies.

`--part attention`: the packed aligner with each attention mechanism (rows padded for the
attention alone, nested jagged tensors, SDPA with a block-diagonal mask, compiled flex_attention
with a block mask) on the same packed batches: train-step and forward time, and the largest
difference from the padded layout's outputs.

`--part msrvtt`: MSR-VTT's 9k-train / 1k-A-test protocol, run through
`configs/video_text_msrvtt.yaml` on generated MSR-VTT-shaped files (the four files of
CLIP4Clip's `msrvtt_data.zip` and per-video features,
`write_msrvtt_files`):
text-to-video and video-to-text R@1/5/10 and median rank on the 1,000 test pairs, untrained and
trained, with features that match the captions and, as a control, shuffled among the videos.
Not part of `all` (several minutes of training on CPU).

`--out DIR` saves the main figure of `--part padding` there: real / allocated elements per
side (video frames, text tokens) of every method, padded against packed (`video_text_padding.png`).

    python scripts/benchmark_video_text.py [--part padding|steps|attention|msrvtt|all] [--annotations PATH]
        [--out DIR]
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from varlen.batching import BucketBatchSampler
from varlen.cli import dispatch as cli
from varlen.datamodules.video_text import VideoTextDataModule
from varlen.datasets.video_text import VideoTextCollator, VideoTextDataset, budget_sizes
from varlen.datasets.video_text.synthetic import write_msrvtt_files
from varlen.models.attention import PACKED_ATTENTION, Rows
from varlen.models.video_text import VideoTextAligner
from varlen.prepare.report import DataReport
from varlen.storage.paths import data_root

DEFAULT = data_root() / "video_text" / "youcookii_annotations_trainval.json"
MSRVTT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "video_text_msrvtt.yaml"
#: short names of the --part padding methods, for the figure
SHORT = ["varlen padded", "varlen packed", "padded sampler,\ntotal sizes", "random +\npadded collate",
         "random, dicts +\npadded collate", "random +\npad-everything"]  # fmt: skip


# -- the attention mechanisms measured against the model's own ("rows", "nested") ---------------


def _heads_first(x: torch.Tensor) -> torch.Tensor:  # [N, H, dh] -> [1, H, N, dh]
    return x.transpose(0, 1)[None].contiguous()


def block_diagonal_attention(q, k, v, rows: Rows, dropout_p: float) -> torch.Tensor:
    """SDPA over the whole packed sequence with a block-diagonal `[N, N]` keep-mask."""
    same = rows.ids[:, None] == rows.ids[None, :]
    out = F.scaled_dot_product_attention(_heads_first(q), _heads_first(k), _heads_first(v), same, dropout_p)
    return out[0].transpose(0, 1)


@functools.cache
def compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)  # eager flex_attention is a slow reference


def flex_block_attention(q, k, v, rows: Rows, dropout_p: float) -> torch.Tensor:
    """Compiled `flex_attention` with a block mask of the rows (no dropout; torch 2.13 has no CPU backward).

    The sequence is padded to a multiple of flex's 128-element block, at least two (a padding row
    of its own): inductor's dynamic-shape CPU kernel fails to build for a single block.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    n = len(q)
    size = max(2, -(-n // 128)) * 128
    ids = torch.cat([rows.ids, rows.ids.new_full((size - n,), -1)])

    def padded(x: torch.Tensor) -> torch.Tensor:
        return F.pad(_heads_first(x), (0, 0, 0, size - n))

    mask = create_block_mask(lambda b, h, i, j: ids[i] == ids[j], None, None, size, size, device=q.device.type)
    return compiled_flex()(padded(q), padded(k), padded(v), block_mask=mask)[0, :, :n].transpose(0, 1)


MEASURED = {"block_diagonal": block_diagonal_attention, "flex": flex_block_attention}


# -- data -----------------------------------------------------------------------------------------


def youcook2(args: argparse.Namespace) -> tuple[VideoTextDataModule, VideoTextDataset]:
    """The DataModule's settings and one dataset of every train+val video (split order), fields built."""
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
    report = DataReport()
    table, store = dm.open(report)
    videos = np.concatenate(list(dm.split_videos(table).values()))
    ds = VideoTextDataset(table, store, dm.tokens(table), videos, frames=True, max_frames_per_segment=args.max_frames)
    ds.video  # noqa: B018 -- read the served features once, outside every timing
    return dm, ds


def plans(ds: VideoTextDataset, budget: tuple[int, int], seed: int) -> dict[str, list[list[int]]]:
    """One shuffled epoch of batches per sampler the DataModule would use (padded, packed)."""
    sizes, groups = budget_sizes(ds.shapes, frames=True)
    padded = BucketBatchSampler(sizes, max_tokens=budget, shuffle=True, seed=seed, groups=groups)
    packed = BucketBatchSampler(ds.lengths, max_tokens=budget, shuffle=True, seed=seed, cost="sum")
    return {"padded": list(padded), "packed": list(packed)}


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
        return {"index": torch.zeros(len(samples)), "video": video, "frame_mask": frame_mask, "text_mask": text_mask}


def random_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]


# -- padding and assembly ---------------------------------------------------------------------


def fill(batches: list[list[int]], assemble, dm: VideoTextDataModule, dim: int) -> dict:
    """Real and allocated elements on each side over one epoch of `batches`."""
    totals = np.zeros((2, 2), np.int64)  # (video, text) x (real, allocated)
    largest = np.zeros(2, np.int64)
    for batch in batches:
        stats = dm.side_stats(assemble(batch))
        sides = np.array([[s.real, s.padded] for s in stats.values()])
        totals += sides
        if len(batch) > 1:
            largest = np.maximum(largest, sides[:, 1])
    return {
        "batches": len(batches),
        "mean_batch": float(np.mean([len(b) for b in batches])),
        "video_eff": totals[0, 0] / totals[0, 1],
        "text_eff": totals[1, 0] / totals[1, 1],
        "allocated_mb": (totals[0, 1] * dim * 4 + totals[1, 1] * 8) / 2**20,
        "largest": largest,
    }


def assembly_times(methods: list[tuple], repeats: int) -> list[float]:
    """Mean µs per batch of each method; passes alternate between methods (a noisy neighbour slows
    them all alike) and each batch keeps its best pass."""
    best = [np.full(len(batches), np.inf) for _, batches, _ in methods]
    for _ in range(repeats):
        for m, (_, batches, assemble) in enumerate(methods):
            for k, batch in enumerate(batches):
                start = time.perf_counter()
                assemble(batch)
                best[m][k] = min(best[m][k], time.perf_counter() - start)
    return [1e6 * float(b.mean()) for b in best]


def part_padding(dm: VideoTextDataModule, ds: VideoTextDataset, batches: dict, args) -> None:
    samples = [ds[i] for i in range(len(ds))]  # per-sample dicts, for the methods that take them
    frames = np.concatenate([s["frame_counts"] for s in samples])
    tokens = np.concatenate([s["token_counts"] for s in samples])
    segments = np.diff(ds.segment_offsets)
    print(
        f"YouCook2 train+val: {len(ds)} videos, {len(frames)} segments; segments/video median "
        f"{np.median(segments):.0f} (max {segments.max()}), frames/segment median {np.median(frames):.0f} "
        f"(max {frames.max()}, cap {args.max_frames}), tokens/sentence median {np.median(tokens):.0f} "
        f"(max {tokens.max()}); features {args.dim}-d at {args.fps} fps; budget {tuple(args.budget)}\n"
    )
    padded = VideoTextCollator(dm.pad_token_id)
    packed = VideoTextCollator(dm.pad_token_id, layout="packed")
    shapes = ds.shapes
    alone = np.stack([shapes[:, 0] * shapes[:, 1], shapes[:, 2] * shapes[:, 3]], 1)  # each video padded alone
    scaled = tuple(int(b * ds.lengths[:, d].mean() / alone[:, d].mean()) for d, b in enumerate(args.budget))
    totals = BucketBatchSampler(ds.lengths, max_tokens=scaled, shuffle=True, seed=args.seed)
    rand = random_batches(len(ds), int(round(len(ds) / len(batches["padded"]))), args.seed)
    naive = PadEverythingCollate(segments.max(), frames.max(), segments.max(), tokens.max(), dm.pad_token_id)
    methods = [
        ("varlen padded: sampler on padded-tensor bounds, `__getitems__` + collate", batches["padded"],
         lambda b: padded(ds.__getitems__(b))),
        ("**varlen packed**: sampler on summed real sizes, `__getitems__` + collate", batches["packed"],
         lambda b: packed(ds.__getitems__(b))),
        ("varlen padded sampler on total sizes + padded collate", list(totals), lambda b: padded(ds.__getitems__(b))),
        ("random batches + padded collate", rand, lambda b: padded(ds.__getitems__(b))),
        ("random batches, per-sample dicts + padded collate", rand, lambda b: padded([samples[i] for i in b])),
        ("random batches + pad-everything collate", rand, lambda b: naive([samples[i] for i in b])),
    ]  # fmt: skip
    times = assembly_times(methods, args.repeats)
    rows = [
        {"method": name, **fill(b, fn, dm, args.dim), "us": t} for (name, b, fn), t in zip(methods, times, strict=True)
    ]
    ceiling = ds.lengths.sum(0) / alone.sum(0)
    print(f"Padded ceiling (every video padded alone): video {ceiling[0]:.1%}, text {ceiling[1]:.1%}\n")
    print(
        "| method | batches | mean batch | video real / allocated | text real / allocated | allocated MB / epoch "
        "| largest batch / budget (video, text) | µs / batch | vs pad-everything |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = rows[-1]["us"]
    for r in rows:
        ratio = r["largest"] / np.asarray(args.budget)
        print(
            f"| {r['method']} | {r['batches']} | {r['mean_batch']:.1f} | {r['video_eff']:.1%} | {r['text_eff']:.1%} "
            f"| {r['allocated_mb']:.0f} | {ratio[0]:.2f}, {ratio[1]:.2f} | {r['us']:.0f} | {base / r['us']:.1f}x |"
        )
    if args.out:
        print(f"figure: {plot_padding(rows, Path(args.out))}\n")
    p, q = rows[0], rows[1]
    print(
        f"\npacked vs padded (same budget): real / allocated video {q['video_eff']:.3f} vs {p['video_eff']:.3f}, "
        f"text {q['text_eff']:.3f} vs {p['text_eff']:.3f}; {p['batches'] / q['batches']:.2f}x fewer batches; "
        f"assembly {p['us'] / q['us']:.2f}x the padded speed per batch, "
        f"{p['us'] * p['batches'] / (q['us'] * q['batches']):.2f}x per epoch\n"
    )


def plot_padding(rows: list[dict], out: Path) -> Path:
    """Real / allocated elements per side of every method (horizontal bars), as a small PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    y, height = np.arange(len(rows)), 0.38
    for offset, side, label in ((-0.5, "video_eff", "video frames"), (0.5, "text_eff", "text tokens")):
        values = [r[side] for r in rows]
        bars = ax.barh(y + offset * height, values, height, label=label)
        ax.bar_label(bars, [f"{v:.0%}" for v in values], padding=2, fontsize=8)
    ax.set_yticks(y, SHORT[: len(rows)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("real / allocated elements over one epoch (YouCook2 shapes)")
    ax.set_title("Video-text batches: padded vs packed, same (frames, tokens) budget", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "video_text_padding.png"
    fig.savefig(path, dpi=85)
    plt.close(fig)
    return path


# -- the aligner's train step -------------------------------------------------------------------


def aligner(dm: VideoTextDataModule, args, **kwargs) -> VideoTextAligner:
    torch.manual_seed(args.seed)
    return VideoTextAligner(
        feature_dim=args.dim, vocab_size=dm.vocab_size, pad_token_id=dm.pad_token_id, d_model=args.d_model, **kwargs
    )


def step_time(model: VideoTextAligner, batch: dict, optimizer: torch.optim.Optimizer | None) -> float:
    """Seconds of one train step (forward, backward and, with an optimizer, its step)."""
    start = time.perf_counter()
    loss = model.losses(batch, model.encode(batch))["loss"]
    model.zero_grad(set_to_none=True)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    return time.perf_counter() - start


def part_steps(dm: VideoTextDataModule, ds: VideoTextDataset, batches: dict, args) -> None:
    rng = np.random.default_rng(args.seed)
    layouts = {}
    for layout, plan in batches.items():
        collate = VideoTextCollator(dm.pad_token_id, layout=layout)
        chosen = [plan[k] for k in rng.choice(len(plan), min(args.steps, len(plan)), replace=False)]
        model = aligner(dm, args).train()
        layouts[layout] = {"plan": plan, "batches": [collate(ds.__getitems__(b)) for b in chosen], "model": model}
        layouts[layout]["optimizer"] = model.configure_optimizers()
        layouts[layout]["times"] = []
        for batch in layouts[layout]["batches"][:2]:  # warm-up
            step_time(model, batch, layouts[layout]["optimizer"])
    for k in range(args.steps):  # alternate layouts step by step: a noisy neighbour slows both alike
        for entry in layouts.values():
            if k < len(entry["batches"]):
                entry["times"].append(step_time(entry["model"], entry["batches"][k], entry["optimizer"]))
    print(
        f"Aligner train step on CPU ({torch.get_num_threads()} threads), d_model {args.d_model}, "
        f"budget {tuple(args.budget)}, {args.steps} random batches of each layout's epoch\n"
    )
    print("| layout | batches / epoch | videos / batch | real / allocated (video, text) | median ms / step "
          "| real elements / s | epoch s (batches x mean step) | vs padded |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for layout, entry in layouts.items():
        stats = [dm.side_stats(b) for b in entry["batches"]]
        real = sum(s["video"].real + s["text"].real for s in stats)
        eff = [sum(s[side].real for s in stats) / sum(s[side].padded for s in stats) for side in ("video", "text")]
        epoch = float(np.mean(entry["times"])) * len(entry["plan"])
        base = base or epoch
        videos = np.mean([len(b["index"]) for b in entry["batches"]])
        print(
            f"| {layout} | {len(entry['plan'])} | {videos:.1f} | {eff[0]:.1%}, {eff[1]:.1%} "
            f"| {1e3 * statistics.median(entry['times']):.0f} | {real / sum(entry['times']):,.0f} | {epoch:.1f} "
            f"| {base / epoch:.2f}x |"
        )
    print()


# -- attention mechanisms ---------------------------------------------------------------------


def mechanism_times(model: VideoTextAligner, inputs: list[dict], expected: list, train: bool, repeats: int) -> tuple:
    """(mean forward s, mean train-step s or None, largest output difference) over `inputs`."""
    forward = np.full(len(inputs), np.inf)
    diff = 0.0
    with torch.no_grad():
        model.eval()
        for _ in range(repeats):
            for k, batch in enumerate(inputs):
                start = time.perf_counter()
                out = model(batch)
                forward[k] = min(forward[k], time.perf_counter() - start)
                diff = max(diff, float((out - expected[k]).abs().max()))
    if not train:
        return float(forward.mean()), None, diff
    model.train()
    steps = [min(step_time(model, batch, None) for _ in range(repeats)) for batch in inputs]
    return float(forward.mean()), float(np.mean(steps)), diff


def part_attention(dm: VideoTextDataModule, ds: VideoTextDataset, batches: dict, args) -> None:
    PACKED_ATTENTION.update(MEASURED)
    chosen = batches["packed"][: args.attention_batches]
    packed = [VideoTextCollator(dm.pad_token_id, layout="packed")(ds.__getitems__(b)) for b in chosen]
    padded = [VideoTextCollator(dm.pad_token_id)(ds.__getitems__(b)) for b in chosen]
    reference = aligner(dm, args, dropout=0.0)
    with torch.no_grad():
        expected = [reference.eval()(b) for b in padded]
    shape = [np.mean([len(b[k]) - d for b in packed]) for k, d in (("text_ids", 0), ("text_cu_seqlens", 1))]
    segments = np.mean([len(b["video_times"]) for b in packed])
    print(
        f"Packed attention on CPU ({torch.get_num_threads()} threads): the aligner (d_model {args.d_model}, "
        f"dropout 0) on {len(chosen)} packed YouCook2 batches (mean {shape[0]:.0f} tokens in {shape[1]:.0f} "
        f"captions, {segments:.0f} segments); best of {args.repeats} passes per batch\n"
    )
    results = {}
    for name in ["padded layout (nn.TransformerEncoder)", "rows", "nested", "block_diagonal", "flex"]:
        model = copy.deepcopy(reference)
        is_padded = name.startswith("padded")
        model.hparams.packed_attention = "rows" if is_padded else name
        inputs = padded if is_padded else packed
        if name == "flex":  # compile once (dynamic shapes), outside the timing
            start = time.perf_counter()
            with torch.no_grad():
                model.eval()(inputs[0])
            name = f"flex (compiled in {time.perf_counter() - start:.0f} s, excluded)"
        results[name] = mechanism_times(model, inputs, expected, not name.startswith("flex"), args.repeats)
    print("| mechanism | train step ms (fwd + bwd) | forward ms | train step vs rows | max abs. diff. from padded |")
    print("|---|---:|---:|---:|---:|")
    rows_step = results["rows"][1]
    for name, (forward, step, diff) in results.items():
        step_cell = "n/a: no CPU backward" if step is None else f"{1e3 * step:.0f}"
        ratio = "-" if step is None else f"{rows_step / step:.2f}x"
        print(f"| {name} | {step_cell} | {1e3 * forward:.0f} | {ratio} | {diff:.1e} |")
    print()


# -- MSR-VTT's 9k / 1k-A protocol on generated files --------------------------------------------


def protocol_run(paths: dict[str, Path], args, root: Path) -> dict[str, dict[str, float]]:
    """Test metrics of the msrvtt config on `paths`: before training and after `--msrvtt-epochs`."""
    overrides = [f"--data.init_args.{k}={v}" for k, v in paths.items()]
    overrides += [f"--model.init_args.{k}={args.d_model}" for k in ("d_model", "embed_dim")]
    overrides += [f"--trainer.max_epochs={args.msrvtt_epochs}", f"--trainer.default_root_dir={root}"]
    overrides += ["--trainer.logger=false", "--trainer.enable_checkpointing=false", f"--seed_everything={args.seed}"]
    run = cli.main(["--config", str(MSRVTT_CONFIG), *overrides], run=False)
    results = {}
    for stage in ("untrained", "trained"):
        if stage == "trained":
            start = time.perf_counter()
            run.trainer.fit(run.model, datamodule=run.datamodule)
            fit_s = time.perf_counter() - start
        run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)
        results[stage] = {k[5:]: float(v) for k, v in run.trainer.callback_metrics.items() if k.startswith("test/")}
    results["trained"]["fit_s"] = fit_s
    return results


def part_msrvtt(args) -> None:
    root = Path(args.msrvtt_dir)
    print(
        f"MSR-VTT 9k / 1k-A protocol on generated files ({args.msrvtt_videos} videos, 1,000 test pairs, 20 "
        f"captions per training video, {args.dim}-d features): configs/video_text_msrvtt.yaml with d_model "
        f"{args.d_model}, {args.msrvtt_epochs} epochs on CPU ({torch.get_num_threads()} threads)\n"
    )
    print("| features | model | t2v R@1 | R@5 | R@10 | MdR | v2t R@1 | R@5 | R@10 | MdR | chance R@1 | fit s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, shuffle in (("match the captions", False), ("shuffled among videos (control)", True)):
        folder = root / ("shuffled" if shuffle else "matched")
        paths = write_msrvtt_files(
            folder, args.msrvtt_videos, dim=args.dim, num_concepts=150, seed=args.seed, shuffle_features=shuffle
        )
        for stage, m in protocol_run(paths, args, folder / "run").items():
            cells = [f"{100 * m[f'{d}_R{k}']:.1f}" if k else f"{m[f'{d}_median_rank']:.1f}"
                     for d in ("t2v", "v2t") for k in (1, 5, 10, None)]  # fmt: skip
            fit = f"{m['fit_s']:.0f}" if "fit_s" in m else "-"
            print(f"| {name} | {stage} | {' | '.join(cells)} | {100 * m['t2v_R1_chance']:.1f} | {fit} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["padding", "steps", "attention", "msrvtt", "all"], default="all")
    parser.add_argument("--annotations", default=str(DEFAULT))
    parser.add_argument("--dim", type=int, default=128, help="feature width")
    parser.add_argument("--fps", type=float, default=1.0)
    parser.add_argument("--max-frames", type=int, default=32, help="frames kept per segment")
    parser.add_argument(
        "--budget", type=int, nargs=2, default=[2048, 2048], help="(video frames, text tokens) per batch"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (best per batch kept)")
    parser.add_argument("--steps", type=int, default=20, help="timed train steps per layout (--part steps)")
    parser.add_argument("--attention-batches", type=int, default=4, help="packed batches (--part attention)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder for the --part padding figure (PNG)")
    parser.add_argument("--msrvtt-dir", default="/tmp/varlen_msrvtt", help="where --part msrvtt writes its files")
    parser.add_argument("--msrvtt-videos", type=int, default=2500, help="videos, 1,000 of them the test pairs")
    parser.add_argument("--msrvtt-epochs", type=int, default=4)
    args = parser.parse_args()
    if args.part == "msrvtt":
        return part_msrvtt(args)
    dm, ds = youcook2(args)
    batches = plans(ds, tuple(args.budget), args.seed)
    for part in ("padding", "steps", "attention"):
        if args.part in (part, "all"):
            globals()[f"part_{part}"](dm, ds, batches, args)


if __name__ == "__main__":
    main()
