"""The round planner of `lbscale sweep --until-resolved`: from the critical batch as the last fit gives it and each
batch's search, the trials of the next round, or why the sweep stops. Pure: states in, actions out, so its
benchmark (benchmarks/bench_adaptive.py) needs no training.

The rules, in order (each action says why it was taken):
1. stop where B_crit is an interval with hi / lo <= ratio (resolved), where the budget is spent, or where no batch
   reached the target (nothing to fit: a longer budget or an easier target would);
2. an open side gets a batch past it: the next doubling above the largest batch where the upper end is open (a
   lower bound, or not resolved) or an interval's upper end lies more than a doubling past it (extrapolated: seeds
   at the batches run narrow it slowly), half the smallest where the lower end is open or lies more than a halving
   below it (an interval's ends only where the curve fits, MISFIT_P); never past a batch that missed the
   target (a larger one would miss it too) nor past the limits the data set. Where the largest batch ran its whole
   budget without reaching the target, the trial that came closest runs again with twice the epochs instead (with a
   constant LR a longer budget does not move the steps to the target: docs/designing.md); that run is its point
   and seed at a longer budget and supersedes the short one, so the batch counts as reached once it reaches;
3. a batch whose best LR sits at the edge of its searched range gets a point one grid step past that edge (the
   points' mean ratio), so the optimum is bracketed;
4. where the answer is still wide (an interval wider than the ratio, or nothing resolved), one more seed at the best
   point of each batch that decides it (within [lo / 2, 2 hi]; all batches where an end is open): the seeds at
   the optimum narrow the curve, and small rounds stop soon after the interval is narrow enough.
The budget cuts the round in that order of priority; a round it cuts to nothing stops the sweep (budget spent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Point:
    lr: float
    key: str  # the trial that stands for the point (its id without the seed): what the sweep reruns or extends
    seeds: int = 1


@dataclass(frozen=True)
class BatchState:
    batch: int
    reached: bool  # a trial at this batch reached the target
    points: tuple  # Points, by increasing LR
    best: int | None  # the index of the best point (None: none reached)
    short: str | None = None  # where none reached: the trial that came closest of those that ran their whole budget
    eval_share: float | None = None  # the evaluations' measured share of its trials' training time (median)


@dataclass(frozen=True)
class Answer:
    """B_crit as the fit gives it: kind interval / lower / upper / none, with its ends (0 and inf where open)."""

    kind: str
    lo: float
    hi: float
    lack_of_fit_p: float | None = None  # the curve's lack-of-fit test against a free level per batch (None: untested)


MISFIT_P = 0.01  # lack of fit this strong is the curve's shape, not chance (the test's level is 10%)


@dataclass(frozen=True)
class Action:
    kind: str  # batch: a new batch with the spec's points; lr: a new point past an edge; seeds: more seeds;
    # budget: a point again with twice the epochs
    batch: int
    why: str
    key: str | None = None  # lr, seeds: the point's trial (without the seed); budget: the trial to extend
    lr: float | None = None  # lr: the new point's LR
    seeds: int = 1

    def trials(self, trials_per_batch: int) -> int:
        return trials_per_batch if self.kind == "batch" else self.seeds


@dataclass(frozen=True)
class Round:
    stop: str | None
    actions: tuple = ()
    notes: tuple = field(default_factory=tuple)  # what could not be done, and why


def plan_round(answer: Answer, batches: list[BatchState], ratio: float = 4.0, trials_left: int | None = None,
               trials_per_batch: int = 1, min_batch: int = 1, max_batch: int | None = None) -> Round:
    """The next round of an adaptive sweep (the rules in the module's docstring)."""
    batches = sorted(batches, key=lambda s: s.batch)
    if answer.kind == "interval" and answer.lo > 0 and answer.hi / answer.lo <= ratio:
        return Round(f"resolved: B_crit in [{answer.lo:,.0f}, {answer.hi:,.0f}], hi / lo = "
                     f"{answer.hi / answer.lo:.1f} <= {ratio:g}")
    if trials_left is not None and trials_left <= 0:
        return Round("budget spent: B_crit is still " + _said(answer))
    reached = [s for s in batches if s.reached]
    if not reached:
        return Round("no batch reached the target: nothing to fit (a longer budget in epochs, or an easier target, "
                     "would give one)")
    actions, notes = [], []
    misfit = answer.lack_of_fit_p is not None and answer.lack_of_fit_p < MISFIT_P
    sides = _sides(answer, batches, min_batch, max_batch, notes, misfit)
    actions += sides
    actions += _edges(reached)
    if (answer.kind == "none" or (answer.kind == "interval") or not sides) and not misfit:
        actions += _seeds(answer, reached)
    if not actions and misfit:  # seeds narrow the noise within a batch, not the batches' scatter about the curve
        return Round(f"the curve does not describe the batches (lack of fit p = {answer.lack_of_fit_p:.2g}): more "
                     f"seeds cannot narrow B_crit {_said(answer)}; the steps per batch are in the report (a model "
                     "whose knee can vary would say more)", notes=tuple(notes))
    if not actions:
        return Round("nothing left to add: " + "; ".join(notes), notes=tuple(notes))
    kept = _within(actions, trials_left, trials_per_batch)
    if not kept:  # a round that adds nothing is a stop: without one, every rerun would record another empty round
        first = actions[0]
        return Round(f"budget spent: B_crit is still {_said(answer)} ({_named(first)} needs "
                     f"{first.trials(trials_per_batch)} trials, {trials_left} left)", notes=tuple(notes))
    return Round(None, tuple(kept), tuple(notes))


def _named(a: Action) -> str:
    return {"batch": f"batch {a.batch}", "lr": f"an LR past the edge at batch {a.batch}",
            "seeds": f"a seed at batch {a.batch}", "budget": f"{a.key} with twice the epochs"}[a.kind]


def _said(answer: Answer) -> str:
    return {"interval": f"[{answer.lo:,.0f}, {answer.hi:,.0f}]", "lower": f"> {answer.lo:,.0f}",
            "upper": f"< {answer.hi:,.0f}", "none": "not resolved"}[answer.kind]


def _sides(answer: Answer, batches: list[BatchState], min_batch: int, max_batch: int | None,
           notes: list, misfit: bool = False) -> list[Action]:
    out = []
    largest, smallest = batches[-1], batches[0]
    # an interval's end more than a doubling past the batches is extrapolated, not measured: as an open end (where
    # the curve fits the batches; where it does not, its interval's ends say little about where to measure)
    extrapolated = answer.kind == "interval" and not misfit
    past_top = extrapolated and answer.hi > 2 * largest.batch
    past_bottom = extrapolated and answer.lo < smallest.batch / 2
    if answer.kind in ("lower", "none") or past_top:
        new = largest.batch * 2
        why = (f"its upper end lies more than a doubling past batch {largest.batch}, the largest measured"
               if past_top else f"its upper end is open past batch {largest.batch}")
        if not largest.reached and largest.short:
            out.append(Action("budget", largest.batch, f"B_crit {_said(answer)}, and batch {largest.batch} ran its "
                                                       "budget without reaching the target: its closest trial "
                                                       "again with twice the epochs", key=largest.short))
        elif not largest.reached:
            notes.append(f"batch {largest.batch} did not reach the target: no larger batch is added (raise the "
                         "budget in epochs for the large batches)")
        elif max_batch is not None and new > max_batch:
            notes.append(f"{largest.batch} is the largest batch the data allow here: no larger one is added")
        else:
            out.append(Action("batch", new, f"B_crit {_said(answer)}: {why}"))
    if answer.kind in ("upper", "none") or past_bottom:
        new = smallest.batch // 2
        why = (f"its lower end lies more than a halving below batch {smallest.batch}, the smallest measured"
               if past_bottom else f"its lower end is open below batch {smallest.batch}")
        share = eval_share_below(batches)
        if new < max(min_batch, 1) or smallest.batch % 2:
            notes.append(f"{smallest.batch} is the smallest batch here: no smaller one is added")
        elif share is not None and share > MAX_EVAL_SHARE:
            notes.append(f"batch {new} is not added: its evaluations would take about {share:.0%} of its training "
                         f"(measured: {_shares(batches)}): below batch {smallest.batch} the answer costs more in "
                         "evaluations than in training here (a coarser --eval-spacing or a smaller --eval-subset "
                         "would buy it)")
        else:
            out.append(Action("batch", new, f"B_crit {_said(answer)}: {why}"))
    return out


MAX_EVAL_SHARE = 1.0  # a batch whose evaluations would cost more than its training is not added


def eval_share_below(batches: list[BatchState]) -> float | None:
    """The evaluations' share of training at half the smallest batch, from the shares measured at the two smallest
    (the smallest's times their ratio, at least 1: one halving more); the smallest's own where only it was
    measured; None where neither was."""
    measured = [s for s in batches[:2] if s.eval_share is not None]
    if not measured or measured[0] is not batches[0]:
        return None
    if len(measured) == 1:
        return measured[0].eval_share
    a, b = measured
    return a.eval_share * max(a.eval_share / b.eval_share, 1.0) if b.eval_share > 0 else a.eval_share


def _shares(batches: list[BatchState]) -> str:
    return ", ".join(f"{s.eval_share:.0%} at batch {s.batch}" for s in batches[:2] if s.eval_share is not None)


def _edges(reached: list[BatchState]) -> list[Action]:
    out = []
    for s in reached:
        if len(s.points) < 2 or s.best not in (0, len(s.points) - 1):
            continue
        lrs = [p.lr for p in s.points]
        step = (lrs[-1] / lrs[0]) ** (1 / (len(lrs) - 1))
        p = s.points[s.best]
        low = s.best == 0
        side = "lowest" if low else "highest"
        out.append(Action("lr", s.batch, f"the best LR at batch {s.batch} ({p.lr:.4g}) is the {side} searched (an "
                                         "edge): the range is extended past it", key=p.key,
                          lr=p.lr / step if low else p.lr * step))
    return out


def _seeds(answer: Answer, reached: list[BatchState]) -> list[Action]:
    lo = answer.lo / 2 if answer.kind in ("interval", "lower") else 0.0
    hi = answer.hi * 2 if answer.kind in ("interval", "upper") else math.inf
    where = [s for s in reached if lo <= s.batch <= hi] or reached
    # the best point only: on the simulator, seeds at its two neighbours too resolved B_crit with 0.61-0.67 of a
    # fixed grid's budget against 0.55 (docs/benchmarks.md, "Adaptive sweep")
    why = "B_crit not resolved" if answer.kind == "none" else f"B_crit {_said(answer)} is wider than asked"
    return [Action("seeds", s.batch, f"{why}: one more seed at the best LR", key=s.points[s.best].key)
            for s in where]


def _within(actions: list[Action], trials_left: int | None, trials_per_batch: int) -> list[Action]:
    """The actions in order of priority while the budget lasts."""
    if trials_left is None:
        return actions
    out, left = [], trials_left
    for a in actions:
        cost = a.trials(trials_per_batch)
        if cost <= left:
            out.append(a)
            left -= cost
    return out


def describe(added: list[dict]) -> list[str]:
    """A round's actions as rounds.json keeps them ({action, trials}), one line per batch or LR added and one per
    reason for seeds (their batches together): what the sweep prints and the report's rounds table shows."""
    lines, seeds = [], {}
    for entry in added:
        a, n = entry["action"], len(entry["trials"])
        if a["kind"] == "batch":
            lines.append(f"batch {a['batch']} ({n} trials): {a['why']}")
        elif a["kind"] == "lr":
            lines.append(f"LR {a['lr']:.4g} at batch {a['batch']}: {a['why']}")
        elif a["kind"] == "budget":
            lines.append(f"{a['key']} with twice the epochs ({n} trial{'s' if n > 1 else ''}): {a['why']}")
        else:
            batches, count = seeds.get(a["why"], ({}, 0))
            seeds[a["why"]] = ({**batches, a["batch"]: None}, count + n)
    for why, (batches, count) in seeds.items():
        lines.append(f"{count} more seed{'s' if count > 1 else ''} at batch{'es' if len(batches) > 1 else ''} "
                     f"{', '.join(map(str, batches))}: {why}")
    return lines


def answer_text(a: dict) -> str:
    """B_crit as rounds.json keeps it ({kind, value, lo, hi}, an open end null): '~ 145 [106, 208]', '> 300',
    '< 20' or 'not resolved'."""
    if a.get("kind") == "interval":
        return f"~ {a.get('value') or 0:,.0f} [{a['lo']:,.0f}, {a['hi']:,.0f}]"
    if a.get("kind") == "lower" and a.get("lo") is not None:
        return f"> {a['lo']:,.0f}"
    if a.get("kind") == "upper" and a.get("hi") is not None:
        return f"< {a['hi']:,.0f}"
    return "not resolved"
