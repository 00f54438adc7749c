"""The pilot's own shape (`lbscale design`): its batches, how long its trials train, whether a curve is trained
on, and what it spent (`PilotRecord`, whose `spend` is the one place the pilot's seconds are counted); and the
prices its timings give (`costs`). Pure functions on typed records; studies/design.py runs the pilot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lbscale.analysis import curves as c
from lbscale.analysis.pricing import Costs

PILOT_SHARE, PILOT_FLOOR = 0.10, 180.0  # the pilot takes at most max(10% of the budget, 3 minutes)
# a pilot trial of one epoch shows neither where the curve levels off nor the LRs' order: below two, refuse
MIN_PILOT_EPOCHS = 2
MAX_PILOT_EPOCHS = 12
LR_STEP = math.sqrt(10.0)  # the pilot's LRs: a factor sqrt(10) apart, 10x across three
MID_BATCH, SMALLEST = 64, 8
EVAL_BATCH = 256  # evaluation keeps no activations: a batch this large costs little memory and far less time


def chance_level(task: str, metric: str, labels, classes: int) -> float | None:
    """The value of `metric` a constant predictor reaches on a split whose labels are `labels` (class ids, or
    multi-hot rows): the floor a target must clear, whatever the classes' balance. Top-k accuracy: the k
    commonest classes' share (predicting them for every image); F1 (micro): the best constant set of labels,
    taken by frequency; F1 (macro): each label's always-positive F1 2 n / (n + N), averaged over the labels;
    precision (micro): the commonest label's share; recall: 1 (every label predicted). None for any other
    metric (a loss)."""
    import numpy as np

    base = metric.split("_", 1)[1]
    y = np.asarray(labels)
    if task == "multiclass" and base.startswith("top") and base[3:].isdigit():
        counts = np.sort(np.bincount(y.astype(np.int64), minlength=classes))[::-1]
        return float(counts[:int(base[3:])].sum() / max(len(y), 1))
    if task != "multilabel" or y.ndim != 2 or not len(y):
        return None
    n, counts = len(y), np.sort(y.astype(bool).sum(axis=0))[::-1].astype(float)
    if base == "f1_micro":
        tp = np.cumsum(counts)
        fp = np.cumsum(n - counts)
        return float(np.max(2 * tp / (2 * tp + fp + (counts.sum() - tp)))) if counts.sum() else 0.0
    if base == "f1_macro":
        return float(np.mean(2 * counts / (counts + n)))
    return {"precision": float(counts[0] / n), "recall": 1.0}.get(base)


@dataclass(frozen=True)
class DataFacts:
    """What the prepared file says that the design depends on."""

    train: int
    val: int
    classes: int
    task: str
    metric: str
    chance: float | None
    test: int = 0  # the test split each finished trial evaluates once at its end (0: none)


@dataclass(frozen=True)
class Timing:
    """A timing run's pace (`sweep --estimate`'s): seconds a step, an evaluation of `eval_samples`, the start-up."""

    step_seconds: float
    eval_seconds: float
    eval_samples: int
    startup: float

    @property
    def per_eval_example(self) -> float:
        return self.eval_seconds / max(self.eval_samples, 1)


@dataclass
class PilotRecord:
    """The pilot's plan and what it spent (pilot.json): a rerun with the same inputs reuses it."""

    inputs: dict
    mid: int
    largest: int
    lr: float
    epochs: int
    evals: int
    timing: Timing
    host: str
    seconds: float = 0.0  # all the pilot has spent, its timing runs included
    small: dict | None = None  # the smallest batch's timing run: {batch, step_seconds}
    small_timed: bool = True  # False: kept from before the smallest batch was timed
    stage_seconds: dict = field(default_factory=dict)  # stage -> the wall seconds its trials took
    epochs_long: int | None = None  # the middle batch's best trained on to (0: not trained on; None: not decided)
    epochs_largest: int | None = None
    lrs_largest: int = 3  # the largest batch's LRs (1: the limit left room for one; 0: the stage dropped)
    cut: list = field(default_factory=list)  # trials the pilot's limit stopped or never started: not run again

    def spend(self, seconds: float, stage: str | None = None) -> None:
        """The one place the pilot's seconds are counted: all of them, and the stage's where one is named."""
        self.seconds = round(self.seconds + seconds, 1)
        if stage:
            self.stage_seconds[stage] = round(self.stage_seconds.get(stage, 0.0) + seconds, 1)

    def to_json(self) -> dict:
        out = {"inputs": self.inputs, "mid": self.mid, "largest": self.largest, "lr": self.lr, "epochs": self.epochs,
               "timing": vars(self.timing).copy(), "host": self.host, "evals": self.evals, "seconds": self.seconds}
        if self.small_timed:
            out["small"] = self.small
        out.update({f"{k}_seconds": v for k, v in self.stage_seconds.items()})
        for k in ("epochs_long", "epochs_largest"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.lrs_largest != 3:
            out["lrs_largest"] = self.lrs_largest
        if self.cut:
            out["cut"] = self.cut
        return out

    @classmethod
    def from_json(cls, r: dict) -> PilotRecord:
        stages = {k[:-len("_seconds")]: v for k, v in r.items() if k.endswith("_seconds") and k != "seconds"}
        return cls(r["inputs"], r["mid"], r["largest"], r["lr"], r["epochs"], r["evals"], Timing(**r["timing"]),
                   r.get("host", ""), r.get("seconds", 0.0), r.get("small"), "small" in r, stages,
                   r.get("epochs_long"), r.get("epochs_largest"), r.get("lrs_largest", 3), r.get("cut", []))


def pilot_limit(wall: float) -> float:
    return max(PILOT_SHARE * wall, PILOT_FLOOR)


def pilot_batches(train: int) -> tuple[int, int]:
    """The middle batch (64, or less where the train split is small) and the largest (an eighth of the split:
    eight steps an epoch), powers of two."""
    largest = max(SMALLEST * 2, c.pow2_floor(train / 8))
    return min(MID_BATCH, largest // 4), largest


def pilot_evals(timing: Timing, facts: DataFacts, batch: int) -> int:
    """Whole-split evaluations an epoch in the pilot: as many as cost at most half its training (1 to 8; the
    curves' shape is what the pilot is for)."""
    train = facts.train / batch * timing.step_seconds
    one = timing.per_eval_example * facts.val
    return int(min(max(0.5 * train // max(one, 1e-9), 1), 8))


def pilot_epochs(timing: Timing, facts: DataFacts, batch: int, seconds_left: float, trials: int = 7) -> int | None:
    """Epochs per pilot trial so that `trials` of them fit `seconds_left`: training at the middle batch's pace
    per sample, its evaluations (`pilot_evals`, and one at each epoch's end), a start-up each; at most
    MAX_PILOT_EPOCHS; None where fewer than MIN_PILOT_EPOCHS fit."""
    epochs = int((seconds_left / trials - timing.startup) // pilot_epoch_seconds(timing, facts, batch))
    return min(epochs, MAX_PILOT_EPOCHS) if epochs >= MIN_PILOT_EPOCHS else None


def pilot_epoch_seconds(timing: Timing, facts: DataFacts, batch: int) -> float:
    """One pilot epoch at `batch`: its training and its whole-split evaluations."""
    return (facts.train / batch * timing.step_seconds
            + (pilot_evals(timing, facts, batch) + 1) * timing.per_eval_example * facts.val)


def pilot_seconds_needed(timing: Timing, facts: DataFacts, batch: int, used: float, trials: int = 7) -> float:
    """What a pilot of MIN_PILOT_EPOCHS a trial would take at this pace, with what it `used` already."""
    return trials * (timing.startup + MIN_PILOT_EPOCHS * pilot_epoch_seconds(timing, facts, batch)) + used


def mid_pace(pilot: PilotRecord, trials: int) -> tuple[float, float]:
    """(seconds a trial, seconds an epoch past its start-up) of the middle stage, whose `trials` took its stage
    seconds: the pace the later stages are planned at."""
    per_trial = pilot.stage_seconds.get("mid", 0.0) / max(trials, 1)
    return per_trial, max(per_trial - pilot.timing.startup, 1e-9) / pilot.epochs


def long_epochs(pilot: PilotRecord, trials: int, wall: float) -> int:
    """Epochs of the middle batch's best LR trained on where its curve still rose at its end (0: none): what the
    pilot has left once the largest batch's three trials at the middle stage's epochs are set aside, at the middle
    stage's measured pace per epoch (`trials` of them took its stage seconds), at most as many more epochs as it had
    (a curve seen twice as long shows whether it levels off); none where not one more epoch fits."""
    per_trial, per_epoch = mid_pace(pilot, trials)
    left = pilot_limit(wall) - pilot.seconds - 3 * per_trial - pilot.timing.startup
    more = min(int(left / per_epoch + 1e-9), pilot.epochs) if left > 0 else 0
    return pilot.epochs + more if more >= 1 else 0


def largest_stage(pilot: PilotRecord, trials: int, wall: float) -> tuple[int, int]:
    """(LRs, epochs) of the largest batch's stage, within what the pilot has left at the middle stage's measured
    pace per epoch (a larger batch costs no more a sample): three LRs at the epochs that fit (at most
    MAX_PILOT_EPOCHS), else one, else none (0, 0: the stage dropped), at least MIN_PILOT_EPOCHS each. The largest
    batch needs the most samples to a target, and its LRs' order is what the first rung rests on."""
    _, per_epoch = mid_pace(pilot, trials)
    left = pilot_limit(wall) - pilot.seconds
    for lrs in (3, 1):
        fit = int((left / lrs - pilot.timing.startup) // per_epoch)
        if fit >= MIN_PILOT_EPOCHS:
            return lrs, min(fit, MAX_PILOT_EPOCHS)
    return 0, 0


def costs(pilot: PilotRecord, images_per_second: dict) -> Costs:
    """The pilot's prices: seconds per training sample at its two batches (the median of each stage's trials' own
    images/s, `images_per_second`: batch -> values) and at the smallest (its timing run), per evaluated example,
    and the start-up."""
    per_sample = {}
    for batch in (pilot.mid, pilot.largest):
        ips = sorted(x for x in images_per_second.get(batch, []) if math.isfinite(x) and x > 0)
        per_sample[batch] = 1 / ips[len(ips) // 2] if ips else pilot.timing.step_seconds / pilot.mid
    if pilot.small:  # the smallest batch's timing run
        per_sample[pilot.small["batch"]] = pilot.small["step_seconds"] / pilot.small["batch"]
    return Costs(per_sample, pilot.timing.per_eval_example, pilot.timing.startup)
