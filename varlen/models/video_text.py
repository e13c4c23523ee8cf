"""Reference video-text model: segment encoders, masked cross-attention, alignment and retrieval heads."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, Metric

from varlen.datamodules.video_text import IGNORE_INDEX, cross_attention_masks
from varlen.models.base import VarLenModule


def masked_mean(x: torch.Tensor, keep: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean of ``x`` over ``dim`` counting only positions where the keep-mask is True."""
    weights = keep.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(dim) / weights.sum(dim).clamp_min(1.0)


def _encoder(hidden: int, heads: int, layers: int, dropout: float) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout, batch_first=True, norm_first=True)
    # no nested-tensor fast path: the same arithmetic alone and in a padded batch
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class RetrievalRanks(Metric):
    """Text-to-video retrieval over a whole split: R@1/5/10 and median rank.

    Keeps every video's and text's embedding (synced across ranks by torchmetrics, ``cat``),
    then ranks all videos for each text query by cosine similarity. Ties count against the
    true video: its rank is the number of videos scored at least as high as it (itself
    included), so a collapsed model that scores everything alike gets rank ``N``, not 1. The
    median rank is the average of the two middle ranks when their number is even (not
    ``torch.median``'s lower one). Chance R@1 is ``1 / N``.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("video", default=[], dist_reduce_fx="cat")
        self.add_state("text", default=[], dist_reduce_fx="cat")

    def update(self, video: torch.Tensor, text: torch.Tensor) -> None:
        self.video.append(video.detach().float())
        self.text.append(text.detach().float())

    @staticmethod
    def ranks(scores: torch.Tensor) -> torch.Tensor:
        """``[Q]`` rank of the true item (the diagonal) in each row of ``scores`` ``[Q, N]``, ties pessimistic."""
        return (scores >= scores.diagonal()[:, None]).sum(dim=1)

    def compute(self) -> dict[str, torch.Tensor]:
        video = torch.cat(self.video) if isinstance(self.video, list) else self.video
        text = torch.cat(self.text) if isinstance(self.text, list) else self.text
        scores = F.normalize(text, dim=-1) @ F.normalize(video, dim=-1).T  # [queries, videos]
        ranks = self.ranks(scores)
        out = {f"t2v_R{k}": (ranks <= k).float().mean() for k in (1, 5, 10)}
        out["t2v_median_rank"] = torch.quantile(ranks.float(), 0.5)  # linear: mean of the middle two
        out["t2v_R1_chance"] = torch.tensor(1.0 / len(ranks), device=ranks.device)
        return out


class VideoTextAligner(VarLenModule):
    """Aligns video segments with captions and retrieves videos from their captions.

    - **Video encoder**: segment features (frames pooled with ``frame_mask`` when present) ->
      linear -> a transformer over the segments of a video (key padding from ``video_mask``).
    - **Text encoder**: each real caption's tokens -> a transformer (key padding from
      ``text_mask``) -> masked mean; then a transformer over the captions of a video. Padded
      caption slots are never encoded (a row of only padding would attend to nothing).
    - **Cross-attention**: every caption attends to the video segments it overlaps in time
      (``alignment_mask`` and both padding masks; ``nn.MultiheadAttention`` wants True =
      blocked, so the keep-mask is flipped by :func:`~varlen.datamodules.video_text.cross_attention_masks`).
      Values come from the video only, so the result is a learnt pooling of the caption's own
      time span, contrasted with the caption (a segment-level InfoNCE).
    - **Alignment head**: for each video segment, scores against every real caption of its
      video from the two encoders alone (no timestamps, no positions: content only); trained
      with cross-entropy on ``alignment_target``. Accuracy chance is ``1 / S_t`` per segment.
    - **Retrieval head**: video and caption-set embeddings (masked means), symmetric InfoNCE
      over the batch; evaluated as text-to-video R@1/5/10 and median rank over the whole split.
      Under DDP the InfoNCE negatives are the *local* batch only (embeddings are not gathered
      across ranks), so the effective number of negatives is the per-rank batch size; the
      evaluation metrics, in contrast, rank over the whole split gathered from every rank.

    ``forward`` returns ``[B, 2 * embed_dim]``: the normalised video and text embeddings.

    Args:
        feature_dim: visual feature size (linked from the DataModule).
        vocab_size: tokenizer vocabulary size (linked).
        pad_token_id: tokenizer pad id (linked).
        hidden: model width.
        heads: attention heads.
        layers: layers per transformer.
        embed_dim: retrieval embedding size.
        dropout: dropout in the transformers.
        max_positions: longest caption (tokens) the position table covers; at least the
            DataModule's ``max_caption_tokens`` (rounded up to ``pad_to_multiple_of``), else a
            batch with longer captions raises a clear error.
        temperature: initial InfoNCE temperature (learnt).
        align_weight: weight of the alignment loss.
        span_weight: weight of the segment-level (caption vs its time span) InfoNCE.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
    """

    def __init__(
        self,
        feature_dim: int = 32,
        vocab_size: int = 30522,
        pad_token_id: int = 0,
        hidden: int = 64,
        heads: int = 4,
        layers: int = 1,
        embed_dim: int = 64,
        dropout: float = 0.1,
        max_positions: int = 128,
        temperature: float = 0.07,
        align_weight: float = 1.0,
        span_weight: float = 0.5,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.heads = heads
        self.video_in = nn.Sequential(nn.Linear(feature_dim, hidden), nn.LayerNorm(hidden))
        self.video_encoder = _encoder(hidden, heads, layers, dropout)
        self.token_embed = nn.Embedding(vocab_size, hidden, padding_idx=pad_token_id)
        self.position_embed = nn.Embedding(max_positions, hidden)
        self.token_encoder = _encoder(hidden, heads, layers, dropout)
        self.caption_encoder = _encoder(hidden, heads, layers, dropout)
        self.cross_attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.align_query = nn.Linear(hidden, hidden)
        self.align_key = nn.Linear(hidden, hidden)
        self.video_proj = nn.Linear(hidden, embed_dim)
        self.text_proj = nn.Linear(hidden, embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature)))
        self.metrics = nn.ModuleDict(
            {f"{split}_{name}": MeanMetric() for split in ("val", "test") for name in ("align_acc", "align_chance")}
        )
        self.retrieval = nn.ModuleDict({split: RetrievalRanks() for split in ("val", "test")})

    # -- encoders -------------------------------------------------------------------------

    def encode_video(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``[B, S_v, hidden]`` contextual video segment features."""
        x = self.video_in(batch["video"])
        if "frame_mask" in batch:  # [B, S_v, F, H] -> masked mean over real frames
            x = masked_mean(x, batch["frame_mask"], dim=2)
        return self.video_encoder(x, src_key_padding_mask=~batch["video_mask"])

    def encode_text(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``[B, S_t, hidden]`` contextual caption features (zeros on padded caption slots)."""
        segments = batch["text_segment_mask"]
        ids, keep = batch["text_ids"][segments], batch["text_mask"][segments]  # real captions only: [N, L]
        if ids.shape[1] > self.position_embed.num_embeddings:
            raise ValueError(
                f"captions padded to {ids.shape[1]} tokens exceed max_positions="
                f"{self.position_embed.num_embeddings}; set the model's max_positions to at least the "
                "DataModule's max_caption_tokens (rounded up to pad_to_multiple_of)"
            )
        positions = torch.arange(ids.shape[1], device=ids.device)
        tokens = self.token_embed(ids) + self.position_embed(positions)[None]
        tokens = self.token_encoder(tokens, src_key_padding_mask=~keep)
        pooled = masked_mean(tokens, keep, dim=1)
        captions = pooled.new_zeros((*segments.shape, pooled.shape[-1]))
        captions[segments] = pooled
        return self.caption_encoder(captions, src_key_padding_mask=~segments)

    def encode(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Everything the heads need: segment features, embeddings, alignment logits, spans."""
        video = self.encode_video(batch)
        text = self.encode_text(batch)
        video_mask, text_segments = batch["video_mask"], batch["text_segment_mask"]
        # captions attend to the video segments they overlap; a caption with none (or a padded
        # slot) may see every real segment, so no row is all-blocked (that would give NaN)
        keep = batch["alignment_mask"].transpose(1, 2)
        keep = keep | (~keep.any(-1, keepdim=True) & video_mask[:, None, :])
        masks = cross_attention_masks(keep, self.heads)
        span, _ = self.cross_attention(text, video, video, attn_mask=masks["mha_bool"], need_weights=False)
        logits = self.align_query(video) @ self.align_key(text).transpose(1, 2) / math.sqrt(video.shape[-1])
        logits = logits.masked_fill(~text_segments[:, None, :], float("-inf"))
        video_emb = F.normalize(self.video_proj(masked_mean(video, video_mask, dim=1)), dim=-1)
        text_emb = F.normalize(self.text_proj(masked_mean(text, text_segments, dim=1)), dim=-1)
        return {
            "video_segments": video,
            "text_segments": text,
            "spans": span,
            "align_logits": logits,
            "video_emb": video_emb,
            "text_emb": text_emb,
        }

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``[B, 2 * embed_dim]``: the normalised video embedding, then the text embedding."""
        out = self.encode(batch)
        return torch.cat([out["video_emb"], out["text_emb"]], dim=-1)

    # -- losses ---------------------------------------------------------------------------

    def info_nce(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Symmetric InfoNCE: row ``i`` of ``a`` matches row ``i`` of ``b``; the others are negatives."""
        logits = self.logit_scale.exp().clamp(max=100) * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
        labels = torch.arange(len(a), device=a.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2

    def losses(self, batch: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        target = batch["alignment_target"]
        valid = target != IGNORE_INDEX
        logits = out["align_logits"]
        if valid.any():
            align = F.cross_entropy(logits[valid], target[valid])
        else:  # e.g. whole-video captions: every segment ties; keep the graph for DDP
            align = logits.masked_fill(torch.isinf(logits), 0).sum() * 0.0
        segments = batch["text_segment_mask"]
        span = self.info_nce(self.text_proj(out["text_segments"][segments]), self.video_proj(out["spans"][segments]))
        retrieval = self.info_nce(out["text_emb"], out["video_emb"])
        total = retrieval + self.hparams.align_weight * align + self.hparams.span_weight * span
        return {"loss": total, "retrieval_loss": retrieval, "align_loss": align, "span_loss": span}

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        losses = self.losses(batch, self.encode(batch))
        self.log_metrics({f"train/{k}": v for k, v in losses.items()}, batch, prog_bar=False)
        return losses["loss"]

    def _evaluate(self, split: str, batch: Mapping[str, torch.Tensor]) -> None:
        out = self.encode(batch)
        losses = self.losses(batch, out)
        self.log_metrics({f"{split}/{k}": v for k, v in losses.items()}, batch)
        target = batch["alignment_target"]
        valid = target != IGNORE_INDEX
        if valid.any():
            correct = (out["align_logits"].argmax(-1) == target)[valid].float()
            captions = batch["text_segment_mask"].sum(-1, keepdim=True).expand_as(target)[valid]
            self.metrics[f"{split}_align_acc"].update(correct)
            self.metrics[f"{split}_align_chance"].update(1.0 / captions.float())
        self.retrieval[split].update(out["video_emb"], out["text_emb"])

    def _epoch_end(self, split: str) -> None:
        metrics = {f"{split}/{name}": value for name, value in self.retrieval[split].compute().items()}
        for name in ("align_acc", "align_chance"):
            metric = self.metrics[f"{split}_{name}"]
            if metric.update_count:
                metrics[f"{split}/{name}"] = metric.compute()
            metric.reset()
        self.retrieval[split].reset()
        self.log_dict(metrics, batch_size=1)

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate("test", batch)

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
