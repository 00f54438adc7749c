"""What a designed study's trials cost, as pure arithmetic: the seconds a training sample takes at a batch from
the batches the pilot timed (`per_sample_at`), the samples a search point trains given the pilot's LR bowl
(`bowl_factor`, `designed_samples`), where pruning's first rung pays (`rung_choice`), the evaluations that fit
their share of training (`evaluation_choice`) and the grid's price (`grid_seconds`). The designer prices its grid
by these (analysis/design.py) and `sweep --estimate` a designed spec's trials (sweep/estimate.py). `facts` is the
data's `pilot.DataFacts` (train, val and test sizes).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from lbscale.analysis.curves import Z_SETTLED
from lbscale.analysis.evaluations import check_reads, check_share, evals_to, near_checks, near_evals, spaced_evals

EVAL_SHARE = 0.10  # evaluations inside epochs: at most this share of training time
SPACINGS = (0.15, 0.2, 0.3)  # step evaluations' spacing, finest first (a crossing bracketed within 15%)
SUBSETS = (2000, 1000, 500, 250, 100)  # evaluation subsets tried, largest first (the whole split before them)
FIRST_SHARE = 0.25  # a batch's first step evaluation at this share of its predicted steps to the target
CONFIRM_TOP = 2  # a designed study's best points run again with one more seed

OFF_OPTIMUM = 1.6  # an unpruned search point trains this many times the optimum's samples (LRs off it need more)


def bowl_factor(bowl: dict, lr_ratio: float) -> float | None:
    """Samples to the target of an LR `lr_ratio` x the pilot's best over the best's, from the pilot's LRs
    (`bowl`: LR ratio -> samples ratio, None where that LR did not reach the target in the pilot): log-linear
    between the LRs that reached it; past them, up to half the pilot's LR step, rising as steeply as the nearest
    measured segment falls (a bowl in log LR; one reached LR: to OFF_OPTIMUM at the half step); None further out
    (such a point does not reach the target: it trains its whole budget)."""
    keys = sorted(math.log(float(r)) for r in bowl)
    reached = sorted((math.log(float(r)), math.log(float(c))) for r, c in bowl.items() if c)
    if not reached:
        return None
    half = min((b - a for a, b in zip(keys, keys[1:])), default=math.log(10.0) / 2) / 2
    x, (x0, y0), (x1, y1) = math.log(lr_ratio), reached[0], reached[-1]
    if x0 <= x <= x1:
        for (ax, ay), (bx, by) in zip(reached, reached[1:]):
            if ax <= x <= bx:
                return math.exp(ay + (by - ay) * (x - ax) / (bx - ax) if bx > ax else ay)
        return math.exp(y0)
    out = x0 - x if x < x0 else x - x1
    if out > half + 1e-9:
        return None
    if len(reached) == 1:
        return math.exp(y0) * (1 + (OFF_OPTIMUM - 1) * out / half)
    (ax, ay), (bx, by) = (reached[0], reached[1]) if x < x0 else (reached[-2], reached[-1])
    slope = abs((by - ay) / (bx - ax))
    return math.exp((y0 if x < x0 else y1) + slope * out)


def designed_samples(samples: float, rung: float | None, factor: float | None = OFF_OPTIMUM,
                     budget: float = math.inf) -> float:
    """The samples one search point of a designed study trains, its batch's optimum reaching the target after
    `samples`: the point's own need, `factor` x that (its LR's `bowl_factor`; None: it never reaches the target and
    trains its `budget`), capped at the budget; with a first rung (in samples) all train to the rung and half of
    what is past it (ASHA's asynchronous promotions keep more than a third). The designer prices its grid by this
    rule and `--estimate` its trials."""
    need = budget if factor is None else min(factor * samples, budget)
    if rung:
        return min(rung, need) + max(need - rung, 0.0) / 2
    return need




@dataclass(frozen=True)
class Choice:
    """One decision of the design: its value and the measured reason the spec's comment gives."""

    value: object
    why: str


def rung_choice(settled: float | None, lrs: int, val: int, batches: list[int], samples: dict, largest: int) -> Choice:
    """The first rung of successive halving: where the LRs' order at the largest batch settled (`settled` samples,
    `curves.settled_samples` on its `lrs` trials), unless it never did or only past half the fewest samples to the
    target."""
    if settled is None:
        return Choice(None, f"the pilot's {lrs} LRs at batch {largest} never led one another by more than "
                            f"{Z_SETTLED:g} standard errors on the {val:,}-image val split: no pruning")
    fewest = min(samples[b] for b in batches)
    if settled > fewest / 2:
        return Choice(None, f"the LRs' order at batch {largest} settled after {settled:,.0f} samples, more than half "
                            f"the fewest samples to the target ({fewest:,.0f}): pruning would save little; none")
    return Choice(int(math.ceil(settled)), f"the LRs' order at batch {largest} settled (the best ahead by "
                                           f"> {Z_SETTLED:g} SE from then on) after {settled:,.0f} samples")


@dataclass(frozen=True)
class Costs:
    """The pilot's prices: seconds per training sample at each batch it timed, per evaluated example, and a trial's
    start-up."""

    per_sample: dict  # batch -> seconds per training sample
    per_eval_example: float
    startup: float


def per_sample_at(costs: Costs, batch: float) -> float:
    """Seconds per training sample at `batch`: a step's seconds run straight between the batches the pilot timed
    (a fixed cost per step, the Python and optimizer work a small batch pays as often as a large one, and a cost per
    sample); outside them the nearest two's line a + c B goes on where it has a positive fixed cost, else a sample
    costs what it cost at the nearest timed batch."""
    points = sorted(costs.per_sample.items())
    if len(points) == 1:
        return points[0][1]
    i = min(max(bisect.bisect_left([b for b, _ in points], batch), 1), len(points) - 1)
    (b1, c1), (b2, c2) = points[i - 1], points[i]  # the segment holding `batch`, or the nearest end's
    slope = (c2 * b2 - c1 * b1) / (b2 - b1)
    fixed = c1 * b1 - slope * b1
    if b1 <= batch <= b2 or (fixed > 0 and slope > 0):
        return (fixed + slope * batch) / batch
    return c1 if batch < b1 else c2


@dataclass(frozen=True)
class EvalChoice:
    """The step evaluations: subset, spacing, each batch's first step; their predicted share of training where it
    weighs most, and `floor`: (the share the crossing's own whole-split check takes, at its batch)."""

    subset: int
    spacing: float
    first: dict
    share: float
    share_at: int
    near: float
    target: float
    floor: tuple


def first_step(steps: float) -> int:
    """A batch's first step evaluation: FIRST_SHARE of its predicted steps to the target (each batch evaluated from
    the same share of its training on)."""
    return max(1, int(steps * FIRST_SHARE))


def evaluation_choice(batches: list[int], samples: dict, costs: Costs, facts, near: dict,
                      target: float, targets: int = 1) -> EvalChoice:
    """The largest evaluation subset and finest spacing whose evaluations inside epochs take at most EVAL_SHARE of
    training at every batch: the step evaluations on the subset from each batch's first (a quarter of its predicted
    steps to the target, `first_step`) and, on a subset, the whole split wherever a value comes within its noise
    of the target (from `near[subset]` of the steps to the target on: `near_evals`; a small subset is noisy, so it
    checks more often; the crossing's own check reads all of the split, each miss before it `check_share` of it,
    since it stops clearly below the target: `check_reads`; with `targets` targets, each checked so). Where none
    fits, the cheapest, with `floor`: (the share the crossing's own whole-split evaluation takes of the optimum's
    training, at the batch where it weighs most)."""
    first = {b: first_step(samples[b] / b) for b in batches}
    per = {b: per_sample_at(costs, b) for b in batches}
    # the crossing's own evaluation of the whole split, which no subset or spacing avoids, over the optimum's
    # training: where it alone takes most of EVAL_SHARE, nothing fits, and the spec says why
    floor = max((facts.val * costs.per_eval_example / (samples[b] * per[b]), b) for b in batches)
    subsets = [facts.val] + [s for s in SUBSETS if s < facts.val]
    tried = []
    for spacing in SPACINGS:
        for subset in subsets:
            checks = {b: targets * check_reads(near_evals(first[b], spacing, samples[b] / b, near[subset]),
                                               check_share(target, subset, facts.val)) if subset < facts.val else 0
                      for b in batches}
            share, at = max(((len(evals_to(first[b], spacing, samples[b] / b)) * subset + checks[b] * facts.val)
                             * costs.per_eval_example / (samples[b] * per[b]), b) for b in batches)
            ev = EvalChoice(subset, spacing, first, share, at, near[subset], target, floor)
            if share <= EVAL_SHARE:
                return ev
            tried.append(ev)
    return min(tried, key=lambda e: e.share)  # none within the share: the cheapest, and the spec says its share


def grid_seconds(batches: list[int], samples: dict, costs: Costs, facts, ev: EvalChoice,
                 rung: float | None, bowl: dict, ratios: list[float], epochs: dict,
                 confirm: int = CONFIRM_TOP, targets: int = 1) -> float:
    """The grid and its confirmation priced from the pilot: per batch, each search point (its LR `ratios` x the
    pilot's best) priced by `designed_samples` on the pilot's `bowl` (the rule `--estimate` prices the designed
    spec's trials by: one that never reaches the target trains its batch's `epochs`), `confirm` reruns at the
    optimum's samples; their step evaluations on the subset and the whole split at each epoch's end and near each of
    `targets` targets; the test split once at each trial's end; a start-up each."""
    total, per = 0.0, {b: per_sample_at(costs, b) for b in batches}
    for b in batches:
        e, budget = samples[b], float(epochs[b] * facts.train)
        searched = [bowl_factor(bowl, r) for r in ratios]
        runs = [(designed_samples(e, rung, f, budget), f) for f in searched] + [(e, 1.0)] * confirm
        examples = 0.0  # evaluated: the step evaluations' subset, each epoch's end and the checks on the whole split
        for n, f in runs:
            share = check_share(ev.target, ev.subset, facts.val)
            checks = (targets * check_reads(near_checks(ev.first[b], ev.spacing, n / b, e / b, f, ev.near), share)
                      if ev.subset < facts.val else 0)
            examples += (spaced_evals(ev.first[b], ev.spacing, n / b) * ev.subset
                         + (n / facts.train + checks) * facts.val)
        examples += len(runs) * facts.test  # each trial's test split, once at its end
        total += (sum(n for n, _ in runs) * per[b] + examples * costs.per_eval_example
                  + len(runs) * costs.startup)
    return total
