"""The designer's pruning and spacing on simulated studies (issue 52 item 6): the verdict's coverage of B_crit when
a study is pruned and evaluated as `lbscale design` sets it, beside the same truths pruned as the old template
did. Pruning reads a trial's value at a rung, so each simulated trial has a learning curve, not only its steps to
the target.

The curve model (two shapes, both through the steps model of bench_verdict_coverage): a trial that needs S steps to
the target T (S drawn as there: S_min (1 + B_crit / B) x the LR's bowl x exp(sigma z)) has after t steps the
validation metric
- 'exponential': m(t) = P - (P - c) q^(t / S), q = 1 - f, an exponential approach to the plateau P from chance c;
- 'power': m(t) = P - (P - c) / (1 + t / tau), tau = S (1 - f) / f, a power law's fast start and long tail;
f = (T - c) / (P - c) the target's fraction of the way from chance to the plateau, so both pass T at exactly S
steps; a diverged trial (its LR above `diverge` x lr*) stays at chance. Each evaluation on n examples reads
Binomial(n, m(t)) / n: the noise pruning's margin and the designer's settling rule reason about.

A study as the designer writes it and lbscale runs it:
- evaluations at `analysis.evaluations.geometric_steps(first, spacing, ...)` from each batch's first step (a quarter
  of its steps as the designer predicts them, `analysis.pricing.first_step`, the prediction off by up to a factor 2
  either way) on the step subset, the whole split where a subset value is near the target
  (`train.evaluation.near_target`), read in parts and stopped once clearly below the target as `Evaluator.check`
  reads it (`Trial.check`); the target is met where the whole split reaches it, the crossing between the last
  whole-split miss, stopped check or subset value clearly below the target before it (as
  `report.tuned.steps_to_result` reads them; no epoch ends: the lower end is, if anything, earlier than a
  study's) and this one;
- the LR search: `points` a factor `grid` apart around lr* misjudged by up to half a grid step, the trials of a
  batch run one after another in a random order (a local sweep's arrival order), each judged at its rungs in
  samples (`train.pruning.rung_steps_in_samples`, eta 3) by `train.pruning.judge` against the values published
  there before it; a pruned trial is right-censored at its rung, as the report reads it;
- the first rung: where the designer's rule puts it, from a simulated pilot (three LRs a factor sqrt(10) apart at
  the largest batch, the whole split evaluated 16 times, log-spaced from 2% to 150% of that batch's optimal samples,
  `analysis.curves.settled_samples`), no pruning where the ranking never settles or settles past half the fewest
  samples to the target; the template's: a fixed rung in samples, the whole split as the subset;
- a budget of 3x each batch's own optimal samples (the designer's epochs; the template's: 3x the largest
  batch's at every batch); the two best points of each batch again with one more seed, unpruned (the
  confirmation stage);
- the fit: `report.steps_model.fit`, B_crit scored strictly against the truth (the batch where a doubling saves
  25%), "not resolved" counted apart.

`python benchmarks/bench_designed.py` (LBSCALE_DESIGNED_STUDIES, 300 by default).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np

if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from benchmarks.bench_verdict_coverage import Regime, _bowl, covers, false_bound  # noqa: E402

METRIC, ETA = "val_top1", 3


@dataclass(frozen=True)
class Design:
    """How a study is evaluated and pruned."""

    name: str
    spacing: float = 0.15
    subset: int = 500  # the step evaluations' examples
    whole: int = 1500  # the val split's
    rung: float | str | None = "designed"  # samples; 'designed': the designer's rule from a simulated pilot
    # the first evaluation: at each batch a quarter of its steps as the designer predicts them, within a factor 2 of
    # its optimum's ('own'); a quarter of the fewest optimal steps at every batch ('quarter'); or step 1 ('one')
    first: str = "own"
    budget: str = "own"  # each batch 3x its own optimal samples ('own', the designer's epochs) or the largest's


@dataclass(frozen=True)
class Curves:
    """The learning curves' truth: shape, chance, plateau, target fraction."""

    shape: str = "exponential"
    chance: float = 0.1
    plateau: float = 0.87
    fraction: float = 0.9

    @property
    def target(self) -> float:
        return self.chance + self.fraction * (self.plateau - self.chance)

    def value(self, t: np.ndarray, need: float, diverged: bool) -> np.ndarray:
        """The mean metric after t steps of a trial that reaches the target after `need` steps."""
        t = np.asarray(t, dtype=float)
        if diverged or not math.isfinite(need):
            return np.full(t.shape, self.chance)
        gap = self.plateau - self.chance
        if self.shape == "power":
            tau = need * (1 - self.fraction) / self.fraction
            return self.plateau - gap / (1 + t / tau)
        return self.plateau - gap * (1 - self.fraction) ** (t / need)


TEMPLATE = Design("the old template: a first rung of 2,048 samples, spacing 0.1 on the whole split", spacing=0.1,
                  subset=1500, rung=2048.0, first="one", budget="top")
DESIGNED = Design("the designer's: its rung from the pilot, spacing 0.15 on a 500-image subset")
# the truths: the reviewer's setup of bench_verdict_coverage (S_min 500, k = 1, 6 LR points over 100x there; here
# the designer's 16x range), B_crit inside the batches, near their top, and the noisier steps
BASE = Regime("B_crit 128, batches 32-512", s_min=500.0, k=1.0, grid=16 ** 0.2, samples_budget=3.0)
TRUTHS = [
    (BASE, Curves()),
    (BASE, Curves(shape="power")),
    (replace(BASE, name="B_crit 128, sigma ~ sqrt(B) 0.05 to 0.20, divergence above 2 lr*", sigma=(0.05, 0.5),
             diverge=2.0), Curves()),
    (replace(BASE, name="B_crit 256, batches 32-512 (near the top)", b_crit=256.0), Curves(shape="power")),
]


class Trial:
    """One simulated trial: its steps to the target, its mean curve and its evaluations' noise."""

    def __init__(self, rng, r: Regime, c: Curves, batch: float, lr: float, lr_star: float, budget_steps: float):
        d = math.log(lr / lr_star)
        sigma = r.sigma[0] * (batch / r.batches[0]) ** r.sigma[1]
        self.diverged = r.diverge is not None and lr > r.diverge * lr_star
        self.need = float(r.curve(batch)) * _bowl(r.bowl, d, r.k) * math.exp(sigma * rng.standard_normal())
        self.rng, self.curves, self.batch, self.lr, self.budget = rng, c, batch, lr, budget_steps

    def read(self, step: float, n: int) -> float:
        m = float(self.curves.value(np.array([step]), self.need, self.diverged)[0])
        return float(self.rng.binomial(n, m)) / n

    def check(self, step: float, n: int, target: float) -> bool:
        """Whether a whole-split check of `n` examples at `step` meets `target`, read as `Evaluator.check` reads
        it: in the parts of `analysis.evaluations.check_parts`, each part's count Binomial(part, m(step)), stopped
        after a part where the value so far is `clearly_below` the target (a stopped check misses)."""
        from lbscale.analysis.evaluations import clearly_below

        m = float(self.curves.value(np.array([step]), self.need, self.diverged)[0])
        sizes = part_sizes(n)
        read = right = 0
        for k, size in enumerate(sizes):
            right, read = right + int(self.rng.binomial(size, m)), read + size
            if k < len(sizes) - 1 and clearly_below(right / read, target, read, n):
                return False
        return right / n >= target


@functools.lru_cache(maxsize=16)
def part_sizes(n: int) -> tuple[int, ...]:
    """The sizes of a check's parts on an n-example split (`analysis.evaluations.check_parts`)."""
    from lbscale.analysis.evaluations import check_parts

    return tuple(len(part) for part in check_parts(n))


def run_trial(t: Trial, design: Design, first: int, rungs: list[int], published: dict | None) -> tuple:
    """(batch, lr, low, high, diverged) as the report reads the trial: evaluated at the designed steps, judged at
    its rungs against `published` (rung -> [(value, examples)], appended to), stopped at the target."""
    from lbscale.analysis.evaluations import clearly_below, geometric_steps
    from lbscale.train.evaluation import near_target
    from lbscale.train.pruning import judge

    total = max(2, int(math.floor(t.budget)))
    if t.diverged:
        return (t.batch, t.lr, 5.0, math.inf, 1.0)
    steps = sorted(set(geometric_steps(first, design.spacing, total + 1)) | set(rungs))
    # the crossing's lower end, as the report reads it (`report.tuned.steps_to_result`): the last whole-split miss,
    # stopped check or subset value clearly below the target
    last = 0.0
    for s in steps:
        value = t.read(s, design.subset)
        if design.subset >= design.whole:  # the step evaluations read the whole split: each miss bounds
            if value >= t.curves.target:
                return (t.batch, t.lr, last, float(s), 0.0)
            bound = True
        elif near_target(value, t.curves.target, design.subset, True):
            if t.check(s, design.whole, t.curves.target):
                return (t.batch, t.lr, last, float(s), 0.0)
            bound = True  # a checked miss, whole or stopped
        else:
            bound = clearly_below(value, t.curves.target, design.subset, math.inf)
        if published is not None and s in rungs:
            others = published.setdefault(s, [])
            decision = judge(value, design.subset, list(others), ETA, METRIC, True)["decision"]
            others.append((value, design.subset))
            if decision == "prune":
                return (t.batch, t.lr, float(s), math.inf, 0.0)
        last = float(s) if bound else last
    return (t.batch, t.lr, last, math.inf, 0.0)


def designed_rung(rng, r: Regime, c: Curves, lr_star_top: float, guess: float, whole: int) -> float | None:
    """The designer's first rung from a simulated pilot at the largest batch (see the module's note)."""
    from lbscale.analysis.curves import settled_samples
    from lbscale.analysis.pilot import LR_STEP as LR_STEP_PILOT

    top = float(r.batches[-1])
    optimal = float(r.curve(top)) * top
    at = np.geomspace(optimal * 0.02, optimal * 1.5, 16)
    curves = []
    for k in (-1, 0, 1):
        t = Trial(rng, r, c, top, lr_star_top * guess * LR_STEP_PILOT ** k, lr_star_top, math.inf)
        curves.append([(float(s), t.read(s / top, whole)) for s in at])
    settled = settled_samples(curves, whole)
    fewest = float(r.curve(r.batches[0])) * r.batches[0]
    if settled is None or settled > fewest / 2:
        return None
    return float(math.ceil(settled))


def simulate_designed(rng, r: Regime, c: Curves, design: Design):
    """One study as the module's note says: arrays (batch, lr, low, high, diverged) of its trials."""
    from lbscale.analysis.pricing import first_step
    from lbscale.train.pruning import rung_steps_in_samples

    b = np.array(r.batches, dtype=float)
    coef = 0.1 / b[0] ** r.alpha
    guess = 2.0 ** rng.uniform(-0.5, 0.5)
    rung = design.rung
    if rung == "designed":
        rung = designed_rung(rng, r, c, coef * b[-1] ** r.alpha, r.grid ** math.log(guess, 2), design.whole)
    top_samples = r.samples_budget * float(r.curve(b[-1])) * b[-1]
    fewest = 1 if design.first == "one" else max(1, int(min(float(r.curve(x)) for x in b) // 4))
    rows = []
    for batch in b:
        # the designer's prediction of a batch's steps (from two pilot batches) is off by up to a factor 2
        first = (first_step(float(r.curve(batch)) * 2.0 ** rng.uniform(-1, 1)) if design.first == "own"
                 else fewest)
        star = coef * batch ** r.alpha
        centre = star * r.grid ** math.log(guess, 2)
        lrs = centre * r.grid ** (np.arange(r.points) - (r.points - 1) / 2)
        budget = (top_samples / batch if design.budget == "top" else r.samples_budget * float(r.curve(batch)))
        rungs = rung_steps_in_samples(int(rung), ETA, int(batch), int(budget)) if rung else []
        published: dict = {}
        found = [None] * len(lrs)
        for j in rng.permutation(len(lrs)):
            found[j] = run_trial(Trial(rng, r, c, batch, lrs[j], star, budget), design, first, rungs,
                                 published if rungs else None)
        rows += found
        reached = sorted((row[3], j) for j, row in enumerate(found) if math.isfinite(row[3]))
        for _, j in reached[:2]:  # the confirmation: the two best points again, one more seed, unpruned
            rows.append(run_trial(Trial(rng, r, c, batch, lrs[j], star, budget), design, first, [], None))
    a = np.array(rows)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4] > 0, rung


def run(r: Regime, c: Curves, design: Design, studies: int, seed: int) -> dict:
    """B_crit's coverage over `studies` drawn from the truth (r, c), run as `design` sets it."""
    from lbscale.report.steps_model import Observations, fit

    rng = np.random.default_rng(seed)
    kinds, hits, false, ratios, pruned_share, rungs = [], [], [], [], [], []
    for _ in range(studies):
        batch, lr, low, high, diverged, rung = simulate_designed(rng, r, c, design)
        f = fit(Observations.of(batch, lr, low, high, diverged), quantities=("b_crit",))
        e = f.estimates.get("b_crit") if f is not None else None
        kind, lo, hi = (e.kind, e.lo, e.hi) if e is not None and e.lo is not None else ("none", -math.inf, math.inf)
        kinds.append(kind)
        hits.append(covers(kind, lo, hi, r.truth))
        false.append(false_bound(kind, lo, hi, r.truth))
        ratios.append(hi / lo if lo > 0 and math.isfinite(hi) else math.inf)
        rungs.append(rung)
        pruned_share.append(float(np.mean(np.isinf(high) & ~diverged)))
    stated = [h for h, k in zip(hits, kinds) if k != "none"]
    return {"studies": studies, "covered": float(np.mean(hits)),
            "covered_stated": float(np.mean(stated)) if stated else math.nan,
            "unresolved": float(np.mean([k == "none" for k in kinds])),
            "bounds": float(np.mean([k in ("lower", "upper") for k in kinds])),
            "false_bounds": float(np.mean(false)), "ratio": float(np.median(ratios)),
            "miss_or_unresolved": float(np.mean([not h or k == "none" for h, k in zip(hits, kinds)])),
            "pruning": float(np.mean([x is not None for x in rungs])),
            "rung": float(np.median([x for x in rungs if x is not None])) if any(x is not None for x in rungs)
            else math.nan,
            "unreached": float(np.mean(pruned_share))}


def main():
    studies = int(os.environ.get("LBSCALE_DESIGNED_STUDIES", "300"))
    print(f"designed studies: {studies} per row, nominal 90%, strict scoring (a tie is a miss; 'not resolved' apart)")
    print("| truth | curves | design | covered when stated | not resolved | bounds | false bounds | median hi/lo | "
          "miss or not resolved | pruned (rung, median samples) | unreached trials | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (r, c) in enumerate(TRUTHS):
        for design in (DESIGNED, TEMPLATE):
            t0 = time.perf_counter()
            s = run(r, c, design, studies, seed=500 + i)
            print(f"| {r.name} (B_crit {r.truth:.0f}) | {c.shape}, target {c.fraction:g} of the way | {design.name} | "
                  f"{100 * s['covered_stated']:.1f}% | {100 * s['unresolved']:.1f}% | {100 * s['bounds']:.1f}% | "
                  f"{100 * s['false_bounds']:.1f}% | {s['ratio']:.2f} | {100 * s['miss_or_unresolved']:.1f}% | "
                  f"{100 * s['pruning']:.0f}% ({s['rung']:,.0f}) | {100 * s['unreached']:.1f}% | "
                  f"{time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
