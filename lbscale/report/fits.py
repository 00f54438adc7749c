"""Fits that know their limits: the critical batch of S(B) = S_min (1 + B_noise / B) (McCandlish et al. 2018), the
optimal LR's power law LR* = c B^alpha and its saturating form eps_max / (1 + B_lr / B) (McCandlish et al.'s
eps_opt), and the regimes of Shallue et al. 2019 that follow from B_noise.

Each fit needs residual degrees of freedom (three batches or more for two parameters) and gives its interval from
them: a t-interval on the fit's own residuals (`dof` = batches - 2), so the scatter of the per-batch estimates
(seed noise, the search grid) is in it. A number the data cannot resolve is a bound, never a value: B_noise
beyond the largest measured batch is "> B_max" (still in perfect scaling there), below the smallest "< B_min";
an interval end past the measured batches is open on that side. Pure numpy / scipy: arrays in, `Fit` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

LEVEL = 0.9  # the intervals' level, as the tables and the verdict name it
MIN_BATCHES = 3  # two parameters and one residual degree of freedom


@dataclass(frozen=True)
class Fit:
    """A fitted number with its limits. kind 'fit': `value` with the interval [lo, hi] (-inf / inf, or 0 for a
    positive quantity, where open); 'lower' / 'upper': the data bound it from one side only and `value` is that
    bound; 'none': no fit, `reason` says why. `dof`: the residual degrees of freedom the interval rests on;
    `extra`: the fit's other parameters (s_min, c, ...)."""

    kind: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    reason: str = ""
    dof: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.kind == "fit"


def _pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    order = np.argsort(x[keep], kind="stable")
    return x[keep][order], y[keep][order]


def _t(level: float, dof: int) -> float:
    """The t quantile of a two-sided `level` interval: scipy.stats.t.ppf's own function, without importing
    scipy.stats (a second of a report's time)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.5 + level / 2))


def _too_few(n: int, what: str) -> Fit:
    return Fit("none", reason=f"{n} {what}{'' if n == 1 else 'es'}; a fit needs {MIN_BATCHES} (two parameters "
                              "and a residual)")


def _least_squares(residual, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parameters, residuals and the Jacobian at the optimum of sum(residual(p)^2)."""
    from scipy.optimize import least_squares

    r = least_squares(residual, p0, method="lm", x_scale="jac")
    return r.x, r.fun, r.jac


def _covariance(p: np.ndarray, res: np.ndarray, jac: np.ndarray) -> np.ndarray | None:
    """s^2 (J^T J)^-1, s^2 the residuals' mean square over the residual degrees of freedom; None if singular."""
    s2 = float(res @ res) / (len(res) - len(p))
    try:
        return s2 * np.linalg.inv(jac.T @ jac)
    except np.linalg.LinAlgError:
        return None


def _t_interval(p: np.ndarray, res: np.ndarray, jac: np.ndarray, index: int, level: float) -> tuple[float, float]:
    """The t-interval of parameter `index`: its standard error from the covariance (`_covariance`)."""
    dof = len(res) - len(p)
    cov = _covariance(p, res, jac)
    if cov is None:
        return -math.inf, math.inf
    se = math.sqrt(max(float(cov[index, index]), 0.0))
    q = _t(level, dof)
    return float(p[index] - q * se), float(p[index] + q * se)


def critical_batch(batches, steps, level: float = LEVEL) -> Fit:
    """B_noise (and S_min in `extra`) of S(B) = S_min (1 + B_noise / B), fitted to one steps-to-target figure per
    batch in relative error (least squares of log S); a bound where the fit leaves the measured batches."""
    b, s = _pairs(batches, steps)
    n = len(np.unique(b))
    if n < MIN_BATCHES:
        return _too_few(n, "reached batch")
    lo_b, hi_b = float(b.min()), float(b.max())
    # the linear relative-error fit S = a + c / B (a = S_min, c = S_min B_noise) says which side a bound is on
    design = np.stack([np.ones_like(b), 1.0 / b], axis=1) / s[:, None]
    (a, c), *_ = np.linalg.lstsq(design, np.ones_like(s), rcond=None)
    if c <= 0 or (a > 0 and c / a < lo_b):
        return Fit("upper", lo_b, reason=f"B_noise < {lo_b:,.0f}: the steps no longer halve with the batch from the "
                                         f"smallest batch on (past perfect scaling already at {lo_b:,.0f})", dof=n - 2)
    if a <= 0 or c / a > hi_b:
        return Fit("lower", hi_b, reason=f"B_noise > {hi_b:,.0f}: still in perfect scaling at the largest batch",
                   dof=n - 2)

    def residual(p):
        return p[0] + np.log1p(np.exp(p[1]) / b) - np.log(s)

    p, res, jac = _least_squares(residual, np.array([math.log(a), math.log(c / a)]))
    value = math.exp(p[1])
    if not lo_b <= value <= hi_b:  # the log fit may leave the span the linear one stayed in
        side = "lower" if value > hi_b else "upper"
        bound = hi_b if side == "lower" else lo_b
        return Fit(side, bound, reason=f"B_noise {'>' if side == 'lower' else '<'} {bound:,.0f}: the fit leaves "
                                       "the measured batches", dof=n - 2)
    lo, hi = _t_interval(p, res, jac, 1, level)
    lo_v, hi_v = math.exp(lo), math.exp(hi)
    return Fit("fit", value, lo_v if lo_v >= lo_b else 0.0, hi_v if hi_v <= hi_b else math.inf, dof=len(b) - 2,
               extra={"s_min": math.exp(p[0]), "log_params": p, "cov": _covariance(p, res, jac),
                      "span": (lo_b, hi_b)})


def steps_at(fit: Fit, batches, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """S(B) of a critical-batch fit at `batches` with its t-interval (the delta method on log S, the fit's own
    covariance and residual degrees of freedom): (steps, lo, hi)."""
    b = np.asarray(batches, dtype=float)
    p, cov = fit.extra["log_params"], fit.extra["cov"]
    ratio = math.exp(p[1]) / b
    log_s = p[0] + np.log1p(ratio)
    if cov is None:
        return np.exp(log_s), np.zeros_like(b), np.full_like(b, math.inf)
    grad = np.stack([np.ones_like(b), ratio / (1 + ratio)], axis=1)
    se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", grad, cov, grad), 0.0))
    q = _t(level, fit.dof)
    return np.exp(log_s), np.exp(log_s - q * se), np.exp(log_s + q * se)


def lr_power_law(batches, lrs, level: float = LEVEL) -> Fit:
    """alpha (and c in `extra`) of log LR* = log c + alpha log B, least squares over one LR* per batch, with the
    t-interval of the slope."""
    b, lr = _pairs(batches, lrs)
    n = len(np.unique(b))
    if n < MIN_BATCHES:
        return _too_few(n, "reached batch")
    x, y = np.log(b), np.log(lr)
    design = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    res = y - design @ coef
    lo, hi = _t_interval(coef, res, design, 1, level)
    return Fit("fit", float(coef[1]), lo, hi, dof=len(b) - 2,
               extra={"c": math.exp(coef[0]), "rss": float(res @ res), "slopes": local_slopes(b, lr)})


def lr_saturating(batches, lrs, level: float = LEVEL) -> Fit:
    """B_lr (and eps_max in `extra`) of LR* = eps_max / (1 + B_lr / B): linear in B below B_lr, flat above it
    (McCandlish et al.'s eps_opt, with B_lr playing B_noise's part); least squares of log LR*. Bounds as for the
    critical batch: B_lr past the largest batch means LR* still grows linearly there."""
    b, lr = _pairs(batches, lrs)
    n = len(np.unique(b))
    if n < MIN_BATCHES:
        return _too_few(n, "reached batch")
    fit = critical_batch(b, 1.0 / lr, level)  # 1 / LR* = (1 + B_lr / B) / eps_max: the same form as S(B)
    if not fit.ok:
        return Fit(fit.kind, fit.value, reason=fit.reason.replace("B_noise", "B_lr"), dof=fit.dof)
    eps_max = 1.0 / fit.extra["s_min"]
    res = np.log(lr) - (math.log(eps_max) - np.log1p(fit.value / b))
    return Fit("fit", fit.value, fit.lo, fit.hi, dof=fit.dof, extra={"eps_max": eps_max, "rss": float(res @ res)})


def local_slopes(batches, lrs) -> list[float]:
    """d log LR* / d log B between neighbouring batches (one per pair, in batch order)."""
    b, lr = _pairs(batches, lrs)
    return [float(v) for v in np.diff(np.log(lr)) / np.diff(np.log(b))]


def aic(rss: float, n: int, k: int = 2) -> float:
    """Akaike's criterion of a least-squares fit with Gaussian residuals: n log(RSS / n) + 2 k."""
    return n * math.log(max(rss, 1e-300) / n) + 2 * k


def lr_model(batches, lrs, level: float = LEVEL) -> dict:
    """Both LR models side by side and which the data favour (the lower AIC on the log residuals; a difference
    under 2 is no preference, and so are three batches, through which either curve passes closely):
    {"power", "saturating", "better", "aic_power", "aic_saturating", "slopes"}."""
    power, saturating = lr_power_law(batches, lrs, level), lr_saturating(batches, lrs, level)
    out = {"power": power, "saturating": saturating, "better": "power" if power.ok else None,
           "aic_power": None, "aic_saturating": None, "slopes": local_slopes(batches, lrs)}
    if power.ok and saturating.ok and power.dof >= 2:  # three points fit either curve: no preference from them
        n = power.dof + 2
        out["aic_power"], out["aic_saturating"] = aic(power.extra["rss"], n), aic(saturating.extra["rss"], n)
        gap = out["aic_power"] - out["aic_saturating"]
        out["better"] = "saturating" if gap > 2 else "power" if gap < -2 else "either"
    return out


def regimes(b_noise: Fit) -> dict:
    """Shallue et al.'s regimes from S(B) = S_min (1 + B_noise / B): perfect scaling ends where the steps are
    twice the perfect-scaling line S_min B_noise / B, at B = B_noise; diminishing returns end where doubling the
    batch saves under 10 % of the steps, S(2B) / S(B) > 0.9, at B = 4 B_noise. Each as (value, lo, hi), None
    without a fit."""
    if not b_noise.ok:
        return {"perfect_end": None, "diminishing_end": None}
    return {"perfect_end": (b_noise.value, b_noise.lo, b_noise.hi),
            "diminishing_end": tuple(4 * v for v in (b_noise.value, b_noise.lo, b_noise.hi))}
