"""Which video segment goes with which caption: temporal overlap, IoU and the alignment target.

Pure tensor functions shared by both batch layouts: the padded one broadcasts `[B, S_v, 1]`
spans against `[B, 1, S_t]` ones, the packed one evaluates the same expression on a list of
(segment, caption) pairs, so both give the same values bit for bit.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "alignment_targets", "span_overlap", "temporal_alignment"]

IGNORE_INDEX = -100


def span_overlap(
    video_span: torch.Tensor, text_span: torch.Tensor, min_iou: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(aligned, IoU)` of (start, end) spans `[..., 2]` that broadcast against each other.

    Aligned: IoU >= `min_iou`, or any overlap when `min_iou` is 0. Identical spans give IoU 1.
    """
    (vs, ve), (ts, te) = video_span.unbind(-1), text_span.unbind(-1)
    inter = (torch.minimum(ve, te) - torch.maximum(vs, ts)).clamp_min(0)
    union = (ve - vs) + (te - ts) - inter
    iou = inter / union.clamp_min(1e-9)
    return (inter > 0 if min_iou <= 0 else iou >= min_iou), iou


def temporal_alignment(
    video_times: torch.Tensor,
    text_times: torch.Tensor,
    video_mask: torch.Tensor,
    text_mask: torch.Tensor,
    min_iou: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-mask and IoU `[B, S_v, S_t]` of the temporal overlap of every (segment, caption) pair.

    Broadcasts the `[B, S_v, 1]` video spans against the `[B, 1, S_t]` caption spans: one
    tensor expression, no loop (`span_overlap`). Identical spans give IoU 1 (a diagonal
    for annotated segments).

    Args:
        video_times, text_times: `[B, S, 2]` (start, end) seconds.
        video_mask, text_mask: `[B, S_v]` / `[B, S_t]` keep-masks of real segments.
        min_iou: a pair is aligned when IoU >= `min_iou`; with 0, when they overlap at all.

    Returns:
        (keep-mask: True = aligned and both real, IoU: 0 on padding).
    """
    aligned, iou = span_overlap(video_times[:, :, None], text_times[:, None], min_iou)
    real = video_mask[:, :, None] & text_mask[:, None, :]
    return aligned & real, torch.where(real, iou, torch.zeros_like(iou))


def alignment_targets(keep: torch.Tensor, iou: torch.Tensor) -> torch.Tensor:
    """`[B, S_v]` the caption with the highest IoU per video segment; -100 where none or tied."""
    scores = iou.masked_fill(~keep, -1.0)
    if scores.shape[-1] == 0:
        return torch.full(scores.shape[:2], IGNORE_INDEX, dtype=torch.long)
    best, target = scores.max(dim=-1)
    ties = (scores == best[..., None]).sum(-1) > 1
    return target.masked_fill((best <= 0) | ties, IGNORE_INDEX)
