# ruff: noqa: E402  (the extra is checked before the imports that need it)
"""`MoleculeGNN`: GINE message passing with bond features, a virtual node, and graph pooling."""

from __future__ import annotations

from varlen._extras import require

require("molecules")  # before torch_geometric: names the extra when its packages are missing

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torch_geometric.nn import GINEConv, GraphNorm, global_add_pool, global_mean_pool
from torchmetrics import MeanAbsoluteError, MeanSquaredError, Metric, MetricCollection
from torchmetrics.classification import BinaryAUROC

from varlen.datasets.molecules.features import ATOM_VOCAB, BOND_VOCAB
from varlen.models.base import VarLenModule

__all__ = ["NORMS", "POOLING", "ClassCounts", "MoleculeGNN"]


class ClassCounts(Metric):
    """Targets of class 0 and of class 1 seen in an epoch, summed over ranks.

    ROC-AUC needs both classes; with one only, torchmetrics' `BinaryAUROC` returns 0.0 with a
    warning. These counts (the same on every rank after `compute`) decide, before it is
    computed, whether a task's ROC-AUC is defined.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("counts", default=torch.zeros(2, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, target: torch.Tensor) -> None:
        self.counts += torch.bincount(target.long().view(-1), minlength=2)[:2]

    def compute(self) -> torch.Tensor:
        return self.counts


def _add_mean_pool(h: torch.Tensor, graph: torch.Tensor, size: int) -> torch.Tensor:
    """Sum and mean readouts side by side: the sum keeps size (what solubility grows with), the mean composition."""
    return torch.cat([global_add_pool(h, graph, size), global_mean_pool(h, graph, size)], dim=-1)


POOLING = {"add": global_add_pool, "mean": global_mean_pool, "add_mean": _add_mean_pool}


NORMS = ("graph", "layer", "batch", "none")


def _norm(kind: str, dim: int) -> nn.Module:
    """The norm after each message-passing layer.

    `graph` (PyG's `GraphNorm`, the default) normalizes each
    molecule's atoms with that molecule's own statistics: batch-independent, so exactly
    per-sample invariant, and fast to train. `batch` norm is a poor fit here because batches
    are *bucketed by size*: every training batch holds molecules of similar size, so its
    statistics swing from batch to batch and the running averages used in eval mode match none
    of them (measured on ESOL: train-set RMSE 0.75 in train mode but 1.4 in eval mode after 9
    epochs). It stays available (it is still invariant in eval mode).
    """
    if kind == "graph":
        return GraphNorm(dim)
    if kind == "batch":
        return nn.BatchNorm1d(dim)
    if kind == "layer":
        return nn.LayerNorm(dim)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


def _inner_norm(kind: str, dim: int) -> nn.Module:
    """Norm inside the MLPs, which see no `batch` vector: layer norm stands in for graph norm."""
    return _norm("layer" if kind == "graph" else kind, dim)


def _mlp(dim: int, hidden: int, norm: str) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), _inner_norm(norm, hidden), nn.ReLU(), nn.Linear(hidden, dim))


class MoleculeGNN(VarLenModule):
    """Graph isomorphism network with edge features (GINE), for molecular property prediction.

    Atoms and bonds are categorical features in shared vocabularies (see
    `varlen.datasets.molecules`), embedded by summing one embedding per column. Each layer
    runs a `torch_geometric.nn.GINEConv` with its own bond embedding; an optional virtual
    node (one per graph, connected to all its atoms) carries graph-wide context between layers.
    Every operation is per node, per edge or per graph (`batch`-indexed), so a molecule's
    prediction does not depend on which molecules share its batch.

    Regression: the network predicts standardized targets (train mean/std from the DataModule,
    kept as buffers so checkpoints carry them); `forward` returns them in the original units.
    Loss and metrics use only observed targets (`y_mask`), task by task. Classification:
    `forward` returns logits; BCE loss; ROC-AUC per task, averaged over the tasks where it is
    defined. A task whose split holds one class only has no ROC-AUC: it is left out of the mean
    with a warning, and a split where no task has one logs NaN (never torchmetrics' 0.0).

    Args:
        num_tasks: targets per molecule.
        task: `"regression"` (RMSE, MAE) or `"classification"` (ROC-AUC).
        node_features: size of the atom vocabulary.
        edge_features: size of the bond vocabulary.
        hidden: width of node and graph embeddings.
        num_layers: message-passing layers.
        dropout: dropout after each layer and in the head.
        virtual_node: add a virtual node per graph.
        pooling: `"add"`, `"mean"` or `"add_mean"` (both, concatenated) graph readout.
        num_descriptors: graph-level descriptors per molecule (`batch.descriptors`, from the
            DataModule's `descriptors=True`), concatenated to the pooled embedding before the head; 0 = none.
        norm: `"graph"`, `"layer"`, `"batch"` or `"none"` after each layer (see
            `_norm` for why not batch norm).
        lr: AdamW learning rate (cosine-annealed over `max_epochs`).
        weight_decay: AdamW weight decay.

    `num_tasks`, `task`, `node_features`, `edge_features` and `num_descriptors` are the DataModule's
    (`varlen fit` links them): each left None is taken from the DataModule the model trains on
    (`VarLenModule.setup`); without one, the last three are varlen's featurizer's (`ATOM_VOCAB`, `BOND_VOCAB`,
    no descriptors).
    """

    linked = ("num_tasks", "task", "node_features", "edge_features", "num_descriptors")

    def __init__(
        self,
        num_tasks: int | None = None,
        task: str | None = None,
        node_features: int | None = None,
        edge_features: int | None = None,
        hidden: int = 128,
        num_layers: int = 4,
        dropout: float = 0.0,
        virtual_node: bool = True,
        pooling: str = "mean",
        norm: str = "graph",
        lr: float = 2e-3,
        weight_decay: float = 1e-5,
        num_descriptors: int | None = None,
    ) -> None:
        super().__init__()
        if task not in ("regression", "classification", None):
            raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {sorted(POOLING)}, got {pooling!r}")
        self.save_hyperparameters()
        self.build_when_known()

    def needs(self) -> list[str]:
        """`num_tasks` and `task` (the featurizer's sizes stand in for the rest)."""
        return [name for name in super().needs() if name in ("num_tasks", "task")]

    def build_layers(self) -> None:
        hp = self.hparams
        task, num_tasks, hidden, num_layers, norm = hp.task, hp.num_tasks, hp.hidden, hp.num_layers, hp.norm
        node_features, edge_features = hp.node_features or ATOM_VOCAB, hp.edge_features or BOND_VOCAB
        num_descriptors = hp.num_descriptors or 0
        virtual_node, pooling, dropout = hp.virtual_node, hp.pooling, hp.dropout
        if task not in ("regression", "classification"):
            raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
        self.task = task
        self.num_tasks = num_tasks
        self.atom_embedding = nn.Embedding(node_features, hidden)
        self.bond_embeddings = nn.ModuleList(nn.Embedding(edge_features, hidden) for _ in range(num_layers))
        self.convs = nn.ModuleList(GINEConv(_mlp(hidden, 2 * hidden, norm), train_eps=True) for _ in range(num_layers))
        self.norms = nn.ModuleList(_norm(norm, hidden) for _ in range(num_layers))
        self.virtual_node = virtual_node
        if virtual_node:
            self.virtual_embedding = nn.Parameter(torch.zeros(hidden))
            self.virtual_mlps = nn.ModuleList(
                nn.Sequential(_mlp(hidden, 2 * hidden, norm), nn.ReLU()) for _ in range(num_layers - 1)
            )
        self.pool = POOLING[pooling]
        self.dropout = nn.Dropout(dropout)
        self.num_descriptors = num_descriptors
        readout = (2 if pooling == "add_mean" else 1) * hidden + num_descriptors
        self.head = nn.Sequential(
            nn.Linear(readout, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_tasks)
        )
        self.register_buffer("target_mean", torch.zeros(num_tasks))
        self.register_buffer("target_std", torch.ones(num_tasks))
        self.val_metrics = nn.ModuleList(self._task_metrics() for _ in range(num_tasks))
        self.test_metrics = nn.ModuleList(self._task_metrics() for _ in range(num_tasks))
        classified = task == "classification"
        self.val_classes = nn.ModuleList(ClassCounts() for _ in range(num_tasks if classified else 0))
        self.test_classes = nn.ModuleList(ClassCounts() for _ in range(num_tasks if classified else 0))
        self.task_names = [f"task {t}" for t in range(num_tasks)]

    def _task_metrics(self) -> MetricCollection:
        if self.task == "regression":
            return MetricCollection({"rmse": MeanSquaredError(squared=False), "mae": MeanAbsoluteError()})
        return MetricCollection({"roc_auc": BinaryAUROC()})

    def setup(self, stage: str) -> None:
        """When fitting, take the train-split target statistics from the DataModule.

        Only then: validating, testing or predicting, the statistics are the model's own (from its
        checkpoint), whatever table the DataModule reads; another table's would change the units.
        """
        super().setup(stage)  # the layers, of the DataModule's dimensions where none were given
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        columns = list(getattr(datamodule, "target_columns", None) or [])
        if len(columns) == self.num_tasks:
            self.task_names = [repr(column) for column in columns]  # for the warnings
        if stage == "fit" and datamodule is not None and getattr(datamodule, "standardize", False):
            # Lightning runs the DataModule's setup before this hook: the statistics exist
            self.set_target_stats(datamodule.target_mean, datamodule.target_std)

    def set_target_stats(self, mean: Any, std: Any) -> None:
        """Targets are predicted as `(y - mean) / std`; set these from the train split."""
        self.target_mean.copy_(torch.as_tensor(mean, dtype=torch.float32).view(-1))
        self.target_std.copy_(torch.as_tensor(std, dtype=torch.float32).view(-1))

    def embed(self, batch: Any) -> torch.Tensor:
        """Graph embeddings `[B, hidden]`."""
        graph = batch.batch
        num_graphs = int(batch.num_graphs)
        h = self.atom_embedding(batch.x).sum(1)
        virtual = self.virtual_embedding.expand(num_graphs, -1) if self.virtual_node else None
        last = len(self.convs) - 1
        for layer, (conv, norm, bonds) in enumerate(zip(self.convs, self.norms, self.bond_embeddings, strict=True)):
            if virtual is not None:
                h = h + virtual[graph]
            out = conv(h, batch.edge_index, bonds(batch.edge_attr).sum(1))
            out = norm(out, graph, num_graphs) if isinstance(norm, GraphNorm) else norm(out)
            if layer < last:
                out = torch.relu(out)
            out = self.dropout(out)
            if virtual is not None and layer < last:
                virtual = virtual + self.dropout(
                    self.virtual_mlps[layer](global_add_pool(h, graph, num_graphs) + virtual)
                )
            h = out + h  # residual
        return self.pool(h, graph, num_graphs)

    def raw(self, batch: Any) -> torch.Tensor:
        """Network outputs: standardized predictions (regression) or logits, `[B, T]`."""
        embedding = self.embed(batch)
        if self.num_descriptors:
            descriptors = getattr(batch, "descriptors", None)
            if descriptors is None or descriptors.shape[-1] != self.num_descriptors:
                raise ValueError(
                    f"the model expects {self.num_descriptors} descriptors per molecule in batch.descriptors; "
                    "build the DataModule with descriptors=True (or the model with num_descriptors=0)"
                )
            embedding = torch.cat([embedding, descriptors.to(embedding.dtype)], dim=-1)
        return self.head(embedding)

    def forward(self, batch: Any) -> torch.Tensor:
        """Per-molecule predictions `[B, T]`: original units (regression) or logits."""
        out = self.raw(batch)
        if self.task == "regression":
            out = out * self.target_std + self.target_mean
        return out

    def loss(self, raw: torch.Tensor, batch: Any) -> torch.Tensor:
        """Mean loss over observed targets only (`y_mask`)."""
        mask = batch.y_mask
        if self.task == "regression":
            target = (batch.y - self.target_mean) / self.target_std
            per = nn.functional.mse_loss(raw, target, reduction="none")
        else:
            per = nn.functional.binary_cross_entropy_with_logits(raw, batch.y, reduction="none")
        return (per * mask).sum() / mask.sum().clamp_min(1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(self.raw(batch), batch)
        self.log_mean({"train/loss": loss}, batch, prog_bar=True)
        return loss

    def _evaluate(self, batch: Any, metrics: nn.ModuleList, classes: nn.ModuleList, stage: str) -> None:
        raw = self.raw(batch)
        self.log_mean({f"{stage}/loss": self.loss(raw, batch)}, batch)
        # probabilities, not logits: BinaryAUROC applies a sigmoid only to a batch whose values leave
        # [0, 1], so logits would be ranked on two scales and the ROC-AUC would depend on the batching
        pred = raw * self.target_std + self.target_mean if self.task == "regression" else torch.sigmoid(raw)
        for t, metric in enumerate(metrics):
            keep = batch.y_mask[:, t]
            if keep.any():
                target = batch.y[keep, t]
                metric.update(pred[keep, t], target if self.task == "regression" else target.long())
                if classes:
                    classes[t].update(target)

    def _task_values(self, metrics: nn.ModuleList, classes: nn.ModuleList, stage: str) -> dict[str, list]:
        """Each task's metrics, synced over ranks by `compute`; NaN ROC-AUC where a task saw one class only."""
        values: dict[str, list[torch.Tensor]] = {}
        for t, metric in enumerate(metrics):
            counts = classes[t].compute() if classes else None
            if counts is not None and bool((counts == 0).any()):  # the same decision on every rank
                negatives, positives = (int(c) for c in counts)
                if not (self._trainer is not None and self.trainer.sanity_checking):  # a few batches, not the split
                    rank_zero_warn(
                        f"{stage}/roc_auc: {self.task_names[t]} has {negatives} target(s) of class 0 and {positives} "
                        "of class 1 in this split; ROC-AUC needs both, so it is NaN for this task (left out of the "
                        "mean over tasks; NaN when no task has one)"
                    )
                computed = {"roc_auc": torch.tensor(float("nan"), device=self.device)}
            else:
                computed = metric.compute()
            for name, value in computed.items():
                values.setdefault(name, []).append(value)
            metric.reset()
            if classes:
                classes[t].reset()
        return values

    def _log_epoch(self, metrics: nn.ModuleList, classes: nn.ModuleList, stage: str) -> None:
        """Per-task metrics averaged over tasks (NaN tasks left out): the same on every rank."""
        values = self._task_values(metrics, classes, stage)
        means = {f"{stage}/{name}": torch.stack(per_task).nanmean() for name, per_task in values.items()}
        shown = {k for k in means if k.endswith(("/rmse", "/roc_auc"))}
        self.log_global({k: v for k, v in means.items() if k in shown}, prog_bar=True)
        self.log_global({k: v for k, v in means.items() if k not in shown})

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, self.val_metrics, self.val_classes, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch(self.val_metrics, self.val_classes, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics, self.test_classes, "test")

    def on_test_epoch_end(self) -> None:
        self._log_epoch(self.test_metrics, self.test_classes, "test")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
