"""One model over every trial of an arm (a variant x warm-up): the steps to a target as a function of the batch,
the learning rate and the seed, fitted by maximum likelihood with censored trials, and profile-likelihood
intervals for the critical batch B_crit, the LR exponent alpha, S_min and E_min = S_min B_crit.

    log S(B, lr) = log S_min + log(1 + B_crit / B) + g(log lr - log lr*(B)) + e,     e ~ N(0, sigma(B)^2)
    log lr*(B)   = l0 + alpha (log B - x0)                                           (a power law)
    g(d)         = log(1 + k d^2)                                                    (the LR bowl, k > 0)
    log sigma(B) = v0 + v1 (log B - x0)                                              (noise that grows with B)

S(B) = S_min (1 + B_crit / B) is McCandlish et al. 2018's eq. 2.11 ("An Empirical Model of Large-Batch Training");
the bowl multiplies the steps by 1 + k d^2 at an LR d (natural log) off the optimum, the shape Shallue et al. 2019
measure about each batch's best LR. x0 is the geometric centre of the batches (it decorrelates l0 and alpha). A
study with one LR per batch (a rule-based grid) has no bowl: the LR was not tuned, and the model says so.

A trial enters as what it measured: a crossing of the target between two evaluations is interval-censored
(the steps lie in (previous evaluation, the evaluation that met it]); a trial that stopped without reaching the
target (pruned, out of budget) is right-censored at its last evaluation (it needed more steps); a trial that
diverged measured no steps, only that its LR lies above the stability edge at its batch: it enters as the
constraint lr*(B) < its LR (through the lr* law, at every batch between). The likelihood, its minimiser and the
profile search live in `report/likelihood.py`. Pure functions: arrays in,
`ModelFit` out (`steps_at`: a DataFrame). docs/scaling-model.md has the equations and the assumptions.

Intervals: the profile likelihood of each quantity, its deviance compared with n log(1 + t^2 / (n - p)) (the
exact small-sample threshold of a Gaussian linear model with n observations and p parameters: chi^2 of the
maximum-likelihood variance would be too narrow at 20-40 trials) at the two-sided `level`. An end whose deviance
never reaches the threshold within a factor ~1,000 past the measured batches is open; nothing is clipped to the
measured span. Coverage by simulation: benchmarks/bench_verdict_coverage.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lbscale.analysis.intervals import LEVEL, t_quantile
from lbscale.report.likelihood import (KNEE_LIMITS, REACH, Fitter, Observations, Problem, curve_part, knee_shift,
                                       log_b_crit_for, log_b_crit_for_ratio, log_s_min_for, one_blas_thread, profile,
                                       threshold)

__all__ = ["LEVEL", "Observations", "Estimate", "ModelFit", "fit", "threshold", "steps_at", "ratio",
           "doubling_saving", "curve", "steps_for_samples", "doublings", "thresholds_supported", "VERSION"]

# the model's version: rounds decided by an older one are decided again (sweep.rounds' settings check); 2: the
# knee g free (B_crit the batch where a doubling saves 25%)
VERSION = 2
ALPHA_REACH = 4.0  # alpha's profile is searched within +- 4 of its estimate
NAMES = ("log_s_min", "log_b_crit", "lr0", "alpha", "log_k", "v0", "v1", "log_g")
MIN_KNEE_BATCHES = 4  # reached batches before the knee is fitted (3 curve parameters and a degree of freedom)
MIN_KNEE_DOF = 3  # and residual degrees of freedom left with it
# the doubling words: a doubling saves >= 45% of the steps below one batch, under 10% above another
WORDS = {"saves_45": 0.45, "saves_10": 0.10}


@dataclass(frozen=True)
class Estimate:
    """A quantity with its profile-likelihood interval. kind: 'interval' (both ends finite), 'lower' (the data
    bound it from below only: lo finite, hi open), 'upper' (from above only), 'none' (not resolved, or no fit:
    `reason`)."""

    name: str
    value: float | None
    lo: float | None
    hi: float | None
    kind: str
    reason: str = ""


@dataclass
class ModelFit:
    """The fitted model: parameters (`NAMES`, fewer without the bowl or the noise slope), the estimates with
    their intervals, what the fit rests on."""

    params: dict
    estimates: dict
    n: int  # observations that reached the target (exact or interval-censored)
    censored: int  # stable trials that did not reach it (right-censored)
    p: int  # free parameters
    bowl: bool
    batches: tuple  # the distinct batches that reached the target
    all_batches: tuple
    threshold: float
    nll: float
    x0: float
    extra: dict = field(default_factory=dict)
    unstable: int = 0  # trials that diverged: each bounds lr* at its batch from above, no steps

    def steps(self, batch) -> np.ndarray:
        """S(B) at the optimal LR: S_min (1 + (B_c / B)^g)^(1 / g) (S_min (1 + B_crit / B) at g = 1)."""
        theta = self.extra["theta"]
        return curve(batch, math.exp(theta[0]), math.exp(theta[1]), math.exp(theta[7]))

    @property
    def knee(self) -> float:
        """g: 1 McCandlish's knee, below 1 softer, above sharper (1 where it was held there)."""
        return math.exp(self.params.get("log_g", 0.0))

    def lr_star(self, batch) -> np.ndarray | None:
        if not self.bowl:
            return None
        b = np.asarray(batch, dtype=float)
        return np.exp(self.params["lr0"] + self.params["alpha"] * (np.log(b) - self.x0))

    def sigma(self, batch) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        return np.exp(self.params["v0"] + self.params.get("v1", 0.0) * (np.log(b) - self.x0))


# --- fitting ---------------------------------------------------------------------------------------------------


def _start(obs: Observations, problem: Problem, bowl: bool) -> list[np.ndarray]:
    """Starting points: per batch the fewest steps any trial reached the target in (and its LR), lr* from those
    LRs, and a few B_crit values across the batches (S_min by the mean there)."""
    theta = np.zeros(len(NAMES))
    reached = obs.reached
    batches = np.unique(obs.batch[reached])
    best_steps, best_lr = [], []
    for b in batches:
        m = reached & (obs.batch == b)
        steps = np.where(obs.low[m] > 0, np.sqrt(np.maximum(obs.low[m], 1e-9) * obs.high[m]), obs.high[m] * 0.7)
        j = int(np.argmin(steps))
        best_steps.append(steps[j])
        best_lr.append(obs.lr[m][j] if bowl else 1.0)
    lb, ls_ = np.log(batches), np.log(best_steps)
    if bowl:
        if len(batches) >= 2:
            slope, icpt = np.polyfit(lb - problem.x0, np.log(best_lr), 1)
        else:
            slope, icpt = 0.5, float(np.log(best_lr[0]))
        theta[2], theta[3], theta[4] = icpt, float(np.clip(slope, -2, 2)), math.log(0.5)
    theta[5] = math.log(0.2)
    starts = []
    for lbc in np.linspace(lb.min() - 2, lb.max() + 2, 5):
        t = theta.copy()
        t[1] = lbc
        t[0] = float(np.mean(ls_ - np.logaddexp(0.0, lbc - lb)))
        starts.append(t)
    return starts


QUANTITIES = ("b_crit", "alpha", "s_min", "e_min", "knee", "saves_45", "saves_10")


@one_blas_thread
def fit(obs: Observations, level: float = LEVEL, quantities=QUANTITIES, noise_slope: bool | None = None,
        knee: bool | None = None) -> ModelFit | None:
    """The model's maximum-likelihood fit to one arm with profile intervals of `quantities`; None where fewer
    than two batches reached the target (nothing to fit a curve through). The bowl is fitted where the arm
    searched more than one LR at a batch; the noise slope v1 where three batches or more
    each have two observations that reached it (else one sigma for all); the knee g where `MIN_KNEE_BATCHES`
    batches reached it and `MIN_KNEE_DOF` residual degrees of freedom are left with it (else g = 1,
    McCandlish's; the knee and the doubling thresholds are then not estimated)."""
    reached = obs.reached
    batches = np.unique(obs.batch[reached])
    if len(batches) < 2:
        return None
    # a search: more than one LR at some batch, whether or not each reached the target (a trial that missed it at
    # another LR still says the steps were more there)
    bowl = obs.lr is not None and any(len(np.unique(obs.lr[obs.batch == b])) > 1 for b in np.unique(obs.batch))
    if obs.lr is not None and not bowl:  # no lr* for an unstable trial to bound: it carries nothing
        obs = obs.steps_only()
    if noise_slope is None:
        noise_slope = sum(int((reached & (obs.batch == b)).sum() >= 2) for b in batches) >= 3
    if knee is None:  # 4 batches, and trials to spare for it: a knee from no residual freedom is no test
        knee = (len(batches) >= MIN_KNEE_BATCHES
                and int(reached.sum()) - int(Problem(obs, bowl, noise_slope, knee=True).free.sum()) >= MIN_KNEE_DOF)
    problem = Problem(obs, bowl, noise_slope, knee=knee)
    span = (float(np.log(batches.min())), float(np.log(batches.max())))
    fitter = Fitter(problem, span)
    best = None
    starts = sorted(_start(obs, problem, bowl), key=lambda t: problem.nll(t, grad=False))
    for s in starts[:2]:  # refined from the two likeliest starting points
        val, t = fitter.minimise(s)
        if best is None or val < best[0]:
            best = (val, t)
    nll_hat, theta = best
    n, p = int(reached.sum()), int(problem.free.sum())
    thr = threshold(n, p, level)
    lack = lack_of_fit(obs, problem, theta, nll_hat, bowl, noise_slope, span)
    curve_thr = curve_threshold(n, p, lack, level)
    # the doubling words are one statement of two thresholds: each at (1 + level) / 2, so both hold at `level`
    words_thr = curve_threshold(n, p, lack, (1 + level) / 2)
    lr = lr_forms(obs, problem, theta, nll_hat, noise_slope, span, level) if bowl else None
    params = {name: float(v) for name, v, f in zip(NAMES, theta, problem.free) if f}
    result = ModelFit(params, {}, n, int(obs.censored.sum()), p, bowl, tuple(float(b) for b in batches),
                      tuple(float(b) for b in np.unique(obs.batch)), thr or math.nan, nll_hat, problem.x0,
                      extra={"lack_of_fit": lack, "curve_threshold": curve_thr, "fitter": fitter, "theta": theta,
                             "lr_forms": lr},
                      unstable=0 if obs.unstable is None else int(obs.unstable.sum()))
    for q in sorted(quantities, key=lambda q: q in WORDS):  # the knee before the thresholds that rest on it
        if (q == "alpha" and not bowl) or (q in ("knee", *WORDS) and not knee):
            continue
        if q in WORDS and "knee" in quantities and result.estimates["knee"].kind != "interval":
            continue  # the verdict says no thresholds from an unresolved knee: their profiles would go unread
        # the knee's words ('sharper', 'softer' than McCandlish's) are one-sided claims either way: its interval at
        # (1 + level) / 2, as the doubling words'
        result.estimates[q] = _estimate(q, fitter, theta, nll_hat, thr if q == "alpha" else words_thr
                                        if q in (*WORDS, "knee") else curve_thr, span, n, p)
    _open_with_b_crit(result.estimates)
    return result


def curve_threshold(n: int, p: int, lack: dict, level: float) -> float | None:
    """The deviance threshold of the curve's quantities: `threshold`, and where the lack-of-fit test rejected the
    curve (the batches scatter about it more than the noise allows), a profile deviance n log(1 + dRSS / RSS0)
    inside dRSS <= phi (RSS0 / n) t^2, t on the scatter's dof, if that is larger."""
    thr = threshold(n, p, level)
    if thr is None or not lack["rejected"]:
        return thr
    return max(thr, n * math.log1p(lack["phi"] * t_quantile(lack["dof"], level) ** 2 / n))


def _open_with_b_crit(estimates: dict) -> None:
    """S_min -> 0 as B_crit -> inf (perfect scaling: only S_min B_crit is measured) and E_min -> 0 as B_crit -> 0
    (no gain from the batch: only S_min is): where B_crit's interval is open on that side, so is theirs (the search
    for their ends stops at B_crit's own search limit, which would give a finite end)."""
    crit = estimates.get("b_crit")
    for q, side in (("s_min", "hi"), ("e_min", "lo")):
        e = estimates.get(q)
        if crit is None or e is None or e.kind == "none":
            continue
        if (side == "hi" and crit.kind in ("lower", "none")) or (side == "lo" and crit.kind in ("upper", "none")):
            estimates[q] = Estimate(q, e.value, 0.0, e.hi, "upper" if math.isfinite(e.hi) else "none", e.reason)


MIN_LR_BATCHES = 6  # reached batches before the LR's form is tested at all


def lr_forms(obs: Observations, problem: Problem, theta: np.ndarray, nll_hat: float, slope: bool, span,
             level: float) -> dict:
    """Which form of lr*(B) the data support: the power law c B^alpha and the saturating eps_max / (1 + B_lr / B)
    (McCandlish et al.'s eps_opt), each tested for lack of fit against a free lr* per batch (the rest of the model
    alike; deviance on batches - 2 dof, chi^2 at 10%), with at least `MIN_LR_BATCHES` reached batches and 3 dof of
    replicates. `named`: the form whose rival is rejected while it is not; None (not distinguishable) otherwise.
    With the saturating form, B_lr and its profile interval."""
    batches = np.unique(obs.batch[obs.reached])
    out = {"batches": len(batches), "named": None, "tested": False}
    free = Problem(obs, True, slope, lr_form="free", knee=problem.knee)
    if len(batches) < MIN_LR_BATCHES or int(obs.reached.sum()) - int(free.free.sum()) < 3:
        return out
    from scipy.special import chdtrc

    dof = len(batches) - 2
    lstar = theta[2] + theta[3] * (free.batches - problem.x0)
    val_free, _ = Fitter(free, span).minimise(np.concatenate([theta, lstar]))
    sat = Problem(obs, True, slope, lr_form="saturating", knee=problem.knee)
    sat_fitter = Fitter(sat, span)
    best = None
    for log_blr in np.linspace(span[0] - 1, span[1] + 2, 4):  # l0 so that lr* matches the power law at B_max
        t = theta.copy()
        t[3] = log_blr
        t[2] = theta[2] + theta[3] * (span[1] - problem.x0) + float(np.logaddexp(0.0, log_blr - span[1]))
        val, t = sat_fitter.minimise(t)
        if best is None or val < best[0]:
            best = (val, t)
    val_sat, theta_sat = best
    p_power = float(chdtrc(dof, max(2 * (nll_hat - val_free), 0.0)))
    p_sat = float(chdtrc(dof, max(2 * (val_sat - val_free), 0.0)))
    named = ("power" if p_sat < 0.1 <= p_power else "saturating" if p_power < 0.1 <= p_sat else None)
    out.update({"tested": True, "dof": dof, "p_power": p_power, "p_saturating": p_sat, "named": named})
    if named == "saturating":
        thr = threshold(int(obs.reached.sum()), int(sat.free.sum()), level)
        hat = float(theta_sat[3])
        lo, hi = (None, None) if thr is None else profile(
            sat_fitter, theta_sat, val_sat, thr, hat, lambda v: {"fixed": {3: v}}, 0.3,
            (span[0] - REACH, span[1] + REACH))
        out.update({"b_lr": math.exp(hat), "b_lr_lo": 0.0 if lo is None else math.exp(lo),
                    "b_lr_hi": math.inf if hi is None else math.exp(hi),
                    "b_lr_kind": "interval" if lo is not None and hi is not None else
                    "lower" if lo is not None else "upper" if hi is not None else "none",
                    "eps_max": math.exp(theta_sat[2])})
    return out


def lack_of_fit(obs: Observations, problem: Problem, theta: np.ndarray, nll_hat: float, bowl: bool,
                slope: bool, span) -> dict:
    """The curve S_min (1 + B_crit / B) against a free level of log S at each batch (the rest of the model
    alike), where the free levels leave at least 3 degrees of freedom for the noise within the batches
    (replicates): the classical lack-of-fit F on (batches - 2, pure) dof, rejected at 10%. With Gaussian log steps
    the deviance is D = n log(RSS0 / RSS1), so F = (exp(D / n) - 1) pure / dof (chi^2 on D would ignore that
    sigma is estimated from the same trials: it rejected a true curve 20-24% of the time at 10%); censored trials
    make it approximate (benchmarks/bench_verdict_coverage.py measures its rate). Where it is rejected the
    batches scatter about the curve more than the trials within them allow (a shared deviation per batch, or a
    curve of another shape), and the curve's intervals take the scatter's scale (quasi-likelihood): phi, the
    lack-of-fit mean square (RSS0 - RSS1) / dof over the fit's variance RSS0 / n, with t on the same dof."""
    from scipy.special import fdtrc

    dof = len(problem.batches[np.isin(problem.batches, np.log(np.unique(obs.batch[obs.reached])))]) - \
        (3 if problem.knee else 2)
    free = Problem(obs, bowl, slope, levels=True)
    n = int(obs.reached.sum())
    pure = n - int(free.free.sum())  # what is left for the noise within the batches
    if dof < 1 or pure < 3:  # no replicates to judge the scatter by: the curve's own residuals are the noise
        return {"dof": max(dof, 0), "pure_dof": max(pure, 0), "deviance": math.nan, "F": math.nan, "p": math.nan,
                "phi": 1.0, "rejected": False}
    start = np.concatenate([theta, theta[0] + curve_part(theta, free.batches)[0]])
    val, _ = Fitter(free, span).minimise(start)
    deviance = max(2 * (nll_hat - val), 0.0)
    f = math.expm1(deviance / n) * pure / dof
    pval = float(fdtrc(dof, pure, f))
    phi = -math.expm1(-deviance / n) * n / dof  # (RSS0 - RSS1) / dof over RSS0 / n; ~ D / dof where D << n
    return {"dof": dof, "pure_dof": pure, "deviance": deviance, "F": f, "p": pval, "phi": max(1.0, phi),
            "rejected": pval < 0.1}


def _estimate(q: str, fitter: Fitter, theta: np.ndarray, nll_hat: float, thr: float | None,
              span: tuple[float, float], n: int, p: int) -> Estimate:
    if q == "e_min":
        hat, scale, exp = float(theta[0] + theta[1] + knee_shift(theta[7])[0]), 0.2, True
        limits = (hat - 2 * REACH, hat + 2 * REACH)

        def constrain(v):
            return {"solve": (0, log_s_min_for(v, None))}
    elif q in WORDS:  # the batch where a doubling saves WORDS[q] of the steps
        share = WORDS[q]
        hat = float(theta[1] + knee_shift(theta[7])[0] - knee_shift(theta[7], share)[0])
        scale, exp, limits = 0.3, True, (span[0] - 2 * REACH, span[1] + 2 * REACH)

        def constrain(v):
            return {"solve": (1, log_b_crit_for(v, share))}
    elif q == "knee":
        hat, scale, exp, limits = float(theta[7]), 0.2, True, KNEE_LIMITS

        def constrain(v):
            return {"fixed": {7: v}}
    else:
        j, scale, exp = {"b_crit": (1, 0.3, True), "s_min": (0, 0.2, True), "alpha": (3, 0.1, False)}[q]
        hat = float(theta[j])
        limits = {"b_crit": (span[0] - REACH, span[1] + REACH), "s_min": (hat - 2 * REACH, hat + 2 * REACH),
                  "alpha": (hat - ALPHA_REACH, hat + ALPHA_REACH)}[q]

        def constrain(v):
            return {"fixed": {j: v}}
    value = math.exp(hat) if exp else hat
    if thr is None:
        return Estimate(q, value, None, None, "none", f"{n} trials reached the target for {p} parameters: no "
                                                         "residual degree of freedom")
    lo, hi = profile(fitter, theta, nll_hat, thr, hat, constrain, scale, limits)
    f = math.exp if exp else float
    lo_v = (0.0 if exp else -math.inf) if lo is None else f(lo)
    hi_v = math.inf if hi is None else f(hi)
    kind = ("interval" if lo is not None and hi is not None else "lower" if lo is not None
            else "upper" if hi is not None else "none")
    return Estimate(q, value, lo_v, hi_v, kind)


@one_blas_thread
def steps_at(model: ModelFit, batches) -> pd.DataFrame:
    """S(B) on the curve (`ModelFit.steps`) at `batches` with its profile-likelihood interval at the model's level (the
    curve's threshold: lack of fit widens it as it does B_crit's): global_batch, steps, steps_lo, steps_hi (an end
    the data leave open is 0 or inf)."""
    fitter, theta, thr = model.extra["fitter"], model.extra["theta"], model.extra["curve_threshold"]
    rows = []
    for b in sorted(set(float(x) for x in batches)):
        lb = math.log(b)
        hat = float(theta[0] + curve_part(theta, lb)[0])
        if thr is None or not math.isfinite(thr):
            lo = hi = None
        else:
            lo, hi = profile(fitter, theta, model.nll, thr, hat,
                              lambda v, lb=lb: {"solve": (0, log_s_min_for(v, lb))}, 0.1, (hat - 2 * REACH,
                                                                                            hat + 2 * REACH))
        rows.append({"global_batch": b, "steps": math.exp(hat), "steps_lo": 0.0 if lo is None else math.exp(lo),
                     "steps_hi": math.inf if hi is None else math.exp(hi)})
    return pd.DataFrame(rows, columns=["global_batch", "steps", "steps_lo", "steps_hi"])


@one_blas_thread
def b_crit_profile(model: ModelFit, log_b: np.ndarray) -> np.ndarray:
    """The profile deviance of log B_crit at each of `log_b` (2 (min nll at B_crit fixed - the fit's nll)),
    warm-started outward from the estimate."""
    fitter, theta = model.extra["fitter"], model.extra["theta"]
    out = np.full(len(log_b), np.nan)
    hat = float(theta[1])
    order = np.argsort(np.abs(log_b - hat))
    warm_lo, warm_hi = theta, theta
    for i in order:
        side_lo = log_b[i] < hat
        val, t = fitter.minimise(warm_lo if side_lo else warm_hi, {1: float(log_b[i])})
        if side_lo:
            warm_lo = t
        else:
            warm_hi = t
        out[i] = 2 * (val - model.nll)
    return out


def _profile_grid(m: ModelFit, points: int, thr: float) -> tuple[np.ndarray, np.ndarray]:
    """log B_crit values about the arm's interval, widened for the deviance `thr` (the arm's own interval is at its
    own threshold; a profile about quadratic widens as sqrt(thr / own)) and half again, to the search limit on an
    open side; and the profile deviance at each."""
    e = m.estimates["b_crit"]
    hat = m.params["log_b_crit"]
    widen = 1.5 * math.sqrt(max(thr / m.extra["curve_threshold"], 1.0))
    lo = hat - widen * (hat - math.log(e.lo)) if e.lo and e.lo > 0 else math.log(min(m.batches)) - REACH
    hi = (hat + widen * (math.log(e.hi) - hat) if e.hi is not None and math.isfinite(e.hi)
          else math.log(max(m.batches)) + REACH)
    grid = np.unique(np.concatenate([np.linspace(lo, hi, points), [hat]]))
    return grid, b_crit_profile(m, grid)


@one_blas_thread
def ratio(a: ModelFit, b: ModelFit, level: float = LEVEL, points: int = 61) -> Estimate:
    """B_crit of arm a over arm b with the profile-likelihood interval of the ratio: each arm's profile of log
    B_crit on a grid about its interval, D(r) = min over l of D_a(l) + D_b(l - r) (independent arms; linear
    interpolation between grid points), against the larger of the two arms' curve thresholds (each from its own
    n - p and lack of fit: the narrower study does not lend the wider its precision). Where an arm's own B_crit is
    open on a side, the ratio is open on the matching side."""
    value = math.exp(a.params["log_b_crit"] - b.params["log_b_crit"])
    thr = max(a.extra["curve_threshold"] or math.inf, b.extra["curve_threshold"] or math.inf)
    ka, kb = a.estimates["b_crit"].kind, b.estimates["b_crit"].kind
    if not math.isfinite(thr) or "b_crit" not in a.estimates or "b_crit" not in b.estimates:
        return Estimate("ratio", value, 0.0, math.inf, "none")
    ga, da = _profile_grid(a, points, thr)
    gb, db = _profile_grid(b, points, thr)
    r = np.linspace(ga[0] - gb[-1], ga[-1] - gb[0], 8 * points)

    def d_at(grid, dev, x):
        return np.interp(x, grid, dev, left=np.inf, right=np.inf)

    dev = np.array([min(np.min(da + d_at(gb, db, ga - x)), np.min(d_at(ga, da, gb + x) + db)) for x in r])
    inside = dev - dev.min() <= thr
    first, last = np.flatnonzero(inside)[[0, -1]]
    # an arm whose own B_crit is open on a side leaves the ratio open on the matching side: a / b is unbounded
    # above where a is above or b below, and from below where a is below or b above
    hi_open = last == len(r) - 1 or ka in ("lower", "none") or kb in ("upper", "none")
    lo_open = first == 0 or ka in ("upper", "none") or kb in ("lower", "none")
    step = r[1] - r[0]
    lo_v = 0.0 if lo_open else math.exp(r[first] - step / 2)
    hi_v = math.inf if hi_open else math.exp(r[last] + step / 2)
    kind = ("interval" if not lo_open and not hi_open else "lower" if not lo_open else "upper" if not hi_open
            else "none")
    return Estimate("ratio", value, lo_v, hi_v, kind)


# --- what the numbers mean -------------------------------------------------------------------------------------


def curve(batch, s_min: float, b_crit: float, knee: float = 1.0) -> np.ndarray:
    """S(B) at the optimal LR on the curve with these S_min, B_crit (a doubling saves 25% there) and knee g:
    S_min (1 + (B_c / B)^g)^(1 / g); at g = 1, S_min (1 + B_crit / B)."""
    theta = np.zeros(len(NAMES))
    theta[1], theta[7] = math.log(b_crit), math.log(knee)
    return s_min * np.exp(curve_part(theta, np.log(np.asarray(batch, dtype=float)))[0])


def doubling_saving(batch, b_crit, knee: float = 1.0) -> np.ndarray:
    """The share of the steps a doubling of the batch saves at B: 1 - S(2B) / S(B) on the curve whose doubling
    saves 25% at `b_crit` with knee g (`knee`; at g = 1, B_crit / (2 (B + B_crit)))."""
    b = np.asarray(batch, dtype=float)
    return 1 - curve(2 * b, 1.0, b_crit, knee) / curve(b, 1.0, b_crit, knee)


def thresholds_supported(estimates: dict) -> bool:
    """Whether the verdict may say where a doubling saves >= 45% and under 10% of the steps: the knee resolved
    (both ends of its interval inside its search range) and both thresholds with two-sided intervals; otherwise
    the thresholds are an extrapolation the data do not carry, and the verdict gives the measured doublings."""
    return all(q in estimates and estimates[q].kind == "interval" for q in ("knee", *WORDS))


@one_blas_thread
def doublings(model: ModelFit, level: float = LEVEL) -> list[dict]:
    """Between each two neighbouring batches that reached the target, the share of the steps the step from one to
    the other saved on the fitted curve, 1 - S(B2) / S(B1), with its profile interval: what the study measured
    of the curve's fall, whatever its shape past the batches. The verdict says them in one sentence, so with m
    steps each is at 1 - (1 - level) / m (Bonferroni), and the sentence holds at `level`. Rows: b1, b2, saving,
    saving_lo, saving_hi, kind."""
    fitter, theta = model.extra["fitter"], model.extra["theta"]
    m = max(len(model.batches) - 1, 1)
    thr = curve_threshold(model.n, model.p, model.extra["lack_of_fit"], 1 - (1 - level) / m)
    rows = []
    for b1, b2 in zip(model.batches[:-1], model.batches[1:]):
        l1, l2 = math.log(b1), math.log(b2)
        gap = l2 - l1
        hat = float(curve_part(theta, l2)[0] - curve_part(theta, l1)[0])  # log S(B2) - log S(B1), in (-gap, 0)
        lo = hi = None
        if thr is not None and math.isfinite(thr):
            lo, hi = profile(fitter, theta, model.nll, thr, hat,
                             lambda v, l1=l1, l2=l2: {"solve": (1, log_b_crit_for_ratio(v, l1, l2))}, 0.05,
                             (-gap * (1 - 1e-6), -gap * 1e-6), xtol=0.002)
        # the saving 1 - e^v falls as v rises: the upper end of v is the lower end of the saving
        rows.append({"b1": b1, "b2": b2, "saving": -math.expm1(hat),
                     "saving_lo": 0.0 if hi is None else -math.expm1(hi),
                     "saving_hi": 1 - b1 / b2 if lo is None else -math.expm1(lo),
                     "kind": "interval" if lo is not None and hi is not None else "lower" if hi is not None
                     else "upper" if lo is not None else "none"})
    return rows


def steps_for_samples(samples, s_min: float, e_min: float) -> np.ndarray:
    """The steps S that a run of E training samples needs on the curve (S / S_min - 1)(E / E_min - 1) = 1
    (McCandlish et al. 2018, eq. 2.12); inf at E <= E_min."""
    e = np.asarray(samples, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(e > e_min, s_min * (1 + 1 / (e / e_min - 1)), np.inf)
