"""What the batches of a set-up DataModule look like, before any training (`varlen inspect`).

`summarize` takes one split's batches of epoch 0 from the plan that `world_size` ranks are
served (the plan splits batches until every rank gets as many), fetches and collates them as the
loader does, and measures them: what setup kept, skipped, truncated or left unused
(`dm.report`), the size quantiles of each budget axis, the batches per epoch and per rank,
samples per batch, padding efficiency and budget use, the distinct padded shapes and the largest
batch; under a schedule of source shares, each stage's first epoch's served share per source against its
scheduled one. `plot_summary` draws three PNGs: the size histogram with the sampler's bucket edges
(bins from the observed sizes, a log count axis when a short tail would not show beside the mass),
the padding efficiency of every batch, and samples per batch against padded size. The command
line (`varlen inspect --config ...`) is in `varlen.cli.dispatch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from varlen.batching.padding import round_up
from varlen.batching.plan import SUMMED
from varlen.datamodules.base import VarLenDataModule
from varlen.datamodules.weighting import served_shares
from varlen.datasets.mixture import SourceMixture

__all__ = [
    "SplitSummary",
    "budget_value",
    "draw_sizes",
    "log_counts",
    "padded_shape",
    "plot_summary",
    "size_bins",
    "summarize",
    "tensor_bytes",
]

QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)


def tensor_bytes(batch: Any) -> int:
    """Bytes of the tensors a collated batch holds (a dict of tensors, or a PyG `Batch`)."""
    values = batch.values() if isinstance(batch, Mapping) else (v for _, v in batch)
    return sum(v.numel() * v.element_size() for v in values if torch.is_tensor(v))


def padded_shape(batch: Any, keys: Sequence[str]) -> tuple:
    """The shape that padding decides: the shapes of the batch's keep masks (or of every tensor)."""
    if keys and isinstance(batch, Mapping):
        return tuple(tuple(batch[k].shape) for k in keys)
    values = batch.values() if isinstance(batch, Mapping) else (v for _, v in batch)
    return tuple(tuple(v.shape) for v in values if torch.is_tensor(v))


@dataclass
class SplitSummary:
    """What one split's batches look like (see `summarize`)."""

    name: str
    split: str
    samples: int
    report: dict[str, Any]
    axes: list[str]
    sizes: np.ndarray
    quantiles: np.ndarray
    bucket_edges: list[np.ndarray]
    world_size: int
    batches: int
    batches_per_rank: int
    samples_per_batch: np.ndarray
    efficiency: np.ndarray
    real: int
    allocated: int
    budget: str
    budget_use: np.ndarray
    padded_size: np.ndarray
    shapes: int
    largest_bytes: int
    #: a weighted split's `sample_weights` setting and, per class, (name, served share over the
    #: planned epoch, share of the split's samples); empty when the split is not weighted
    weighting: str | None = None
    served: list[tuple[str, float, float]] = field(default_factory=list)
    #: a split drawn from several sources: `mix` and, per source, (name, served share, share of the split)
    mix: str | None = None
    sources: list[tuple[str, float, float]] = field(default_factory=list)
    #: under a schedule: its description and, per stage an epoch starts in, (stage, its first epoch, per source
    #: (name, served share of that epoch, scheduled share))
    schedule: str | None = None
    stages: list[tuple[int, int, list[tuple[str, float, float]]]] = field(default_factory=list)
    #: the shape policy: the rungs of each axis (None: exact buckets), the plan's distinct (batch size, padded
    #: length) shapes on the worst axis, and (shapes, padding efficiency) of the plan with the rungs and with
    #: exact buckets, from the plan's sizes alone
    rungs: list[list[int]] | None = None
    policy: tuple[tuple[int, float], tuple[int, float]] | None = None
    #: packed batches (every batch one row of the budget): the row's length in tokens, else None
    packed_row: int | None = None
    #: a DataModule of several variable-length fields (its `field_stats`): (field, padding efficiency) each
    fields: list[tuple[str, float]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The terminal summary (lines of at most about 100 characters)."""
        r = self.report
        skipped = sum(r.get("skipped", {}).values())
        out = [
            f"varlen inspect: {self.name}, split {self.split!r}",
            f"  samples {self.samples:,}; skipped {skipped:,}; truncated {sum(r.get('truncated', {}).values()):,}",
        ]
        out += [f"    skipped {n:,} {why}" for why, n in r.get("skipped", {}).items()]
        out += [f"    unused {n:,} {what}" for what, n in r.get("unused", {}).items()]
        for axis, q in zip(self.axes, self.quantiles.T, strict=True):
            out.append(
                f"  sizes ({axis}): min {q[0]:,.0f}  p50 {q[1]:,.0f}  p90 {q[2]:,.0f}  p99 {q[3]:,.0f}  max {q[4]:,.0f}"
            )
        spb = self.samples_per_batch
        out.append(
            f"  batches per epoch {self.batches:,} ({self.batches_per_rank:,} per rank on {self.world_size}); "
            f"samples per batch min {spb.min()} / median {np.median(spb):g} / max {spb.max()}"
        )
        eff = self.efficiency
        out.append(
            f"  padding efficiency {self.real / max(self.allocated, 1):.4f} "
            f"(per batch: min {eff.min():.3f}, median {np.median(eff):.3f})"
        )
        if self.fields:
            out.append("    per field: " + ", ".join(f"{name} {value:.4f}" for name, value in self.fields))
        out.append(f"  budget use mean {self.budget_use.mean():.2f} / max {self.budget_use.max():.2f} of {self.budget}")
        out.append(
            f"  distinct padded shapes {self.shapes:,}; largest batch {self.largest_bytes / 2**20:,.2f} MiB of tensors"
        )
        out += self._policy_lines()
        if self.weighting is not None:
            out.append(f"  sample_weights={self.weighting!r}: served share per class in epoch 0 (share of the split)")
            cells = [f"{name} {served:.3f} ({held:.3f})" for name, served, held in self.served]
            out += ["    " + ";  ".join(cells[i : i + 4]) for i in range(0, len(cells), 4)]
        if self.sources:
            out.append(f"  sources (mix={self.mix!r}): served share per source in epoch 0 (share of the split)")
            cells = [f"{name} {served:.3f} ({held:.3f})" for name, served, held in self.sources]
            out += ["    " + ";  ".join(cells[i : i + 4]) for i in range(0, len(cells), 4)]
        if self.schedule is not None:
            out.append(f"  schedule: {self.schedule}")
            out.append("    served share per source in each stage's first epoch (scheduled share)")
            for stage, epoch, shares in self.stages:
                cells = [f"{name} {served:.3f} ({asked:.3f})" for name, served, asked in shares]
                rows = [";  ".join(cells[i : i + 4]) for i in range(0, len(cells), 4)]
                out += [f"    stage {stage}, epoch {epoch}: {row}" for row in rows]
        if self.plots:
            out.append(f"  plots in {self.plots[0].parent}/: " + ", ".join(p.name for p in self.plots))
        return out

    def _policy_lines(self) -> list[str]:
        """The shape policy: its rungs, the epoch's shapes and what they cost in padding against exact buckets."""
        if self.policy is None:
            return []
        (shapes, efficiency), (exact_shapes, exact_efficiency) = self.policy
        if self.packed_row is not None:
            return [f"  shapes: {shapes} an epoch (packed: each batch one row of {self.packed_row:,} tokens, filled "
                    f"{efficiency:.4f} by the plan)"]  # fmt: skip
        if self.rungs is None:
            return [f"  shapes: {shapes} distinct (batch size, padded length) an epoch (exact buckets)"]
        out = [f"  shape policy: rungs ({axis}) {_listed(r)}" for axis, r in zip(self.axes, self.rungs, strict=True)]
        cost = exact_efficiency / max(efficiency, 1e-9) - 1
        out.append(
            f"    {shapes} distinct (batch size, padded length) shapes an epoch, padding efficiency {efficiency:.4f}"
        )
        out.append(
            f"    exact buckets: {exact_shapes} shapes, {exact_efficiency:.4f} (the rungs allocate {cost:.1%} more)"
        )
        return out


def _shapes_of(sampler) -> tuple[int, float]:
    """An epoch's distinct shapes (worst axis) and padding efficiency on the first axis, from its plan."""
    shapes, plan = sampler.shapes(0), sampler.global_plan(0)
    real = float(round_up(sampler.sizes[plan.order, 0], sampler.spec.pad_to_multiple_of).sum())
    return sampler.shape_count(0), real / max(float((shapes[:, 0] * shapes[:, 1]).sum()), 1.0)


def _policy(dm: VarLenDataModule, split: str, shuffle: bool, world_size: int, sampler) -> tuple | None:
    """The plan's shapes and padding with the DataModule's rungs and with exact buckets (None: a plan that
    cannot tell its shapes, a streamed one)."""
    if not hasattr(sampler, "shapes"):
        return None
    exact = sampler if dm.rungs is None else dm._new_sampler(split, shuffle, world_size, 0, None)
    return _shapes_of(sampler), _shapes_of(exact)


def _listed(values: Sequence[int], most: int = 12) -> str:
    """A rung list as a line holds it: all of it, or its first and last few."""
    values = list(values)
    if len(values) <= most:
        return str(values)
    return "[" + ", ".join(map(str, values[:6])) + ", ..., " + ", ".join(map(str, values[-4:])) + f"] ({len(values)})"


def _budget_use(sizes: np.ndarray, batches: list[np.ndarray], sampler, rounds: int | None) -> tuple[np.ndarray, str]:
    """Per batch, the largest share of its budget it uses (over the budget's axes), and the budget's name."""
    spec = sampler.spec
    if spec.max_tokens is None:
        return np.array([len(b) / spec.batch_size for b in batches]), f"batch_size={spec.batch_size}"
    budget = np.asarray(spec.max_tokens, dtype=np.float64)
    rounded = round_up(sizes, rounds) if rounds else sizes
    if spec.cost in SUMMED:
        cost = np.stack([rounded[b].sum(0) for b in batches])
    else:
        cost = np.stack([len(b) * rounded[b].max(0) for b in batches])
    return (cost / budget).max(axis=1), f"max_tokens={budget_value(spec.max_tokens)} ({spec.cost})"


def budget_value(values: Sequence[int]) -> int | tuple[int, ...]:
    """A budget as it is written in a config: one axis a number, several a tuple (never a list of one)."""
    values = tuple(int(v) for v in values)
    return values[0] if len(values) == 1 else values


def summarize(
    dm: VarLenDataModule, split: str = "train", world_size: int = 1, max_batches: int | None = None
) -> SplitSummary:
    """Every rank's batches of `split` for epoch 0, as the loaders build them (one batched fetch and
    collate each), in serving order (rank `r` is served batches `r, r + world_size, ...`).

    Args:
        dm: a DataModule after `setup`.
        split: the split to look at.
        world_size: ranks to plan for: the plan, and so every count and measure, is the one that
            `world_size` ranks get (batches are split until the count divides evenly).
        max_batches: collate at most this many batches (the first in serving order) for the
            measured efficiency, padded shapes and largest batch (None: all).
    """
    dataset = dm.dataset(split)
    shuffle = split == "train" and dm.shuffle
    sampler = dm.batch_sampler(split, shuffle, num_replicas=world_size, rank=0)
    plan = sampler.global_plan(0)
    batches = [plan.order[a:b] for a, b in plan.bounds.tolist()]
    sizes = np.asarray(dm.of_each_source(dataset, "sampler_lengths")).reshape(len(dataset), -1)
    collated = _collated(dm, split, batches[:max_batches] if max_batches else batches)
    weighting, served = _served(dm, dataset, sampler, plan.order)
    sources = []
    if isinstance(dataset, SourceMixture):
        _, shares, held = served_shares(plan.order, dataset.sources)
        sources = list(zip(dataset.names, shares.tolist(), held.tolist(), strict=True))
    schedule, stages = _stages(dataset, sampler, world_size)
    rounds = dm.pad_to_multiple_of if dm.sampler_rounds_sizes else None
    use, budget = _budget_use(sizes, batches, sampler, rounds)
    axes = list(dm.size_axes)[: sizes.shape[1]]
    axes += [f"axis {d}" for d in range(len(axes), sizes.shape[1])]
    return SplitSummary(
        name=type(dm).__name__,
        split=split,
        samples=len(dataset),
        report=dm.report.to_dict().get(split, {}),
        axes=axes,
        sizes=sizes,
        quantiles=np.quantile(sizes, QUANTILES, axis=0) if len(sizes) else np.zeros((5, sizes.shape[1])),
        bucket_edges=sampler.bucket_sizes(),
        world_size=world_size,
        batches=len(batches),
        batches_per_rank=len(sampler),
        samples_per_batch=np.array([len(b) for b in batches]),
        **collated,
        budget=budget,
        budget_use=use,
        padded_size=np.array([sizes[b, 0].max() for b in batches]),
        weighting=weighting,
        served=served,
        mix=dm.mix if sources else None,
        sources=sources,
        schedule=schedule,
        stages=stages,
        rungs=None if dm.rungs is None else [list(r.lengths) for r in dm.rungs],
        policy=_policy(dm, split, shuffle, world_size, sampler),
        packed_row=getattr(dm, "packing", None) and dm.packing[0],
    )


def _collated(dm: VarLenDataModule, split: str, batches: list[np.ndarray]) -> dict[str, Any]:
    """The batches fetched and collated as the loader does: their padding efficiency (each, all, per field
    where the DataModule counts fields apart), distinct padded shapes and largest size in bytes."""
    efficiency, shapes, largest, real, allocated = [], set(), 0, 0, 0
    by_field, fields = getattr(dm, "field_stats", None), {}
    for indices in batches:
        batch = dm.collate_fn(dm.fetch_batch(split, indices.tolist()))
        stats = dm.batch_stats(batch)
        for name, counts in (by_field(batch) if by_field is not None else {}).items():
            part = fields.setdefault(name, [0, 0])
            part[0], part[1] = part[0] + counts.real, part[1] + counts.padded
        real, allocated = real + stats.real, allocated + stats.padded
        efficiency.append(stats.real / max(stats.padded, 1))
        shapes.add(padded_shape(batch, dm.mask_keys))
        largest = max(largest, tensor_bytes(batch))
    return {
        "efficiency": np.asarray(efficiency),
        "real": real,
        "allocated": allocated,
        "shapes": len(shapes),
        "largest_bytes": largest,
        "fields": [(name, r / max(p, 1)) for name, (r, p) in fields.items()] if len(fields) > 1 else [],
    }


def _stages(dataset, sampler, world_size: int) -> tuple[str | None, list]:
    """A scheduled sampler's schedule and, per stage an epoch starts in, its first epoch's served share per
    source (from that epoch's plan on the sampler's `world_size` ranks) against its scheduled share."""
    scheduled = getattr(sampler, "scheduled", None)
    if scheduled is None or not isinstance(dataset, SourceMixture):
        return None, []
    schedule = getattr(scheduled, "schedule", scheduled)  # in memory: the draws of a MixtureSchedule
    stages, seen, epoch = [], set(), 0
    while len(seen) < len(schedule.stages) and epoch <= 10_000:  # a stage shorter than an epoch may start none
        stage = sampler.stage_of(epoch)
        if stage not in seen:
            seen.add(stage)
            _, served, _ = served_shares(sampler.global_plan(epoch).order, dataset.sources)
            asked = sampler.shares_of(epoch)
            stages.append((stage, epoch, list(zip(dataset.names, served.tolist(), asked.tolist(), strict=True))))
        if stage == len(schedule.stages) - 1:
            break
        epoch += 1
    return schedule.describe(), stages


def _served(dm: VarLenDataModule, dataset, sampler, order: np.ndarray) -> tuple[str | None, list]:
    """A weighted sampler's setting and, per class, its served share in `order` (which may
    repeat indices) against the split's share; nothing for an unweighted one."""
    if sampler.draw is None:
        return None, []
    labels = dm.of_each_source(dataset, "class_labels")
    if labels is None:
        return str(dm.sample_weights), []
    names = list(getattr(dm, "class_names", None) or [])
    classes, served, held = served_shares(order, labels)
    named = [("unlabelled" if c < 0 else names[c] if c < len(names) else f"class {c}") for c in classes.tolist()]
    return str(dm.sample_weights or "none: source_weights"), list(
        zip(named, served.tolist(), held.tolist(), strict=True)
    )


#: the most bars a size histogram gets (about 5 pixels each in the saved plot)
MOST_BINS = 80
#: a count axis is logarithmic when its tallest bar is this many times its shortest nonzero one: a
#: tail bin of 3 beside a bin of 30,000 stays visible
LOG_RATIO = 20


def size_bins(sizes: np.ndarray, most: int = MOST_BINS) -> np.ndarray:
    """Histogram edges over the observed sizes: numpy's `"auto"` width (Freedman-Diaconis or
    Sturges), widened to whole sizes and to at most `most` bins, each bin centred on whole sizes."""
    sizes = np.asarray(sizes)
    if not len(sizes):
        return np.array([-0.5, 0.5])
    lo, hi = int(sizes.min()), int(sizes.max())
    width = np.diff(np.histogram_bin_edges(sizes, bins="auto")[:2])[0] if hi > lo else 1.0
    width = int(np.ceil(max(width, (hi - lo + 1) / most, 1.0)))
    return lo - 0.5 + width * np.arange(-(-(hi - lo + 1) // width) + 1)


def log_counts(counts: np.ndarray) -> bool:
    """Whether a histogram's counts need a log axis for its smallest nonzero bar to show."""
    positive = counts[counts > 0]
    return bool(len(positive)) and positive.max() >= LOG_RATIO * positive.min()


def draw_sizes(ax, sizes: np.ndarray, edges: np.ndarray, axis: str) -> None:
    """One axis's size histogram (`size_bins`, a log count axis where `log_counts` says)
    with the sampler's bucket edges (red; at most about 40 drawn)."""
    counts, _, _ = ax.hist(sizes, bins=size_bins(sizes), color="#4472c4")
    if log_counts(counts):
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)  # a bar of one sample keeps a visible height
    for edge in edges[:: max(1, len(edges) // 40)]:
        ax.axvline(edge, color="#c00000", lw=0.5, alpha=0.5)
    scale = " (log)" if ax.get_yscale() == "log" else ""
    ax.set(xlabel=f"sample size ({axis})", ylabel=f"samples{scale}", title="sizes and bucket edges (red)")


def plot_summary(summary: SplitSummary, out: str | Path) -> list[Path]:
    """Three PNGs in `out`: sizes with bucket edges, efficiency per batch, samples against padded size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{summary.split}"
    paths = [out / f"{stem}_sizes.png", out / f"{stem}_padding.png", out / f"{stem}_batches.png"]

    axes_count = summary.sizes.shape[1]
    fig, axes = plt.subplots(1, axes_count, figsize=(6 * axes_count, 3.6), squeeze=False)
    for d, ax in enumerate(axes[0]):
        draw_sizes(ax, summary.sizes[:, d], summary.bucket_edges[d], summary.axes[d])
    fig.suptitle(f"{summary.name}: {summary.split}", fontsize=10)
    fig.tight_layout()
    fig.savefig(paths[0], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(np.arange(len(summary.efficiency)), summary.efficiency, ".", ms=3, color="#4472c4")
    ax.set(xlabel="batch (epoch order)", ylabel="real / allocated", ylim=(0, 1.02))
    ax.set_title(f"padding efficiency per batch (overall {summary.real / max(summary.allocated, 1):.3f})")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.scatter(summary.padded_size, summary.samples_per_batch, s=6, color="#4472c4")
    ax.set(xlabel=f"largest sample in the batch ({summary.axes[0]})", ylabel="samples per batch")
    ax.set_title(f"samples per batch against padded size ({summary.budget})", fontsize=9)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=80)
    plt.close(fig)
    summary.plots = paths
    return paths
