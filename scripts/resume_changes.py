"""Resumes with batching settings changed at random (issue 40, item 1): the table of the closing note.

`python scripts/resume_changes.py [--cases 600] [--seed 0]`

Each case: random sizes (8-400 samples), a random run (batch size or budget with cost padded/sum/packed, cap,
multiple, buckets, the shape policy's rungs and their batch sizes; 1-4 ranks; weights or groups sometimes),
served to a random batch of a random epoch, saved, and resumed under settings changed at random (one setting,
or all redrawn; a quarter of the cases resumed a second time under third settings). Every case is checked by
`tests/test_resume_changes.py`'s `resumed_epoch` (samples served 0 and 2+ times against the epoch's
draw, budgets, equal counts, `len()`, the next epoch the new settings' own). One row per setting changed
alone (between the saved run and the last resumed one), one for several at once; a line the user saw (the
shortest).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_resume_changes import ranks_of, resumed_epoch  # noqa: E402

from varlen.batching import resume  # noqa: E402

NAMES = ("world", "batch_size", "max_tokens", "cost", "max_batch_size", "pad_to_multiple_of", "num_buckets",
         "max_shapes", "caps")  # fmt: skip


def run_of(rng: np.random.Generator) -> dict:
    """One run's settings, as the property test draws them."""
    kind = rng.choice(["batch_size", "padded", "sum", "packed"])
    run: dict = {"world": int(rng.integers(1, 5))}
    if kind == "batch_size":
        run["batch_size"] = int(rng.integers(1, 25))
    else:
        run |= {"max_tokens": int(rng.integers(32, 1501)), "cost": str(kind)}
        if rng.random() < 0.5:
            run["max_batch_size"] = int(rng.integers(1, 25))
    if rng.random() < 0.5:
        run["pad_to_multiple_of"] = int(rng.choice([2, 8]))
    if rng.random() < 0.5:
        run["num_buckets"] = int(rng.integers(1, 13))
    if kind in ("batch_size", "padded") and rng.random() < 0.5:
        run["max_shapes"] = int(rng.integers(1, 13))
        if kind == "padded" and rng.random() < 0.5:
            run["caps"] = int(rng.integers(1, 11))
    return run


def changed_one(rng: np.random.Generator, old: dict) -> dict:
    """`old` with one setting changed (the budget halved or doubled, another world size, ...)."""
    new = dict(old)
    name = rng.choice(["world", "budget", "pad_to_multiple_of", "num_buckets", "max_shapes", "cost", "cap", "caps"])
    if name == "world":
        new["world"] = int(rng.integers(1, 5))
    elif name == "budget" and "max_tokens" in old:
        new["max_tokens"] = max(8, int(old["max_tokens"] * rng.choice([0.5, 2.0])))
    elif name == "budget":
        new["batch_size"] = int(rng.integers(1, 25))
    elif name == "pad_to_multiple_of":
        new["pad_to_multiple_of"] = rng.choice([None, 2, 8])
    elif name == "num_buckets":
        new["num_buckets"] = rng.choice([None, 1, 3, 9])
    elif name == "max_shapes" and old.get("cost", "padded") == "padded":
        new["max_shapes"] = int(rng.integers(1, 13))
        new.pop("caps", None)
    elif name == "cap" and "max_tokens" in old:
        new["max_batch_size"] = rng.choice([None, int(rng.integers(1, 25))])
    elif name == "caps" and "max_shapes" in old and old.get("cost") == "padded":
        new["caps"] = int(rng.integers(1, 11))
    elif name == "cost" and "max_tokens" in old:
        new["cost"] = str(rng.choice(["padded", "sum", "packed"]))
        if new["cost"] != "padded":
            new.pop("max_shapes", None), new.pop("caps", None)
    return {k: (int(v) if isinstance(v, np.integer) else v) for k, v in new.items() if v is not None}


def case_of(rng: np.random.Generator) -> dict:
    n = int(rng.integers(8, 401))
    sizes = np.clip(np.rint(rng.lognormal(rng.uniform(1, 6), 1.0, n)), 1, 3000).astype(np.int64)
    old = run_of(rng)
    new = run_of(rng) if rng.random() < 0.5 else changed_one(rng, old)
    case = {"sizes": sizes, "seed": int(rng.integers(100)), "epoch": int(rng.integers(3)), "old": old, "new": new}
    if rng.random() < 0.3:
        case["extra"] = {"groups": rng.integers(0, rng.integers(1, 6), n)}
    elif rng.random() < 0.3:
        case["extra"] = {"weights": rng.random(n) + 0.05, "replacement": bool(rng.random() < 0.5)}
    length = len(ranks_of(sizes, old | {"world": 1}, {"seed": case["seed"], **case.get("extra", {})})[0])
    case["stop"] = int(rng.integers(0, length // old["world"] + 1))
    if rng.random() < 0.25:
        case["third"], case["stop2"] = run_of(rng), int(rng.integers(0, 7))
    return case


def changed(case: dict) -> list[str]:
    """The settings that changed between the saved run and the (last) resumed one, by their names."""
    last = case.get("third", case["new"])
    names = [name for name in NAMES if case["old"].get(name) != last.get(name)]
    return ["rungs" if n == "max_shapes" else "rung_batch_sizes" if n == "caps" else n for n in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list] = defaultdict(lambda: [0, 0, 0, 0, 0, ""])  # cases, resumed twice, lost, twice, padded
    start = time.perf_counter()
    for _ in range(args.cases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # samples over a budget, a plan's own repeats: said, and counted
            case = case_of(rng)
            resume._SAID.clear()  # each case's lines (said once per process otherwise)
            outcome = resumed_epoch(case)  # raises where a check fails
        names = changed(case)
        alone = f"{names[0]} alone" if len(names) == 1 else f"{len(names)} at once" if names else "none"
        for key in ("every case", alone if len(names) < 2 else "2-9 at once"):
            row = rows[key]
            row[0] += 1
            row[1] += "third" in case
            row[2] += outcome["lost"]
            row[3] += outcome["twice"]
            row[4] += outcome["padded"] > 0
            if outcome["lines"] and (not row[5] or len(outcome["lines"][0]) < len(row[5])):
                row[5] = outcome["lines"][0]
    print("| settings changed | cases | of them resumed twice | samples served 0 times | served 2+ times (beyond the "
          "counted repeats that feed every rank) | cases with such repeats | a line the user sees |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in sorted(rows, key=lambda k: (k != "every case", not k.endswith("alone"), -rows[k][0])):
        cases, again, lost, twice, padded, line = rows[name]
        line = line or "(none: nothing planned again)"
        print(f"| {name} | {cases} | {again} | {lost} | {twice} | {padded} | {line} |")
    print(f"\n{args.cases} cases in {time.perf_counter() - start:.0f} s; every check held in every case")


if __name__ == "__main__":
    main()
