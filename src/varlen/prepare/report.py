"""`DataReport`: what a DataModule's setup kept, skipped, truncated and left unused, per split.

One type for every scenario, so a user finds what was dropped in one place, `dm.report`:

* **kept**: samples per split;
* **skipped**: bad input left out under `on_bad="skip"` (counted by item and reason, with the
  first few places that name the file / row / sample); under `on_bad="raise"` the first bad
  item raises a `DataError` instead;
* **truncated**: samples cut to a maximum size (texts over `max_length`...);
* **unused**: data that no sample covers, by design, by reason and unit (signal between
  windows, labelled pixels at the image border or in split buffers...);
* **sources** of a training split drawn from several: each one's samples, the share of an epoch
  asked of it and the samples every epoch of the sampler draws of it (a fixed count), and the
  samples each served per epoch (counted as batches reach the model, in this process: under DDP,
  this rank's); under a schedule of shares, each stage's shares and draws, and per epoch the stage and
  shares it was asked for, so that each stage's served share shows beside its scheduled one;
* **retried**: of a split read from a stream, the chunk reads retried so far (a live count, its
  loader workers included; nothing streamed is skipped: a chunk that keeps failing raises); its
  truncated counts are those made when the chunks were written (`varlen optimize` records them);
* **duplicates**: per split, the items that repeat an earlier one of the split exactly, and those
  of a held-out split that are in `train` too (`Duplicates`, `varlen.prepare.duplicates`);
* **stand-ins**: a split that is another (a test split not given is the validation split,
  `varlen.prepare.splits.STANDS_IN`), said beside its counts.

Skips found before the data is split are filed under the pseudo-split `SOURCE`.
`str(report)` is a short table; the DataModule logs it once when `setup` ends.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from varlen import notices
from varlen.errors import DataError

__all__ = ["BAD_INPUT_POLICIES", "SOURCE", "DataReport", "Duplicates", "OnBad", "SplitReport"]

OnBad = Literal["raise", "skip"]
BAD_INPUT_POLICIES = ("raise", "skip")
#: the pseudo-split of what is skipped before the data is split (a file, a recording, a row)
SOURCE = "source"
#: the order the table lists splits in (others after them, as recorded)
ORDER = ("train", "val", "test", "predict")
log = logging.getLogger("varlen")


@dataclass
class SplitReport:
    """The counts of one split (or of `SOURCE`).

    Attributes:
        kept: samples in the split.
        skipped: `(item, reason) -> count` of bad input left out.
        examples: `(item, reason) -> ["<where>: <reason>", ...]`, the first few of each.
        truncated: `item -> count` of samples cut to a maximum size.
        unused: `(unit, reason) -> amount` of data no sample covers.
    """

    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    truncated: Counter = field(default_factory=Counter)
    unused: Counter = field(default_factory=Counter)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())


class Duplicates(NamedTuple):
    """The exact duplicates of one split: `repeated` items repeat an earlier one of the split,
    `in_train` (of a split other than train) are in train too; counted in `unit`."""

    repeated: int
    in_train: int
    unit: str


class DataReport:
    """Bad input under one policy, and the per-split counts of what setup built.

    Args:
        on_bad: `"raise"` (the first bad item raises `DataError`) or
            `"skip"` (it is counted here, and nothing else is dropped silently).
        max_examples: places remembered per (item, reason).
    """

    def __init__(self, on_bad: OnBad = "raise", max_examples: int = 3) -> None:
        if on_bad not in BAD_INPUT_POLICIES:
            raise ValueError(f"on_bad must be one of {BAD_INPUT_POLICIES}, got {on_bad!r}")
        self.on_bad = on_bad
        self.max_examples = max_examples
        self.splits: dict[str, SplitReport] = {}
        self.sources: dict[str, dict[str, tuple[int, float]]] = {}  # split -> source -> (samples, share)
        self.drawn: dict[str, dict[str, float]] = {}  # split -> source -> samples an epoch draws
        self.served: dict[int, Counter] = {}  # epoch -> source -> samples served
        self.schedules: dict[str, tuple[str, list[dict[str, float]]]] = {}  # split -> (schedule, shares per stage)
        self.drawn_stages: dict[str, list[dict[str, float]]] = {}  # split -> per stage, samples an epoch draws
        self.scheduled: dict[int, tuple[int, dict[str, float]]] = {}  # epoch -> (its stage, the shares it asked)
        self.streamed: dict[str, Callable[[], int]] = {}  # split -> its chunk reads retried so far (live)
        self.duplicates: dict[str, Duplicates] = {}  # split -> its exact duplicates
        self.stand_ins: dict[str, str] = {}  # split -> the split it is (test -> val where no test was given)

    # -- recording ----------------------------------------------------------------------------

    def split(self, name: str) -> SplitReport:
        """The counts of split `name` (created empty on first use)."""
        return self.splits.setdefault(name, SplitReport())

    def bad(self, where: str, reason: str, *, item: str = "sample", split: str = SOURCE) -> None:
        """One bad `item` at `where`: raise under `"raise"`, else count it.

        Raises:
            DataError: under `on_bad="raise"`, naming `where` and `reason`.
        """
        if self.on_bad == "raise":
            raise DataError(f"{where}: {reason} (pass on_bad='skip' to skip such input and count it in dm.report)")
        counts = self.split(split)
        key = (item, reason)
        counts.skipped[key] += 1
        shown = counts.examples.setdefault(key, [])
        if len(shown) < self.max_examples:
            shown.append(f"{where}: {reason}")

    def stand_in(self, split: str, other: str) -> None:
        """`split` was not given: it is `other`'s samples (the same dataset)."""
        self.stand_ins[split] = other

    def keep(self, split: str, count: int) -> None:
        """Record the number of samples of `split`."""
        self.split(split).kept = int(count)

    def truncate(self, split: str, count: int, item: str = "sample") -> None:
        """`count` samples of `split` were cut to a maximum size."""
        if count:
            self.split(split).truncated[item] += int(count)

    def leave_unused(self, split: str, reason: str, amount: int, unit: str) -> None:
        """`amount` `unit` of `split`'s data are covered by no sample, because of `reason`."""
        if amount:
            self.split(split).unused[(unit, reason)] += int(amount)

    def mixture(self, split: str, counts: dict[str, int], shares: dict[str, float]) -> None:
        """`split` is drawn from several sources: their samples and planned shares of an epoch."""
        self.sources[split] = {name: (int(counts[name]), float(shares[name])) for name in counts}

    def draw(self, split: str, counts: dict[str, float]) -> None:
        """What every epoch of `split`'s sampler draws of each source: `counts` (the draw's fixed counts)."""
        self.drawn[split] = {name: float(n) for name, n in counts.items()}

    def schedule(self, split: str, described: str, stages: list[dict[str, float]]) -> None:
        """`split`'s sources follow a schedule: its one-line description and each stage's shares by source."""
        self.schedules[split] = (described, [{k: float(v) for k, v in shares.items()} for shares in stages])

    def draw_stages(self, split: str, counts: list[dict[str, float]]) -> None:
        """Per stage, the samples of each source an epoch of `split` draws at the stage's start."""
        self.drawn_stages[split] = [{k: float(n) for k, n in stage.items()} for stage in counts]

    def plan_epoch(self, epoch: int, stage: int, shares: dict[str, float]) -> None:
        """`epoch` (of a scheduled split) draws in `stage`, asking each source for its `shares`."""
        self.scheduled[int(epoch)] = (int(stage), {k: float(v) for k, v in shares.items()})

    def by_stage(self) -> dict[int, dict[str, Any]]:
        """Per stage of the served epochs: `epochs`, `scheduled` (each source's share, its epochs' asked shares
        weighted by what they served) and `served` (each source's share of what they served)."""
        out: dict[int, dict[str, Any]] = {}
        for epoch, (stage, shares) in sorted(self.scheduled.items()):
            counts = self.served.get(epoch, Counter())
            total = sum(counts.values())
            part = out.setdefault(stage, {"epochs": [], "asked": Counter(), "counts": Counter(), "total": 0})
            part["epochs"].append(epoch)
            part["asked"].update({k: v * total for k, v in shares.items()})
            part["counts"].update(counts)
            part["total"] += total
        return {
            stage: {
                "epochs": part["epochs"],
                "scheduled": {k: v / max(part["total"], 1) for k, v in part["asked"].items()},
                "served": {k: part["counts"][k] / max(part["total"], 1) for k in part["asked"]},
            }
            for stage, part in out.items()
        }

    def serve(self, epoch: int, counts: dict[str, int]) -> None:
        """Samples each source served in a batch of `epoch`."""
        self.served.setdefault(int(epoch), Counter()).update(counts)

    def stream(self, split: str, retried: Callable[[], int], written: dict[str, Any] | None = None) -> None:
        """`split` is read from a stream; `retried()` counts its chunk reads retried so far, by this
        process and its loader workers (nothing is skipped: a chunk that keeps failing raises). `written`:
        what the writer counted of it (`truncated`: item -> count), which become its truncated counts."""
        self.streamed[split] = retried
        if written is not None:
            self.split(split).truncated = Counter({k: int(n) for k, n in written.get("truncated", {}).items()})

    def retries(self, split: str | None = None) -> int:
        """Chunk reads retried so far, of `split` or of every streamed split."""
        return sum(count() for name, count in self.streamed.items() if split in (None, name))

    def duplicate(self, split: str, repeated: int, in_train: int = 0, unit: str = "sample") -> None:
        """`repeated` items of `split` repeat an earlier one of it exactly; `in_train` are in train too."""
        self.duplicates[split] = Duplicates(int(repeated), int(in_train), unit)

    def absorb(self, source: str, other: DataReport, left_out: list[str]) -> None:
        """Take in the report of another source's DataModule: what its training split (and its
        files) skipped, truncated and left unused; its splits in `left_out` (held out by it,
        served by no loader here) count as unused training samples, their skips as skips."""
        for name, theirs in other.splits.items():
            if name in left_out:
                mine = self.split("train")
                mine.unused[("samples", f"{name} split of source {source!r}, not served")] += theirs.kept
            elif name in ("train", SOURCE):
                mine = self.split(name)
                mine.truncated.update(theirs.truncated)
                mine.unused.update(theirs.unused)
            else:
                continue  # a split that repeats another (test as validation)
            mine.skipped.update(theirs.skipped)
            for key, shown in theirs.examples.items():
                kept = mine.examples.setdefault(key, [])
                kept.extend(shown[: max(self.max_examples - len(kept), 0)])

    def clear(self) -> None:
        self.splits.clear()
        self.sources.clear()
        self.drawn.clear()
        self.served.clear()
        self.schedules.clear()
        self.drawn_stages.clear()
        self.scheduled.clear()
        self.streamed.clear()
        self.duplicates.clear()
        self.stand_ins.clear()

    # -- reading --------------------------------------------------------------------------------

    @property
    def num_skipped(self) -> int:
        """Bad items skipped, over every split."""
        return sum(s.num_skipped for s in self.splits.values())

    def skipped(self, reason: str | None = None) -> int:
        """Bad items skipped over every split, optionally only those whose reason contains `reason`."""
        return sum(
            n for s in self.splits.values() for (_, why), n in s.skipped.items() if reason is None or reason in why
        )

    def unused(self, reason: str | None = None) -> int:
        """Unused amounts over every split (mixing units: filter by `reason`)."""
        return sum(
            n for s in self.splits.values() for (_, why), n in s.unused.items() if reason is None or reason in why
        )

    @property
    def num_truncated(self) -> int:
        return sum(sum(s.truncated.values()) for s in self.splits.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON): per split, kept, skipped / truncated / unused by reason, examples."""
        return (
            {
                name: {
                    "kept": s.kept,
                    "skipped": {f"{item}: {why}": n for (item, why), n in s.skipped.items()},
                    "examples": [e for shown in s.examples.values() for e in shown],
                    "truncated": dict(s.truncated),
                    "unused": {f"{unit}: {why}": n for (unit, why), n in s.unused.items()},
                    **({"sources": self._sources_dict(name)} if name in self.sources else {}),
                    **({"retried": self.retries(name)} if name in self.streamed else {}),
                    **({"duplicates": self.duplicates[name]._asdict()} if name in self.duplicates else {}),
                    **({"same_as": self.stand_ins[name]} if name in self.stand_ins else {}),
                }
                for name, s in self.splits.items()
            }
            | ({"served": {epoch: dict(counts) for epoch, counts in self.served.items()}} if self.served else {})
            | ({"stages": self.by_stage()} if self.scheduled else {})
        )

    def _sources_dict(self, split: str) -> dict[str, dict[str, Any]]:
        drawn = self.drawn.get(split, {})
        out = {
            k: {"samples": n, "share": f} | ({"drawn": drawn[k]} if k in drawn else {})
            for k, (n, f) in self.sources[split].items()
        }
        if split in self.schedules:
            described, stages = self.schedules[split]
            drawn_stages = self.drawn_stages.get(split, [{}] * len(stages))
            for k in out:
                out[k]["stages"] = [
                    {"share": shares[k]} | ({"drawn": counts[k]} if k in counts else {})
                    for shares, counts in zip(stages, drawn_stages, strict=True)
                ]
        return out

    def __str__(self) -> str:
        names = sorted(
            (n for n in self.splits if n != SOURCE), key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)
        )
        names += [SOURCE] if SOURCE in self.splits else []
        lines = [f"{'split':<8} {'kept':>10} {'skipped':>8} {'truncated':>9}  unused"]
        for name in names:
            s = self.splits[name]
            unused = ", ".join(f"{n:,} {unit} ({why})" for (unit, why), n in s.unused.items()) or "-"
            kept = f"{s.kept:,}" if name != SOURCE else "-"
            if name in self.stand_ins:  # its counts are the other split's
                unused = f"= {self.stand_ins[name]} (no {name} data given: the {self.stand_ins[name]} split stands in)"
            lines.append(f"{name:<8} {kept:>10} {s.num_skipped:>8,} {sum(s.truncated.values()):>9,}  {unused}")
        for name in names:
            s = self.splits[name]
            for (item, why), n in s.skipped.items():
                lines.append(f"skipped in {name}: {n:,} {item}(s): {why}")
                lines += [f"    e.g. {e}" for e in s.examples.get((item, why), [])[:2]]
        for name, sources in self.sources.items():
            drawn = self.drawn.get(name, {})
            parts = []
            for k, (n, share) in sources.items():
                told = f"asked {100 * share:.4g}% of each epoch"
                if k in drawn:
                    told += f", drawn {drawn[k]:,.0f} an epoch"
                parts.append(f"{k} {n:,} ({told})")
            lines.append(f"{name} sources: {', '.join(parts)}")
            if name in self.schedules:
                lines.append(f"{name} schedule: {self.schedules[name][0]}")
        for epoch, counts in self.served.items():
            total = max(sum(counts.values()), 1)
            parts = ", ".join(f"{k} {n:,} ({n / total:.1%})" for k, n in counts.items())
            lines.append(f"served in epoch {epoch}: {parts}")
        for stage, part in self.by_stage().items():
            epochs = part["epochs"]
            told = ", ".join(f"{k} {part['served'][k]:.1%} (scheduled {v:.1%})" for k, v in part["scheduled"].items())
            lines.append(f"served in stage {stage} (epochs {epochs[0]}-{epochs[-1]}): {told}")
        for name in self.streamed:
            told = f"{name} streamed: {self.retries(name):,} chunk read(s) retried so far (each logged)"
            cut = sum(self.splits[name].truncated.values()) if name in self.splits else 0
            lines.append(told + (f"; {cut:,} truncated when the chunks were written" if cut else ""))
        for name, (repeated, in_train, unit) in self.duplicates.items():
            if repeated or in_train:
                also = f"; {in_train:,} also in train" if in_train else ""
                lines.append(f"duplicates in {name}: {repeated:,} {unit}(s) repeat an earlier one of {name}{also}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"DataReport(on_bad={self.on_bad!r}, skipped={self.num_skipped}, splits={sorted(self.splits)})"

    def announce(self, owner: str = "setup") -> None:
        """Log the table (INFO on the `varlen` logger) and warn when anything was skipped, once per job."""
        notices.info(log, "%s: data report\n%s", owner, self)
        if self.num_skipped:
            first = next(e for s in self.splits.values() for shown in s.examples.values() for e in shown)
            notices.warn(
                f"{owner}: skipped {self.num_skipped} bad item(s) under on_bad='skip' (first: {first}); "
                "every count and reason is in dm.report"
            )
