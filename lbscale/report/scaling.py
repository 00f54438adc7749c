"""Pure scaling math: the series of GPU counts a study ran, speedup and efficiency. The critical batch has its
own home: `report.steps_model`."""

from __future__ import annotations


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
