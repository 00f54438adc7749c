"""Pure scaling math: speedup and efficiency, steps to a target, and the critical batch.

The critical batch follows McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training"): the steps
to reach a target fall with the batch as S(B) = S_min (1 + B_noise / B); B_noise is where doubling the batch
stops halving the steps. Their gradient noise scale B_simple = tr(Sigma) / |G|^2 predicts it from gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def scaling_series(trials, means=()):
    """Groups of finished trials that scale over GPUs: per variant, a fixed local batch (weak scaling) or a
    fixed global batch (strong scaling), each over two or more GPU counts. Yields (variant, regime, per-GPU
    means of epoch_seconds, images_per_second and the trial columns `means`, global_batch, local_batch)."""
    t = trials.dropna(subset=["epoch_seconds"]).assign(variant=trials["variant"].fillna("-"))
    for variant, g in t.groupby("variant", sort=True):
        for regime, key in (("weak", "local_batch"), ("strong", "global_batch")):
            for _, s in g.groupby(key, sort=True):
                if s["gpus"].nunique() < 2:
                    continue
                per = s.groupby("gpus").agg(epoch_seconds=("epoch_seconds", "mean"),
                                            images_per_second=("images_per_second", "mean"),
                                            **{c: (c, "mean") for c in means},
                                            global_batch=("global_batch", "first"),
                                            local_batch=("local_batch", "first")).reset_index()
                yield variant, regime, per


def speedup_efficiency(gpus, epoch_seconds) -> tuple[np.ndarray, np.ndarray]:
    """Speedup T(K0) / T(K) of the time per epoch against the fewest GPUs K0, and efficiency = speedup / (K/K0).

    For a fixed number of images per epoch both regimes ideally give T ~ 1/K: in weak scaling each step does
    K times the work in the same time, in strong scaling each step's work is split K ways."""
    k = np.asarray(gpus, dtype=float)
    t = np.asarray(epoch_seconds, dtype=float)
    i0 = int(np.argmin(k))
    speedup = t[i0] / t
    return speedup, speedup / (k / k[i0])


def positive_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) pairs where both are finite and positive, as float arrays (the fits work in logs or 1/x)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    return x[ok], y[ok]


@dataclass(frozen=True)
class CriticalBatchFit:
    s_min: float  # steps needed with an infinite batch
    b_noise: float  # the critical batch
    points: int

    def steps(self, batch):
        return self.s_min * (1 + self.b_noise / np.asarray(batch, dtype=float))


def fit_critical_batch(batches, steps) -> CriticalBatchFit | None:
    """S = S_min (1 + B_noise / B) fitted in relative error (least squares of log S; `fits.critical_batch`).

    None where the data cannot support the fit: fewer than three distinct batches (no residual left), or a
    B_noise outside the measured batches (`fits.critical_batch` says which bound and why). Several values of
    one batch (seeds) are fitted as they are."""
    from lbscale.report.fits import critical_batch

    fit = critical_batch(batches, steps)
    if not fit.ok:
        return None
    return CriticalBatchFit(float(fit.extra["s_min"]), float(fit.value), int(fit.dof + 2))
