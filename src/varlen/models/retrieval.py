"""Retrieval metrics over a whole split: text-to-video and video-to-text R@1/5/10 and median rank.

Two layouts of the same computation (cosine similarity of L2-normalised embeddings):

- **paired**: one text per video (MSR-VTT's 1k-A test set, one sentence for each of 1,000
  videos; or a video against the set of its captions): a square `[N, N]` similarity whose
  diagonal holds the true pairs. Text-to-video ranks each text's video among the `N` videos,
  video-to-text each video's text among the `N` texts.
- **captions**: several captions per video (`caption_video` maps each caption to its video).
  Text-to-video: one query per caption, its video ranked among all videos. Video-to-text: one
  query per video, ranked by its *best-ranked* caption among all captions (a hit at K when any
  of its captions is in the top K), as the retrieval papers that evaluate MSR-VTT's full test
  split with 20 captions per video do (e.g. CLIP4Clip's multi-sentence evaluation).
  With one caption per video it is the paired layout.

Ranks are counts, so they depend neither on the order of the items (the order in which DDP
ranks' shards are gathered) nor on float noise below `TIE_TOLERANCE`; ties count against
the true item. The states are gathered whole from every rank (`cat`), so the values are exact
under DDP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import Metric

__all__ = [
    "TIE_TOLERANCE",
    "CaptionEmbeddings",
    "PairedEmbeddings",
    "caption_ranks",
    "retrieval_metrics",
    "retrieval_ranks",
    "target_ranks",
]

#: cosine scores this close to the true item's count as ties (against it): the embeddings of one
#: sample computed in differently padded batches differ by about 1e-7, and ranks must not
TIE_TOLERANCE = 1e-6
#: query rows compared at once for video-to-text ranks (a `[chunk, captions]` comparison)
CHUNK = 2048


def target_ranks(scores: torch.Tensor, target: torch.Tensor, tolerance: float = TIE_TOLERANCE) -> torch.Tensor:
    """`[Q]` rank of item `target[q]` in row `q` of `scores` `[Q, N]`: items scored at least its
    score minus `tolerance`, itself included (a collapsed model that scores all alike gets rank `N`)."""
    true = scores.gather(1, target[:, None])
    return (scores >= true - tolerance).sum(dim=1)


def retrieval_ranks(scores: torch.Tensor, tolerance: float = TIE_TOLERANCE) -> torch.Tensor:
    """`[Q]` rank of the true item (the diagonal) in each row of the square `scores` `[Q, Q]`."""
    return target_ranks(scores, torch.arange(len(scores), device=scores.device), tolerance)


def caption_ranks(
    scores: torch.Tensor, caption_video: torch.Tensor, tolerance: float = TIE_TOLERANCE
) -> tuple[torch.Tensor, torch.Tensor]:
    """Text-to-video ranks `[C]` and video-to-text ranks `[V]` of `scores` `[C captions, V videos]`.

    A video's video-to-text rank is the best rank of its captions among all `C` captions; a
    video without captions gets rank `C + 1` (never a hit; `retrieval_metrics` leaves it out).
    """
    t2v = target_ranks(scores, caption_video, tolerance)
    true = scores.gather(1, caption_video[:, None])[:, 0]
    column = scores.T  # [V, C]: every caption's score for each video
    chunks = [
        (column[caption_video[first : first + CHUNK]] >= true[first : first + CHUNK, None] - tolerance).sum(1)
        for first in range(0, len(true), CHUNK)
    ]
    per_caption = torch.cat(chunks) if chunks else caption_video.new_zeros(0)
    v2t = per_caption.new_full((scores.shape[1],), scores.shape[0] + 1)
    return t2v, v2t.scatter_reduce(0, caption_video, per_caption, reduce="amin")


def _summary(ranks: torch.Tensor, chance: float, prefix: str) -> dict[str, torch.Tensor]:
    """R@1/5/10, the median rank (linear: the mean of the two middle ranks) and the chance R@1."""
    out = {f"{prefix}_R{k}": (ranks <= k).float().mean() for k in (1, 5, 10)}
    out[f"{prefix}_median_rank"] = torch.quantile(ranks.float(), 0.5)
    out[f"{prefix}_R1_chance"] = torch.tensor(chance, device=ranks.device)
    return out


def retrieval_metrics(
    video: torch.Tensor, text: torch.Tensor, caption_video: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Text-to-video and video-to-text R@1/5/10, median rank and chance R@1 (see the module docstring).

    Args:
        video: `[V, E]` video embeddings.
        text: `[V, E]` paired texts (`caption_video` None), or `[C, E]` captions.
        caption_video: `[C]` the row of `video` each caption describes; None: paired.

    The median rank is the average of the two middle ranks when their number is even (not
    `torch.median`'s lower one). Chance R@1: `1 / V` text-to-video; video-to-text, the mean
    over videos of `captions of the video / C` (`1 / V` when paired).
    """
    if caption_video is None:
        if len(video) != len(text):
            raise ValueError(f"paired retrieval needs one text per video, got {len(text)} texts for {len(video)}")
        caption_video = torch.arange(len(video), device=video.device)
    scores = F.normalize(text.float(), dim=-1) @ F.normalize(video.float(), dim=-1).T  # [captions, videos]
    t2v, v2t = caption_ranks(scores, caption_video)
    captions = torch.bincount(caption_video, minlength=len(video))
    described = captions > 0
    num_videos, num_captions = max(len(video), 1), max(len(text), 1)
    v2t_chance = float((captions[described].float() / num_captions).mean()) if described.any() else 0.0
    return {**_summary(t2v, 1.0 / num_videos, "t2v"), **_summary(v2t[described], v2t_chance, "v2t")}


def _joined(state, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A `cat` state as one tensor (a list before sync, a tensor after)."""
    if isinstance(state, torch.Tensor):
        return state
    return torch.cat(state) if state else torch.zeros(0, device=device, dtype=dtype)


class PairedEmbeddings(Metric):
    """Row-paired embeddings `(a_i, b_i)` of a whole split, gathered from every rank (`cat` states).

    `compute()` returns both, concatenated in the same order, so pairs stay pairs whatever
    order the ranks' shards arrive in.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("a", default=[], dist_reduce_fx="cat")
        self.add_state("b", default=[], dist_reduce_fx="cat")

    def update(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a.append(a.detach().float())
        self.b.append(b.detach().float())

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = _joined(self.a, self.device), _joined(self.b, self.device)
        return (a.reshape(0, 0), b.reshape(0, 0)) if a.numel() == 0 else (a, b)


class CaptionEmbeddings(Metric):
    """Video embeddings with their sample index, and caption embeddings with their video's index,
    of a whole split, gathered from every rank (`cat` states); the captions layout of
    `retrieval_metrics`.

    `compute()` returns `(video [V, E], captions [C, E], caption_video [C])`, videos in
    index order and `caption_video` the row of each caption's video, whatever order the ranks'
    shards arrive in.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        for name in ("video", "video_index", "caption", "caption_index"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(
        self, video: torch.Tensor, video_index: torch.Tensor, caption: torch.Tensor, caption_index: torch.Tensor
    ) -> None:
        """`video [B, E]` of samples `video_index [B]`; `caption [C, E]` of samples `caption_index [C]`."""
        self.video.append(video.detach().float())
        self.video_index.append(video_index.detach().long())
        self.caption.append(caption.detach().float())
        self.caption_index.append(caption_index.detach().long())

    def compute(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = _joined(self.video_index, self.device, torch.long)
        order = torch.argsort(index)
        caption_index = _joined(self.caption_index, self.device, torch.long)
        caption_video = torch.searchsorted(index[order], caption_index)
        video, caption = _joined(self.video, self.device), _joined(self.caption, self.device)
        return video[order], caption, caption_video
