"""Evaluation metrics per task (torchmetrics; synced across ranks on compute)."""

from __future__ import annotations

import torch
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import (MulticlassAccuracy, MultilabelF1Score, MultilabelPrecision,
                                         MultilabelRecall)

# Metrics where larger is better (for "best" and time-to-target); val_loss is the exception.
HIGHER_IS_BETTER = {"val_top1", "val_top5", "val_f1_micro", "val_f1_macro", "val_precision", "val_recall"}


class TaskMetrics:
    """Accumulates loss and task metrics over an evaluation pass; `compute` returns val_* floats."""

    def __init__(self, task: str, num_classes: int, device: torch.device):
        if task == "multiclass":
            metrics = {"top1": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
            if num_classes > 5:
                metrics["top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
        else:
            metrics = {
                "f1_micro": MultilabelF1Score(num_classes, threshold=0.5, average="micro"),
                "f1_macro": MultilabelF1Score(num_classes, threshold=0.5, average="macro"),
                "precision": MultilabelPrecision(num_classes, threshold=0.5, average="micro"),
                "recall": MultilabelRecall(num_classes, threshold=0.5, average="micro"),
            }
        self.task = task
        self.collection = MetricCollection(metrics).to(device)
        self.loss = MeanMetric().to(device)

    def update(self, logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor) -> None:
        logits = logits.float()
        if self.task == "multiclass":
            self.collection.update(logits, target)
        else:
            self.collection.update(torch.sigmoid(logits), target.int())
        self.loss.update(loss.detach().float(), weight=len(target))

    def compute(self) -> dict[str, float]:
        out = {f"val_{k}": float(v) for k, v in self.collection.compute().items()}
        out["val_loss"] = float(self.loss.compute())
        self.collection.reset()
        self.loss.reset()
        return out
