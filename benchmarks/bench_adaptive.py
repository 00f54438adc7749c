"""`sweep --until-resolved` against a fixed grid, on a simulator of known truth (no training): the rounds come from
the sweep's own planner (`analysis.rounds.plan_round`) fed by the report's fit (`report.steps_model.fit`), the trials
from the simulator of bench_verdict_coverage (S_min (1 + B_crit / B) x a bowl in ln(lr / lr*) x lognormal noise,
crossings known between evaluations 10% apart, a budget of 20x the perfect-scaling steps at each batch).

A study is the spec's batches x its LR points (the same LRs at every batch, as a search with lr_scaling none
draws them) x one seed, with a confirmation stage (one more seed at each batch's best point). The fixed grid raises
the seeds at every point; the adaptive sweep adds what the planner asks for, round after round, until B_crit's
90% interval has hi / lo <= 4 or its budget is spent. Cost is counted in trial-steps (every step a trial trained,
stopped at its target).

Printed per regime: the budget (trial-steps, median over studies) at which the fixed grid's median hi / lo first
reaches 4 (seeds 1, 2, 3, ...), the adaptive sweep's median spend where it stopped resolved and the share that
resolved, their ratio, and the coverage of the adaptive sweep's final interval (strict: a tie is a miss; stopping
when narrow enough is optional stopping, so this is the figure that says whether it is safe).

`python benchmarks/run.py adaptive` (LBSCALE_ADAPTIVE_STUDIES=N studies per regime, default 150).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from lbscale.analysis.intervals import LEVEL  # the level the report names
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_verdict_coverage import EVALS, covers  # noqa: E402  (the simulator's evaluation steps, strict scoring)


@dataclass(frozen=True)
class Truth:
    name: str
    batches: tuple = (32, 64, 128, 256)
    b_crit: float = 128.0
    s_min: float = 200.0
    alpha: float = 0.5
    sigma: tuple = (0.15, 0.5)  # at the smallest batch, and its exponent in B
    lrs: tuple = tuple(0.02 * 2.0 ** np.arange(6))  # the spec's LR points (0.02 .. 0.64), the same at every batch
    c: float = 0.1 / 32 ** 0.5  # lr*(B) = c B^alpha: 0.1 at batch 32, 0.4 at 512
    budget: float = 20.0


TRUTHS = [
    Truth("B_crit 128 inside 32..256, sigma ~ sqrt(B) 0.25..0.71", sigma=(0.25, 0.5)),
    Truth("B_crit 512 past 32..256, sigma ~ sqrt(B) 0.15..0.42", b_crit=512.0),
]
RATIO = 4.0
MAX_ROUNDS = 30


class Study:
    """One simulated study's trials: (batch, lr, low, high, cost) rows and which point each ran."""

    def __init__(self, t: Truth, rng: np.random.Generator):
        self.t, self.rng, self.rows = t, rng, []

    def run(self, batch: float, lr: float) -> None:
        t = self.t
        d = math.log(lr / (t.c * batch ** t.alpha))
        sigma = t.sigma[0] * (batch / t.batches[0]) ** t.sigma[1]
        perfect = t.s_min * (1 + t.b_crit / batch)
        need = perfect * (1 + 0.5 * d * d) * math.exp(sigma * self.rng.standard_normal())
        budget = t.budget * perfect
        if need > budget:
            last = float(EVALS[np.searchsorted(EVALS, budget, side="right") - 1])
            self.rows.append((batch, lr, last, math.inf, last))
            return
        i = int(np.searchsorted(EVALS, need, side="left"))
        self.rows.append((batch, lr, float(EVALS[i - 1]) if i else 0.0, float(EVALS[i]), float(EVALS[i])))

    def grid(self, batches, lrs, seeds: int) -> None:
        for b in batches:
            for lr in lrs:
                for _ in range(seeds):
                    self.run(b, lr)
            self.confirm(b)

    def confirm(self, b) -> None:
        best = self.best_lr(b)
        if best is not None:
            self.run(b, best)

    def best_lr(self, b):
        rows = [r for r in self.rows if r[0] == b and math.isfinite(r[3])]
        if not rows:
            return None
        by = {}
        for r in rows:
            by.setdefault(r[1], []).append(math.log(r[3]))
        return min(by, key=lambda lr: np.mean(by[lr]))

    @property
    def cost(self) -> float:
        return float(sum(r[4] for r in self.rows))

    def answer(self):
        from lbscale.analysis.rounds import Answer
        from lbscale.report.steps_model import Observations, fit

        a = np.array([r[:4] for r in self.rows])
        f = fit(Observations.of(a[:, 0], a[:, 1], a[:, 2], a[:, 3]), level=LEVEL, quantities=("b_crit",))
        e = f.estimates.get("b_crit") if f is not None else None
        if e is None or e.lo is None:
            return Answer("none", 0.0, math.inf)
        return Answer(e.kind, e.lo, e.hi)

    def states(self):
        from lbscale.analysis.rounds import BatchState, Point

        out = []
        for b in sorted({r[0] for r in self.rows}):
            lrs = sorted({r[1] for r in self.rows if r[0] == b})
            best = self.best_lr(b)
            points = tuple(Point(lr, f"{b:g}:{float(lr)!r}", sum(r[0] == b and r[1] == lr for r in self.rows))
                           for lr in lrs)
            index = lrs.index(best) if best is not None else None
            out.append(BatchState(int(b), best is not None, points, index))
        return out


def adaptive(t: Truth, rng, max_trials: int) -> tuple:
    """(final answer, trial-steps spent, rounds, stop reason) of one adaptive sweep."""
    from lbscale.analysis.rounds import plan_round

    s = Study(t, rng)
    s.grid(t.batches, t.lrs, 1)
    for rounds in range(MAX_ROUNDS):
        answer = s.answer()
        r = plan_round(answer, s.states(), RATIO, trials_left=max_trials - len(s.rows), trials_per_batch=len(t.lrs))
        if r.stop:
            return answer, s.cost, rounds, r.stop
        for a in r.actions:
            if a.kind == "batch":
                s.grid([a.batch], t.lrs, 1)
            elif a.kind == "lr":
                s.run(a.batch, a.lr)
            else:
                s.run(a.batch, float(a.key.split(":")[1]))
    answer = s.answer()
    return answer, s.cost, MAX_ROUNDS, f"{MAX_ROUNDS} rounds"


def fixed(t: Truth, rng, seeds: int) -> tuple:
    s = Study(t, rng)
    s.grid(t.batches, t.lrs, seeds)
    return s.answer(), s.cost


def _ratio(a) -> float:
    return a.hi / a.lo if a.kind == "interval" and a.lo > 0 else math.inf


def run_truth(t: Truth, studies: int, seed: int) -> dict:
    fixed_rows = {}
    for k in range(1, 7):
        rng = np.random.default_rng(seed * 100 + k)
        rows = [fixed(t, rng, k) for _ in range(studies)]
        fixed_rows[k] = rows
        if np.median([_ratio(a) for a, _ in rows]) <= RATIO:
            break
    k_needed = next((k for k, rows in fixed_rows.items() if np.median([_ratio(a) for a, _ in rows]) <= RATIO), None)
    fixed_cost = float(np.median([c for _, c in fixed_rows[k_needed]])) if k_needed else math.inf
    cap = 6 * len(t.lrs) * (len(t.batches) + 4)  # trials: the most a study may spend
    rng = np.random.default_rng(seed)
    ad = [adaptive(t, rng, cap) for _ in range(studies)]
    resolved = [x for x in ad if _ratio(x[0]) <= RATIO]
    return {"k_needed": k_needed, "fixed_cost": fixed_cost,
            "fixed_ratio": {k: float(np.median([_ratio(a) for a, _ in rows])) for k, rows in fixed_rows.items()},
            "adaptive_cost": float(np.median([c for _, c, *_ in resolved])) if resolved else math.inf,
            "resolved": len(resolved) / studies, "ratio": float(np.median([_ratio(x[0]) for x in ad])),
            "covered": float(np.mean([covers(a.kind, a.lo, a.hi, t.b_crit) for a, *_ in ad])),
            "rounds": float(np.median([x[2] for x in ad]))}


def main():
    studies = int(os.environ.get("LBSCALE_ADAPTIVE_STUDIES", "150"))
    print(f"adaptive sweep vs fixed grid: {studies} studies per truth, stop at hi / lo <= {RATIO:g}, "
          f"{100 * LEVEL:.0f}% intervals, strict scoring")
    print("| truth | fixed grid: seeds to median hi/lo <= 4, its trial-steps | adaptive: resolved, median "
          "trial-steps | adaptive / fixed | final interval covers | median rounds | seconds |")
    print("|---|---|---|---|---|---|---|")
    for i, t in enumerate(TRUTHS):
        t0 = time.perf_counter()
        r = run_truth(t, studies, seed=i + 1)
        ratios = ", ".join(f"{k}: {v:.1f}" for k, v in r["fixed_ratio"].items())
        fixed_text = (f"{r['k_needed']} seeds, {r['fixed_cost']:,.0f}" if r["k_needed"]
                      else f"not within 6 seeds (median hi/lo {ratios})")
        share = r["adaptive_cost"] / r["fixed_cost"] if math.isfinite(r["fixed_cost"]) else 0.0
        print(f"| {t.name} | {fixed_text} | {100 * r['resolved']:.0f}%, {r['adaptive_cost']:,.0f} | "
              f"{f'{share:.2f}' if share else '-'} | {100 * r['covered']:.1f}% | {r['rounds']:.0f} | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
