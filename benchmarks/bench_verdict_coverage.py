"""The verdict's calibration: synthetic tuned studies drawn from a known truth in the regimes real studies have,
each fitted by the report's model (`report.steps_model.fit`), scored strictly:
- an interval covers where lo < truth < hi; a lower bound "> L" where truth > L; an upper bound where truth < U;
  a tie is a miss; "not resolved" (both ends open) covers, and is counted apart;
- a false bound: a one-sided bound whose half-line excludes the truth.
Beside it, on the same studies, the old fit's t-interval (least squares of log S through the per-batch best points,
t on its residuals, a bound where the fit left the batches): its coverage, false bounds and median hi / lo.

The simulator is its own code (nothing of lbscale's fit): a trial of batch B and LR lr needs
S_min (1 + B_crit / B) * bowl(ln(lr / lr*(B))) * exp(sigma(B) z) steps, lr*(B) = c B^alpha, z ~ N(0, 1) per trial; it
is evaluated at steps growing by 10% (1, 2, ..., then x1.1), so a crossing is known between two evaluations; a
trial that needs more than its budget stops there unreached; where `diverge` is set, an LR above diverge x lr*
diverges at step 5 (the fit reads it as diverged: its LR above the stability edge, no steps; `censor_diverged`
reads it the old way, as right-censored steps, for the comparison). The LR search is 6 points a factor `grid`
apart around a guess of lr* that is off by up to half a grid step (one draw per study); each batch's best point is
rerun with one more seed (a confirmation stage).

Beside the coverage, the lack-of-fit test's rejection rate on the same studies (each drawn from the curve itself:
a test at 10% should reject about 10% of them), and `python benchmarks/bench_verdict_coverage.py lack_of_fit`
for that rate alone in the regimes of `LACK_REGIMES` (a fit without profiles, ~0.3 s a study), with what chi^2
on the same deviance (the reference before issue 53) would have rejected.

`python benchmarks/run.py verdict_coverage` (1,000 studies per regime: a standard error of ~1 point at 90%; the
knee regimes a third as many); LBSCALE_COVERAGE_STUDIES=N for fewer. `python benchmarks/bench_verdict_coverage.py
knee` runs the knee regimes alone (LBSCALE_KNEE_STUDIES, 300 by default): the knee g of S_min (1 + (B_c /
B)^g)^(1 / g) softer, McCandlish's and sharper, and heavy-tailed noise, in issue 53's reviewer's setup, each
beside the same studies fitted with the knee held at 1.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Regime:
    name: str
    batches: tuple = (32, 64, 128, 256, 512)
    b_crit: float = 128.0
    sigma: tuple = (0.10, 0.0)  # sigma at the smallest batch, and its exponent in B
    grid: float = 1.5  # the LR points' ratio
    points: int = 6
    diverge: float | None = None  # LRs above diverge x lr* never reach the target
    bowl: str = "quadratic"  # 1 + 0.5 ln^2(lr / lr*); 'v': 1 + 0.5 |log2(lr / lr*)|; 'asymmetric': 1 + 0.5 ln^2
    # below lr*, 1 + 2 ln^2 above (an LR too large costs 4x what one too small does, as near a stability edge)
    alpha: float = 0.5
    s_min: float = 200.0
    budget: float = 20.0  # x the perfect-scaling steps at the batch (S_min B_crit / B + S_min)
    knee: float = 1.0  # g of S = S_min (1 + (B_c / B)^g)^(1 / g), B_c = `b_crit`; 1 McCandlish's
    k: float = 0.5  # the bowl's 1 + k d^2 (4 k d^2 above lr* where asymmetric; 1 + k |log2 d| where V-shaped)
    growth: float = 1.1  # evaluations this factor apart in steps
    samples_budget: float | None = None  # a budget in samples, this times the largest batch's optimal samples
    # (the same for every batch, as `epochs` gives): in place of `budget`
    heavy: bool = False  # noise sigma t(3) in place of sigma N(0, 1)

    def curve(self, batch):
        """The truth's steps at the optimal LR."""
        return self.s_min * (1 + (self.b_crit / np.asarray(batch, dtype=float)) ** self.knee) ** (1 / self.knee)

    def saving_at(self, batch) -> float:
        return float(1 - self.curve(2 * batch) / self.curve(batch))

    def batch_saving(self, share: float) -> float:
        """The batch where a doubling saves `share` of the steps on the truth's curve (a root, not the fit's
        closed form): B_crit at 25%."""
        from scipy.optimize import brentq

        return brentq(lambda lb: self.saving_at(math.exp(lb)) - share, -30.0, 40.0, xtol=1e-12)

    @property
    def truth(self) -> float:
        """B_crit as the verdict means it: the batch where a doubling saves 25%."""
        return math.exp(self.batch_saving(0.25))


REGIMES = [
    Regime("control: 5 batches 32-512, B_crit 128, sigma 0.10, 6 LR points"),
    Regime("sigma ~ sqrt(B), 0.05 to 0.20, B_crit 128", sigma=(0.05, 0.5)),
    Regime("sigma ~ sqrt(B), 0.05 to 0.20, B_crit 400", sigma=(0.05, 0.5), b_crit=400.0),
    Regime("sigma ~ B^0.75, 0.05 to 0.40, B_crit 128", sigma=(0.05, 0.75)),
    Regime("4 batches 64-512, B_crit 384", batches=(64, 128, 256, 512), b_crit=384.0),
    Regime("4 batches 64-512, B_crit 256", batches=(64, 128, 256, 512), b_crit=256.0),
    Regime("factor-2 LR grid, divergence above 2 lr*", grid=2.0, diverge=2.0),
    Regime("4 batches + sigma ~ sqrt(B) + factor-2 grid, B_crit 384", batches=(64, 128, 256, 512), b_crit=384.0,
           sigma=(0.05, 0.5), grid=2.0, diverge=2.0),
    Regime("V-shaped bowl 1 + 0.5 |log2 d|, B_crit 128", bowl="v"),
    Regime("asymmetric LR bowl, divergence above 1.5 lr*, 6 LR points over 100x, B_crit 128", grid=100 ** 0.2,
           diverge=1.5, bowl="asymmetric"),
    Regime("4 batches 64-512 + sigma ~ sqrt(B) + factor-2 grid + asymmetric bowl, divergence above 1.5 lr*, "
           "B_crit 128", batches=(64, 128, 256, 512), sigma=(0.05, 0.5), grid=2.0, diverge=1.5, bowl="asymmetric"),
]
# issue 53's reviewer's setup: S_min 500, lr*(32) = 0.1, k = 1, 6 LR points over 100x, evaluations 15% apart, a
# budget of 3x the largest batch's optimal samples; the knee softer (g = 0.5: B_crit 180), McCandlish's, sharper
REVIEWER = dict(s_min=500.0, k=1.0, grid=100 ** 0.2, growth=1.15, samples_budget=3.0)
KNEE_REGIMES = [
    Regime("softer knee S_min (1 + (128 / B)^0.5)^2 (B_crit 180), the reviewer's setup", knee=0.5, **REVIEWER),
    Regime("McCandlish's knee g = 1 (B_crit 128), the reviewer's setup", **REVIEWER),
    Regime("sharper knee g = 2 (B_c 128: B_crit 110), the reviewer's setup", knee=2.0, **REVIEWER),
    Regime("heavy tails 0.1 t(3) (B_crit 128), the reviewer's setup", heavy=True, **REVIEWER),
]
# correctly specified studies (the curve itself, no cliff) for the lack-of-fit test's rate, the truth inside,
# above and below the batches
LACK_REGIMES = [REGIMES[0], REGIMES[1], REGIMES[4],
                Regime("B_crit 2048, above the batches 32-512", b_crit=2048.0),
                Regime("B_crit 8, below the batches 32-512", b_crit=8.0)]


def _bowl(shape: str, d: float, k: float = 0.5) -> float:
    if shape == "v":
        return 1 + k * abs(d / math.log(2))
    return 1 + (4 * k if shape == "asymmetric" and d > 0 else k) * d * d


def _evaluations(limit: float, growth: float = 1.1) -> np.ndarray:
    steps, s = [], 1.0
    while s <= limit * 1.2 + 2:
        steps.append(s)
        s = max(s + 1, math.ceil(s * growth))
    return np.array(steps)


EVALS = _evaluations(1e6)
_EVALS = {1.1: EVALS}


def evaluations(growth: float) -> np.ndarray:
    if growth not in _EVALS:
        _EVALS[growth] = _evaluations(1e6, growth)
    return _EVALS[growth]


def simulate(rng: np.random.Generator, r: Regime):
    """One study: arrays (batch, lr, low, high, diverged) of its trials (low < steps <= high; high inf: unreached
    at low)."""
    b = np.array(r.batches, dtype=float)
    c = 0.1 / b[0] ** r.alpha
    guess = 2.0 ** rng.uniform(-0.5, 0.5)  # the study's misjudgement of lr*, in grid steps
    rows = []
    evals = evaluations(r.growth)

    def run(batch, lr):
        star = c * batch ** r.alpha
        d = math.log(lr / star)
        bowl = _bowl(r.bowl, d, r.k)
        sigma = r.sigma[0] * (batch / b[0]) ** r.sigma[1]
        z = rng.standard_t(3) if r.heavy else rng.standard_normal()
        need = float(r.curve(batch)) * bowl * math.exp(sigma * z)
        budget = (r.samples_budget * float(r.curve(b[-1])) * b[-1] / batch if r.samples_budget is not None
                  else r.budget * r.s_min * (1 + r.b_crit / batch))
        if r.diverge is not None and lr > r.diverge * star:
            return (batch, lr, 5.0, math.inf, 1.0)
        if need > budget:
            last = evals[np.searchsorted(evals, budget, side="right") - 1]
            return (batch, lr, float(last), math.inf, 0.0)
        i = int(np.searchsorted(evals, need, side="left"))  # the first evaluation at or past the need
        return (batch, lr, float(evals[i - 1]) if i else 0.0, float(evals[i]), 0.0)

    for batch in b:
        centre = c * batch ** r.alpha * r.grid ** math.log(guess, 2)
        lrs = centre * r.grid ** (np.arange(r.points) - (r.points - 1) / 2)
        first = [run(batch, lr) for lr in lrs]
        rows += first
        best = min(range(len(first)), key=lambda j: first[j][3])
        if math.isfinite(first[best][3]):
            rows.append(run(batch, lrs[best]))
    a = np.array(rows)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4] > 0


def old_t_interval(batch, low, high, level=0.9):
    """The fit the report had: log S = log S_min + log(1 + B_noise / B) by least squares through each batch's
    fewest steps (the best point), its t-interval on the residuals, ends past the batches open; (kind, lo, hi)."""
    from scipy.optimize import least_squares
    from scipy.special import stdtrit

    ok = np.isfinite(high)
    bs = np.unique(batch[ok])
    if len(bs) < 3:
        return "none", 0.0, math.inf
    s = np.array([high[ok & (batch == x)].min() for x in bs])
    design = np.stack([np.ones_like(bs), 1.0 / bs], axis=1) / s[:, None]
    (a, cc), *_ = np.linalg.lstsq(design, np.ones_like(s), rcond=None)
    if cc <= 0 or (a > 0 and cc / a < bs[0]):
        return "upper", 0.0, bs[0]
    if a <= 0 or cc / a > bs[-1]:
        return "lower", bs[-1], math.inf
    res = least_squares(lambda p: p[0] + np.log1p(np.exp(p[1]) / bs) - np.log(s), [math.log(a), math.log(cc / a)])
    dof = len(bs) - 2
    cov = float(res.fun @ res.fun) / dof * np.linalg.pinv(res.jac.T @ res.jac)
    q = float(stdtrit(dof, 0.95 if level == 0.9 else 0.5 + level / 2))
    se = math.sqrt(max(cov[1, 1], 0.0))
    lo, hi = math.exp(res.x[1] - q * se), math.exp(res.x[1] + q * se)
    return "interval", lo if lo >= bs[0] else 0.0, hi if hi <= bs[-1] else math.inf


def covers(kind: str, lo: float, hi: float, truth: float) -> bool:
    """Strict scoring: the truth inside the open interval (a tie is a miss)."""
    return lo < truth < hi


def false_bound(kind: str, lo: float, hi: float, truth: float) -> bool:
    return kind in ("lower", "upper") and not lo < truth < hi


def run_regime(r: Regime, studies: int, seed: int = 0, old: bool = False, censor_diverged: bool = False,
               words: bool = False, hold_knee: bool = False) -> dict:
    """Coverage over `studies` drawn from `r`; `old`: the old t-interval beside it; `censor_diverged`: diverged
    trials read as right-censored steps (how the fit read them before they bounded lr*); `words`: the knee and
    the doubling words scored too (`score_words`); `hold_knee`: the knee held at McCandlish's g = 1 and the
    words as they were said before it was fitted (B_crit / 9 and 4 B_crit wherever B_crit was two-sided)."""
    from lbscale.report.steps_model import Observations, fit

    rng = np.random.default_rng(seed)
    rows = []
    quantities = ("b_crit", "alpha", "knee", "saves_45", "saves_10") if words else ("b_crit", "alpha")
    for _ in range(studies):
        batch, lr, low, high, diverged = simulate(rng, r)
        f = fit(Observations.of(batch, lr, low, high, None if censor_diverged else diverged),
                quantities=quantities, knee=False if hold_knee else None)
        row = {"words": held_words(f, r) if hold_knee else score_words(f, r)} if words else {}
        for q, truth in (("b_crit", r.truth), ("alpha", r.alpha)):
            e = f.estimates.get(q) if f is not None else None
            kind, lo, hi = (e.kind, e.lo, e.hi) if e is not None and e.lo is not None else ("none", -math.inf,
                                                                                             math.inf)
            row[q] = (kind, lo, hi, covers(kind, lo, hi, truth), false_bound(kind, lo, hi, truth))
        row["lack"] = lack_outcome(f)
        if old:
            k, lo, hi = old_t_interval(batch, low, high)
            row["old"] = (k, lo, hi, covers(k, lo, hi, r.truth), false_bound(k, lo, hi, r.truth))
        rows.append(row)
    return summarise(rows)


def score_words(f, r: Regime) -> dict:
    """The knee's interval against the truth's g, and the doubling words as the verdict would say them: where
    `thresholds_supported`, "saves >= 45% below X, under 10% above Y", true where both intervals hold the truth's
    thresholds (roots of its own curve); otherwise each measured step between neighbouring batches with its
    saving's interval, scored as intervals against the truth's saving there."""
    from lbscale.report.steps_model import doublings, thresholds_supported

    if f is None:
        return {"fitted": False}
    e = f.estimates.get("knee")
    out = {"fitted": True, "knee_fitted": e is not None,
           "knee_covered": e is not None and covers(e.kind, e.lo, e.hi, r.knee), "printed": False,
           "knee_word_false": e is not None and e.kind != "none" and ((e.lo > 1 and r.knee <= 1) or
                                                                      (e.hi < 1 and r.knee >= 1))}
    if thresholds_supported(f.estimates):
        x, y = math.exp(r.batch_saving(0.45)), math.exp(r.batch_saving(0.10))
        a, b = f.estimates["saves_45"], f.estimates["saves_10"]
        out.update(printed=True, true=covers(a.kind, a.lo, a.hi, x) and covers(b.kind, b.lo, b.hi, y))
    else:
        steps = doublings(f)
        out["steps"] = [covers(d["kind"], d["saving_lo"], d["saving_hi"],
                               float(1 - r.curve(d["b2"]) / r.curve(d["b1"]))) for d in steps]
    return out


def held_words(f, r: Regime) -> dict:
    """The words as the verdict said them with the knee held at 1: "saves >= 45% below ~B_crit / 9, under 10%
    above ~4 B_crit" with B_crit's interval so scaled, wherever B_crit was two-sided."""
    if f is None:
        return {"fitted": False}
    e = f.estimates["b_crit"]
    out = {"fitted": True, "knee_fitted": False, "printed": e.kind == "interval", "steps": []}
    if out["printed"]:
        x, y = math.exp(r.batch_saving(0.45)), math.exp(r.batch_saving(0.10))
        out["true"] = covers("interval", e.lo / 9, e.hi / 9, x) and covers("interval", 4 * e.lo, 4 * e.hi, y)
    return out


def words_summary(rows) -> dict:
    w = [row["words"] for row in rows if row["words"].get("fitted")]
    printed = [x for x in w if x["printed"]]
    steps = [c for x in w if not x["printed"] for c in x["steps"]]
    knee = [x["knee_covered"] for x in w if x["knee_fitted"]]
    return {"printed": len(printed) / max(len(rows), 1),
            "words_true": float(np.mean([x["true"] for x in printed])) if printed else math.nan,
            "steps_covered": float(np.mean(steps)) if steps else math.nan, "steps_statements": len(steps),
            "knee_covered": float(np.mean(knee)) if knee else math.nan, "knee_fitted": len(knee),
            "knee_word_false": float(np.mean([x.get("knee_word_false", False) for x in w])) if w else math.nan}


def lack_outcome(f) -> tuple[bool, bool, bool]:
    """(tested, rejected at 10% by the fit's F reference, rejected by chi^2 on the same deviance) of a fit's
    lack-of-fit test; (False, False, False) without a fit."""
    from scipy.stats import chi2

    lack = f.extra["lack_of_fit"] if f is not None else {}
    tested = bool(np.isfinite(lack.get("p", math.nan)))
    return tested, bool(lack.get("rejected")), tested and float(chi2.sf(lack["deviance"], lack["dof"])) < 0.1


def lack_of_fit_rate(r: Regime, studies: int, seed: int = 0) -> dict:
    """The lack-of-fit test's rejection rate over studies drawn from `r` (the curve itself): a fit without
    profiles; 'rejected' and 'rejected_chi2' are shares of the studies where it was tested."""
    from lbscale.report.steps_model import Observations, fit

    rng = np.random.default_rng(seed)
    rows = [lack_outcome(fit(Observations.of(*simulate(rng, r)), quantities=())) for _ in range(studies)]
    return _lack_rates(rows) | {"studies": studies}


def _lack_rates(rows) -> dict:
    tested = [row for row in rows if row[0]]
    return {"tested": len(tested), "rejected": float(np.mean([row[1] for row in tested])) if tested else math.nan,
            "rejected_chi2": float(np.mean([row[2] for row in tested])) if tested else math.nan}


def run_ratio(r_a: Regime, r_b: Regime, pairs: int, seed: int = 99) -> dict:
    """Coverage of B_crit's ratio between two arms (`steps_model.ratio`), each drawn from its regime."""
    from lbscale.report.steps_model import Observations, fit, ratio

    rng = np.random.default_rng(seed)
    truth = r_a.truth / r_b.truth
    hits, bounds, ratios = [], [], []
    for _ in range(pairs):
        fa, fb = (fit(Observations.of(*simulate(rng, r)), quantities=("b_crit",)) for r in (r_a, r_b))
        e = ratio(fa, fb)
        hits.append(covers(e.kind, e.lo, e.hi, truth))
        bounds.append(false_bound(e.kind, e.lo, e.hi, truth))
        ratios.append(e.hi / e.lo if e.lo > 0 else math.inf)
    return {"covered": float(np.mean(hits)), "false_bounds": float(np.mean(bounds)),
            "ratio": float(np.median(ratios)), "pairs": pairs, "truth": truth}


def _ratio(rows, q):
    ratios = [hi / lo if lo > 0 else math.inf for kind, lo, hi, *_ in (row[q] for row in rows)]
    return float(np.median(ratios))


def summarise(rows) -> dict:
    out = {"studies": len(rows)}
    if "words" in rows[0]:
        out.update({f"words_{k}": v for k, v in words_summary(rows).items()})
    if "lack" in rows[0]:
        lack = _lack_rates([row["lack"] for row in rows])
        out.update({"lack_tested": lack["tested"], "lack_rejected": lack["rejected"]})
    for q in ("b_crit", "alpha", "old"):
        if q not in rows[0]:
            continue
        out[f"{q}_covered"] = float(np.mean([row[q][3] for row in rows]))
        out[f"{q}_false_bounds"] = float(np.mean([row[q][4] for row in rows]))
        out[f"{q}_unresolved"] = float(np.mean([row[q][0] == "none" for row in rows]))
        stated = [row[q][3] for row in rows if row[q][0] != "none"]  # covered among the studies that say something
        out[f"{q}_covered_stated"] = float(np.mean(stated)) if stated else math.nan
        out[f"{q}_bounds"] = float(np.mean([row[q][0] in ("lower", "upper") for row in rows]))
        if q != "alpha":
            out[f"{q}_ratio"] = _ratio(rows, q)
        else:
            out["alpha_width"] = float(np.median([row[q][2] - row[q][1] for row in rows]))
    return out


def mlperf_runs(t) -> tuple[list, list, list]:
    """Every reference run of a published RCP table as (batch, low, high) steps: converged after e whole epochs,
    so between (e - 1) and e epochs of train_samples / batch steps each."""
    b, lo, hi = [], [], []
    for r in t.itertuples():
        for e in map(float, str(r.epochs_per_run).split()):
            b.append(r.global_batch)
            lo.append((e - 1) * r.train_samples / r.global_batch)
            hi.append(e * r.train_samples / r.global_batch)
    return b, lo, hi


def mlperf() -> str:
    """Real replicates: MLPerf's ResNet-50 reference convergence points (10-28 runs per batch, the LR tuned per
    batch; each run's steps in ((e - 1), e] epochs): the model's B_crit with its interval beside the old fit's
    point and t-interval through the per-batch mean steps."""
    from scipy.optimize import least_squares

    from lbscale.report import published
    from lbscale.report.steps_model import Observations, fit

    t, _ = published("mlperf-resnet50")
    b, lo, hi = mlperf_runs(t)
    model = fit(Observations.of(b, None, lo, hi))
    e, lack = model.estimates["b_crit"], model.extra["lack_of_fit"]
    bs = t["global_batch"].to_numpy(float)
    means = (t["epochs_to_target"] * t["train_samples"]).to_numpy(float) / bs
    point = math.exp(least_squares(lambda p: p[0] + np.log1p(np.exp(p[1]) / bs) - np.log(means), [7.0, 10.0]).x[1])
    _, old_lo, old_hi = old_t_interval(bs, means, means)
    return (f"MLPerf ResNet-50 reference convergence points ({len(b)} runs at {len(bs)} batches): B_crit "
            f"{e.value:,.0f} [{e.lo:,.0f}, {e.hi:,.0f}] ({e.kind}; lack of fit p = {lack['p']:.1g}, F on "
            f"{lack['dof']} and {lack['pure_dof']} dof, rejected: {lack['rejected']}); the old fit through the "
            "per-batch means: "
            f"{point:,.0f} [{old_lo:,.0f}, {old_hi:,.0f}]")


def main():
    studies = int(os.environ.get("LBSCALE_COVERAGE_STUDIES", "1000"))
    print(f"verdict coverage: {studies} studies per regime, nominal 90%, strict scoring (a tie is a miss)")
    print("| regime | B_crit covered | covered when stated | false two-sided | bounds / unresolved | false bounds | "
          "median hi/lo | alpha covered | alpha width | lack of fit rejected (10%) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(REGIMES):
        t0 = time.perf_counter()
        s = run_regime(r, studies, seed=i, old=True)
        two_sided = 1 - s["b_crit_covered"] - s["b_crit_false_bounds"]  # the misses that were not bounds
        print(f"| {r.name} | {100 * s['b_crit_covered']:.1f}% | {100 * s['b_crit_covered_stated']:.1f}% | "
              f"{100 * two_sided:.1f}% | {100 * s['b_crit_bounds']:.1f}% / "
              f"{100 * s['b_crit_unresolved']:.1f}% | {100 * s['b_crit_false_bounds']:.1f}% | "
              f"{s['b_crit_ratio']:.2f} | {100 * s['alpha_covered']:.1f}% | {s['alpha_width']:.2f} | "
              f"{100 * s['lack_rejected']:.1f}% of {s['lack_tested']} | {time.perf_counter() - t0:.0f} |",
              flush=True)
        if "old_covered" in s:
            print(f"| (the old t-interval, same studies) | {100 * s['old_covered']:.1f}% | | | "
                  f"{100 * s['old_bounds']:.1f}% / {100 * s['old_unresolved']:.1f}% | "
                  f"{100 * s['old_false_bounds']:.1f}% | {s['old_ratio']:.2f} | | | | |", flush=True)
        if r.diverge is not None:
            t0 = time.perf_counter()
            c = run_regime(r, studies, seed=i, censor_diverged=True)
            print(f"| (diverged read as right-censored steps, same studies) | {100 * c['b_crit_covered']:.1f}% | | | "
                  f"{100 * c['b_crit_bounds']:.1f}% / {100 * c['b_crit_unresolved']:.1f}% | "
                  f"{100 * c['b_crit_false_bounds']:.1f}% | {c['b_crit_ratio']:.2f} | "
                  f"{100 * c['alpha_covered']:.1f}% | {c['alpha_width']:.2f} | {100 * c['lack_rejected']:.1f}% of "
                  f"{c['lack_tested']} | {time.perf_counter() - t0:.0f} |", flush=True)
    pairs = max(studies // 3, 50)
    t0 = time.perf_counter()
    r = run_ratio(Regime("arm a", b_crit=400.0, sigma=(0.05, 0.5)), REGIMES[0], pairs)
    print(f"| ratio of two arms' B_crit (400 with sigma ~ sqrt(B) over the control's 128; {pairs} pairs) | "
          f"{100 * r['covered']:.1f}% | | | | {100 * r['false_bounds']:.1f}% | {r['ratio']:.2f} | | | | "
          f"{time.perf_counter() - t0:.0f} |", flush=True)
    print(mlperf(), flush=True)
    knee_main(max(studies // 3, 100))


def knee_main(studies: int | None = None):
    """The knee regimes (issue 53 item 2): B_crit (the batch where a doubling saves 25%) and the knee's coverage,
    the doubling words where printed and whether true, the measured steps' savings where not; beside each, the
    same studies with the knee held at McCandlish's g = 1 and the words as they were said before."""
    studies = studies or int(os.environ.get("LBSCALE_KNEE_STUDIES", os.environ.get("LBSCALE_COVERAGE_STUDIES",
                                                                                       "300")))
    print(f"knee regimes: {studies} studies per regime, nominal 90%, strict scoring (a tie is a miss)")
    print("| regime (truth) | B_crit covered when stated | bounds / unresolved | false bounds | median hi/lo | "
          "knee covered | "
          "words printed | words true | measured steps covered | lack of fit rejected (10%) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(KNEE_REGIMES):
        for hold in (False, True):
            t0 = time.perf_counter()
            s = run_regime(r, studies, seed=300 + i, words=True, hold_knee=hold)
            name = (f"{r.name} (B_crit {r.truth:.0f}, g {r.knee:g})" if not hold else
                    "(the knee held at g = 1, the old words, same studies)")
            steps = (f"{100 * s['words_steps_covered']:.1f}% of {s['words_steps_statements']}"
                     if s["words_steps_statements"] else "-")
            knee = f"{100 * s['words_knee_covered']:.1f}%" if s["words_knee_fitted"] else "-"
            true = f"{100 * s['words_words_true']:.1f}%" if s["words_printed"] else "-"
            print(f"| {name} | {100 * s['b_crit_covered_stated']:.1f}% | {100 * s['b_crit_bounds']:.1f}% / "
                  f"{100 * s['b_crit_unresolved']:.1f}% | {100 * s['b_crit_false_bounds']:.1f}% | "
                  f"{s['b_crit_ratio']:.2f} | {knee} | {100 * s['words_printed']:.1f}% | {true} | {steps} | "
                  f"{100 * s['lack_rejected']:.1f}% of {s['lack_tested']} | {time.perf_counter() - t0:.0f} |",
                  flush=True)


# issue 68 items 11-12: where thin data leave the knee open. The 4-batch regime and B_crit past the batches of
# REGIMES / LACK_REGIMES, the asymmetric bowls, the reviewer's soft knee, and a study as `make demo`'s template runs
# (bench_designed: batches 16..512, S_min 30, ASHA from 4,096 samples, evaluations 15% apart on a 256-image subset)
EDGE_REGIMES = [REGIMES[7], REGIMES[4], Regime("B_crit 2048, above the batches 32-512", b_crit=2048.0), REGIMES[9],
                REGIMES[10], KNEE_REGIMES[0], KNEE_REGIMES[1], KNEE_REGIMES[2]]


def edges_main():
    """B_crit's coverage, width and false bounds and the knee's words ('sharper' / 'softer' than McCandlish's,
    false where the knee's interval excludes 1 on the wrong side of the truth) in EDGE_REGIMES and the template's
    designed studies, with the knee held within `likelihood.KNEE_LIMITS`."""
    from dataclasses import replace

    from benchmarks import bench_designed as bd
    from lbscale.report.likelihood import KNEE_LIMITS

    studies = int(os.environ.get("LBSCALE_EDGE_STUDIES", "200"))
    print(f"thin-data regimes: {studies} studies each, nominal 90% (the knee's words at 95%), strict scoring; knees "
          f"within [{math.exp(KNEE_LIMITS[0]):g}, {math.exp(KNEE_LIMITS[1]):g}]")
    print("| regime (truth) | B_crit covered when stated | bounds / unresolved | false bounds | median hi/lo | "
          "knee covered | knee's words false | lack of fit rejected (10%) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(EDGE_REGIMES):
        t0 = time.perf_counter()
        s = run_regime(r, studies, seed=600 + i, words=True)
        knee = f"{100 * s['words_knee_covered']:.1f}%" if s["words_knee_fitted"] else "-"
        print(f"| {r.name} (B_crit {r.truth:.0f}, g {r.knee:g}) | {100 * s['b_crit_covered_stated']:.1f}% | "
              f"{100 * s['b_crit_bounds']:.1f}% / {100 * s['b_crit_unresolved']:.1f}% | "
              f"{100 * s['b_crit_false_bounds']:.1f}% | {s['b_crit_ratio']:.2f} | {knee} | "
              f"{100 * s['words_knee_word_false']:.1f}% | {100 * s['lack_rejected']:.1f}% of {s['lack_tested']} | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)
    template = replace(bd.BASE, name="make demo's template: batches 16..512, S_min 30, ASHA from 4,096 samples",
                       batches=(16, 32, 64, 128, 256, 512), s_min=30.0, grid=100 ** 0.2, samples_budget=2.2)
    design = bd.Design("the template's", spacing=0.15, subset=256, whole=1500, rung=4096.0, first="one",
                       budget="top")
    t0 = time.perf_counter()
    s = bd.run(template, bd.Curves(), design, studies, seed=650)
    print(f"| {template.name} (B_crit {template.truth:.0f}, g 1) | {100 * s['covered_stated']:.1f}% | "
          f"{100 * s['bounds']:.1f}% / {100 * s['unresolved']:.1f}% | {100 * s['false_bounds']:.1f}% | "
          f"{s['ratio']:.2f} | - | - | - | {time.perf_counter() - t0:.0f} |", flush=True)


def lack_of_fit_main():
    """The lack-of-fit test's rejection rate on correctly specified studies, F (the fit's) and chi^2 (before)."""
    studies = int(os.environ.get("LBSCALE_COVERAGE_STUDIES", "1000"))
    print(f"lack of fit on studies drawn from the curve itself: {studies} per regime, nominal 10%")
    print("| regime | tested | rejected (F) | rejected (chi^2 on the same deviance) | seconds |")
    print("|---|---|---|---|---|")
    for i, r in enumerate(LACK_REGIMES):
        t0 = time.perf_counter()
        s = lack_of_fit_rate(r, studies, seed=200 + i)
        print(f"| {r.name} | {s['tested']} | {100 * s['rejected']:.1f}% | {100 * s['rejected_chi2']:.1f}% | "
              f"{time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    {"lack_of_fit": lack_of_fit_main, "knee": knee_main, "edges": edges_main}.get(sys.argv[1] if sys.argv[1:] else "",
                                                                                main)()
