"""Synthetic tuned studies drawn from lbscale's own model with a known truth, as the frames `report.tuned` reads
(`Study.trials`, `Study.steps`): for the coverage of the verdict's intervals and the report's benchmarks.

The model (tests/report/make_tuned.py's closed form, with seed noise): a trial of batch B and LR lr needs
S(B) (1 + k |log2(lr / lr*(B))|) e^(sigma z) steps to the target, S(B) = S_min (1 + B_crit / B), lr*(B) = c B^alpha,
z standard normal per trial; a trial that would need more than `budget` steps stops there without reaching it.
A trial is evaluated at steps growing by 10% (so its crossing is known within 10%).
The search is the demo's: 6 Halton points log-uniform in 0.005 .. 0.5, the same at every batch; a confirmation
stage reruns the `top` best points of every batch with `seeds` more seeds."""

import numpy as np
import pandas as pd
from scipy.stats import qmc

BATCHES = (32, 64, 128, 256, 512)


def _evaluations(limit: float) -> np.ndarray:
    steps, s = [], 1.0
    while s <= limit:
        steps.append(s)
        s = max(s + 1, float(np.ceil(s * 1.1)))
    return np.array(steps)


EVALS = _evaluations(1e6)


def demo_grid(points: int = 6, lo: float = 0.005, hi: float = 0.5, seed: int = 0) -> np.ndarray:
    """The demo's search: scrambled Halton points, log-uniform in [lo, hi] (as `grid.search` draws them)."""
    try:
        u = qmc.Halton(1, scramble=True, rng=seed).random(points)[:, 0]
    except TypeError:  # scipy before 1.15
        u = qmc.Halton(1, scramble=True, seed=seed).random(points)[:, 0]
    return np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))


def needed(batch, lr, alpha=0.5, b_noise=128.0, s_min=100.0, c=0.05 / 32 ** 0.5, k=0.5):
    return s_min * (1 + b_noise / batch) * (1 + k * np.abs(np.log2(lr / (c * batch ** alpha))))


def study(rng: np.random.Generator, alpha: float = 0.5, b_noise: float = 128.0, sigma: float = 0.1,
          budget: float = 4000.0, top: int = 0, seeds: int = 0, batches=BATCHES, lrs=None, target: float = 0.9,
          variant: str = "sgd") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trials, steps) of one study: every (batch, point) once with seed 0, then the confirmation stage."""
    lrs = demo_grid() if lrs is None else np.asarray(lrs)
    c = 0.05 / 32 ** alpha  # lr* = 0.05 at batch 32: inside the search at every batch for alpha <= 1
    trials, steps = [], []

    def add(b, point, seed, lr):
        need = needed(b, lr, alpha, b_noise, c=c) * np.exp(sigma * rng.standard_normal())
        name = f"b{b}-p{point}-s{seed}"
        trials.append({"results": "r", "trial": name, "variant": variant, "global_batch": b, "seed": seed,
                       "state": "completed", "peak_lr": lr, "base_lr": lr, "point": point})
        # evaluations at steps growing by 10% (1, 2, ..., then x1.1): the one before the crossing and the
        # crossing (or the last within the budget) are what the analysis reads; the half-way one is a curve point
        at = EVALS[EVALS <= budget]
        i = int(np.searchsorted(at, need))
        kept = [at[i - 1]] if i >= len(at) else [at[max(i - 1, 0)], at[i]]
        for step in sorted({float(at[max(i // 2, 0)]), *map(float, kept)}):
            value = target if step >= need else target * step / need
            steps.append({"results": "r", "trial": name, "variant": variant, "global_batch": b, "step": step,
                          "epoch": step / 100, "elapsed_seconds": step * 0.01, "val_top1": value, "kind": "step"})
        return need

    for b in batches:
        first = [(add(b, j, 0, lr), j) for j, lr in enumerate(lrs)]
        for _, j in sorted(first)[:top]:
            for seed in range(1, seeds + 1):
                add(b, j, seed, lrs[j])
    return pd.DataFrame(trials), pd.DataFrame(steps)
