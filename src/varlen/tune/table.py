"""`varlen tune`'s table: a row per measured setting, and the pruned settings summed up in one line.

A pruned setting has no figure (its first batch came after the time the whole run takes at the best
setting so far), so a row each would be a column of dashes: they are one line after the table instead,
naming them by start method (`fork 1x2, 2x4` is 1 worker with a prefetch factor of 2 and 2 with 4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from varlen.tune.grid import Row, Setting

__all__ = ["PRUNED", "is_pruned", "pruned_line", "short", "table"]

#: how the `stopped` cell of a pruned setting begins
PRUNED = "pruned"
HEAD = (
    "",
    "workers",
    "prefetch",
    "start",
    "pin",
    "persistent",
    "first s",
    "batches/s",
    "+-",
    "real/s",
    "run batches/s",
)


def short(s: Setting) -> str:
    """A setting in a few words: `0 workers`, `2 workers x4 fork pinned`."""
    if not s.num_workers:
        return "0 workers"
    return f"{s.num_workers} workers x{s.prefetch_factor} {s.multiprocessing_context}" + (
        " pinned" if s.pin_memory else ""
    )


def is_pruned(row: Row) -> bool:
    return row.rate.stopped.startswith(PRUNED)


def _figure(value: float, spec: str) -> str:
    return spec.format(value) if math.isfinite(value) else "-"


def table(rows: Sequence[Row], best: Row | None = None) -> list[str]:
    """The table's lines (`best`'s row marked `*`), then the pruned settings' line where there are any."""
    cells = [(*HEAD, "timed", "stopped")]
    for r in rows:
        if is_pruned(r):
            continue
        s, rate = r.setting, r.rate
        real = f"{rate.real_per_s:,.0f}" if rate.real_per_s is not None else "-"
        cells.append(
            (
                "*" if r is best else "",
                str(s.num_workers),
                str(s.prefetch_factor or "-"),
                s.multiprocessing_context or "-",
                "yes" if s.pin_memory else "no",
                "yes" if s.persistent_workers else "no",
                _figure(rate.start_s, "{:.2f}"),
                _figure(rate.batches_per_s, "{:,.1f}"),
                _figure(100 * rate.rel_error, "{:.0f}%"),
                real,
                _figure(r.run_per_s, "{:,.1f}"),
                str(rate.batches),
                rate.stopped,
            )
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEAD) + 1)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row[:-1], widths, strict=False)) + "  " + row[-1] for row in cells]
    pruned = pruned_line(rows)
    return lines + ([pruned] if pruned else [])


def pruned_line(rows: Sequence[Row]) -> str:
    """One line for the pruned rows (empty without any): how many, why, and which, by start method."""
    pruned = [r for r in rows if is_pruned(r)]
    if not pruned:
        return ""
    points: dict[str, list[str]] = {}
    for r in pruned:
        s = r.setting
        name = f"{s.multiprocessing_context or 'no start method'}{' pinned' if s.pin_memory else ''}"
        point = f"{s.num_workers}x{s.prefetch_factor}" if s.num_workers else "0 workers"
        if point not in points.setdefault(name, []):
            points[name].append(point)
    persistent = any(r.setting.persistent_workers for r in pruned)
    which = "; ".join(f"{name} {', '.join(found)}" for name, found in points.items())
    return (
        f"pruned {len(pruned)} settings, their first batch later than the whole run takes at the best setting so "
        f"far: {which} (workers x prefetch{', each with and without persistent workers' if persistent else ''})"
    )
