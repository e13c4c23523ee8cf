"""What a packed layout promises of its rows: every row `max_tokens` wide (rounded up to `pad_to_multiple_of`),
whatever the samples, and every sample whole in one row.

Why: a packed row's width is the step's memory and its one shape. Widening every row to the longest sample (or to
`max_length`) for the sake of a few long ones cost 4x the memory and filled a row to a quarter. So a sample
longer than `max_tokens` is bad input, found at `setup` before the first step: `on_bad="raise"` names it,
both settings and the way out; `"skip"` leaves it out and counts it in the report (cutting it would change what
the model reads: a text's last token is its `[SEP]`). A streamed split cannot leave samples out: one that holds
any is refused by name whatever `on_bad`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from varlen.batching.shape_policy import round_up
from varlen.errors import DataError
from varlen.prepare.report import DataReport

__all__ = ["check_streamed_rows", "long_samples", "row_width"]


def row_width(max_tokens: int | Sequence[int], pad_to_multiple_of: int | None) -> int:
    """A packed row's width: the (first axis') budget, rounded up to the multiple."""
    return int(round_up(int(np.atleast_1d(max_tokens)[0]), pad_to_multiple_of))


def long_samples(
    lengths: np.ndarray,
    limit: int,
    report: DataReport,
    split: str,
    where: Callable[[np.ndarray], list[str]],
    fix: str,
    item: str = "sample",
    unit: str = "elements",
) -> np.ndarray | None:
    """The positions of `lengths` that fit a packed row of `limit` (None: every one); each longer one goes
    through `report` (raised, or skipped and counted under `split`), named by `where(positions)`, told `fix`.

    Raises:
        DataError: under `on_bad="raise"`, at the first longer sample.
    """
    lengths = np.asarray(lengths)
    longer = np.flatnonzero(lengths > limit)
    if not len(longer):
        return None
    reason = f"longer than max_tokens={limit}, the packed row: {fix}"
    for place, size in zip(where(longer[: 1 if report.on_bad == "raise" else None]), lengths[longer], strict=False):
        report.bad(f"{place} ({int(size)} {unit})", reason, item=item, split=split)
    return np.flatnonzero(lengths <= limit)


def check_streamed_rows(index, limit: int, stream: str, fix: str) -> None:
    """Refuse a streamed split whose size index holds a sample longer than `limit` (its first size axis): a
    stream serves every sample it holds. Reads the sizes of the chunks whose histograms reach past `limit` only.

    Raises:
        DataError: naming the stream, how many samples, the longest and the way out.
    """
    past = np.asarray(index.edges) > limit
    histograms = np.asarray(index.histograms(0))
    count, longest = 0, 0
    for chunk in np.flatnonzero(histograms[:, past].sum(axis=1)).tolist():
        sizes = np.asarray(index.sizes(chunk)).reshape(int(index.samples_per_chunk[chunk]), -1)[:, 0]
        count += int((sizes > limit).sum())
        longest = max(longest, int(sizes.max(initial=0)))
    if count:
        raise DataError(
            f"{stream}: {count} streamed samples are longer than max_tokens={limit}, the packed row (the longest "
            f"{longest}); a stream cannot leave them out: raise max_tokens to at least {longest}, or {fix}"
        )
