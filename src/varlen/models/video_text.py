"""Reference video-text model: segment encoders, masked cross-attention, alignment and retrieval heads."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric

from varlen.datasets.video_text.collate import IGNORE_INDEX, cross_attention_masks
from varlen.models.attention import PACKED_ATTENTION, Rows, packed_encoder, pair_attention, row_mean
from varlen.models.base import VarLenModule
from varlen.models.retrieval import (
    TIE_TOLERANCE,
    CaptionEmbeddings,
    PairedEmbeddings,
    retrieval_metrics,
    retrieval_ranks,
)

__all__ = [
    "TIE_TOLERANCE",
    "AlignmentScores",
    "CaptionEmbeddings",
    "PairedEmbeddings",
    "VideoTextAligner",
    "info_nce",
    "masked_mean",
    "packed_encoder",
    "retrieval_metrics",
    "retrieval_ranks",
]


def masked_mean(x: torch.Tensor, keep: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean of `x` over `dim` counting only positions where the keep-mask is True."""
    weights = keep.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(dim) / weights.sum(dim).clamp_min(1.0)


def _encoder(d_model: int, nhead: int, num_layers: int, dropout: float) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(d_model, nhead, 2 * d_model, dropout, batch_first=True, norm_first=True)
    # no nested-tensor fast path: the same arithmetic alone and in a padded batch
    return nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)


def info_nce(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Symmetric InfoNCE: row `i` of `a` matches row `i` of `b`; every other row is a negative.

    Computed in chunks of `chunk` query rows, so a whole split (thousands of captions) never
    needs its full `[N, N]` logit matrix at once.
    """
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    total = a.new_zeros(())
    for query, key in ((a, b), (b, a)):
        for first in range(0, len(query), chunk):
            logits = scale * query[first : first + chunk] @ key.T
            labels = torch.arange(first, first + len(logits), device=a.device)
            total = total + F.cross_entropy(logits, labels, reduction="sum")
    return total / (2 * max(len(a), 1))


#: epoch value -> the `AlignmentScores` sum it is the per-segment mean of
ALIGN_KEYS = {"align_loss": "loss", "align_acc": "correct", "align_chance": "chance"}


class AlignmentScores(Metric):
    """Segment alignment over a whole split: cross-entropy, accuracy and chance, as sums over segments.

    Sums (`sum` states) over every valid video segment, so the epoch values are per-segment
    means whatever the batching and however many ranks there are.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        for name in ("loss", "correct", "chance", "segments"):
            self.add_state(name, default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, target: torch.Tensor, captions: torch.Tensor) -> None:
        """`logits [B, S_v, S_t]`, `target [B, S_v]` (-100: ignore), `captions [B]` real per video;
        or packed: `logits [N_v, S_t]`, `target [N_v]`, `captions [N_v]` of each segment's video."""
        valid = target != IGNORE_INDEX
        if not valid.any():
            return
        if captions.dim() < target.dim():
            captions = captions[:, None].expand_as(target)
        self.loss += F.cross_entropy(logits[valid].float(), target[valid], reduction="sum").detach()
        self.correct += (logits.argmax(-1) == target)[valid].sum()
        self.chance += (1.0 / captions[valid].float()).sum()
        self.segments += valid.sum()

    def compute(self) -> dict[str, torch.Tensor]:
        """`align_loss` (0 when no segment has a target), and `align_acc` / `align_chance` when any has."""
        if self.segments == 0:
            return {"align_loss": self.loss.clone()}
        return {name: getattr(self, key) / self.segments for name, key in ALIGN_KEYS.items()}


class VideoTextAligner(VarLenModule):
    """Aligns video segments with captions and retrieves videos from their captions.

    - **Video encoder**: segment features (frames pooled with `frame_mask` when present) ->
      linear -> a transformer over the segments of a video (key padding from `video_mask`).
    - **Text encoder**: each real caption's tokens -> a transformer (key padding from
      `text_mask`) -> masked mean; then a transformer over the captions of a video. Padded
      caption slots are never encoded (a row of only padding would attend to nothing).
    - **Cross-attention**: every caption attends to the video segments it overlaps in time
      (`alignment_mask` and both padding masks; `nn.MultiheadAttention` wants True =
      blocked, so the keep-mask is flipped by `cross_attention_masks`).
      Values come from the video only, so the result is a learnt pooling of the caption's own
      time span, contrasted with the caption (a segment-level InfoNCE).
    - **Alignment head**: for each video segment, scores against every real caption of its
      video from the two encoders alone (no timestamps, no positions: content only); trained
      with cross-entropy on `alignment_target`. Accuracy chance is `1 / S_t` per segment.
    - **Retrieval head**: video and caption-set embeddings (masked means), symmetric InfoNCE
      over the batch. Evaluated over the whole split (`varlen.models.retrieval`)
      in both directions, R@1/5/10 and median rank: `t2v_*` / `v2t_*` pair each video with
      its caption set (a square similarity); `caption_t2v_*` / `caption_v2t_*` query with
      each caption alone (its projection, as in the span loss) and rank a video by its
      best-ranked caption. With one caption per video (MSR-VTT's 1k-A test pairs) the two are
      the same numbers: the 1k-A protocol's.

    Training losses are in-batch (under DDP the negatives are the *local* batch only) and
    logged with `log_mean`. Validation and test values are computed over the whole split
    at epoch end, from metrics synced across ranks (`PairedEmbeddings`,
    `CaptionEmbeddings`, `AlignmentScores`): the InfoNCE terms take every other
    video / caption of the split as negatives and the alignment loss is a mean over segments, so
    they depend neither on how the split was batched nor on how many processes validated it (1
    and 2 give the same numbers).

    `forward` returns `[B, 2 * embed_dim]`: the normalised video and text embeddings.

    **Both batch layouts** (`varlen.datasets.video_text.collate`), with the same weights
    and the same outputs per sample (to float rounding): padded batches go through the
    `nn.TransformerEncoder` modules with key padding masks; packed ones through
    `packed_encoder` (the same layers' weights on the real elements only; attention within
    each video for segments and captions, within each caption for tokens) and
    `pair_attention` (each caption attends to the segments of `pair_index` it overlaps).
    `packed_attention` picks the attention inside a row; the default, "auto"
    (`packed_attention`, shared by every packed model), runs torch's
    varlen FlashAttention on CUDA in half precision without attention dropout and "rows" elsewhere,
    which was chosen by measuring the aligner's CPU train step (forward + backward) on packed YouCook2 batches
    (torch 2.13, `scripts/benchmark_video_text.py --part attention`): "rows" (each row padded
    to the batch's longest row for the attention alone: one SDPA call on `[R, H, L, dh]`, the
    projections and feed-forward still on real elements only) 17 ms; nested jagged tensors
    (`"nested"`) 48 ms, as SDPA on CPU has no fused jagged kernel and splits them into one
    tensor per row; SDPA with a block-diagonal mask over the whole packed sequence 46 ms
    (`N^2` scores where `sum L^2` are needed, growing with the budget); `flex_attention`
    with a block mask has no CPU backward in torch 2.13, and compiled its forward takes 27 ms
    against 6 ms. The padded layout takes 28 ms on the same videos.

    Args:
        feature_dim: visual feature size (None: the DataModule's, at `setup`; `varlen fit` links it).
        vocab_size: tokenizer vocabulary size (None: the DataModule's).
        pad_token_id: tokenizer pad id (None: the DataModule's).
        d_model: model width (as `torch.nn.Transformer` names it).
        nhead: attention heads.
        num_layers: layers per transformer.
        embed_dim: retrieval embedding size.
        dropout: dropout in the transformers.
        max_positions: longest caption (tokens) the position table covers; at least the
            DataModule's `max_caption_tokens` (rounded up to `pad_to_multiple_of`), else a
            batch with longer captions raises a clear error.
        temperature: initial InfoNCE temperature (learnt).
        align_weight: weight of the alignment loss.
        span_weight: weight of the segment-level (caption vs its time span) InfoNCE.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        packed_attention: attention within rows of packed batches, a key of `PACKED_ATTENTION`.
    """

    linked = ("feature_dim", "vocab_size", "pad_token_id")

    def __init__(
        self,
        feature_dim: int | None = None,
        vocab_size: int | None = None,
        pad_token_id: int | None = None,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 1,
        embed_dim: int = 64,
        dropout: float = 0.1,
        max_positions: int = 128,
        temperature: float = 0.07,
        align_weight: float = 1.0,
        span_weight: float = 0.5,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        packed_attention: str = "auto",
    ) -> None:
        super().__init__()
        if packed_attention not in PACKED_ATTENTION:
            raise ValueError(f"packed_attention must be one of {sorted(PACKED_ATTENTION)}, got {packed_attention!r}")
        self.save_hyperparameters()
        self.nhead = nhead
        self.build_when_known()

    def build_layers(self) -> None:
        hp = self.hparams
        d_model, nhead, num_layers, dropout, embed_dim = hp.d_model, hp.nhead, hp.num_layers, hp.dropout, hp.embed_dim
        feature_dim, vocab_size, pad_token_id, max_positions = (
            hp.feature_dim, hp.vocab_size, hp.pad_token_id, hp.max_positions
        )  # fmt: skip
        self.video_in = nn.Sequential(nn.Linear(feature_dim, d_model), nn.LayerNorm(d_model))
        self.video_encoder = _encoder(d_model, nhead, num_layers, dropout)
        self.token_embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_token_id)
        self.position_embed = nn.Embedding(max_positions, d_model)
        self.token_encoder = _encoder(d_model, nhead, num_layers, dropout)
        self.caption_encoder = _encoder(d_model, nhead, num_layers, dropout)
        self.cross_attention = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.align_query = nn.Linear(d_model, d_model)
        self.align_key = nn.Linear(d_model, d_model)
        self.video_proj = nn.Linear(d_model, embed_dim)
        self.text_proj = nn.Linear(d_model, embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / hp.temperature)))
        splits = ("val", "test")
        self.retrieval = nn.ModuleDict({split: PairedEmbeddings() for split in splits})  # (video, text)
        self.span_pairs = nn.ModuleDict({split: PairedEmbeddings() for split in splits})  # (caption, its span)
        self.caption_retrieval = nn.ModuleDict({split: CaptionEmbeddings() for split in splits})
        self.alignment = nn.ModuleDict({split: AlignmentScores() for split in splits})

    # -- encoders -------------------------------------------------------------------------

    def encode_video(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`[B, S_v, d_model]` contextual video segment features."""
        x = self.video_in(batch["video"])
        if "frame_mask" in batch:  # [B, S_v, F, H] -> masked mean over real frames
            x = masked_mean(x, batch["frame_mask"], dim=2)
        return self.video_encoder(x, src_key_padding_mask=~batch["video_mask"])

    def _check_positions(self, length: int) -> None:
        if length > self.position_embed.num_embeddings:
            raise ValueError(
                f"captions padded to {length} tokens exceed max_positions="
                f"{self.position_embed.num_embeddings}; set the model's max_positions to at least the "
                "DataModule's max_caption_tokens (rounded up to pad_to_multiple_of)"
            )

    def encode_text(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`[B, S_t, d_model]` contextual caption features (zeros on padded caption slots)."""
        segments = batch["text_segment_mask"]
        ids, keep = batch["text_ids"][segments], batch["text_mask"][segments]  # real captions only: [N, L]
        self._check_positions(ids.shape[1])
        positions = torch.arange(ids.shape[1], device=ids.device)
        tokens = self.token_embed(ids) + self.position_embed(positions)[None]
        tokens = self.token_encoder(tokens, src_key_padding_mask=~keep)
        pooled = masked_mean(tokens, keep, dim=1)
        captions = pooled.new_zeros((*segments.shape, pooled.shape[-1]))
        captions[segments] = pooled
        return self.caption_encoder(captions, src_key_padding_mask=~segments)

    @staticmethod
    def cross_attention_keep(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`[B, S_t, S_v]` keep-mask of the cross-attention: each caption sees the segments it overlaps.

        A caption that overlaps none (or a padded caption slot) may see every real segment, so
        that no query row is all-blocked (that would give NaN).
        """
        keep = batch["alignment_mask"].transpose(1, 2)
        return keep | (~keep.any(-1, keepdim=True) & batch["video_mask"][:, None, :])

    def encode(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Everything the heads need: segment features, embeddings, alignment logits, spans.

        Padded batches give `[B, S, d]` features and `[B, S_v, S_t]` logits; packed ones
        `[N, d]` features and `[N_v, max S_t]` logits (-inf past a video's captions).
        """
        if "video_cu_seqlens" in batch:
            return self.encode_packed(batch)
        video = self.encode_video(batch)
        text = self.encode_text(batch)
        video_mask, text_segments = batch["video_mask"], batch["text_segment_mask"]
        masks = cross_attention_masks(self.cross_attention_keep(batch), self.nhead)
        span, _ = self.cross_attention(text, video, video, attn_mask=masks["mha_bool"], need_weights=False)
        logits = self.align_query(video) @ self.align_key(text).transpose(1, 2) / math.sqrt(video.shape[-1])
        logits = logits.masked_fill(~text_segments[:, None, :], float("-inf"))
        return self._heads(
            video, text, span, logits, masked_mean(video, video_mask, 1), masked_mean(text, text_segments, 1)
        )

    def encode_packed(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`encode` of a packed batch: no padding anywhere, attention restricted to each row."""
        attention = PACKED_ATTENTION[self.hparams.packed_attention]
        videos, captions = Rows.of(batch["video_cu_seqlens"]), Rows.of(batch["caption_cu_seqlens"])
        video = self.video_in(batch["video"])
        if "frame_cu_seqlens" in batch:  # [N_f, H] -> mean over each segment's frames
            video = row_mean(video, Rows.of(batch["frame_cu_seqlens"]))
        video = packed_encoder(self.video_encoder, video, videos, attention)
        tokens = Rows.of(batch["text_cu_seqlens"])
        self._check_positions(tokens.max_len)
        text = self.token_embed(batch["text_ids"]) + self.position_embed(tokens.positions)
        text = row_mean(packed_encoder(self.token_encoder, text, tokens, attention), tokens)
        text = packed_encoder(self.caption_encoder, text, captions, attention)
        segment, caption = batch["pair_index"]
        keep = batch["alignment_mask"]
        # a caption that overlaps no segment sees every segment of its video (as in the padded layout)
        overlaps = torch.zeros(len(text), dtype=torch.bool, device=keep.device).index_fill(0, caption[keep], True)
        allowed = keep | ~overlaps[caption]
        span = pair_attention(self.cross_attention, text, video, caption[allowed], segment[allowed])
        scores = (self.align_query(video)[segment] * self.align_key(text)[caption]).sum(-1) / math.sqrt(video.shape[-1])
        logits = scores.new_full((len(video), max(int(captions.lengths.max()), 1)), float("-inf"))
        logits = logits.index_put((segment, caption - captions.cu[videos.ids[segment]]), scores)
        out = self._heads(video, text, span, logits, row_mean(video, videos), row_mean(text, captions))
        out["segment_captions"] = captions.lengths[videos.ids]
        return out

    def _heads(self, video, text, span, logits, video_pool, text_pool) -> dict[str, torch.Tensor]:
        video_emb = F.normalize(self.video_proj(video_pool), dim=-1)
        text_emb = F.normalize(self.text_proj(text_pool), dim=-1)
        return {
            "video_segments": video,
            "text_segments": text,
            "spans": span,
            "align_logits": logits,
            "video_emb": video_emb,
            "text_emb": text_emb,
        }

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """`[B, 2 * embed_dim]`: the normalised video embedding, then the text embedding."""
        out = self.encode(batch)
        return torch.cat([out["video_emb"], out["text_emb"]], dim=-1)

    # -- losses ---------------------------------------------------------------------------

    @property
    def scale(self) -> torch.Tensor:
        """The learnt InfoNCE inverse temperature (at most 100)."""
        return self.logit_scale.exp().clamp(max=100)

    def span_embeddings(
        self, batch: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(caption, its time span)` projections of every real caption, `[N, embed_dim]` each."""
        if "video_cu_seqlens" in batch:  # packed: every caption is real
            return self.text_proj(out["text_segments"]), self.video_proj(out["spans"])
        segments = batch["text_segment_mask"]
        return self.text_proj(out["text_segments"][segments]), self.video_proj(out["spans"][segments])

    def losses(self, batch: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The in-batch training losses."""
        target = batch["alignment_target"]
        valid = target != IGNORE_INDEX
        logits = out["align_logits"]
        if valid.any():
            align = F.cross_entropy(logits[valid], target[valid])
        else:  # e.g. whole-video captions: every segment ties; keep the graph for DDP
            align = logits.masked_fill(torch.isinf(logits), 0).sum() * 0.0
        span = info_nce(*self.span_embeddings(batch, out), self.scale)
        retrieval = info_nce(out["text_emb"], out["video_emb"], self.scale)
        total = retrieval + self.hparams.align_weight * align + self.hparams.span_weight * span
        return {"loss": total, "retrieval_loss": retrieval, "align_loss": align, "span_loss": span}

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        losses = self.losses(batch, self.encode(batch))
        self.log_mean({f"train/{k}": v for k, v in losses.items()}, batch, prog_bar=False)
        return losses["loss"]

    # -- evaluation over whole splits -----------------------------------------------------

    def _evaluate(self, split: str, batch: Mapping[str, torch.Tensor]) -> None:
        out = self.encode(batch)
        self.retrieval[split].update(out["video_emb"], out["text_emb"])
        caption, span = self.span_embeddings(batch, out)
        self.span_pairs[split].update(caption, span)
        index = batch["index"]
        if "video_cu_seqlens" in batch:  # packed: captions in video order, `caption_cu_seqlens` apart
            caption_index = index.repeat_interleave(batch["caption_cu_seqlens"].diff())
        else:
            segments = batch["text_segment_mask"]
            caption_index = index[:, None].expand(segments.shape)[segments]
        self.caption_retrieval[split].update(out["video_emb"], index, F.normalize(caption, dim=-1), caption_index)
        captions = out["segment_captions"] if "segment_captions" in out else batch["text_segment_mask"].sum(-1)
        self.alignment[split].update(out["align_logits"], batch["alignment_target"], captions)

    def split_metrics(self, split: str) -> dict[str, torch.Tensor]:
        """The epoch values of `split` from its synced metrics (the same on every rank); resets them."""
        video, text = self.retrieval[split].compute()
        caption, span = self.span_pairs[split].compute()
        values = {**retrieval_metrics(video, text), **self.alignment[split].compute()}
        captions = retrieval_metrics(*self.caption_retrieval[split].compute())
        values.update({f"caption_{name}": value for name, value in captions.items()})
        with torch.no_grad():
            values["retrieval_loss"] = info_nce(text, video, self.scale)
            values["span_loss"] = info_nce(caption, span, self.scale)
        hp = self.hparams
        values["loss"] = (
            values["retrieval_loss"] + hp.align_weight * values["align_loss"] + hp.span_weight * values["span_loss"]
        )
        for metrics in (self.retrieval, self.span_pairs, self.caption_retrieval, self.alignment):
            metrics[split].reset()
        return {f"{split}/{name}": value for name, value in values.items()}

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate("val", batch)

    def on_validation_epoch_end(self) -> None:
        self.log_global(self.split_metrics("val"))

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate("test", batch)

    def on_test_epoch_end(self) -> None:
        self.log_global(self.split_metrics("test"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
