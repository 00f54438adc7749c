"""The likelihood of the steps model (`report.steps_model`): one arm's trials as censored observations of log
steps, the negative log-likelihood with its gradient in the full parameter vector, a minimiser that holds some
parameters (or a combination) fixed, and the profile-likelihood search for an interval's ends. Pure numpy /
scipy: arrays in, numbers out.

A trial's steps to the target S lie in (low, high]: an exact crossing where low == high (a normal density of
log S), a crossing between two evaluations (a difference of two normal CDFs), a trial that did not reach the
target at all where high is inf (the survival function at its last evaluation). A trial that was unstable (it
diverged) measured no steps: its LR lies above the stability edge at its batch, so above lr*(B) (an LR that
diverges is never the optimum); it enters as the constraint lr*(B) < its LR, held by a steep quadratic penalty
(`EDGE_WEIGHT`), not as steps it needed.

The curve's knee: S(B) = S_min (1 + (B_c / B)^g)^(1 / g) (g = 1: McCandlish et al.'s S_min (1 + B_c / B); a smaller
g a softer knee, a larger one a sharper), parametrised by B_crit, the batch where a doubling saves 25% of the steps
(B_c = B_crit there, at g = 1), so that the vector's B_crit means what the verdict says at every g (`knee_shift`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from lbscale.analysis.intervals import t_quantile

LEVELS = 8  # the named entries of the vector; a free level of log S per batch follows (the lack-of-fit reference)
REACH = 7.0  # an end open past exp(7) ~ 1,100 times beyond the measured batches (B_crit) is unbounded
# lr*(B) < the LR of a trial that diverged at B, as a penalty EDGE_WEIGHT v^2 on the excess v of log lr* over it:
# L-BFGS-B takes bounds, not constraints on a combination; at the solution the excess is the likelihood's pull over
# 2 EDGE_WEIGHT (~1e-4 in log LR), and EDGE_MARGIN (0.2 %) keeps lr* strictly below the diverged LR all the same
EDGE_WEIGHT = 1e5
EDGE_MARGIN = 0.002
# log g: a knee from 2x softer than McCandlish's to 2x sharper, the range real curves have shown (docs/scaling-model.md,
# "The knee's range"): where a study's data do not bound the knee, B_crit's interval holds over this range
KNEE_LIMITS = (math.log(0.5), math.log(2.0))
CRITICAL_SAVING = 0.25  # B_crit: the batch where a doubling saves this share of the steps


def knee_shift(log_g, saving: float = CRITICAL_SAVING) -> tuple[np.ndarray, np.ndarray]:
    """log B_c - log B_s (B_s: the batch where a doubling saves `saving` of the steps on S_min (1 + (B_c / B)^g)^(1
    / g)) and its derivative in log g. From S(2B)^g / S(B)^g = (1 + y 2^-g) / (1 + y) = (1 - s)^g, y = (B_c /
    B_s)^g: y = (1 - (1 - s)^g) / ((1 - s)^g - 2^-g); 0 at g = 1 and s = 1/4."""
    g = np.exp(np.asarray(log_g, dtype=float))
    a, h = (1 - saving) ** g, 2.0 ** -g
    y = (1 - a) / (a - h)
    dy = (-a * math.log(1 - saving) * (a - h) - (1 - a) * (a * math.log(1 - saving) + h * math.log(2))) / (a - h) ** 2
    ly = np.log(y)
    return ly / g, dy / y - ly / g  # d(ly / g) / d log g = g (y' / (y g) - ly / g^2)


def knee_curve(w, log_g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """F(w) = log(1 + e^(g w)) / g (w = log B_c - log B: log S - log S_min on the curve), dF / dw and dF / d log g
    at fixed w."""
    g = math.exp(float(log_g))
    from scipy.special import expit

    sp = np.logaddexp(0.0, g * np.asarray(w, dtype=float)) / g
    e = expit(g * np.asarray(w, dtype=float))
    return sp, e, np.asarray(w, dtype=float) * e - sp


def curve_part(theta: np.ndarray, log_b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log S(B) - log S_min on the curve at `log_b` (theta[1] log B_crit, theta[7] log g) with its derivatives in
    theta[1] and theta[7]."""
    shift, dshift = knee_shift(theta[7])
    f, dw, dg = knee_curve(theta[1] + shift - np.asarray(log_b, dtype=float), theta[7])
    return f, dw, dg + dw * dshift


def one_blas_thread(fn):
    """Run `fn` with the BLAS libraries (OpenBLAS's threads, which OMP_WAIT_POLICY does not reach) held to one
    thread: the fits' vectors are a few dozen entries, and BLAS threads that spin for work beside a training
    trial (a sweep's rounds decide while trials run) made a fit ~3x slower on a busy 2-core machine."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)
    return wrapper


@dataclass(frozen=True)
class Observations:
    """One arm's trials: batch, LR (None: one LR per batch, no bowl), and what each trial measured of its steps
    to the target: `low` < steps <= `high` (low 0: no evaluation before the one that met it; high inf: not
    reached, at least `low` steps; low == high: an exact crossing). `unstable` (None: none): the trials that
    diverged without reaching the target; they measured no steps, only that their LR is above the stability
    edge at their batch (their high is inf, their low not read)."""

    batch: np.ndarray
    lr: np.ndarray | None
    low: np.ndarray
    high: np.ndarray
    unstable: np.ndarray | None = None

    @classmethod
    def of(cls, batch, lr, low, high, unstable=None) -> "Observations":
        b = np.asarray(batch, dtype=float)
        lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
        edge = np.zeros(len(b), bool) if unstable is None else np.asarray(unstable, dtype=bool)
        hi = np.where(edge, np.inf, hi)
        # an unstable trial is kept whatever it evaluated: it diverged, perhaps before its first evaluation
        keep = np.isfinite(b) & (b > 0) & (edge | (((hi > 0) | (lo > 0)) & ~(np.isinf(hi) & ~(lo > 0))))
        rates = None if lr is None else np.asarray(lr, dtype=float)
        if rates is not None:
            keep &= np.isfinite(rates) & (rates > 0)
        else:  # one LR per batch: no lr* for an unstable trial to bound
            keep &= ~edge
        return cls(b[keep], None if rates is None else rates[keep], np.maximum(np.nan_to_num(lo[keep]), 0.0),
                   hi[keep], edge[keep] if edge[keep].any() else None)

    @property
    def reached(self) -> np.ndarray:
        return np.isfinite(self.high)

    @property
    def stable(self) -> np.ndarray:
        """The trials that measured steps (reached the target, or stopped without it and without diverging)."""
        return np.ones(len(self.batch), bool) if self.unstable is None else ~self.unstable

    @property
    def censored(self) -> np.ndarray:
        """Stable trials that stopped without reaching the target: right-censored steps."""
        return self.stable & ~self.reached

    def steps_only(self) -> "Observations":
        """The trials that measured steps, without the LR: the model with one LR per batch (no bowl, no lr*)."""
        s = self.stable
        return Observations(self.batch[s], None, self.low[s], self.high[s])



def _norm_logpdf(z):
    return -0.5 * z * z - 0.5 * math.log(2 * math.pi)


def _log_diff_ndtr(za, zb):
    """log(Phi(zb) - Phi(za)) for za < zb, stable in both tails (flipped where za > 0)."""
    from scipy.special import log_ndtr

    flip = za > 0
    lo, hi = np.where(flip, -zb, za), np.where(flip, -za, zb)
    lhi, llo = log_ndtr(hi), log_ndtr(lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        return lhi + np.log1p(-np.exp(np.minimum(llo - lhi, 0.0)) + 0.0)


class Problem:
    """The negative log-likelihood of one arm's observations and its gradient, in the full parameter vector."""

    def __init__(self, obs: Observations, bowl: bool, slope: bool, levels: bool = False, lr_form: str = "power",
                 knee: bool = False):
        self.bowl, self.slope, self.levels, self.lr_form, self.knee = bowl, slope, levels, lr_form, knee
        self.x0 = float(np.mean(np.unique(np.log(obs.batch))))
        edge = ~obs.stable
        unstable = (obs.batch[edge], None if obs.lr is None else obs.lr[edge])
        obs = Observations(obs.batch[~edge], None if obs.lr is None else obs.lr[~edge], obs.low[~edge],
                           obs.high[~edge])
        self.log_b = np.log(obs.batch)
        # levels: each batch its own free level of log S in place of the curve (the lack-of-fit reference)
        self.batches, self.index = np.unique(self.log_b, return_inverse=True)
        self.x = self.log_b - self.x0
        self.log_lr = np.log(obs.lr) if bowl else np.zeros_like(self.x)
        self._edges(*unstable)
        low = np.where(obs.low > 0, np.log(np.maximum(obs.low, 1e-300)), -np.inf)
        high = np.where(np.isfinite(obs.high), np.log(np.where(np.isfinite(obs.high), obs.high, 1.0)), np.inf)
        self.exact = np.isfinite(high) & (high - low < 1e-9)
        self.right = ~np.isfinite(high)
        self.interval = ~self.exact & ~self.right
        self.y = np.where(self.exact, high, 0.0)
        self.a, self.b = low, high
        # which entries of the full vector are free: 8 named ones (the knee log g, 0 where it is held at
        # McCandlish's), then a free level of log S per batch (`levels`), then a free log lr* per batch (lr_form
        # 'free'); lr_form 'saturating' reads the alpha entry as log B_lr of lr* = eps_max / (1 + B_lr / B), l0 as
        # log eps_max
        nb = len(self.batches)
        free_lr = bowl and lr_form == "free"
        self.lr_off = LEVELS + (nb if levels else 0)
        self.free = np.array([not levels, not levels, bowl and not free_lr, bowl and not free_lr, bowl, True, slope,
                              knee and not levels]
                             + [levels] * (nb if levels else 0) + [free_lr] * (nb if free_lr else 0))

    def _edges(self, batch: np.ndarray, lr: np.ndarray | None) -> None:
        """The unstable trials' bounds on lr*: per batch the smallest LR that diverged there (a larger one bounds
        nothing more). With a free lr* per batch, a batch without a stable trial has no lr* to bound."""
        self.edge_log_b = self.edge_log_lr = np.zeros(0)
        self.edge_index = np.zeros(0, int)
        if not self.bowl or lr is None or not len(batch):
            return
        log_b, log_lr = np.log(batch), np.log(lr)
        where = np.unique(log_b)
        smallest = np.array([log_lr[log_b == b].min() for b in where])
        at = np.searchsorted(self.batches, where).clip(0, max(len(self.batches) - 1, 0))
        known = self.batches[at] == where if len(self.batches) else np.zeros(len(where), bool)
        keep = known if self.lr_form == "free" else np.ones(len(where), bool)
        self.edge_log_b, self.edge_log_lr, self.edge_index = where[keep], smallest[keep] - EDGE_MARGIN, at[keep]

    def log_lr_star(self, theta: np.ndarray, log_b: np.ndarray, index: np.ndarray) -> np.ndarray:
        """log lr*(B) at `log_b` (`index`: their places among the batches, for a free lr* per batch)."""
        l0, alpha = theta[2], theta[3]
        if self.lr_form == "free":
            return theta[self.lr_off:][index]
        if self.lr_form == "saturating":
            return l0 - np.logaddexp(0.0, alpha - log_b)
        return l0 + alpha * (log_b - self.x0)

    def add_lr_star_gradient(self, g: np.ndarray, theta: np.ndarray, w: np.ndarray, log_b: np.ndarray,
                             index: np.ndarray) -> None:
        """g += the gradient of sum(w log lr*(B)) (w: d nll / d log lr* at each of `log_b`)."""
        from scipy.special import expit

        if self.lr_form == "free":
            g[self.lr_off:] += np.bincount(index, weights=w, minlength=len(self.batches))
            return
        g[2] += float(w.sum())
        g[3] += (-float(w @ expit(theta[3] - log_b)) if self.lr_form == "saturating"
                 else float(w @ (log_b - self.x0)))

    def edge_penalty(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """EDGE_WEIGHT v^2 summed over the excess v > 0 of log lr*(B) over the smallest diverged LR at B (less
        EDGE_MARGIN), and d penalty / d log lr* at each."""
        v = np.maximum(self.log_lr_star(theta, self.edge_log_b, self.edge_index) - self.edge_log_lr, 0.0)
        return float(EDGE_WEIGHT * v @ v), 2 * EDGE_WEIGHT * v

    def mean(self, theta: np.ndarray) -> tuple[np.ndarray, dict]:
        """mu = E[log S] of every trial that measured steps, and what its gradient needs."""
        lk = theta[4]
        parts = {}
        if self.levels:
            mu = theta[LEVELS:][self.index]
        else:
            f, parts["dw"], parts["dg"] = curve_part(theta, self.log_b)
            mu = theta[0] + f
        if self.bowl:
            k = math.exp(lk)
            d = self.log_lr - self.log_lr_star(theta, self.log_b, self.index)
            kd2 = k * d * d
            mu = mu + np.log1p(kd2)
            parts.update(k=k, d=d, kd2=kd2)
        return mu, parts

    def censored(self, mu: np.ndarray, log_s: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """The negative log-likelihood of the observations given mu and log sigma, with its derivatives in mu
        and in log sigma: exact crossings a normal density, interval-censored ones a difference of two CDFs,
        right-censored ones a survival function."""
        from scipy.special import log_ndtr

        s = np.exp(log_s)
        out = 0.0
        gm = np.zeros_like(mu)  # d nll / d mu
        gs = np.zeros_like(mu)  # d nll / d log s
        e = self.exact
        if e.any():
            z = (self.y[e] - mu[e]) / s[e]
            out += float(np.sum(log_s[e] + 0.5 * z * z))
            gm[e], gs[e] = -z / s[e], 1.0 - z * z
        r = self.right
        if r.any():
            w = (self.a[r] - mu[r]) / s[r]  # P(steps > low) = Phi(-w)
            lp = log_ndtr(-w)
            out -= float(np.sum(lp))
            h = np.exp(np.minimum(_norm_logpdf(w) - lp, 300.0))  # inverse Mills ratio (~w far in the tail)
            gm[r], gs[r] = -h / s[r], -h * w
        i = self.interval
        if i.any():
            za, zb = (self.a[i] - mu[i]) / s[i], (self.b[i] - mu[i]) / s[i]
            lp = _log_diff_ndtr(za, zb)
            # an interval too narrow for the difference of two CDFs: its density times its width
            fa = np.where(np.isfinite(za), za, zb - 1.0)
            narrow = _norm_logpdf(0.5 * (fa + zb)) + np.log(zb - fa)
            lp = np.where(np.isfinite(lp) & (lp > narrow - 20), lp, narrow)
            out -= float(np.sum(lp))
            pa = np.where(np.isfinite(za), np.exp(np.minimum(_norm_logpdf(fa) - lp, 300.0)), 0.0)
            pb = np.exp(np.minimum(_norm_logpdf(zb) - lp, 300.0))
            gm[i] = (pb - pa) / s[i]
            gs[i] = pb * zb - pa * fa
        return out, gm, gs

    def nll(self, theta: np.ndarray, grad: bool = True):
        """The negative log-likelihood at `theta` (and its gradient over the whole vector)."""
        mu, p = self.mean(theta)
        out, gm, gs = self.censored(mu, theta[5] + theta[6] * self.x)
        penalty, w_edge = self.edge_penalty(theta)
        out += penalty
        if not grad:
            return out
        g = np.zeros(len(theta))
        nb = len(self.batches)
        if self.levels:
            g[LEVELS:LEVELS + nb] = np.bincount(self.index, weights=gm, minlength=nb)
        else:
            g[0] = gm.sum()
            g[1] = float(gm @ p["dw"])
            g[7] = float(gm @ p["dg"])
        if self.bowl:
            dg = 2 * p["k"] * p["d"] / (1 + p["kd2"])  # d mu / d d; d d / d log lr* = -1
            self.add_lr_star_gradient(g, theta, -gm * dg, self.log_b, self.index)
            self.add_lr_star_gradient(g, theta, w_edge, self.edge_log_b, self.edge_index)
            g[4] = float(gm @ (p["kd2"] / (1 + p["kd2"])))
        g[5] = gs.sum()
        g[6] = float(gs @ self.x)
        return out, g


class Fitter:
    """Minimises the likelihood with some parameters held fixed (a profile), warm-started from the last solution."""

    def __init__(self, problem: Problem, span: tuple[float, float]):
        self.problem = problem
        lo, hi = span
        wide = (lo - REACH - 2, hi + REACH + 2)  # log B_crit (and log B_lr): past the batches by ~e^9
        nb = len(problem.batches)
        self.bounds = [(None, None), wide, (None, None), wide if problem.lr_form == "saturating" else (-6.0, 6.0),
                       (-9.0, 6.0), (math.log(1e-3), math.log(10.0)), (-3.0, 3.0), KNEE_LIMITS] \
            + [(-5.0, 40.0)] * (nb if problem.levels else 0) + [(None, None)] * (len(problem.free) - problem.lr_off)

    def minimise(self, start: np.ndarray, fixed: dict[int, float] | None = None,
                 solve: tuple[int, object] | None = None) -> tuple[float, np.ndarray]:
        """min nll over the free parameters not in `fixed` ({index: value}); `solve` (j, fn): parameter j follows
        the others, fn(theta) -> (its value, its gradient over theta) (a constraint on a combination: E_min's
        log S_min + log B_crit, or log S(B) at a batch)."""
        from scipy.optimize import minimize

        free = self.problem.free.copy()
        fixed = fixed or {}
        for j in fixed:
            free[j] = False
        if solve is not None:
            free[solve[0]] = False
        idx = np.flatnonzero(free)
        theta = start.copy()
        for j, v in fixed.items():
            theta[j] = v

        def full(v):
            t = theta.copy()
            t[idx] = v
            if solve is not None:
                t[solve[0]] = solve[1](t)[0]
            return t

        def f(v):
            t = full(v)
            val, g = self.problem.nll(t)
            if solve is not None:  # the solved entry moves with the others: chain rule
                g = g + g[solve[0]] * solve[1](t)[1]
            return val, g[idx]

        if not len(idx):
            return self.problem.nll(full(np.array([])), grad=False), full(np.array([]))
        bounds = [self.bounds[j] for j in idx]
        x = np.clip(theta[idx], [b[0] if b[0] is not None else -np.inf for b in bounds],
                    [b[1] if b[1] is not None else np.inf for b in bounds])
        r = minimize(f, x, jac=True, method="L-BFGS-B", bounds=bounds,
                     options={"maxiter": 400, "ftol": 1e-11, "gtol": 1e-6})
        return float(r.fun), full(r.x)


def log_s_min_for(value: float, log_batch: float | None):
    """log S_min as the rest of the vector fixes it where log E_min = log S_min + log B_c = value (log_batch None;
    B_c = B_crit at g = 1, `knee_shift`) or log S(B) = log S_min + (curve) = value at B = exp(log_batch)."""
    def fn(t):
        g = np.zeros_like(t)
        if log_batch is None:
            shift, dshift = knee_shift(t[7])
            g[1], g[7] = -1.0, -float(dshift)
            return value - t[1] - float(shift), g
        f, dw, dg = curve_part(t, log_batch)
        g[1], g[7] = -float(dw), -float(dg)
        return value - float(f), g
    return fn


def log_b_crit_for(value: float, saving: float):
    """log B_crit as the rest of the vector fixes it where the batch at which a doubling saves `saving` of the
    steps has log `value`: log B_s = log B_crit + shift_25(g) - shift_s(g) (`knee_shift`)."""
    def fn(t):
        (s25, d25), (ss, ds) = knee_shift(t[7]), knee_shift(t[7], saving)
        g = np.zeros_like(t)
        g[7] = -float(d25 - ds)
        return value - float(s25 - ss), g
    return fn


def log_b_crit_for_ratio(value: float, log_b1: float, log_b2: float):
    """log B_crit as the rest of the vector fixes it where log S(B2) - log S(B1) = value (in (-(log B2 - log B1),
    0): the steps' fall from B1 to B2). With q = (B_c / B1)^g, E = e^(g value) and c = (B1 / B2)^g the fall
    reads (1 + q c) / (1 + q) = E, so q = (1 - E) / (E - c): log B_c = log B1 + log(q) / g, in closed form."""
    gap = log_b2 - log_b1

    def fn(t):
        lg = float(t[7])
        g = math.exp(lg)
        e, c = math.exp(g * value), math.exp(-g * gap)
        lq = math.log1p(-e) - math.log(e - c)
        de, dc = g * value * e, -g * gap * c  # d / d log g
        dlq = -de / (1 - e) - (de - dc) / (e - c)
        shift, dshift = knee_shift(lg)
        out = np.zeros_like(t)
        out[7] = dlq / g - lq / g - float(dshift)
        return log_b1 + lq / g - float(shift), out
    return fn


def threshold(n: int, p: int, level: float) -> float | None:
    """The deviance a profile must rise by for an end of a `level` interval: n log(1 + t^2 / (n - p)), t the
    two-sided t quantile with n - p degrees of freedom (the exact interval of a Gaussian linear model, expressed
    as a likelihood ratio); None without a residual degree of freedom."""
    dof = n - p
    if dof < 1:
        return None
    t = t_quantile(dof, level)
    return n * math.log1p(t * t / dof)


def profile_end(fitter: Fitter, theta_hat: np.ndarray, nll_hat: float, thr: float, hat: float, constrain,
                 direction: int, scale: float, limit: float, xtol: float = 0.01) -> tuple[float, bool]:
    """The end of a quantity's profile interval on one side: (the value, False) where the deviance reaches `thr`,
    (limit, True) where it does not before `limit`. `constrain(v)`: minimise's keywords that hold the quantity
    at v; `hat` its estimate.

    The search steps outward, then halves the bracket between the last point inside and the first outside; each
    point is minimised once, warm-started from the solution of the last point inside (never from a point farther
    out, whose solution can sit in another valley and give the same point another deviance), and a point that
    seems outside is minimised from the estimate too, keeping the lower: a profile is a minimum, so the lower
    value is the truer one. An end is thus always a found crossing, never the search's limit."""
    def deviance(v, start):
        val, t = fitter.minimise(start, **constrain(v))
        if 2 * (val - nll_hat) >= thr and start is not theta_hat:
            val2, t2 = fitter.minimise(theta_hat, **constrain(v))
            if val2 < val:
                val, t = val2, t2
        return 2 * (val - nll_hat) - thr, t

    step, inside, warm = scale, hat, theta_hat
    while True:
        v = hat + direction * step
        if direction * (v - limit) >= 0:
            v = limit
        dv, t = deviance(v, warm)
        if dv >= 0:
            break
        if v == limit:
            return limit, True
        # the next probe where a parabola through the estimate and this point reaches the threshold (a profile
        # is about quadratic near its minimum), at least twice as far: few refits before the crossing is bracketed
        rise = dv + thr
        inside, warm = v, t
        step = max(2.0 * step, 1.2 * step * math.sqrt(thr / rise) if rise > 0 else 4.0 * step)
    d_in, d_out, outside = None, dv, v  # d_in: the deviance at `inside` once a halving has landed there
    while abs(outside - inside) > xtol:
        mid = 0.5 * (inside + outside)
        dm, tm = deviance(mid, warm)
        if dm >= 0:
            outside, d_out = mid, dm
        else:
            inside, warm, d_in = mid, tm, dm
    if d_in is None:  # the first probe out was already close: the crossing within xtol of it
        return float(outside), False
    return float(inside + (outside - inside) * (-d_in) / (d_out - d_in)), False


def profile(fitter: Fitter, theta: np.ndarray, nll_hat: float, thr: float, hat: float, constrain, scale: float,
             limits: tuple[float, float], xtol: float = 0.01) -> tuple[float | None, float | None]:
    """Both ends of a profile interval (None where open)."""
    ends = []
    for direction, limit in ((-1, limits[0]), (1, limits[1])):
        v, open_ = profile_end(fitter, theta, nll_hat, thr, hat, constrain, direction, scale, limit, xtol)
        ends.append(None if open_ else v)
    return ends[0], ends[1]
