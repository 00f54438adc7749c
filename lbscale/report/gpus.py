"""How many GPUs to ask for, in the report (`lbscale report --allreduce FIT`): the time-to-target section that
opens the scaling section. Joins `time_to_target`'s pure functions to a study: which steps-to-target figures it
rests on (per variant: the steps model over its trials, `steps_model.steps_at`; or one run's noise scale, McCandlish
et al.'s approximation), the grid of (global batch, GPU count), the table, the
figure and the recommendation line. docs/scaling-model.md has the equations and what they assume."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

import numpy as np

from lbscale.analysis.intervals import t_quantile
from lbscale.report.numbers import estimate_cell, interval_after, number, whole
from lbscale.analysis.intervals import LEVEL
from lbscale.report.steps_model import steps_at
from lbscale.report.critical_batch import arm_model
from lbscale.report.tables import Table, batch_label
from lbscale.report.time_to_target import (best_per_gpus, interpolated_steps, measured_steps, one_run_steps, pareto,
                                           recommend, step_model, time_grid)

EXTRA_DOUBLINGS = 2  # with a bounded fit, batches predicted past the largest measured one (marked extrapolated)
ONE_RUN_DOUBLINGS = 4  # the one-run approximation: the run's batch halved and doubled this many times


@dataclass
class Basis:
    """What a grid's steps to target rest on: a variant's study (its reached batches and their fit) or one run."""

    variant: str
    label: str  # "study" or "one run (<trial>, B_simple ...)"
    steps: pd.DataFrame  # steps_to_target's frame
    note: str


def arm(frame: pd.DataFrame) -> pd.Series:
    """Each row's arm of the study: its variant, with its warm-up where the rows have several (a rule-based grid's
    warm-up axis is a study of its own, never averaged with the others)."""
    variant = frame["variant"].fillna("-").astype(str) if "variant" in frame else pd.Series("-", index=frame.index)
    if "warmup" not in frame or frame["warmup"].fillna("-").nunique() < 2:
        return variant
    return variant + ", warm-up " + frame["warmup"].fillna("-").astype(str)


def reached_per_batch(per_trial: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Rule-based trials (variant, warmup, global_batch, steps: NaN where not reached) as one figure per (arm,
    batch): steps_star the geometric mean over its trials where every one reached the target (else the batch is
    unreached), with the seeds' spread as steps_lo / steps_hi (the t-interval of the mean log steps at `level`;
    open with one seed)."""
    rows = []
    for (variant, b), g in per_trial.groupby([arm(per_trial), "global_batch"], sort=True):
        s = pd.to_numeric(g["steps"], errors="coerce")
        reached = bool(len(s)) and bool(s.notna().all())
        y = np.log(s.to_numpy(float)) if reached else np.array([])
        half = (t_quantile(len(y) - 1, level) * y.std(ddof=1) / math.sqrt(len(y))
                if len(y) >= 2 else math.inf)
        rows.append({"variant": variant, "global_batch": float(b), "reached": reached,
                     "steps_star": float(np.exp(y.mean())) if reached else math.nan,
                     "steps_lo": float(np.exp(y.mean() - half)) if reached else math.nan,
                     "steps_hi": float(np.exp(y.mean() + half)) if reached else math.nan})
    return pd.DataFrame(rows, columns=["variant", "global_batch", "reached", "steps_star", "steps_lo", "steps_hi"])


def grid_batches(reached, extend: int = 0, below: float = math.inf) -> list[float]:
    """The reached batches and the doublings between them (from the smallest), `extend` doublings past the
    largest, never up to `below` (the smallest batch above them that was run and did not reach the target)."""
    b = sorted(set(float(x) for x in reached if x and math.isfinite(float(x))))
    if not b:
        return []
    out, x = set(b), b[0]
    while x * 2 <= b[-1] * 2 ** extend and x * 2 < below:
        x *= 2
        out.add(x)
    return sorted(out)


def study_bases(optima: pd.DataFrame, per_trial: pd.DataFrame | None = None, models: dict | None = None) \
        -> list[Basis]:
    """Per arm (variant, and warm-up where it varies), steps to target from the steps model over its trials
    (`models` by arm, else fitted here without the LR bowl from `per_trial`: a rule-based study), with its
    interval at every batch; two doublings past the largest reached batch only where B_crit has a two-sided
    interval (marked extrapolated), never up to a larger batch that was run and missed the target. Without a model
    (fewer than two reached batches), the measured optima with their seeds' spread."""
    out = []
    for variant, g in optima.groupby(arm(optima), sort=True):
        hit = g[g["reached"].astype(bool)].dropna(subset=["steps_star"])
        model = (models or {}).get(variant)
        if model is None and models is None and per_trial is not None and len(per_trial) and "steps" in per_trial:
            model = arm_model(per_trial[arm(per_trial) == variant])
        bounded = model is not None and model.estimates["b_crit"].kind == "interval"
        top = hit["global_batch"].max() if len(hit) else math.inf
        missed = g.loc[~g["reached"].astype(bool) & (g["global_batch"] > top), "global_batch"]
        batches = grid_batches(hit["global_batch"], EXTRA_DOUBLINGS if bounded else 0,
                               float(missed.min()) if len(missed) else math.inf)
        if model is not None and batches:
            steps = steps_at(model, batches)
            outside = (steps["global_batch"] < min(model.batches)) | (steps["global_batch"] > max(model.batches))
            steps["steps_source"] = np.where(outside, "model, extrapolated", "model")
            crit = model.estimates["b_crit"]
            how = (f"the steps model over every trial ({model.n} reached the target; B_crit "
                   f"{estimate_cell(crit.value, crit.lo, crit.hi, crit.kind, whole)}), its {LEVEL:.0%} interval at "
                   "each batch")
        else:
            steps = interpolated_steps(hit, batches)
            how = f"between the measured optima of {len(hit)} reached batch{'' if len(hit) == 1 else 'es'}"
        out.append(Basis(variant, "study", steps, how))
    return out


def one_run_bases(per_trial: pd.DataFrame, evaluations: pd.DataFrame) -> list[Basis]:
    """Per variant, McCandlish et al.'s approximation from one run: the first trial (by batch, then id) that
    reached the target and measured the noise scale (`--gns-every`) at or before that step; B_simple its last
    value there, S_min from its own steps."""
    if evaluations is None or "gns_b_simple" not in evaluations or not len(per_trial):
        return []
    out = []
    hit = per_trial.dropna(subset=["steps"]).sort_values(["global_batch", "trial"])
    for variant, g in hit.groupby(arm(hit), sort=True):
        for r in g.itertuples():
            ev = evaluations[(evaluations["results"] == r.results) & (evaluations["trial"] == r.trial)]
            ev = ev[(ev["step"] <= r.steps) & ev["gns_b_simple"].notna()].sort_values("step")
            if not len(ev) or not float(ev["gns_b_simple"].iloc[-1]) > 0:
                continue
            b_simple = float(ev["gns_b_simple"].iloc[-1])
            batches = [r.global_batch * 2.0 ** k for k in range(-ONE_RUN_DOUBLINGS, ONE_RUN_DOUBLINGS + 1)]
            steps = one_run_steps(r.global_batch, float(r.steps), b_simple, batches)
            note = (f"one run, approximately: {r.trial} reached the target in {r.steps:,.0f} steps at batch "
                    f"{r.global_batch:,.0f} with B_simple {number(b_simple)} there (S = S_min (1 + B_crit / B), "
                    "B_crit taken as B_simple; assumes SGD-like dynamics)")
            out.append(Basis(variant, f"one run ({r.trial})", steps, note))
            break
    return out


def gpu_counts(measured: pd.DataFrame, predict: list[int] | None, largest_default: int) -> list[int]:
    """The measured GPU counts, the counts asked for (`--predict-gpus`), and every doubling from 1 up to the
    largest of them (up to `largest_default` where none are asked for)."""
    have = {int(k) for k in measured["gpus"].dropna()} | {1}
    top = max([*(predict or []), largest_default if not predict else 1, *have])
    out, k = set(have) | set(predict or []), 1
    while k <= top:
        out.add(k)
        k *= 2
    return sorted(out)


def weak_batch(measured: pd.DataFrame) -> float | None:
    """The per-GPU batch of the weak-scaling line: the most often measured one (the smallest among equals)."""
    if not len(measured):
        return None
    counts = measured.groupby("per_gpu")["trials"].sum()
    return float(counts[counts == counts.max()].index.min())


def grids(bases: list[Basis], model: dict, measured: pd.DataFrame, gpus: list[int]) -> pd.DataFrame:
    """Every basis's time grid, with its variant and basis label."""
    frames = [time_grid(b.steps.dropna(subset=["steps"]), model, measured, gpus).assign(variant=b.variant,
                                                                                       basis=b.label)
              for b in bases]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _gpus(k) -> str:
    return f"{int(k)} GPU" + ("" if int(k) == 1 else "s")


def _time(s) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s:,.0f} s" if s >= 100 else f"{s:.1f} s"


def _weak(grid: pd.DataFrame, per_gpu: float | None, k: int) -> dict:
    w = grid[(grid["per_gpu"] == per_gpu) & grid["seconds"].notna()] if per_gpu else grid.iloc[0:0]
    at, one = w[w["gpus"] == k], w[w["gpus"] == 1]
    if not len(at) or not len(one):
        return {"seconds": math.nan, "epoch_speedup": math.nan, "target_speedup": math.nan}
    a, o = at.iloc[0], one.iloc[0]
    return {"seconds": float(a["seconds"]), "epoch_speedup": k * o["step_seconds"] / a["step_seconds"],
            "target_speedup": o["seconds"] / a["seconds"]}


def time_table(grid: pd.DataFrame, bases: list[Basis], per_gpu: float | None, model: dict) -> Table:
    """Per (variant, basis) and GPU count: the best batch, its steps and step time (measured or modelled), time
    to target and GPU-hours with the interval carried from the steps' fit, beside the weak-scaling line (fixed
    per-GPU batch): its time to target and its speed-ups per epoch and to the target over one GPU."""
    disp, tidy = [], []
    for (variant, basis), g in grid.groupby(["variant", "basis"], sort=False):
        for r in best_per_gpus(g).itertuples():
            weak = _weak(g, per_gpu, int(r.gpus))
            measured = r.step_source == "measured"
            disp.append({"Variant": variant, "From": basis, "GPUs": int(r.gpus),
                         "Best batch": batch_label(r.global_batch) + (" (extrapolated)" if "extrap" in
                                                                      r.steps_source else ""),
                         "Steps to target": number(r.steps), "Step [s]": f"{r.step_seconds:.3g}"
                         + (" measured" if measured else " extrapolated" if "extrap" in r.step_source else ""),
                         "Time to target": _time(r.seconds) + interval_after(r.seconds_lo, r.seconds_hi, _time),
                         "GPU-hours": number(r.gpu_hours) + interval_after(r.gpu_hours_lo, r.gpu_hours_hi, number),
                         f"Weak ({per_gpu:,.0f}/GPU)" if per_gpu else "Weak": _time(weak["seconds"]),
                         "Weak speed-up per epoch": number(weak["epoch_speedup"]),
                         "Weak speed-up to target": number(weak["target_speedup"])})
            tidy.append({"variant": variant, "basis": basis, "gpus": int(r.gpus), "global_batch": r.global_batch,
                         "per_gpu": r.per_gpu, "steps": r.steps, "steps_source": r.steps_source,
                         "step_seconds": r.step_seconds, "step_source": r.step_source,
                         "startup_seconds": r.startup_seconds, "seconds": r.seconds,
                         "seconds_lo": r.seconds_lo, "seconds_hi": r.seconds_hi, "gpu_hours": r.gpu_hours,
                         "gpu_hours_lo": r.gpu_hours_lo, "gpu_hours_hi": r.gpu_hours_hi,
                         "weak_per_gpu": per_gpu, "weak_seconds": weak["seconds"],
                         "weak_epoch_speedup": weak["epoch_speedup"], "weak_target_speedup": weak["target_speedup"]})
    notes = [f"{b.variant}: {b.note}" for b in bases]
    residual = "-" if not math.isfinite(model["residual"]) else f"{model['residual']:.2g} s"
    notes.append(f"Step time: compute + data = {model['a']:.4g} + {model['c']:.4g} x per-GPU batch s "
                 f"(non-negative least squares over {model['points']} measured points, residual {residual}), plus "
                 f"{model['exposed']:.2f} x the fitted ring all-reduce"
                 + (" (the exposed share measured at more than one GPU)" if model["calibrated"] else
                    " (no exposed share measured: all of it counted as exposed)")
                 + "; a measured point is its measurement; 'extrapolated': a per-GPU batch outside the measured "
                   f"ones ({number(model['per_gpu_span'][0])}..{number(model['per_gpu_span'][1])}). Intervals: the "
                   "steps' fit (90%) and the step model's residual; none for interpolated steps. Each time adds "
                   f"the start-up, {model['startup']:.3g} s (launch to the first step, mean over the 1-GPU trials)"
                 + (f", and at more than one GPU {model['agent']:.3g} s more: torchrun's agent, one more process "
                    "that imports torch before it starts the ranks (the 1-GPU trials' own import)"
                    if model.get("agent") else "; the same at every GPU count") + ".")
    if (grid["step_source"] == "no model").any():
        notes.append("GPU counts without a row: no trial recorded its gradient size (config.json's "
                     "gradient_bytes), so the all-reduce cannot be predicted there.")
    return Table("time-to-target", "Time to target and GPU-hours per GPU count (best batch)", pd.DataFrame(disp),
                 pd.DataFrame(tidy), notes)


def recommendation(grid: pd.DataFrame, gpu_budget: int | None, deadline_hours: float | None) -> str | None:
    """One line from the study-based grid (every variant): the fastest configuration within the GPU budget, the
    cheapest within the deadline, and where adding GPUs stops paying."""
    g = grid[grid["basis"] == "study"].dropna(subset=["seconds"]) if len(grid) else grid
    g = g[~g["steps_source"].str.contains("extrap") & ~g["step_source"].str.contains("extrap")] if len(g) else g
    if not len(g):
        return None
    rec = recommend(g, gpu_budget, deadline_hours)
    several = g["variant"].nunique() > 1
    parts = []
    if rec["fastest"]:
        f = rec["fastest"]
        parts.append(f"fastest{f' within {gpu_budget} GPUs' if gpu_budget else ''}: batch "
                     f"{batch_label(f['global_batch'])} on {_gpus(f['gpus'])}{_of(f, several)}, "
                     f"{_time(f['seconds'])}{interval_after(f['seconds_lo'], f['seconds_hi'], _time)}, "
                     f"{number(f['gpu_hours'])} GPU-hours" + _tie(g, f, gpu_budget, several))
    elif gpu_budget:
        parts.append(f"nothing predicted within {gpu_budget} GPUs")
    if rec["cheapest"]:
        c = rec["cheapest"]
        parts.append(f"cheapest{f' within {deadline_hours:g} h' if deadline_hours else ''}: batch "
                     f"{batch_label(c['global_batch'])} on {_gpus(c['gpus'])}{_of(c, several)}, "
                     f"{number(c['gpu_hours'])} GPU-hours in {_time(c['seconds'])}")
    elif deadline_hours:
        parts.append(f"nothing predicted within {deadline_hours:g} h")
    if rec["stops_paying"]:
        k, (now, later, at) = rec["stops_paying"], rec["stops_paying_seconds"]
        both = f"({_time(now)} on {_gpus(k)}, at best {_time(later)} on more: {_gpus(at)})"
        parts.append(f"more GPUs than {k} do not shorten the time to target {both}" if later >= now else
                     f"past {_gpus(k)} more GPUs cut the time to target by < 10% {both}")
    measured = int((g["step_source"] == "measured").sum())
    return (f"How many GPUs (time to target; {measured} of {len(g)} configurations within the measured batches "
            f"were run, their step time measured; the steps from the model, the rest predicted): " + "; ".join(parts))


def _tie(g: pd.DataFrame, best: dict, gpu_budget: int | None, several: bool) -> str:
    """' (a tie within the intervals with ...)' where the next fastest configuration's interval overlaps the
    fastest's: the ranking of the two is not resolved."""
    within = g[g["gpus"] <= gpu_budget] if gpu_budget else g
    other = within[(within["global_batch"] != best["global_batch"]) | (within["gpus"] != best["gpus"])
                   | (within["variant"] != best["variant"])]
    if not len(other):
        return ""
    r = other.loc[other["seconds"].idxmin()]
    if not (r["seconds_lo"] <= best["seconds_hi"] and best["seconds_lo"] <= r["seconds_hi"]):
        return ""
    spread = interval_after(r["seconds_lo"], r["seconds_hi"], _time)
    return (f" (a tie within the {LEVEL:.0%} intervals with batch {batch_label(r['global_batch'])} on "
            f"{_gpus(r['gpus'])}{_of(r, several)}, {_time(r['seconds'])}{spread})")


def _of(row: dict, several: bool) -> str:
    return f" ({row['variant']})" if several else ""


def published_rows(compare: pd.DataFrame | None, grid: pd.DataFrame) -> Table | None:
    """A published table's total training time beside the prediction at the same (batch, GPUs), labelled as
    different hardware."""
    if compare is None or "total_seconds" not in compare or not len(grid):
        return None
    c = compare.dropna(subset=["total_seconds", "gpus"])
    if "diverged" in c:  # a diverged run's time is not a time to accuracy
        c = c[pd.to_numeric(c["diverged"], errors="coerce").fillna(0) != 1]
    if not len(c):
        return None
    g = grid[grid["basis"] == "study"].dropna(subset=["seconds"])
    disp, tidy = [], []
    for r in c.itertuples():
        here = g[(g["global_batch"] == r.global_batch) & (g["gpus"] == r.gpus)]
        pred = float(here["seconds"].min()) if len(here) else math.nan
        disp.append({"Batch": batch_label(r.global_batch), "GPUs": int(r.gpus),
                     "Published total time": _time(float(r.total_seconds)), "Predicted time to target": _time(pred)})
        tidy.append({"global_batch": r.global_batch, "gpus": int(r.gpus), "published_seconds": r.total_seconds,
                     "predicted_seconds": pred})
    return Table("time-published", "Published training time beside the prediction (different hardware)",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["Published: the paper's total training time to its final metric, on its own hardware and "
                  "data pipeline; predicted: this study's steps to its target and this machine's step time."])


@dataclass
class TimeToTarget:
    """Time to target and GPU-hours per GPU count (`grid`) predicted from the all-reduce fit, and the line that
    recommends a configuration; the report's entries (`report.sections`) make its tables and figure."""

    grid: pd.DataFrame
    bases: list
    per_gpu: float | None
    model: dict
    compare: pd.DataFrame | None
    advice: str | None

    def table(self) -> Table:
        return time_table(self.grid, self.bases, self.per_gpu, self.model)

    def published(self) -> Table | None:
        return published_rows(self.compare, self.grid)

    def figure(self):
        from lbscale.report import plots

        fronts = {k: pareto(g) for k, g in self.grid.groupby(["variant", "basis"], sort=False)}
        return plots.time_to_target(self.grid, fronts, self.per_gpu, self.compare)


def predicted_times(study, optima: pd.DataFrame, per_trial: pd.DataFrame, models: dict | None, scaling_model,
                   gpu_budget=None, deadline=None, largest_default: int = 1024,
                   compare: pd.DataFrame | None = None) -> TimeToTarget | None:
    """A study's time to target given the all-reduce fit; None where no steps to target can be predicted.
    `models`: the steps model per arm (a tuned study's), None to fit them here from `per_trial` (a rule-based
    one)."""
    measured = measured_steps(study.epochs, study.trials)
    if not len(measured):
        return None
    model = step_model(measured, scaling_model.doc)
    bases = [b for b in study_bases(optima, per_trial, models) if b.steps["steps"].notna().any()] \
        if len(optima) else []
    bases += one_run_bases(per_trial, study.steps)
    gpus = gpu_counts(measured, scaling_model.gpus, largest_default)
    grid = grids(bases, model, measured, gpus)
    if not len(grid) or grid["seconds"].notna().sum() == 0:
        return None
    return TimeToTarget(grid, bases, weak_batch(measured), model, compare,
                        recommendation(grid, gpu_budget, deadline))


def study_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Rule-based `tables.target_steps` (per trial) as `section`'s per-trial frame."""
    return steps.reindex(columns=["results", "trial", "variant", "warmup", "global_batch", "steps", "step_before",
                                  "last_step"])


def per_trial_of(outcomes: pd.DataFrame) -> pd.DataFrame:
    """A tuned study's `tuned.trial_outcomes` as `section`'s per-trial frame."""
    return outcomes.assign(steps=outcomes["steps_to_target"]).reindex(
        columns=["results", "trial", "variant", "global_batch", "steps"])

