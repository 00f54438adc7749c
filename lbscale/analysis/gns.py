"""Gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", appendix A).

B_simple = tr(Sigma) / |G|^2 predicts the critical batch. From squared gradient norms measured at a small
batch b and a big batch B (the mean of B/b small-batch gradients), the unbiased estimates are
    |G|^2    ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
    tr(Sigma) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)
Each is noisy on its own, so they are summed over many measurements and divided once (ratio of means).
Pure arithmetic on the measured norms; measuring them on a network is train/noise_measure.py's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from lbscale.analysis.critical import ema_update
from lbscale.analysis.intervals import LEVEL, t_quantile

GNS_FILE = "gns.json"


def estimate(g2_small: float, g2_big: float, b_small: float, b_big: float) -> tuple[float, float]:
    """Unbiased (|G|^2, tr(Sigma)) from one pair of squared norms at batches b_small < b_big."""
    if not 0 < b_small < b_big:
        raise ValueError("need 0 < b_small < b_big")
    g2 = (b_big * g2_big - b_small * g2_small) / (b_big - b_small)
    trace = (g2_small - g2_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


MIN_GROUPS = 4  # fewer groups leave too few degrees of freedom for an interval


def b_simple_interval(parts, level: float = LEVEL) -> tuple[float | None, float | None]:
    """Fieller's interval (Fieller 1954) for B_simple, the ratio of the mean tr(Sigma) and |G|^2 estimates over the
    measurement groups `parts` [(|G|^2, tr(Sigma)), ...]: the B for which mean tr - B mean |G|^2 is within the
    t-quantile (n - 1 degrees of freedom) of zero, from the groups' variances and covariance. Where the |G|^2
    mean is not resolved from zero (or lies below it) the set is unbounded: (0, inf). The lower end is at least 0
    (a noise scale is not negative). (None, None) with fewer than MIN_GROUPS groups, a group that is not a
    number, or a set that lies below zero whole (tr(Sigma) resolved as negative: no noise scale to bound)."""
    import numpy as np

    g2, trace = np.asarray(parts, dtype=float).reshape(-1, 2).T
    n = len(g2)
    if n < MIN_GROUPS or not (np.isfinite(g2).all() and np.isfinite(trace).all()):
        return None, None
    q = t_quantile(n - 1, level) ** 2
    cov = np.cov(g2, trace, ddof=1) / n  # of the two means
    gm, tm = g2.mean(), trace.mean()
    a = gm ** 2 - q * cov[0, 0]
    b = -2 * (gm * tm - q * cov[0, 1])
    c = tm ** 2 - q * cov[1, 1]
    disc = b * b - 4 * a * c
    if a <= 0 or disc < 0 or gm <= 0:
        return 0.0, math.inf
    root = math.sqrt(disc)
    lo, hi = (-b - root) / (2 * a), (-b + root) / (2 * a)
    return (None, None) if hi <= 0 else (max(0.0, lo), hi)


@dataclass
class NoiseScale:
    """Sums of the per-measurement estimates; `b_simple` is their ratio."""

    g2_sum: float = 0.0
    trace_sum: float = 0.0
    count: int = 0
    b_small: float = 0.0
    b_big: float = 0.0

    def add(self, g2_small: float, g2_big: float, b_small: float, b_big: float) -> tuple[float, float]:
        """Add one measurement; returns its (|G|^2, tr(Sigma)) estimates."""
        g2, trace = estimate(g2_small, g2_big, b_small, b_big)
        self.g2_sum += g2
        self.trace_sum += trace
        self.count += 1
        self.b_small, self.b_big = b_small, b_big
        return g2, trace

    @property
    def b_simple(self) -> float | None:
        return self.trace_sum / self.g2_sum if self.count and self.g2_sum > 0 else None

    def as_dict(self) -> dict:
        return {**asdict(self), "b_simple": self.b_simple,
                "g2": self.g2_sum / self.count if self.count else None,
                "trace": self.trace_sum / self.count if self.count else None}


@dataclass
class SmoothedNoiseScale:
    """Exponential moving averages of the |G|^2 and tr(Sigma) estimates (McCandlish et al. smooth both before
    taking the ratio), bias-corrected as Adam's moments are: B_simple near the current point of training, where
    the whole-run ratio mixes early training (large |G|^2) with late."""

    decay: float = 0.9  # per measurement: about the last 10 measured steps
    g2: float = 0.0
    trace: float = 0.0
    weight: float = 0.0  # 1 - decay^count: the bias correction

    def add(self, g2_small: float, g2_big: float, b_small: float, b_big: float) -> None:
        g2, trace = estimate(g2_small, g2_big, b_small, b_big)
        # the two averages share one weight: the first call reads it, the second moves it on
        self.g2, _, _ = ema_update([self.g2, self.weight, None], g2, self.decay)
        self.trace, self.weight, _ = ema_update([self.trace, self.weight, None], trace, self.decay)

    @property
    def b_simple(self) -> float | None:
        return self.trace / self.g2 if self.weight > 0 and self.g2 > 0 else None  # the correction cancels
