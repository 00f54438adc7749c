"""Points of a search space in the unit cube (scipy.stats.qmc's scrambled Sobol' and Halton sequences, or plain
random draws) and the log-uniform transform, as the sweep's search draws them (sweep/search.py) and the designer
prices them (analysis/design.py): the same seed gives the same points in both."""

from __future__ import annotations

import math

import numpy as np


def unit_points(d: int, n: int, sampler: str, seed: int) -> np.ndarray:
    """n points in [0, 1)^d from the sampler, seeded (scipy.stats.qmc for the quasi-random ones)."""
    if sampler == "random":
        return np.random.default_rng(seed).random((n, d))
    import warnings

    from scipy.stats import qmc

    engine = {"sobol": qmc.Sobol, "halton": qmc.Halton}[sampler]
    try:
        gen = engine(d, scramble=True, rng=seed)
    except TypeError:  # scipy before 1.15 names it seed
        gen = engine(d, scramble=True, seed=seed)
    with warnings.catch_warnings():  # Sobol' warns when n is not a power of two: balance is the user's choice
        warnings.simplefilter("ignore")
        return gen.random(n)


def round_value(value: float) -> float:
    """A drawn (or derived) option value as trial.yaml shows it: 4 significant digits."""
    return float(f"{value:.4g}")


def loguniform(lo: float, hi: float, u: float) -> float:
    """The log-uniform draw in [lo, hi] at unit point u, rounded as trial.yaml shows it."""
    return round_value(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
