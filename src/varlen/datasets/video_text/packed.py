"""The packed video-text batch: segments, frames, captions and tokens back to back, nothing padded.

The keys are listed in `varlen.datasets.video_text.collate`. Each field is one
`Ragged.pack` gather; the alignment is evaluated on the list of every same-video
(segment, caption) pair, built with index arithmetic (`repeat`, `//`, `%`) and reduced per
segment with `reduceat`, never a loop; in numpy, where a few thousand pairs cost microseconds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from varlen.datasets.video_text.alignment import IGNORE_INDEX
from varlen.datasets.video_text.storage import VideoTextSelection

__all__ = ["LAYOUTS", "Layout", "pack_batch", "pair_alignment", "same_video_pairs"]

Layout = Literal["padded", "packed"]
LAYOUTS = ("padded", "packed")


def same_video_pairs(video_cu: np.ndarray, caption_cu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (segment, caption) pair of one video, video by video, segment-major.

    Args:
        video_cu: `[B + 1]` offsets of each video's segments.
        caption_cu: `[B + 1]` offsets of each video's captions.

    Returns:
        `(segment [P], caption [P], caption position within its video [P])`, global indices
        into the packed segment / caption sequences; `P = sum(S_v * S_t)`.
    """
    video_cu, caption_cu = np.asarray(video_cu, np.int64), np.asarray(caption_cu, np.int64)
    segments, captions = np.diff(video_cu), np.diff(caption_cu)
    per_video = segments * captions
    video = np.repeat(np.arange(len(per_video)), per_video)
    k = np.arange(int(per_video.sum())) - np.repeat(np.cumsum(per_video) - per_video, per_video)
    width = captions[video]
    return video_cu[video] + k // width, caption_cu[video] + k % width, k % width


def pair_alignment(
    video_times: np.ndarray,
    text_times: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    min_iou: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(aligned [P], IoU [P], target [N_v])` of the pairs of `same_video_pairs`, as padded.

    The same float32 arithmetic as `span_overlap`
    (the same values bit for bit) and the same rule as
    `alignment_targets`: per segment, the caption of
    highest IoU among the aligned ones; -100 when there is none or a tie. A segment's pairs are
    contiguous (every segment has at least one), so its reductions are `reduceat` calls.
    """
    segment, caption, position = pairs
    (vs, ve), (ts, te) = video_times[segment].T, text_times[caption].T
    inter = np.maximum(np.minimum(ve, te) - np.maximum(vs, ts), np.float32(0))
    iou = inter / np.maximum((ve - vs) + (te - ts) - inter, np.float32(1e-9))
    aligned = inter > 0 if min_iou <= 0 else iou >= np.float32(min_iou)
    scores = np.where(aligned, iou, np.float32(-1))
    starts = np.flatnonzero(np.concatenate([[True], segment[1:] != segment[:-1]]))
    best = np.maximum.reduceat(scores, starts)
    is_best = scores == np.repeat(best, np.diff(np.append(starts, len(segment))))
    first = np.minimum.reduceat(np.where(is_best, position, len(caption)), starts)
    tied = np.add.reduceat(is_best, starts) > 1
    return aligned, iou, np.where((best <= 0) | tied, IGNORE_INDEX, first).astype(np.int64)


def pack_batch(selection: VideoTextSelection, min_iou: float = 0.0) -> dict[str, torch.Tensor]:
    """The packed batch of `selection` (see the table in `collate`)."""
    fields, rows = selection.fields, selection.rows
    video = fields.video.pack(rows, torch.float32)
    video_times = fields.video_times.pack(rows, torch.float32)  # one level: offsets = segments per video
    text = fields.text.pack(rows, torch.long)
    text_times = fields.text_times.pack(rows, torch.float32)
    video_cu, caption_cu = video_times.cu_seqlens, text_times.cu_seqlens
    pairs = same_video_pairs(video_cu.numpy(), caption_cu.numpy())
    aligned, iou, target = pair_alignment(video_times.values.numpy(), text_times.values.numpy(), pairs, min_iou)
    batch = {
        "index": torch.from_numpy(np.asarray(selection.indices, np.int64)),
        "video": video.values,
        "video_cu_seqlens": video_cu,
    }
    if fields.frames:
        batch["frame_cu_seqlens"] = video.cu_seqlens
    batch.update(
        video_times=video_times.values,
        text_ids=text.values,
        text_cu_seqlens=text.cu_seqlens,
        caption_cu_seqlens=caption_cu,
        text_times=text_times.values,
        pair_index=torch.from_numpy(np.stack(pairs[:2])),
        alignment_mask=torch.from_numpy(aligned),
        alignment_iou=torch.from_numpy(iou),
        alignment_target=torch.from_numpy(target),
    )
    return batch
