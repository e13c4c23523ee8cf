"""The caption table and feature store of a configured source: synthetic, YouCook2, MSR-VTT or JSONL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from varlen.datasets.video_text.captions import READERS, CaptionTable
from varlen.datasets.video_text.features import FeatureStore
from varlen.datasets.video_text.msrvtt import read_msrvtt_protocol
from varlen.datasets.video_text.synthetic import SentenceFeatures, synthetic_corpus
from varlen.errors import DataError
from varlen.prepare.report import DataReport

__all__ = ["SOURCES", "open_source"]

SOURCES = ("synthetic", *READERS)


def open_source(
    source: str,
    annotations: str | None,
    store: FeatureStore | None,
    *,
    fps: float,
    seed: int,
    synthetic: Mapping[str, Any],
    limit_videos: int | None = None,
    report: DataReport | None = None,
    train_list: str | None = None,
    test_pairs: str | None = None,
) -> tuple[CaptionTable, FeatureStore]:
    """The caption table and feature store of `source`.

    Args:
        source: "synthetic" or a reader of `READERS`.
        annotations: the caption file of a real source.
        store: real features; None: synthetic ones (the corpus's own, or derived from the
            sentences and timestamps of real annotations, which then need every duration).
        fps: feature frames per second.
        seed: seed of the synthetic corpus / features.
        synthetic: `num_videos`, `num_steps`, `dim`, `noise` of the synthetic corpus
            (only `dim` and `noise` for features of real annotations).
        limit_videos: keep only the first this many videos.
        report: where bad captions / videos of the file go (default: raise).
        train_list, test_pairs: MSR-VTT's train list and 1k-A test pairs (`source="msrvtt"`
            only; see `read_msrvtt_protocol`).
    """
    if source == "synthetic":
        table, features = synthetic_corpus(fps=fps, seed=seed, **synthetic)
        return (table.head(limit_videos) if limit_videos is not None else table), features
    if source not in READERS or annotations is None:
        raise ValueError(f"source must be one of {SOURCES}, with annotations= for a real one; got {source!r}")
    if (train_list is not None or test_pairs is not None) and source != "msrvtt":
        raise ValueError(f"train_list= and test_pairs= are MSR-VTT files (source='msrvtt'), got source {source!r}")
    if source == "msrvtt":
        table = read_msrvtt_protocol(annotations, train_list, test_pairs, report)
    else:
        table = READERS[source](annotations, report)
    if limit_videos is not None:
        table = table.head(limit_videos)
    if store is not None:
        return table, store
    missing = [v for v, d in zip(table.videos, table.durations, strict=True) if not np.isfinite(d)]
    if missing:
        raise DataError(
            f"{table.source}: synthetic features need every video's duration (missing for {len(missing)} videos, "
            f"e.g. {missing[:3]}); pass features= or add durations"
        )
    return table, SentenceFeatures(table, fps, synthetic["dim"], synthetic["noise"], seed)
