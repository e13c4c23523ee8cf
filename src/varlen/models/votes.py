"""Votes of the samples cut from one item (the windows of a recording, of a document).

An item's log-probabilities are the sum of its samples' (a product of their likelihoods, the
naive-Bayes vote), over the whole evaluation epoch: an item's samples may lie in many batches and
on several ranks, so the metric keeps them until `ItemVotes.compute`, which gathers every
rank's first.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

__all__ = ["ItemVotes", "sum_by_item"]


def sum_by_item(
    log_probs: torch.Tensor, item_ids: torch.Tensor, labels: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Sample log-probabilities `[N, K]` summed per item.

    Returns:
        `(ids [I], summed [I, K], labels [I] or None)`: the distinct item ids (sorted), their
        summed log-probabilities (argmax = the item's prediction) and each one's label.
    """
    ids, inverse = torch.unique(item_ids, return_inverse=True)
    summed = torch.zeros(len(ids), log_probs.shape[1], dtype=log_probs.dtype, device=log_probs.device)
    summed.index_add_(0, inverse, log_probs)
    item_labels = None
    if labels is not None:
        item_labels = torch.zeros(len(ids), dtype=labels.dtype, device=labels.device).scatter_(0, inverse, labels)
    return ids, summed, item_labels


class ItemVotes(Metric):
    """Accuracy and macro-F1 of the items' votes over an epoch (DDP: states concatenated).

    Args:
        num_classes: classes of the task.
        accuracy_key: the name `compute` gives the accuracy (the model's own metric names).
    """

    full_state_update = False

    def __init__(self, num_classes: int, accuracy_key: str = "accuracy") -> None:
        super().__init__()
        self.num_classes = num_classes
        self.accuracy_key = accuracy_key
        self.add_state("log_probs", default=[], dist_reduce_fx="cat")
        self.add_state("item_ids", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")

    def update(self, log_probs: torch.Tensor, item_ids: torch.Tensor, labels: torch.Tensor) -> None:
        self.log_probs.append(log_probs.detach().float())
        self.item_ids.append(item_ids)
        self.labels.append(labels)

    def compute(self) -> dict[str, torch.Tensor]:
        states = (self.log_probs, self.item_ids, self.labels)
        _, summed, labels = sum_by_item(*(torch.cat(s) if isinstance(s, list) else s for s in states))
        preds = summed.argmax(dim=1)
        return {
            self.accuracy_key: multiclass_accuracy(preds, labels, self.num_classes, average="micro"),
            "macro_f1": multiclass_f1_score(preds, labels, self.num_classes, average="macro"),
        }
