"""The critical batch against the target, and where training ends: pure arithmetic on a ladder of
targets, each with B_crit and its interval from one sweep (report/ladder.py fits them), placed by how long a
reference run took to reach it.

The law: B_crit grows as a power of the training it takes to reach the target,

    log B_crit(T) = a + gamma (log E(T) - log E_top),

E(T) the training it takes to reach T, in samples at the small-batch limit (McCandlish et al.'s E_min), E_top
that to the study's own target: McCandlish et al. 2018 (their Fig. 7: the noise scale, and with it B_crit, grows
as the loss falls), Kaplan et al. 2020 (eq. 5.1, B_crit(L) ~ B* / L^(1 / alpha_B)), Zhang et al. 2024 and
Bergsma et al. 2025 (B_crit grows as a power law in the data / training duration). E(T) is read off one reference
run at a small batch b (trained on past the study's own target): its samples x(T) to each target are E(T) (1 +
b / B_crit(T)) on McCandlish et al.'s curve (eq. 2.11), so E(T) = x(T) / (1 + b / B_crit(T)) (`duration`), with
B_crit(T) the law's at that rung (`fit_law`); at the named target, where B_crit is what is predicted, the two are
solved together. Fitted by weighted least squares over the rungs whose B_crit has two ends (each weighted by its
interval's width in log, read as 2 z standard errors), with its lack of fit (chi^2 of the residuals on rungs - 2
dof).

The prediction at a named target T*, where the reference run reached it after x* samples: from the law's level at
the top rung and its slope,

    log B*(T*) = log B_top + gamma (log E* - log E_top),   E* = x* / (1 + b / B*),
    var = s_top^2 + (log E* / E_top)^2 var(gamma),

s_top the top rung's own standard error (its profile interval), var(gamma) the slope's from the fit, scaled up
by the residuals' scatter where that exceeds the rungs' own errors. The rungs share their trials, so their errors
move together: a shared shift moves the level, not the slope, and the top rung's own interval carries it; the
slope read as from independent rungs is then, if anything, too wide. The interval takes t on the rungs' dof where
the scatter scaled it, the normal quantile otherwise. Beyond MAX_STRETCH (x* / x_top) the law is not trusted:
"not predicted", with what would predict it. docs/verdict.md, "B_crit where training ends"; the coverage by
simulation: benchmarks/bench_predict.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbscale.analysis.intervals import LEVEL, t_quantile

MIN_RUNGS = 3  # rungs with two-sided B_crit before a law is fitted (a slope and a degree of freedom)
MAX_STRETCH = 4.0  # E* / E_top past which a prediction is declined (validated by simulation)


def z_quantile(level: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(0.5 + level / 2))


@dataclass(frozen=True)
class Rung:
    """B_crit at one target of the ladder: its interval (kind as the steps model's) and x, the training it takes
    to reach the target (E, `duration`)."""

    target: float
    x: float
    value: float | None
    lo: float | None
    hi: float | None
    kind: str

    @property
    def two_sided(self) -> bool:
        return (self.kind == "interval" and self.value is not None and self.lo is not None and self.lo > 0
                and self.hi is not None and math.isfinite(self.hi) and self.x > 0)

    def log_se(self, level: float = LEVEL) -> float:
        """The standard error of log B_crit its interval implies (the width in log over 2 z)."""
        return (math.log(self.hi) - math.log(self.lo)) / (2 * z_quantile(level))


@dataclass(frozen=True)
class Law:
    """log B_crit = a + gamma (log E - log E_top), fitted over `rungs` two-sided rungs (x_top: E_top, the top
    rung's E)."""

    a: float
    gamma: float
    gamma_se: float
    x_top: float
    rungs: int
    chi2: float  # the residuals' weighted sum of squares
    lack_p: float | None  # its p-value on rungs - 2 dof (None with no dof)
    scaled: bool  # the slope's error scaled up to the residuals' scatter

    @property
    def dof(self) -> int:
        return self.rungs - 2

    def gamma_interval(self, level: float = LEVEL) -> tuple[float, float]:
        q = t_quantile(self.dof, level) if self.scaled and self.dof > 0 else z_quantile(level)
        return self.gamma - q * self.gamma_se, self.gamma + q * self.gamma_se


def fit_law(rungs: list[Rung], batch: float = 0.0, level: float = LEVEL) -> Law | None:
    """The law over the two-sided rungs (weighted least squares in log B_crit on log E, the weights their own
    errors); None with fewer than MIN_RUNGS of them or a single x. Each rung's x is the samples a reference run at
    `batch` took to its target, and E = x / (1 + batch / B_crit) (`duration`) with B_crit the fitted law's at that
    rung, not the rung's own estimate: the rung's error would enter both sides of the regression (a B_crit read too
    high makes its E too large as well) and tilt the slope; iterated to its fixed point."""
    used = [r for r in rungs if r.two_sided]
    if len(used) < MIN_RUNGS:
        return None
    law = _wls(used, [r.x for r in used], level)
    for _ in range(50):
        if law is None or not batch:
            break
        fitted = [math.exp(law.a + law.gamma * (math.log(r.x) - math.log(law.x_top))) for r in used]
        e = [duration(r.x, batch, b) for r, b in zip(used, fitted)]
        new = _wls(used, e, level)
        if new is None or abs(new.gamma - law.gamma) < 1e-10:
            return new
        law = new
    return law


def _wls(used: list[Rung], x: list[float], level: float) -> Law | None:
    from scipy.special import chdtrc

    x_top = x[max(range(len(used)), key=lambda i: x[i])]
    u = [math.log(xi) - math.log(x_top) for xi in x]
    y = [math.log(r.value) for r in used]
    w = [1 / r.log_se(level) ** 2 for r in used]
    sw, su, sy = sum(w), sum(wi * ui for wi, ui in zip(w, u)), sum(wi * yi for wi, yi in zip(w, y))
    suu = sum(wi * ui * ui for wi, ui in zip(w, u))
    suy = sum(wi * ui * yi for wi, ui, yi in zip(w, u, y))
    det = sw * suu - su * su
    if det <= 1e-12 * sw * max(suu, 1e-12):
        return None
    gamma = (sw * suy - su * sy) / det
    a = (sy - gamma * su) / sw
    chi2 = sum(wi * (yi - a - gamma * ui) ** 2 for wi, ui, yi in zip(w, u, y))
    dof = len(used) - 2
    var = sw / det
    scale = chi2 / dof if dof > 0 else 1.0
    return Law(a, gamma, math.sqrt(var * max(scale, 1.0)), x_top, len(used), chi2,
               float(chdtrc(dof, chi2)) if dof > 0 else None, scale > 1.0)


@dataclass(frozen=True)
class Prediction:
    """B_crit at a named target: value with its interval (kind interval, or none: `reason` says why not and what
    would predict it), the stretch x* / x_top it extrapolates over, and what it rests on."""

    target: float
    value: float | None
    lo: float | None
    hi: float | None
    kind: str
    stretch: float | None
    reason: str = ""


def duration(x: float, batch: float, b_crit: float) -> float:
    """E, the training to a target at the small-batch limit, from the samples x a run at `batch` took to it: x / (1
    + batch / B_crit) on McCandlish et al.'s curve E(B) = E_min (1 + B / B_crit)."""
    return x / (1 + batch / b_crit)


def on_law(law: Law, x: float, batch: float, b_top: float) -> tuple[float, float]:
    """(B_crit, E) at the target a run at `batch` reached after `x` samples, on the law through the top rung's
    B_crit `b_top`: E = x / (1 + batch / B_crit) and B_crit = b_top (E / E_top)^gamma, solved together."""
    b = b_top
    for _ in range(60):
        e = duration(x, batch, b)
        b = b_top * (e / law.x_top) ** law.gamma
    return b, e


def predict(law: Law | None, top: Rung, target: float, x_star: float | None, batch: float, level: float = LEVEL,
            max_stretch: float = MAX_STRETCH) -> Prediction:
    """B_crit at `target`, which the reference run at `batch` reached after `x_star` samples (None: it did not); a
    target at or below the top rung's is a measurement, not a prediction (the caller gives it); beyond
    `max_stretch` or without a law or a two-sided top rung, 'not predicted' and what would predict it."""
    if x_star is None:
        return Prediction(target, None, None, None, "none", None,
                          f"the reference run did not reach {target:g}: train it on (lbscale predict --at "
                          f"{target:g}) or name a target it reached")
    if law is None or not top.two_sided:
        return Prediction(target, None, None, None, "none", None,
                          f"fewer than {MIN_RUNGS} targets of the ladder have B_crit with two ends: more seeds at "
                          "each batch's best point, or more batches, would fit the law")
    b_star, e_star = on_law(law, x_star, batch, top.value)
    stretch = e_star / law.x_top
    if stretch > max_stretch:
        return Prediction(target, None, None, None, "none", stretch,
                          f"{target:g} takes {stretch:.1f}x the training of the study's own target (E, the samples "
                          f"at the small-batch limit), past the {max_stretch:g}x the law is checked to: a study "
                          "whose own target is closer to it (a longer budget) would predict it")
    delta = math.log(stretch)
    var = top.log_se(level) ** 2 + (delta * law.gamma_se) ** 2
    q = t_quantile(law.dof, level) if law.scaled and law.dof > 0 else z_quantile(level)
    mid = math.log(b_star)
    half = q * math.sqrt(var)
    return Prediction(target, math.exp(mid), math.exp(mid - half), math.exp(mid + half), "interval", stretch)


def ratio_prediction(b_simple_star: tuple[float, float, float] | None, b_crit_top: Rung,
                     b_simple_top: tuple[float, float, float] | None, target: float,
                     level: float = LEVEL) -> Prediction:
    """The second predictor: B_simple measured where the reference run reached `target`, times the ratio B_crit /
    B_simple the study measured at its own target (McCandlish et al.: B_simple predicts B_crit up to a factor; the
    study calibrates the factor). Each B_simple as (value, lo, hi) at `level` (hi inf: open); the interval adds the
    three log variances; 'not predicted' where any is open."""
    parts = [b_simple_star, b_simple_top]
    if any(p is None or not (p[1] and p[1] > 0) or not math.isfinite(p[2]) for p in parts) or \
            not b_crit_top.two_sided:
        return Prediction(target, None, None, None, "none", None,
                          "B_simple not measured with two ends at both targets (a larger --micro or more groups "
                          "in lbscale gns), or B_crit without two ends at the study's target")
    z = z_quantile(level)
    se = [(math.log(p[2]) - math.log(p[1])) / (2 * z) for p in parts] + [b_crit_top.log_se(level)]
    mid = math.log(b_simple_star[0]) + math.log(b_crit_top.value) - math.log(b_simple_top[0])
    half = z * math.sqrt(sum(s * s for s in se))
    return Prediction(target, math.exp(mid), math.exp(mid - half), math.exp(mid + half), "interval", None)


def disagree(a: Prediction, b: Prediction) -> bool:
    """Whether two predictions' intervals do not overlap."""
    return a.kind == b.kind == "interval" and (a.hi < b.lo or b.hi < a.lo)


def ladder_targets(start: float, top: float, count: int = 5) -> list[float]:
    """`count` targets evenly from `start` to `top` (the study's own), rounded to 3 decimals towards `start` (a
    value the curves reached), `top` itself last."""
    if count < 2 or start >= top:
        return [top]
    step = (top - start) / (count - 1)
    out = [math.floor((start + i * step) * 1000 + 1e-6) / 1000 for i in range(count - 1)]
    return sorted(set(out)) + [top]
