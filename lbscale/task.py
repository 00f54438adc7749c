"""The task of a prepared dataset: loss, target type, metrics and the primary metric, in one object per task.

The trial, the metrics, the status table and the report ask the task instead of branching on `multilabel`.
Importing this module costs no torch: the planner and the report use the metadata, the trial the methods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbscale.errors import LbscaleError

LOSS = "loss"


def reaches(value, target: float, maximize: bool):
    """Whether `value` (a number or an array) is at or past `target`: >= where higher is better, else <=. The one
    definition of reaching a target: the trial's first evaluation at the target and the report's steps to
    result both ask it."""
    return value >= target if maximize else value <= target


def binomial_se(p: float, n: int) -> float:
    """The standard error of a proportion `p` measured on `n` examples, sqrt(p (1 - p) / n), with p (1 - p) at
    least 1/n: a value of 0 or 1 on n examples is not certain either."""
    return math.sqrt(max(p * (1 - p), 1 / n) / n)


def evaluation_noise(metric: str, value: float | None, n: int | None) -> float | None:
    """The standard error of `value` of `metric` evaluated on `n` examples: binomial (`binomial_se`), since every
    task metric that grows with quality (top-k accuracy, F1, precision, recall) is a proportion in [0, 1] (F1
    only roughly: taken as one over the n images). None where no noise is known: a loss (its spread over
    examples is not on record), an unknown n, or a value that is not finite."""
    if metric.endswith(LOSS) or not n or value is None or not math.isfinite(value):
        return None
    return binomial_se(value, n)


@dataclass(frozen=True)
class Task:
    """One supervised task: what a batch's targets are, how the loss is taken and what an evaluation reports."""

    name: str
    help: str
    target_dtype: str  # what the loader's labels become on the device: int64 class ids or float32 multi-hot rows
    metrics: tuple[str, ...]  # evaluation metrics (higher is better), without the split prefix
    primary: str  # the headline metric of tables, status and reports
    min_classes: tuple[tuple[str, int], ...] = ()  # a metric that needs more classes than this (top5: > 5)

    def metric_names(self, num_classes: int | None = None, split: str = "val") -> list[str]:
        """Every metric an evaluation on `split` records, loss included (`val_top1`, ..., `val_loss`)."""
        needs = dict(self.min_classes)
        names = [m for m in self.metrics if num_classes is None or num_classes > needs.get(m, 0)]
        return [f"{split}_{m}" for m in (*names, LOSS)]

    @property
    def primary_metric(self) -> str:
        return self.primary_on("val")

    def primary_on(self, split: str) -> str:
        """The headline metric of an evaluation on `split` (`test_top1`)."""
        return f"{split}_{self.primary}"

    @staticmethod
    def higher_is_better(metric: str) -> bool:
        """Every task metric grows with quality; a loss does not."""
        return not metric.endswith(LOSS)

    @staticmethod
    def check_target(metric: str, target: float, option: str = "--target") -> None:
        """A target its metric can never meet, or meets whatever the model, decides nothing: every task metric lies
        between 0 and 1, a loss is >= 0. (0 for a task metric stays allowed: met at the first evaluation, a way to
        time the run up to it.)"""
        if not math.isfinite(target):
            raise LbscaleError(f"{option} {target:g}: not a finite number (a target of {metric})")
        if metric.endswith(LOSS):
            if target < 0:
                raise LbscaleError(f"{option} {target:g}: {metric} is a loss (>= 0): a target below 0 is never "
                                   "reached")
        elif not 0 <= target <= 1:
            raise LbscaleError(f"{option} {target:g}: {metric} lies between 0 and 1: a target of {target:g} is "
                               f"{'never reached' if target > 1 else 'met whatever the model'}")

    def reached(self, metric: str, value: float, target: float) -> bool:
        return bool(reaches(value, target, self.higher_is_better(metric)))

    def best(self, metric: str, values) -> float:
        return max(values) if self.higher_is_better(metric) else min(values)

    def chance_bound(self, metric: str, num_classes: int | None) -> float | None:
        """The value at or below which (a loss: at or above) `metric` is no better than guessing among `num_classes`
        classes; None where that is not defined here (multilabel, whose chance depends on the labels' frequencies,
        or the classes unknown). Top-k accuracy: at most 1.5 x the guessing rate k / K and at most 0.05 above it
        (the noise of a small evaluation; 0.15 at 10 classes, 0.55 at 2); cross-entropy: ln K or more, what
        predicting every class as equally likely gives. Balanced classes are assumed: with unbalanced ones,
        predicting the commonest scores its share, which can lie above this."""
        base = metric.split("_", 1)[-1]
        if self.name != "multiclass" or not num_classes or num_classes < 2:
            return None
        if base == LOSS:
            return math.log(num_classes)
        if base.startswith("top") and base[3:].isdigit():
            guess = min(1.0, int(base[3:]) / num_classes)
            return min(1.5 * guess, guess + 0.05)
        return None

    def at_chance(self, metric: str, value: float, num_classes: int | None) -> bool:
        """Whether a finite `value` of `metric` is at chance level (`chance_bound`); a value that is not finite is
        a divergence, not a model that has learnt nothing yet."""
        bound = self.chance_bound(metric, num_classes)
        if bound is None or value is None or not math.isfinite(value):
            return False
        return value >= bound if metric.endswith(LOSS) else value <= bound

    def check_target_metric(self, metric: str, num_classes: int | None = None, splits=("val",),
                            option: str = "--target-metric") -> None:
        """A time-to-target metric this task never produces would silently never fire: refuse it, naming the
        option that asked for it."""
        known = [m for split in splits for m in self.metric_names(num_classes, split)]
        if metric not in known:
            raise LbscaleError(f"{option}: {metric!r} is not a metric of a {self.name} task "
                               f"(choose one of {', '.join(known)})")

    # --- torch side (the trial) ---------------------------------------------------------------------
    def targets(self, labels):
        """The loader's labels as loss targets on their device."""
        import torch

        return labels.to(getattr(torch, self.target_dtype))

    def loss(self, logits, targets, label_smoothing: float = 0.0):
        import torch.nn.functional as F

        if self.name == "multilabel":
            return F.binary_cross_entropy_with_logits(logits.float(), targets)
        return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)

    def scores(self, logits):
        """What the metrics compare with the targets: logits (multiclass) or probabilities (multilabel)."""
        return logits.float().sigmoid() if self.name == "multilabel" else logits.float()


TASKS: dict[str, Task] = {
    "multiclass": Task("multiclass", "one class per image (softmax cross-entropy; top-1 / top-5 accuracy)",
                       "int64", ("top1", "top5"), "top1", (("top5", 5),)),
    "multilabel": Task("multilabel", "any number of classes per image (sigmoid BCE; F1 / precision / recall at 0.5)",
                       "float32", ("f1_micro", "f1_macro", "precision", "recall"), "f1_micro"),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise LbscaleError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]
