"""Evaluation metrics of a task (torchmetrics; synced across ranks on compute)."""

from __future__ import annotations

import torch
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import (MulticlassAccuracy, MultilabelF1Score, MultilabelPrecision,
                                         MultilabelRecall)

from lbscale.task import Task
from lbscale.train import distributed as dist

# synced across the ranks of whichever engine runs (DDP's process group, or Horovod's ranks)
SYNC = {"dist_sync_fn": dist.gather_metric_state, "distributed_available_fn": dist.active}
# One torchmetrics object per metric name a Task lists.
BUILDERS = {
    "top1": lambda n: MulticlassAccuracy(n, top_k=1, average="micro", **SYNC),
    "top5": lambda n: MulticlassAccuracy(n, top_k=5, average="micro", **SYNC),
    "f1_micro": lambda n: MultilabelF1Score(n, threshold=0.5, average="micro", **SYNC),
    "f1_macro": lambda n: MultilabelF1Score(n, threshold=0.5, average="macro", **SYNC),
    "precision": lambda n: MultilabelPrecision(n, threshold=0.5, average="micro", **SYNC),
    "recall": lambda n: MultilabelRecall(n, threshold=0.5, average="micro", **SYNC),
}


class TaskMetrics:
    """Accumulates loss and the task's metrics over an evaluation pass; `compute` returns `{split}_*` floats."""

    def __init__(self, task: Task, num_classes: int, device: torch.device, split: str = "val"):
        names = [m.removeprefix(f"{split}_") for m in task.metric_names(num_classes, split)[:-1]]
        self.task, self.split = task, split
        self.collection = MetricCollection({m: BUILDERS[m](num_classes) for m in names}).to(device)
        self.loss = MeanMetric(**SYNC).to(device)

    def update(self, logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor) -> None:
        self.collection.update(self.task.scores(logits), target.long())
        self.loss.update(loss.detach().float(), weight=len(target))

    def peek(self) -> dict[str, float]:
        """The metrics over what was accumulated so far (collective, as `compute`), accumulating on."""
        out = {f"{self.split}_{k}": float(v) for k, v in self.collection.compute().items()}
        out[f"{self.split}_loss"] = float(self.loss.compute())
        return out

    def compute(self) -> dict[str, float]:
        out = self.peek()
        self.collection.reset()
        self.loss.reset()
        return out
