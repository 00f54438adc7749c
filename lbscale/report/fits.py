"""The optimal LR's power law LR* = c B^alpha through one best LR per batch, with its t-interval: for a tuned
study without a target (the best value within the budget, no steps to fit). With a target, alpha, the critical
batch and the rest come from one model over every trial: `report.steps_model`.

The fit needs residual degrees of freedom (three batches or more for two parameters) and gives its interval from
them: a t-interval on the fit's own residuals (`dof` = batches - 2). Pure numpy / scipy: arrays in, `Fit` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lbscale.analysis.intervals import t_quantile
from lbscale.analysis.intervals import LEVEL

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


def _too_few(n: int, what: str) -> Fit:
    return Fit("none", reason=f"{n} {what}{'' if n == 1 else 'es'}; a fit needs {MIN_BATCHES} (two parameters "
                              "and a residual)")


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
    q = t_quantile(dof, level)
    return float(p[index] - q * se), float(p[index] + q * se)


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
               extra={"c": math.exp(coef[0]), "rss": float(res @ res)})
