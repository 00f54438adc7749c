"""The pilot of `lbscale design`: its batches, how long its trials train, and what it spent (`PilotRecord`, whose
`spend` is the one place the pilot's seconds are counted); its course, stage by stage (`next_step`: whether the
best is trained on, what the largest batch gets); the prices its timings give (`costs`); what it measured (`Pilot`,
`measured`) and how it reads at a target (`at_target`: the fastest LR and its samples, the B_crit guess, the LR
bowl). Functions of typed records, with no I/O (`next_step` puts the decisions it takes on the record, to be kept);
studies/pilot_run.py runs the pilot, analysis/design.py decides from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lbscale.analysis import curves as c
from lbscale.analysis.pricing import Costs
from lbscale.errors import LbscaleError

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


Curve = list  # [(samples, value)] at each evaluation
Stage = list  # [(lr, Curve)] of one pilot batch, in the order run


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


PACE_MARGIN = 1.3  # a pilot trial's epoch against the timing run's steady pace (measured 3.6 s against 2.7 s)


def pilot_epochs(timing: Timing, facts: DataFacts, batch: int, seconds_left: float, trials: int = 7) -> int | None:
    """Epochs per pilot trial so that `trials` of them fit `seconds_left`: training at the middle batch's pace
    per sample, its evaluations (`pilot_evals`, and one at each epoch's end), PACE_MARGIN past the timing run's
    steady pace, a start-up each; at most MAX_PILOT_EPOCHS; None where fewer than MIN_PILOT_EPOCHS fit."""
    per_epoch = PACE_MARGIN * pilot_epoch_seconds(timing, facts, batch)
    epochs = int((seconds_left / trials - timing.startup) // per_epoch)
    return min(epochs, MAX_PILOT_EPOCHS) if epochs >= MIN_PILOT_EPOCHS else None


def pilot_epoch_seconds(timing: Timing, facts: DataFacts, batch: int) -> float:
    """One pilot epoch at `batch`: its training and its whole-split evaluations."""
    return (facts.train / batch * timing.step_seconds
            + (pilot_evals(timing, facts, batch) + 1) * timing.per_eval_example * facts.val)


def pilot_seconds_needed(timing: Timing, facts: DataFacts, batch: int, used: float, trials: int = 7) -> float:
    """What a pilot of MIN_PILOT_EPOCHS a trial would take at this pace, with what it `used` already."""
    return trials * (timing.startup + MIN_PILOT_EPOCHS * PACE_MARGIN * pilot_epoch_seconds(timing, facts, batch)) + used


def new_record(inputs: dict, facts: DataFacts, lr: float, timing: Timing, small: dict | None, used: float,
               wall: float, host: str) -> PilotRecord:
    """A new pilot's record from its timing runs (`used` seconds, spent on it): its batches, the epochs a trial
    that fit its limit (`pilot_epochs`) and the evaluations an epoch; one line, with the --wall that would do,
    where fewer than MIN_PILOT_EPOCHS fit."""
    mid, largest = pilot_batches(facts.train)
    epochs = pilot_epochs(timing, facts, mid, pilot_limit(wall) - used)
    if epochs is None:
        need = pilot_seconds_needed(timing, facts, mid, used)
        raise LbscaleError(f"--wall: the pilot needs about {need / 60:.1f} min for {MIN_PILOT_EPOCHS} epochs a "
                           f"trial at this pace ({timing.step_seconds:.3g} s a step at batch {mid}); give --wall "
                           f"of at least {math.ceil(need / PILOT_SHARE / 60)}m, or a smaller model or train split")
    rec = PilotRecord(inputs, mid, largest, lr, epochs, pilot_evals(timing, facts, mid), timing, host, small=small)
    rec.spend(used)
    return rec


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
    pace per epoch (a larger batch costs no more a sample): the largest batch needs the most samples to a target,
    so the middle stage's epochs at least, with three LRs (their order is what the first rung rests on) or else
    one (the middle batch's best moved there); only where neither fits, fewer epochs (at least MIN_PILOT_EPOCHS);
    none (0, 0: the stage dropped) where not even that fits. At most MAX_PILOT_EPOCHS."""
    _, per_epoch = mid_pace(pilot, trials)
    left = pilot_limit(wall) - pilot.seconds
    fit = {lrs: int((left / lrs - pilot.timing.startup) // per_epoch) for lrs in (3, 1)}
    for least in (pilot.epochs, MIN_PILOT_EPOCHS):
        for lrs in (3, 1):
            if fit[lrs] >= least:
                return lrs, min(fit[lrs], MAX_PILOT_EPOCHS)
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


@dataclass(frozen=True)
class Pilot:
    """What the pilot measured: its record, each stage's (lr, curve) list and its prices."""

    record: PilotRecord
    stages: dict  # "mid" and "largest" -> Stage
    costs: Costs


def final_value(curve: Curve) -> float:
    """How good a pilot trial got: its highest 3-evaluation running mean (-inf for a trial that measured
    nothing); one noisy evaluation does not decide, and of two LRs the one that got higher sooner wins."""
    values = [v for _, v in curve]
    return max(c.running_mean(values)) if values else -math.inf


def best_of(stage: Stage) -> tuple[float, Curve]:
    return max(stage, key=lambda s: final_value(s[1]))


def edge_lr(stage: Stage) -> float | None:
    """One more LR past the edge where the stage's best is its lowest or highest; None where it is inside."""
    ranked = sorted(stage, key=lambda s: s[0])
    best = max(range(len(ranked)), key=lambda i: final_value(ranked[i][1]))
    if best not in (0, len(ranked) - 1):
        return None
    return ranked[best][0] * (LR_STEP if best else 1 / LR_STEP)


def fastest(stage: Stage, target: float) -> tuple[float | None, float | None]:
    """(LR, samples) of the stage's LR that reached `target` in the fewest samples, read between the evaluations
    around its crossing (`crossing_samples`: a pilot evaluates a few times an epoch, and the first evaluation past
    the target can lie far past the crossing); the study tunes the LR per batch: its optimum is the fastest, not
    the one with the highest plateau. (None, None) where none did."""
    crossed = [(s, lr) for lr, curve in stage if (s := c.crossing_samples(curve, target)) is not None]
    return (min(crossed)[1], min(crossed)[0]) if crossed else (None, None)


@dataclass(frozen=True)
class AtTarget:
    """The pilot read at one target, each value once: the middle batch's fastest LR (`lr`) and its samples there
    (`s_mid`, read between the evaluations around the crossing); the largest batch's (`s_top`; `reached_top`
    False: 1.5x what its best trained, or 1.5x the middle batch's scaled to it where it ran no trial); the critical
    batch's guess from the two (`curves.b_crit_from_two`; ('none', middle batch) where it ran no larger batch); the
    LR bowl (each LR / `lr` -> its samples to the target / `s_mid`, None where it did not reach it); for each val
    subset, the share of the steps to the target from which the fastest curve comes within `z` of its standard
    errors of it (`near`); the LRs that reached it at the same first evaluation, which the pilot cannot tell apart
    (`fastest_lrs`); and, whatever the target, after how many samples the LRs' order at
    the largest batch (the middle one where it ran none) settled (`settled`, `curves.settled_samples`)."""

    target: float
    lr: float
    s_mid: float
    s_top: float
    reached_top: bool
    guess: tuple
    bowl: dict
    near: dict
    fastest_lrs: list
    settled: float | None


def at_target(pilot: Pilot, target: float, val: int, subsets, z: float) -> AtTarget | None:
    """The pilot read at `target` (`AtTarget`); None where the middle batch did not reach it."""
    mid, top = pilot.stages["mid"], pilot.stages.get("largest") or []
    best_top = best_of(top)[1] if top else []
    crossed = {name: [(c.crossing_samples(curve, target), lr) for lr, curve in stage]
               for name, stage in (("mid", mid), ("largest", top))}
    first = [(s, lr) for lr, curve in mid if (s := c.samples_to(curve, target)) is not None]
    reached = {name: [(s, lr) for s, lr in v if s is not None] for name, v in crossed.items()}
    if not reached["mid"]:
        return None
    s_mid, lr = min(reached["mid"])
    rec = pilot.record
    if reached["largest"]:
        s_top, reached_top = min(reached["largest"])[0], True
    else:
        s_top, reached_top = (1.5 * best_top[-1][0] if best_top else 1.5 * s_mid * rec.largest / rec.mid), False
    guess = c.b_crit_from_two(rec.mid, s_mid, rec.largest, s_top) if top else ("none", float(rec.mid))
    settled = c.settled_samples([curve for _, curve in top or mid], val)
    near = {n: c.near_fraction(dict(mid)[lr], target, n, z) for n in [val, *subsets] if n <= val}
    bowl = {float(f"{lr_ / lr:.4g}"): round(s / s_mid, 3) if s else None
            for s, lr_ in sorted(crossed["mid"], key=lambda x: x[1])}
    lrs = sorted(lr_ for s, lr_ in first if s == min(first)[0]) if first else []
    return AtTarget(target, lr, s_mid, s_top, reached_top, guess, bowl, near, lrs, settled)


# --- the pilot's course: what it trains next, and what it measured ------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One stage of the pilot to train: `lrs` at `batch` for `epochs`. `name`: mid, long (the middle batch's best
    trained on from its checkpoint) or largest."""

    name: str
    batch: int
    lrs: tuple
    epochs: int


def next_step(rec: PilotRecord, stages: dict, wall: float, val: int) -> Step | None:
    """The pilot's next stage from what it measured so far (`stages`: name -> Stage), None when it is done:
    three LRs at the middle batch, a fourth past the edge where the best is at one; the best trained on where its
    curve still rose at its end (`long_epochs`); the largest batch's LRs around the best moved by the square-root
    rule (`largest_stage`). What it decides on the way is put on the record once (`epochs_long`, `epochs_largest`
    and `lrs_largest`, at the seconds spent then): a kept pilot takes the same course again."""
    mid = stages.get("mid")
    if mid is None:
        return Step("mid", rec.mid, (rec.lr / LR_STEP, rec.lr, rec.lr * LR_STEP), rec.epochs)
    if len(mid) == 3 and (edge := edge_lr(mid)) is not None:  # the best at an edge: one more LR past it
        return Step("mid", rec.mid, (*(lr for lr, _ in mid), edge), rec.epochs)
    lr_mid, curve = best_of(mid)
    if rec.epochs_long is None:
        rising = bool(curve) and c.plateau([v for _, v in curve], val).rising
        rec.epochs_long = long_epochs(rec, len(mid), wall) if rising else 0
    if rec.epochs_long and "long" not in stages:  # its curve still rose: the plateau lies further on
        return Step("long", rec.mid, (lr_mid,), rec.epochs_long)
    if rec.epochs_largest is None:  # what the limit leaves: three LRs, one, or none
        rec.lrs_largest, rec.epochs_largest = largest_stage(rec, len(mid), wall)
    moved = lr_mid * math.sqrt(rec.largest / rec.mid)
    lrs = {3: (moved / LR_STEP, moved, moved * LR_STEP), 1: (moved,), 0: ()}[rec.lrs_largest]
    return Step("largest", rec.largest, lrs, rec.epochs_largest) if lrs and "largest" not in stages else None


def measured(rec: PilotRecord, stages: dict, images_per_second: dict, wall: float) -> Pilot:
    """What the pilot measured: the middle stage with its best's curve trained on where it was (`long`), each
    stage without the trials that measured no curve (cut by its limit, or diverged before an evaluation), and its
    prices (`costs`, from the kept trials' own images/s: batch -> {LR: images/s}); one line where no curve at the
    middle batch was measured."""
    mid = stages["mid"]
    if "long" in stages:
        (lr_long, longer), = stages["long"]
        mid = [(lr, longer if lr == lr_long else curve) for lr, curve in mid]
    top = stages.get("largest", [])
    kept = {k: [(lr, curve) for lr, curve in v if curve] for k, v in (("mid", mid), ("largest", top))}
    if not kept["mid"]:
        raise LbscaleError(f"design: the pilot measured no curve at batch {rec.mid} within its limit "
                           f"({pilot_limit(wall):.0f} s); give a larger --wall, or a smaller model")
    ips = {batch: [images_per_second.get(batch, {}).get(lr, math.nan) for lr, _ in kept[name]]
           for name, batch in (("mid", rec.mid), ("largest", rec.largest))}
    return Pilot(rec, kept, costs(rec, ips))
