"""The study's analysis as pure DataFrame functions: steps to a target per trial, the series of GPU counts a study
ran, speedup and efficiency. The critical batch has its own home: `report.steps_model`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lbscale.report.load import Study
from lbscale.report.tuned import steps_to_result
from lbscale.results import FINISHED
from lbscale.task import Task

GROUP = ["variant", "warmup", "global_batch", "gpus"]  # a rule-based study's groups; statistics are over seeds


def target_steps(study: Study, metric: str, target: float, task: Task) -> pd.DataFrame:
    """Steps / epochs / seconds to `target` per finished trial, from its evaluations (step evaluations where the
    trial made them, else its epoch records: an analysis choice made after the runs); trials that never reached
    it have None; step_before (the evaluation before the crossing) and last_step (its last evaluation)."""
    t = study.trials[study.trials["state"].isin(FINISHED)]
    keys = ["results", "trial"]
    out = t[keys + GROUP + ["seed"]].copy()
    ev = study.steps
    if len(ev) == 0 or metric not in ev:
        return out.assign(steps=None, epochs=None, seconds=None)
    first = steps_to_result(ev, metric, target, task.higher_is_better(metric), keys)
    first = first.rename(columns={"step": "steps", "epoch": "epochs", "elapsed_seconds": "seconds"})
    last = ev.dropna(subset=[metric]).groupby(keys, sort=False)["step"].max().rename("last_step").reset_index()
    return out.merge(first, on=keys, how="left").merge(last, on=keys, how="left")


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
