"""`VideoTextCollator`: a batch of videos and captions, padded or packed, with the cross-modal alignment.

Padded layout (`layout="padded"`, the default; every mask in the "keep" convention, True =
real / allowed, unless its name says so):

=====================  ====================  ====================================================
key                    shape                 meaning
=====================  ====================  ====================================================
`index`              [B]                   dataset index of each video
`video`              [B, S_v, D]           pooled segment features (`frames=False`), or
                       [B, S_v, F, D]        frames per segment (`frames=True`)
`frame_mask`         [B, S_v, F]           keep: real frames (`frames=True` only)
`video_mask`         [B, S_v]              keep: real video segments
`video_times`        [B, S_v, 2]           start, end seconds of each video segment
`text_ids`           [B, S_t, L]           token ids, the tokenizer's pad id elsewhere
`text_mask`          [B, S_t, L]           keep: real tokens
`text_segment_mask`  [B, S_t]              keep: real captions
`text_times`         [B, S_t, 2]           start, end seconds of each caption
`alignment_mask`     [B, S_v, S_t]         keep: video segment and caption overlap in time
                                             (IoU >= `min_iou`; any overlap when 0), both real
`alignment_iou`      [B, S_v, S_t]         temporal IoU (0 on padding)
`alignment_target`   [B, S_v]              caption with the highest IoU per video segment;
                                             -100 (ignore) on padding, no overlap or a tie
=====================  ====================  ====================================================

Packed layout (`layout="packed"`): nothing is padded. `N_v` segments, `N_f` frames,
`N_t` captions and `N_tok` tokens of the whole batch, video after video; `*_cu_seqlens`
are int32 offsets (FlashAttention's name: row `r` is `[cu[r], cu[r + 1])`); `P` =
sum over videos of `S_v * S_t` (every same-video pair):

======================  ==============  ==========================================================
key                     shape           meaning
======================  ==============  ==========================================================
`index`               [B]             dataset index of each video
`video`               [N_v, D]        pooled segment features (`frames=False`), or
                        [N_f, D]        the frames of every segment (`frames=True`)
`video_cu_seqlens`    [B + 1]         each video's segments in the segment sequence
`frame_cu_seqlens`    [N_v + 1]       each segment's frames in `video` (`frames=True` only)
`video_times`         [N_v, 2]        start, end seconds of each segment
`text_ids`            [N_tok]         token ids, caption after caption
`text_cu_seqlens`     [N_t + 1]       each caption's tokens in `text_ids`
`caption_cu_seqlens`  [B + 1]         each video's captions in the caption sequence
`text_times`          [N_t, 2]        start, end seconds of each caption
`pair_index`          [2, P]          (segment, caption) of every pair of one video, video by
                                        video, segment-major: the padded `[B, S_v, S_t]` grid
                                        without its padding
`alignment_mask`      [P]             keep: the pair overlaps in time (as the padded mask)
`alignment_iou`       [P]             temporal IoU of the pair
`alignment_target`    [N_v]           caption (position within its video) with the highest
                                        IoU per segment; -100 (ignore) on no overlap or a tie
======================  ==============  ==========================================================

The overlap is index pairs, not a block mask: the alignment head scores every same-video pair
and the cross-attention uses the overlapping ones, so one pair list serves both, holds
`sum S_v * S_t` entries where a mask over the packed batch holds `(sum S_v) * (sum S_t)`
(B times more, almost all False), and feeds gathers and `index_add` directly.

Attention masks: PyTorch has two opposite boolean conventions. `nn.MultiheadAttention` wants
True = *blocked*: pass `varlen.batching.blocked_mask` of a keep-mask (or
`varlen.batching.additive_mask`, -inf = blocked). `F.scaled_dot_product_attention` wants
True = *allowed*: pass the keep-mask itself (or the same additive mask). See
`cross_attention_masks`.

The sampler's sizes live here too (`budget_sizes`): they bound exactly the tensors this
collate pads, with the same rounding, so the two cannot drift apart. A packed batch is budgeted
on its real elements (`dataset.lengths`, summed) and needs no size classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from varlen.batching import additive_mask, blocked_mask, round_up
from varlen.datasets.video_text.alignment import IGNORE_INDEX, alignment_targets, span_overlap, temporal_alignment
from varlen.datasets.video_text.packed import LAYOUTS, Layout, pack_batch
from varlen.datasets.video_text.storage import VideoTextSelection

__all__ = [
    "IGNORE_INDEX",
    "LAYOUTS",
    "SEGMENT_EDGES",
    "VideoTextCollator",
    "alignment_targets",
    "budget_sizes",
    "cross_attention_masks",
    "pad_segments",
    "segment_class",
    "span_overlap",
    "temporal_alignment",
]

#: upper edges of the segment-count classes a batch is drawn from (steps of at most 20 %)
SEGMENT_EDGES = np.unique(np.ceil(1.2 ** np.arange(60)).astype(np.int64))


def pad_segments(
    flats: Sequence[np.ndarray | torch.Tensor],
    counts: Sequence[np.ndarray | torch.Tensor],
    pad_value: float | int = 0,
    pad_to_multiple_of: int | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad a batch ragged on two axes (segments, then items per segment) in one scatter.

    For per-sample arrays held elsewhere; `VideoTextCollator` gathers from
    `Ragged` fields instead (the same output).

    Sample `b` holds `len(counts[b])` segments; its segment `s` holds `counts[b][s]`
    items, stored back to back in `flats[b]` (`[sum(counts[b]), *trailing]`). Every item's
    (sample, segment, position) coordinate is computed with `repeat_interleave`, so there is no
    Python loop over segments or items.

    Returns:
        values `[B, S, L, *trailing]` (`pad_value` elsewhere), mask `[B, S, L]` (keep:
        True = real item) and segment mask `[B, S]` (keep: True = real segment).
    """
    counts_t = [torch.as_tensor(np.asarray(c), dtype=torch.long).reshape(-1) for c in counts]
    values = torch.cat([torch.as_tensor(np.asarray(f)) for f in flats])
    if dtype is not None:
        values = values.to(dtype)
    segments = torch.tensor([len(c) for c in counts_t], dtype=torch.long)
    per_segment = torch.cat(counts_t)
    if int(per_segment.sum()) != len(values):
        raise ValueError(f"counts add up to {int(per_segment.sum())} items but the arrays hold {len(values)}")
    batch, max_segments = len(counts_t), int(segments.max())
    max_items = round_up(int(per_segment.max()) if len(per_segment) else 0, pad_to_multiple_of)
    seg_sample = torch.repeat_interleave(torch.arange(batch), segments)
    seg_pos = torch.arange(len(per_segment)) - torch.repeat_interleave(torch.cumsum(segments, 0) - segments, segments)
    item_sample = torch.repeat_interleave(seg_sample, per_segment)
    item_segment = torch.repeat_interleave(seg_pos, per_segment)
    item_start = torch.repeat_interleave(torch.cumsum(per_segment, 0) - per_segment, per_segment)
    item_pos = torch.arange(len(values)) - item_start
    out = torch.full((batch, max_segments, max_items, *values.shape[1:]), pad_value, dtype=values.dtype)
    out[item_sample, item_segment, item_pos] = values
    mask = torch.zeros((batch, max_segments, max_items), dtype=torch.bool)
    mask[item_sample, item_segment, item_pos] = True
    segment_mask = torch.arange(max_segments)[None, :] < segments[:, None]
    return out, mask, segment_mask


def cross_attention_masks(keep: torch.Tensor, num_heads: int = 1) -> dict[str, torch.Tensor]:
    """The same keep-mask `[B, Q, K]` in the forms each PyTorch attention API expects.

    Returns:
        `"mha_bool"`: `[B * num_heads, Q, K]`, True = blocked (`nn.MultiheadAttention`'s
        `attn_mask`); `"additive"`: `[B * num_heads, Q, K]` float, 0 allowed / -inf blocked
        (either API); `"sdpa_bool"`: `[B, 1, Q, K]`, True = allowed
        (`F.scaled_dot_product_attention`'s boolean `attn_mask`, broadcast over heads).
        A query row with nothing allowed gives NaN in both APIs: drop such rows afterwards.
    """
    per_head = keep.repeat_interleave(num_heads, dim=0)
    return {"mha_bool": blocked_mask(per_head), "additive": additive_mask(per_head), "sdpa_bool": keep[:, None]}


class VideoTextCollator:
    """Gathers a batch of videos and captions in one of two layouts and builds the alignment.

    `layout="padded"` (the default) pads to the batch maximum on every ragged axis (the table
    in the module docstring); `layout="packed"` lays segments, frames, tokens and captions back
    to back with their offsets (`.packed`). Input: the
    `VideoTextSelection` of `dataset.__getitems__`
    (one `Ragged.pad` / `Ragged.pack` gather per field), or a list of per-sample dicts
    (`dataset[i]`: concatenated once per field first). No loop over samples, segments,
    frames, captions or tokens; the alignment is one broadcast (padded) or one pair list (packed).

    Args:
        pad_token_id: the tokenizer's pad id, written where there is no token (padded).
        pad_to_multiple_of: round the token and frame axes up to this multiple (padded only:
            a packed batch pads nothing).
        min_iou: IoU threshold of the alignment mask (0: any overlap).
        layout: `"padded"` or `"packed"`.
    """

    def __init__(
        self,
        pad_token_id: int = 0,
        pad_to_multiple_of: int | None = None,
        min_iou: float = 0.0,
        layout: Layout = "padded",
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.pad_token_id = int(pad_token_id)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.min_iou = float(min_iou)
        self.layout = layout

    def __call__(self, samples: VideoTextSelection | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not isinstance(samples, VideoTextSelection):
            samples = VideoTextSelection.from_samples(samples)
        if len(samples) == 0:
            raise ValueError("cannot collate an empty batch")
        if self.layout == "packed":
            return pack_batch(samples, self.min_iou)
        return self.padded(samples)

    def video(self, selection: VideoTextSelection) -> dict[str, torch.Tensor]:
        """`video` and its masks, padded: frames per segment, or pooled segments."""
        fields, rows = selection.fields, selection.rows
        if not fields.frames:
            video = fields.video.pad(rows, 0.0, dtype=torch.float32)
            return {"video": video.values, "video_mask": video.mask}
        video = fields.video.pad(rows, 0.0, self.pad_to_multiple_of, torch.float32)
        return {"video": video.values, "frame_mask": video.mask, "video_mask": video.row_mask}

    def padded(self, selection: VideoTextSelection) -> dict[str, torch.Tensor]:
        """The padded batch of the module docstring's table."""
        fields, rows = selection.fields, selection.rows
        batch = {"index": torch.from_numpy(np.asarray(selection.indices, np.int64)), **self.video(selection)}
        text = fields.text.pad(rows, self.pad_token_id, self.pad_to_multiple_of, torch.long)
        video_times = fields.video_times.pad(rows, 0.0, dtype=torch.float32).values
        text_times = fields.text_times.pad(rows, 0.0, dtype=torch.float32).values
        keep, iou = temporal_alignment(video_times, text_times, batch["video_mask"], text.row_mask, self.min_iou)
        batch.update(
            video_times=video_times,
            text_ids=text.values,
            text_mask=text.mask,
            text_segment_mask=text.row_mask,
            text_times=text_times,
            alignment_mask=keep,
            alignment_iou=iou,
            alignment_target=alignment_targets(keep, iou),
        )
        return batch


# -- what the sampler budgets: bounds of the tensors above ------------------------------------


def segment_class(counts: np.ndarray) -> np.ndarray:
    """The upper edge of each count's class in `SEGMENT_EDGES` (1..9 exact, then +20 % steps)."""
    counts = np.asarray(counts, dtype=np.int64)
    return SEGMENT_EDGES[np.searchsorted(SEGMENT_EDGES, counts, side="left")]


def budget_sizes(
    shapes: np.ndarray, frames: bool, pad_to_multiple_of: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sampler sizes `[N, 2]` and groups `[N]` that bound the padded batch tensors.

    A padded tensor takes its maxima over two axes at once (`[B, max S, max L]`), and the
    product of two maxima can exceed every video's own `S x L`: a batch of 30-caption videos
    with 8-token captions and 3-caption videos with 40-token captions pads to `30 x 40`. So a
    batch only holds videos of one segment-count class (`segment_class`, the groups), and
    a video's size is its class's upper edge times its longest segment / caption, rounded up to
    `pad_to_multiple_of` as the collate rounds that axis. Then the core sampler's
    `len(batch) * max(size) <= max_tokens` implies, per batch (except a video over the budget
    on its own, which gets a batch of its own):

    - text: `B * S_t * L <= max_tokens[1]`, the elements of `text_ids` / `text_mask`;
    - video, `frames=True`: `B * S_v * F <= max_tokens[0]`, the elements of `frame_mask`
      (`video` holds `D` times as many);
    - video, pooled: `B * S_v <= max_tokens[0]`, the elements of `video_mask`
      (`video` holds `D` times as many); the segment count is exact there, no class needed.

    Args:
        shapes: `[N, 4]` per video (segments, longest segment in frames, captions, longest
            caption in tokens), as `VideoTextDataset.shapes`.
        frames: whether the batch keeps frames (`[B, S_v, F, D]`) or pooled segments.
        pad_to_multiple_of: the collate's rounding of the frame and token axes.

    Returns:
        (sizes `[N, 2]`: video, text; groups `[N]`: one id per segment-count class pair).
    """
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 4)
    segments, longest_segment, captions, longest_caption = shapes.T
    text_class = segment_class(captions)
    text = text_class * round_up(longest_caption, pad_to_multiple_of)
    if frames:
        video_class = segment_class(segments)
        video = video_class * round_up(longest_segment, pad_to_multiple_of)
        groups = video_class * (int(SEGMENT_EDGES[-1]) + 1) + text_class
    else:
        video, groups = segments, text_class
    return np.stack([video, text], axis=1), groups
