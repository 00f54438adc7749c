"""How many GPUs to ask for: time to the target and GPU-hours at every (global batch, GPU count), joined from the
two halves a study measures: the steps a batch needs (the steps model, `steps_model.steps_at`) and the time
a step takes at a local batch and GPU count (the step-time model below, with the ring all-reduce of
`analysis.allreduce_model` at GPU counts not run). Pure DataFrame functions; docs/scaling-model.md has the equations.

    time(B, K) = T0 + S(B) x step(B / K, K)     GPU-hours(B, K) = K x time(B, K) / 3600
    step(b, K) = a + c b  +  comm(K) + imbalance(K)     (b: samples per GPU per step, local batch x accumulation)
    comm(K)    = f x ring(K, gradient bytes), f the exposed share measured at K0 > 1 (1 where none was)

T0 is a trial's start-up (launch to its first optimizer step: imports, data, network, process group; summary.json's
`startup_seconds`), measured on the base: the mean over the 1-GPU trials, the fresh processes among them where there
are any (a local sweep forks its 1-process trials warm, with torch already imported, and a K-GPU job starts fresh
processes); 0 for an lbscale that did not record it. Each process does the same work in parallel, so T0 is the same
at every K but for one thing: under torchrun (a local sweep's K-process trials) the agent is one more fresh process
that imports Python and torch before it starts the ranks, so K > 1 adds the base's own import (summary.json's
`import_seconds`; none inside a SLURM job, where srun starts the ranks). The rendezvous and DDP's first broadcast
are not measured on the base; the time-to-target benchmark checks the whole at 2 processes. At a measured (b, K) the
step is the measured one, exactly. S(B) comes from the steps model over every trial with its profile-likelihood
interval at every batch, measured or not (one level throughout), else (fewer than two reached batches) from the
measured optima alone; a batch past the measured ones is predicted only where B_crit has a two-sided interval, and
then marked extrapolated.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lbscale.analysis.allreduce_model import DDP_BUCKET_BYTES, ring_allreduce_seconds
from lbscale.analysis.intervals import t_quantile
from lbscale.analysis.intervals import LEVEL

STEP_PARTS = ("data_seconds", "compute_seconds", "comm_seconds", "imbalance_seconds", "train_seconds")


def startup_per_trial(trials: pd.DataFrame) -> pd.Series:
    """Each trial's start-up [s] as the step-time model counts it (NaN: not counted): its `startup_seconds`,
    a warm-started trial's left out where a 1-GPU trial started fresh (a fork that imported nothing understates
    what a fresh K-process job pays)."""
    seconds = pd.to_numeric(trials.get("startup_seconds", pd.Series(math.nan, index=trials.index)),
                            errors="coerce")
    warm = _warm(trials)
    fresh_base = (~warm & seconds.notna() & (trials["gpus"] == 1)).any()
    return seconds.where(~warm) if fresh_base else seconds


def agent_per_trial(trials: pd.DataFrame) -> pd.Series:
    """Each trial's estimate of the start-up a K-process job adds under torchrun [s]: torchrun's agent is one
    more fresh process that imports Python and torch before it starts the ranks, so it is the trial's own import
    (`import_seconds`) where it started fresh outside SLURM; 0 inside a SLURM job (srun starts the ranks, no
    agent); NaN where a fresh trial did not record it."""
    imports = pd.to_numeric(trials.get("import_seconds", pd.Series(math.nan, index=trials.index)), errors="coerce")
    slurm = trials.get("slurm_job", pd.Series(None, index=trials.index)).notna()
    return imports.where(~slurm, 0.0).where(~_warm(trials))


def _warm(trials: pd.DataFrame) -> pd.Series:
    """Which trials were forked from a local sweep's warm-start server (torch imported before the fork)."""
    return trials.get("started", pd.Series(None, index=trials.index)) == "warm"


def measured_steps(epochs: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Per measured (per-GPU batch, GPUs): the seconds of one optimizer step, by part, over the trials' steady
    epochs (full epochs after the first; a trial with none, e.g. stopped at its target in its second epoch, gives
    its first and its partial one), averaged over trials; with `gradient_bytes` and the trials' mean start-up
    (`startup_per_trial`). An epoch's steps: the difference of its record's `step` to the one before
    (steps_per_epoch where no step was recorded)."""
    if epochs is None or not len(epochs):
        return pd.DataFrame(columns=["per_gpu", "gpus", *STEP_PARTS, "gradient_bytes", "startup_seconds",
                                     "agent_seconds", "trials"])
    trials = trials.assign(startup_seconds=startup_per_trial(trials), agent_seconds=agent_per_trial(trials))
    keys = ["results", "trial"]
    extra = [c for c in ("global_batch", "gpus", "steps_per_epoch", "gradient_bytes", "startup_seconds",
                         "agent_seconds") if c not in epochs]
    e = epochs.merge(trials[[*keys, *extra]], on=keys) if extra else epochs
    e = e.sort_values([*keys, "epoch"])
    spe = pd.to_numeric(e["steps_per_epoch"], errors="coerce")
    if "step" in e:
        done = pd.to_numeric(e["step"], errors="coerce")
        before = done.groupby([e[k] for k in keys]).shift(1)
        first = e.groupby(keys).cumcount() == 0
        spe = (done - before.where(~first, 0.0)).fillna(spe)  # a step missing before: steps_per_epoch
    e = e.assign(_steps=spe)[spe > 0]
    partial = e["partial"].astype(bool) if "partial" in e else pd.Series(False, index=e.index)
    steady = ~partial & (e.groupby(keys)["epoch"].transform("min") < e["epoch"])
    e = e[steady | ~steady.groupby([e[k] for k in keys]).transform("any")]
    zero = pd.Series(0.0, index=e.index)  # a part not recorded (no all-reduce at one GPU) took no time
    per = {c: pd.to_numeric(e[c], errors="coerce").fillna(0.0) / e["_steps"] if c in e else zero
           for c in STEP_PARTS}
    if "compute_seconds" not in e or e["compute_seconds"].isna().all():  # an lbscale that did not time it apart
        per["compute_seconds"] = (per["train_seconds"] - per["data_seconds"] - per["comm_seconds"]
                                  - per["imbalance_seconds"]).clip(lower=0.0)
    rows = pd.DataFrame({"per_gpu": e["global_batch"] / e["gpus"], "gpus": e["gpus"], "trial": e["trial"], **per,
                         "gradient_bytes": pd.to_numeric(e["gradient_bytes"], errors="coerce"),
                         "startup_seconds": e["startup_seconds"], "agent_seconds": e["agent_seconds"]})
    per_trial = rows.groupby(["per_gpu", "gpus", "trial"]).mean(numeric_only=True).reset_index()
    parts = [*STEP_PARTS, "gradient_bytes", "startup_seconds", "agent_seconds"]
    out = per_trial.groupby(["per_gpu", "gpus"]).agg(**{c: (c, "mean") for c in parts},
                                                     trials=("trial", "nunique")).reset_index()
    return out


def step_model(measured: pd.DataFrame, allreduce: dict | None) -> dict:
    """The step-time model from `measured_steps`: compute + data per step = a + c x per-GPU batch (least squares
    over the measured points, with its residual), the exposed share f of the ring all-reduce (mean over measured
    points at K > 1; 1 where none), the imbalance per step (mean over K > 1), the gradient bytes, and the start-up
    T0 (mean over the 1-GPU points; 0 where none was recorded) with what K > 1 processes add to it under torchrun
    (`agent`: the base's import, `agent_per_trial`)."""
    m = measured.dropna(subset=["per_gpu"])
    x = m["per_gpu"].to_numpy(float)
    y = (m["compute_seconds"] + m["data_seconds"]).to_numpy(float)
    if len(np.unique(x)) >= 2:  # non-negative least squares: a step never takes less than nothing
        from scipy.optimize import nnls

        (a, c), _ = nnls(np.stack([np.ones_like(x), x], axis=1), y)
        residual = float(np.sqrt(np.mean((y - (a + c * x)) ** 2)))
    else:  # one local batch: compute proportional to it
        a, c, residual = 0.0, float(y.mean() / x.mean()) if len(x) else 0.0, math.nan
    grad = float(m["gradient_bytes"].dropna().median()) if m["gradient_bytes"].notna().any() else math.nan
    multi = m[m["gpus"] > 1]
    base = pd.to_numeric(m.loc[m["gpus"] == 1, "startup_seconds"], errors="coerce") if "startup_seconds" in m \
        else pd.Series(dtype=float)
    agent = pd.to_numeric(m.loc[m["gpus"] == 1, "agent_seconds"], errors="coerce") if "agent_seconds" in m \
        else pd.Series(dtype=float)
    shares = []
    if allreduce is not None and len(multi) and math.isfinite(grad):
        for r in multi.itertuples():
            ring = _ring(int(r.gpus), grad, allreduce)
            if ring > 0:
                shares.append(min(1.0, r.comm_seconds / ring))
    return {"a": float(a), "c": float(c), "residual": residual, "points": int(len(m)),
            "per_gpu_span": (float(x.min()), float(x.max())) if len(x) else (math.nan, math.nan),
            "exposed": float(np.mean(shares)) if shares else 1.0, "calibrated": bool(shares),
            "imbalance": float(multi["imbalance_seconds"].mean()) if len(multi) else 0.0,
            "gradient_bytes": grad, "allreduce": allreduce,
            "startup": float(base.mean()) if base.notna().any() else 0.0,
            "agent": float(agent.mean()) if agent.notna().any() else 0.0}


def _ring(gpus: int, gradient_bytes: float, allreduce: dict) -> float:
    fit = allreduce["fit"]
    buckets = max(1, math.ceil(gradient_bytes / DDP_BUCKET_BYTES))
    return ring_allreduce_seconds(gpus, gradient_bytes, fit["alpha_seconds"], fit["beta_seconds_per_byte"], buckets)


def step_seconds(model: dict, measured: pd.DataFrame, per_gpu: float, gpus: int) -> tuple[float, str]:
    """Seconds per optimizer step at `per_gpu` samples per GPU and `gpus` GPUs, and where it comes from:
    'measured' (a measured point, exactly), 'model' ('model, extrapolated' at a per-GPU batch outside the
    measured ones), or 'no model' (NaN: more than one GPU, not measured, and no all-reduce fit or gradient size
    to predict the communication)."""
    hit = measured[(measured["per_gpu"] == per_gpu) & (measured["gpus"] == gpus)]
    if len(hit):
        return float(hit["train_seconds"].iloc[0]), "measured"
    compute = model["a"] + model["c"] * per_gpu
    lo, hi = model.get("per_gpu_span", (per_gpu, per_gpu))
    source = "model" if lo <= per_gpu <= hi else "model, extrapolated"
    if gpus == 1:
        return compute, source
    if model["allreduce"] is None or not math.isfinite(model["gradient_bytes"]):
        return math.nan, "no model"
    comm = model["exposed"] * _ring(gpus, model["gradient_bytes"], model["allreduce"])
    return compute + comm + model["imbalance"], source


def interpolated_steps(reached: pd.DataFrame, batches) -> pd.DataFrame:
    """S(B) at `batches` by log-log interpolation between the measured optima (`reached`: global_batch, steps_star,
    and steps_lo / steps_hi where the seeds give a spread), never past them ('not predicted'): where the steps
    model has too few reached batches to fit."""
    b = np.asarray(sorted(set(float(x) for x in batches)), dtype=float)
    out = pd.DataFrame({"global_batch": b})
    r = reached.dropna(subset=["steps_star"]).sort_values("global_batch")
    xs = np.log(r["global_batch"].to_numpy(float))
    inside = (len(xs) >= 1) & (b >= (r["global_batch"].min() if len(r) else np.inf)) \
        & (b <= (r["global_batch"].max() if len(r) else -np.inf))
    cols = {}
    for col in ("steps_star", "steps_lo", "steps_hi"):
        ys = np.log(r[col].to_numpy(float)) if col in r else np.full(len(xs), np.nan)
        cols[col] = np.where(inside, np.exp(np.interp(np.log(b), xs, ys)) if len(xs) else np.nan, np.nan)
    lo = cols["steps_lo"] if "steps_lo" in r else np.where(inside, 0.0, np.nan)
    hi = cols["steps_hi"] if "steps_hi" in r else np.where(inside, np.inf, np.nan)
    return out.assign(steps=cols["steps_star"], steps_lo=np.where(np.isnan(lo) & inside, 0.0, lo),
                      steps_hi=np.where(np.isnan(hi) & inside, np.inf, hi),
                      steps_source=np.where(inside, "interpolated", "not predicted"))


def one_run_steps(run_batch: float, run_steps: float, b_simple: float, batches) -> pd.DataFrame:
    """S(B) from one run, approximately (McCandlish et al.): S = S_min (1 + B_crit / B) with B_crit taken as the
    run's noise scale B_simple near its target and S_min from its own steps at its batch, S_min = S_run / (1 +
    B_simple / B_run). It assumes SGD-like dynamics and that B_simple stands for B_crit."""
    b = np.asarray(sorted(set(float(x) for x in batches)), dtype=float)
    s_min = run_steps / (1 + b_simple / run_batch)
    s = s_min * (1 + b_simple / b)
    return pd.DataFrame({"global_batch": b, "steps": s, "steps_lo": np.nan, "steps_hi": np.nan,
                         "steps_source": "one run (GNS)"})


def time_grid(steps: pd.DataFrame, model: dict, measured: pd.DataFrame, gpus, level: float = LEVEL) -> pd.DataFrame:
    """Time to target [s] and GPU-hours at every (global batch of `steps`, GPU count of `gpus`) where the batch
    splits into at least one sample per GPU, with an interval at `level`: S(B)'s interval and the step time's
    (its fit's residual times the t quantile on the fit's residual degrees of freedom; none at a measured step)
    joined in log space (half-widths added in quadrature), the start-up T0 added to the time and both its ends
    (`startup_seconds`); each row's sources, and `measured_step` where the step was measured."""
    rows = []
    q = _t(model.get("points", 0) - 2, level)
    for r in steps.itertuples():
        for k in sorted(set(int(g) for g in gpus)):
            t0 = model.get("startup", 0.0) + (model.get("agent", 0.0) if k > 1 else 0.0)
            per_gpu = r.global_batch / k
            if per_gpu < 1 or per_gpu != int(per_gpu):
                continue
            step, source = step_seconds(model, measured, per_gpu, k)
            err = 0.0 if source == "measured" or not math.isfinite(model["residual"]) else q * model["residual"]
            lo, hi = _joined(r.steps, r.steps_lo, r.steps_hi, step, err)
            rows.append({"global_batch": r.global_batch, "gpus": k, "per_gpu": per_gpu, "steps": r.steps,
                         "steps_source": r.steps_source, "step_seconds": step, "step_source": source,
                         "startup_seconds": t0, "seconds": t0 + r.steps * step, "seconds_lo": t0 + lo,
                         "seconds_hi": t0 + hi})
    out = pd.DataFrame(rows, columns=["global_batch", "gpus", "per_gpu", "steps", "steps_source", "step_seconds",
                                      "step_source", "startup_seconds", "seconds", "seconds_lo", "seconds_hi"])
    for col in ("", "_lo", "_hi"):
        out[f"gpu_hours{col}"] = out["gpus"] * out[f"seconds{col}"] / 3600
    return out


def _t(dof: int, level: float) -> float:
    """The two-sided t quantile; infinite without a residual degree of freedom."""
    return t_quantile(dof, level) if dof >= 1 else math.inf


def _joined(steps: float, steps_lo: float, steps_hi: float, step: float, err: float) -> tuple[float, float]:
    """(lo, hi) of steps x step from the two intervals, their log half-widths added in quadrature (independent
    errors); an open end of either is open."""
    if not (math.isfinite(steps) and math.isfinite(step)) or steps <= 0 or step <= 0:
        return math.nan, math.nan
    h_step = math.log1p(err / step) if math.isfinite(err) else math.inf
    h_lo = math.log(steps / steps_lo) if steps_lo and steps_lo > 0 else math.inf
    h_hi = math.log(steps_hi / steps) if math.isfinite(steps_hi) else math.inf
    lo = steps * step * math.exp(-math.hypot(h_lo, h_step)) if math.isfinite(h_lo) and math.isfinite(h_step) else 0.0
    hi = steps * step * math.exp(math.hypot(h_hi, h_step)) if math.isfinite(h_hi) and math.isfinite(h_step) \
        else math.inf
    return lo, hi


def best_per_gpus(grid: pd.DataFrame) -> pd.DataFrame:
    """Per GPU count, the batch with the least time to target."""
    g = grid.dropna(subset=["seconds"])
    return g.loc[g.groupby("gpus")["seconds"].idxmin()].sort_values("gpus").reset_index(drop=True) if len(g) else g


def weak_line(grid: pd.DataFrame, per_gpu: float) -> pd.DataFrame:
    """The fixed-local-batch (weak-scaling) configurations: B = per_gpu x K at every K."""
    return grid[grid["per_gpu"] == per_gpu].dropna(subset=["seconds"]).sort_values("gpus").reset_index(drop=True)


def pareto(grid: pd.DataFrame) -> pd.DataFrame:
    """The configurations no other beats in both time to target and GPU-hours."""
    g = grid.dropna(subset=["seconds"]).sort_values(["seconds", "gpu_hours"]).reset_index(drop=True)
    keep, cheapest = [], math.inf
    for i, r in g.iterrows():
        if r["gpu_hours"] < cheapest:
            keep.append(i)
            cheapest = r["gpu_hours"]
    return g.loc[keep].reset_index(drop=True)


def recommend(grid: pd.DataFrame, gpu_budget: int | None = None, deadline_hours: float | None = None,
              gain: float = 0.1) -> dict:
    """The fastest configuration within `gpu_budget` GPUs, the cheapest (GPU-hours) whose time is within
    `deadline_hours`, and the smallest GPU count past which no larger count of the grid cuts the best time to
    target by `gain` (10 %) or more, with (its time, the best time past it, at how many GPUs) in
    `stops_paying_seconds`."""
    g = grid.dropna(subset=["seconds"])
    out = {"fastest": None, "cheapest": None, "stops_paying": None, "stops_paying_seconds": None}
    within = g[g["gpus"] <= gpu_budget] if gpu_budget else g
    if len(within):
        out["fastest"] = within.loc[within["seconds"].idxmin()].to_dict()
    fits = g[g["seconds"] <= deadline_hours * 3600] if deadline_hours else g
    if len(fits):
        out["cheapest"] = fits.loc[fits["gpu_hours"].idxmin()].to_dict()
    best = best_per_gpus(g).set_index("gpus")["seconds"].sort_index()
    for i, k in enumerate(best.index[:-1]):
        later = best.iloc[i + 1:]
        if later.min() > (1 - gain) * best[k]:  # no larger GPU count of the grid saves `gain` or more
            out["stops_paying"] = int(k)
            out["stops_paying_seconds"] = (float(best[k]), float(later.min()), int(later.idxmin()))
            break
    return out
