"""Budgets every batch can reach the target in: once a batch has reached it in S_b steps, a larger batch B needs at
least S_b b / B steps (perfect scaling is the most a larger batch can buy); a trial planned for fewer steps cannot
reach the target whatever its LR, and the sweep says so with the epochs that would give it the steps."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.results import SUMMARY, read_json


def short_budgets(reached: dict, budgets: dict) -> list[str]:
    """`reached`: {(arm, batch): fewest steps to the target}; `budgets`: {(arm, batch): (steps planned, epochs)}.
    One line per (arm, batch) whose planned steps are below the tightest perfect-scaling line from a smaller
    batch of its arm that reached the target."""
    lines = []
    for (arm, batch), (steps, epochs) in sorted(budgets.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        lines_from = [(s * b / batch, b, s) for (a, b), s in reached.items() if a == arm and b < batch]
        if not lines_from:
            continue
        need, b, s = max(lines_from)
        if steps < need:
            more = math.ceil(epochs * need / steps)
            lines.append(f"{arm}: batch {batch} trains {steps} steps, below the {need:.0f} that perfect scaling "
                         f"from batch {b} ({s} steps to the target) requires: it cannot reach the target; give it "
                         f"at least {epochs:g} epochs x {need:.0f} / {steps} = {more} epochs")
    return lines


def budget_warnings(plans) -> list[str]:
    """`short_budgets` of a sweep's plans from the summaries written so far."""
    reached, budgets = {}, {}
    for p in plans:
        if p.plan.total_steps is None:
            continue
        key = (p.variant, p.plan.global_batch)
        budgets[key] = (p.plan.total_steps, p.config.epochs)
        steps = (read_json(p.out / SUMMARY) or {}).get("steps_to_target")
        if steps is not None:
            reached[key] = min(steps, reached.get(key, steps))
    return short_budgets(reached, budgets)


UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "day": 86400, "days": 86400}
LONGEST = 366 * 86400  # a budget longer than a year is a typo


def parse_wall(text: str, option: str = "--wall") -> float:
    """A wall-clock duration: '20m', '20min', '90s', '1.5h', '2d' (wall hours, not GPU-hours) -> seconds, at most
    a year."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]+)\s*", str(text).lower())
    if not m or m.group(2) not in UNITS or float(m.group(1)) <= 0:
        raise LbscaleError(f"{option} {text!r}: give a wall-clock time with its unit (20m, 90min, 1.5h, 600s, 2d)")
    seconds = float(m.group(1)) * UNITS[m.group(2)]
    if seconds > LONGEST:
        raise LbscaleError(f"{option} {text!r}: more than a year ({seconds / 86400:,.0f} days); give at most 366d")
    return seconds


GRACE = 1.1  # a trial still running at this multiple of the wall budget is checkpointed and stopped


def recorded_periods(results: Path) -> list[dict]:
    """The running periods of a sweep's earlier runs (rounds.json's `periods`: `start`, `seconds`), [] without."""
    from lbscale.results import ROUNDS, read_json

    return list((read_json(Path(results) / ROUNDS) or {}).get("periods", []))


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: the time at least one of them was running."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def array_seconds(results: Path) -> float:
    """The time at least one SLURM array task of the sweep was running a trial (the union of the trials'
    `TASK_PERIODS`): a round's tasks that run side by side count once, and time queued counts not at all."""
    from lbscale.results import TASK_PERIODS

    intervals = []
    for f in Path(results).glob(f"*/{TASK_PERIODS}"):
        for q in (read_json(f) or {}).get("periods", []):
            intervals.append((float(q["start"]), float(q["start"]) + float(q["seconds"])))
    return union_seconds(intervals)


def spent_seconds(results: Path) -> float:
    """The wall time a sweep has spent so far: its own running periods (rounds.json's `periods`: each local run,
    each SLURM follow-up job) and its array tasks' (`array_seconds`)."""
    return sum(p["seconds"] for p in recorded_periods(results)) + array_seconds(results)


class WallBudget:
    """The sweep's wall-clock budget: what the sweep spent in earlier runs (`spent_seconds`: time queued or
    stopped is not counted) plus this run's time so far."""

    def __init__(self, results: Path, seconds: float, own: bool = True):
        from lbscale.results import ROUNDS

        self.path, self.seconds, self.own = Path(results) / ROUNDS, float(seconds), own
        self.results = Path(results)
        self.periods = recorded_periods(results)
        self.before = spent_seconds(results)
        self.started, self.t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.monotonic()

    def spent(self) -> float:
        """What the earlier runs spent plus this run's time; with `own` False (a `--launcher slurm --wait`
        submitter, alive while its array tasks run and queue) the recorded periods and the tasks' own, read now."""
        if not self.own:
            return spent_seconds(self.results)
        return self.before + time.monotonic() - self.t0

    def left(self, factor: float = 1.0) -> float:
        """Seconds left of `factor` x the budget."""
        return factor * self.seconds - self.spent()

    def over(self, factor: float = 1.0) -> bool:
        return self.spent() >= factor * self.seconds

    def deadline(self) -> float:
        """The monotonic time at which a running trial is stopped (GRACE x the budget)."""
        return time.monotonic() + self.left(GRACE)

    def save(self) -> None:
        """This run's period into rounds.json beside the rounds (the sweep holds its lock); none where its time is
        its array tasks' (`own` False: they record it)."""
        from lbscale.results import read_json, write_json

        if not self.own:
            return
        data = read_json(self.path) or {}
        mine = {"start": self.started, "seconds": round(time.monotonic() - self.t0, 1)}
        data["periods"] = [*self.periods, mine]
        data.setdefault("rounds", [])
        write_json(self.path, data)

    def line(self) -> str:
        return f"{self.spent() / 60:.1f} of {self.seconds / 60:.1f} min"


class Deadline:
    """A deadline as the local launcher reads a wall budget (`over`, `deadline`, `save`): no trial starts past it,
    and a running one is stopped there (SIGTERM: it checkpoints and exits). `lbscale design`'s pilot runs under
    one."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def over(self) -> bool:
        return time.monotonic() >= self.end

    def deadline(self) -> float:
        return self.end

    def save(self) -> None:
        """Nothing to record: the one who set the deadline counts its own time."""
