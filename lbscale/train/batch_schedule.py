"""Batch-size schedules in a trial (`--batch-schedule "64@0,128@2ep,256@5ep"`): the global batch grows at points
given in epochs (`2ep`) or training samples (`6400`), by accumulation over the first batch's micro-batches (the
same processes; the micro-batch sequence, and so the order of samples, does not depend on the batch), with the
LR of the trial's schedule at that place in the data times the rule's factor for the batch (Smith et al. 2017,
"Don't decay the learning rate, increase the batch size"; Merrill et al. 2025's batch-size warm-up). Pure
arithmetic: the trial asks it, at the start of each optimizer step, for the accumulation and the LR factor."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from lbscale.errors import LbscaleError

SYNTAX_EPOCH = 10 ** 12  # samples per epoch when only the syntax and the first batch are checked (no data yet)
RULE_FACTOR = {"linear": lambda r: r, "sqrt": math.sqrt, "none": lambda r: 1.0}


@dataclass(frozen=True)
class BatchSchedule:
    """(point, global batch) from which each batch applies, in the order given, the first at 0: a point is a number
    of training samples, or ("steps", N) for N optimizer steps taken (as they were taken, at their batches)."""

    points: tuple
    rule: str = "linear"
    items: tuple = ()  # the points as written (for messages)
    lrs: tuple = ()  # (batch, peak LR) where the items give each batch its LR (BATCH@POINT:LR), else ()

    @classmethod
    def parse(cls, text: str, epoch_samples: int, rule: str = "linear", first: int | None = None,
              ordered: bool = True) -> "BatchSchedule":
        """'64@0,128@2ep,256@6400,512@900st': batch@point, a point in epochs (Nep), optimizer steps (Nst) or
        samples, each optionally with its batch's peak LR (128@2ep:0.05; then every item, the first the trial's
        own); one line naming a bad item. 'auto:FILE': from a branch study's critical-batch.csv, starting at
        `first` (`from_branches`). `ordered=False`: the order of points in epochs against points in samples is
        left to the check with the data (SYNTAX_EPOCH)."""
        if rule not in RULE_FACTOR:
            raise LbscaleError(f"--batch-schedule: LR rule {rule!r} is not one of {', '.join(RULE_FACTOR)}")
        if str(text).startswith("auto:"):
            return cls(from_branches(str(text)[5:], first), rule)
        points, lrs = [], []
        for item in (t.strip() for t in str(text).split(",") if t.strip()):
            item, _, lr = item.partition(":")
            points.append(_point(item, epoch_samples))
            lrs.append(_lr(lr, item) if lr else None)
        if any(lrs) and not all(lrs):
            raise LbscaleError("--batch-schedule: give every batch its LR (BATCH@POINT:LR) or none: "
                               f"{', '.join(i for i, lr in zip(str(text).split(','), lrs) if not lr)} lacks one")
        if not points or points[0][0] != 0:
            raise LbscaleError("--batch-schedule: the first batch starts at 0 (e.g. 64@0,128@2ep)")
        for unit in (int, tuple):  # samples, and steps: each increasing
            ats = [p[0] for p in points if isinstance(p[0], unit)]
            if ordered and any(a >= b for a, b in zip(ats, ats[1:])):
                raise LbscaleError("--batch-schedule: points must increase")
        for (_, a), (_, b) in zip(points, points[1:]):
            if b <= a:
                raise LbscaleError(f"--batch-schedule: the batch must grow: {b} after {a} (BATCH@POINT in the "
                                   "order they apply)")
        return cls(tuple(points), rule, tuple(t.strip().partition(":")[0] for t in str(text).split(",") if t.strip()),
                   tuple((b, lr) for (_, b), lr in zip(points, lrs)) if all(lrs) else ())

    def check_run(self, epochs: int, epoch_samples: int | None = None, steps: int | None = None) -> None:
        """Every change point inside the run of `epochs` epochs (of `epoch_samples` samples where the data is
        known, of `steps` optimizer steps as this schedule takes them; else only the points given in epochs): one
        past its end would never apply."""
        run = epochs * (epoch_samples or SYNTAX_EPOCH)
        for (at, _), item in zip(self.points, self.items or [f"{b}@{at}" for at, b in self.points]):
            if isinstance(at, int) and at >= run and (epoch_samples or item.endswith("ep")):
                size = f", {run:,} samples" if epoch_samples else ""
            elif isinstance(at, tuple) and steps is not None and at[1] >= steps:  # steps 0..steps-1 can start one
                size = f", {steps:,} optimizer steps"
            else:
                continue
            raise LbscaleError(f"--batch-schedule: {item} lies past the run ({epochs} epochs{size}): it would never "
                               "apply")

    def check_plan(self, epochs: int, plan) -> None:
        """Against a trial's `plan` (train.plan.Plan: its data and processes): every batch a whole number of its
        first steps, then every point inside the run (the steps counted as the schedule groups them)."""
        step_batch = plan.local_batch * plan.world_size
        if self.lrs and not math.isclose(self.lrs[0][1], plan.peak_lr, rel_tol=1e-3):
            raise LbscaleError(f"--batch-schedule: the first batch's LR {self.lrs[0][1]:g} is not the trial's own "
                               f"peak LR {plan.peak_lr:g} (its base LR under its scaling rule): the items' LRs "
                               "scale the trial's schedule, so they must start from it")
        self.check(step_batch)  # first: a batch under one step's samples would never end a step in the count
        steps = self.total_steps(epochs, plan.micro_batches_per_epoch, step_batch, plan.epoch_samples)
        self.check_run(epochs, plan.epoch_samples, steps)

    @property
    def first(self) -> int:
        return self.points[0][1]

    @property
    def last(self) -> int:
        return self.points[-1][1]

    def check(self, step_batch: int) -> None:
        """Every batch a whole number of the first batch's steps (`step_batch`: local batch x processes)."""
        for _, b in self.points:
            if b % step_batch:
                raise LbscaleError(f"--batch-schedule: batch {b} is not a multiple of {step_batch} (the local "
                                   "batch x processes of the first batch)")

    def batch_at(self, samples: int, steps: int = 0) -> int:
        """The global batch of an optimizer step that starts after `samples` training samples and `steps` steps:
        the last point given that has been reached."""
        reached = [b for at, b in self.points if (at[1] <= steps if isinstance(at, tuple) else at <= samples)]
        return reached[-1]

    def lr_factor(self, batch: int, scheduled: int | None = None) -> float:
        """The LR of a step of `batch` samples over the first batch's: the items' own LRs where given
        (BATCH@POINT:LR: the LR of the `scheduled` batch in effect, times the rule's factor for a step an epoch's
        end cut short of it), else the rule's factor."""
        if self.lrs:
            scheduled = scheduled or batch
            return dict(self.lrs)[scheduled] / self.lrs[0][1] * RULE_FACTOR[self.rule](batch / scheduled)
        return RULE_FACTOR[self.rule](batch / self.first)

    def total_steps(self, epochs: int, micro_per_epoch: int, micro_samples: int, epoch_samples: int) -> int:
        """The optimizer steps of a whole run, as the trial groups its micro-batches (`micro_samples`: one
        micro-batch of every process; a step's batch from the samples and steps before it, an epoch's last step
        short where the batch does not divide it)."""
        steps = 0
        for epoch in range(epochs):
            micro = 0
            while micro < micro_per_epoch:
                seen = epoch * epoch_samples + min(micro * micro_samples, epoch_samples)
                micro += min(self.batch_at(seen, steps) // micro_samples, micro_per_epoch - micro)
                steps += 1
        return steps


def run_steps(batch_schedule: str | None, epochs, plan: dict) -> int | None:
    """The optimizer steps of a whole run: the plan's (config.json's "plan" as a dict), or as a batch schedule
    takes them as the batch grows (`BatchSchedule.total_steps`). The plan's where the schedule cannot be read
    here (an `auto:FILE` whose file is elsewhere), has a batch the trial refuses (not a multiple of its first
    step's samples), or the plan lacks what it needs (an older lbscale's): a count for progress lines, which the
    trial itself checks. Counted once per schedule and plan (`lbscale status --watch` asks again and again)."""
    need = ("total_steps", "epoch_samples", "micro_batches_per_epoch", "global_batch", "local_batch", "world_size")
    if not batch_schedule or not epochs or any(plan.get(k) is None for k in need):
        return plan.get("total_steps")
    return _scheduled_steps(str(batch_schedule), int(epochs), *(int(plan[k]) for k in need))


@functools.lru_cache(maxsize=256)
def _scheduled_steps(text: str, epochs: int, total: int, epoch_samples: int, micro_per_epoch: int, first: int,
                     local: int, world: int) -> int:
    try:
        s = BatchSchedule.parse(text, epoch_samples, first=first)
        s.check(local * world)  # a batch below one step's samples would never advance the count
    except LbscaleError:
        return total
    return s.total_steps(epochs, micro_per_epoch, local * world, epoch_samples)


def _lr(text: str, item: str) -> float:
    try:
        lr = float(text)
    except ValueError:
        lr = math.nan
    if not (lr > 0 and math.isfinite(lr)):
        raise LbscaleError(f"--batch-schedule: {item}:{text} has no LR > 0 after ':' (BATCH@POINT:LR, e.g. "
                           "128@2ep:0.05)")
    return lr


def _point(item: str, epoch_samples: int) -> tuple:
    batch, _, at = item.partition("@")
    try:
        b = int(batch)
        if at.endswith("ep"):
            point = round(float(at[:-2]) * epoch_samples)
        elif at.endswith("st"):
            point = ("steps", int(at[:-2]))
        else:
            point = int(at)
    except (ValueError, OverflowError):
        b, point = 0, -1
    if b < 1 or (point[1] if isinstance(point, tuple) else point) < 0:
        raise LbscaleError(f"--batch-schedule: {item!r} is not BATCH@POINT (a point in epochs, Nep; optimizer "
                           "steps, Nst; or training samples)")
    return (point, b)


def from_branches(path: str, first: int | None) -> tuple:
    """A schedule from a branch study (`lbscale branch`'s critical-batch.csv): start at `first` and double at a
    checkpoint's samples whenever its local critical batch exceeds twice the current batch (as often as it does),
    Merrill et al.'s batch-size warm-up, the batch staying at least a factor 2 under the measured critical batch;
    a checkpoint whose critical batch is a lower bound counts as that bound. With repeats (`critical_kind`), the
    interval's lower end counts (interval, lower); an upper bound or an unresolved checkpoint holds the batch.
    `lbscale schedule` derives a schedule another way (up to the interval's lower end itself, capped at the
    largest batch a sweep tuned, each batch at its tuned LR, with its reasons); this rule stays a factor 2 under
    it and keeps the trial's LR rule."""
    import csv

    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise LbscaleError(f"--batch-schedule auto:{path}: {e.strerror}") from None
    if not rows or not {"samples", "critical_batch"} <= set(rows[0]):
        raise LbscaleError(f"--batch-schedule auto:{path}: not a critical-batch.csv of lbscale branch")
    if first is None:
        raise LbscaleError("--batch-schedule auto:FILE starts at --global-batch: give it")
    seen, points, batch = set(), [(0, first)], first
    for r in sorted(rows, key=lambda r: float(r["samples"] or "nan")):
        kind = r.get("critical_kind") or ""
        value = r["critical_lo"] if kind in ("interval", "lower") else "" if kind else r["critical_batch"]
        if r["samples"] in seen or not value:
            continue
        seen.add(r["samples"])
        grown = batch
        while float(value) > 2 * grown:
            grown *= 2
        if grown != batch:
            batch = grown
            points.append((int(float(r["samples"])), batch))
    return tuple(points)
