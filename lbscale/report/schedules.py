"""Batch-size schedules beside fixed batches (Merrill et al. 2025, Table 1's shape): each growing schedule beside
every fixed batch of the study, steps, samples and time to the target with their intervals, the schedule's savings,
the time modelled on GPUs that grow with the batch (with --allreduce), and the metric against steps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lbscale.results import FINISHED
from lbscale.report.load import Study
from lbscale.report.numbers import number
from lbscale.report.tables import Table, batch_label


LEVEL = 0.9


def _growing(text) -> bool:
    """A schedule whose batch grows (a one-point schedule, BATCH@0, is a fixed batch run as an arm)."""
    return isinstance(text, str) and (text.startswith("auto:") or "," in text.strip(","))


def has_schedule(trials: pd.DataFrame) -> bool:
    """Whether a study holds a growing batch schedule (the schedules table and figure are drawn then)."""
    return "batch_schedule" in trials and bool(trials["batch_schedule"].map(_growing).any())


def _samples(study: Study, steps: pd.DataFrame) -> pd.Series:
    """Per trial of `steps` (target_steps), the training samples seen at the evaluation that reached the target."""
    keys = [k for k in ("results", "trial") if k in steps]
    ev = study.steps
    if "samples_seen" not in ev or steps["steps"].isna().all():
        return pd.Series(np.nan, index=steps.index)
    at = ev.dropna(subset=["samples_seen"]).drop_duplicates(keys + ["step"], keep="last")[keys + ["step",
                                                                                                 "samples_seen"]]
    merged = steps[keys + ["steps"]].merge(at, left_on=keys + ["steps"], right_on=keys + ["step"], how="left")
    return pd.Series(merged["samples_seen"].to_numpy(), index=steps.index)


def _mean_ci(values) -> tuple[str, float | None]:
    """'mean [lo, hi]' (Student t at LEVEL over seeds; the mean alone for one), and the mean."""
    from lbscale.analysis.intervals import t_quantile

    v = [float(x) for x in values if pd.notna(x) and math.isfinite(float(x))]
    if not v:
        return "-", None
    m = float(np.mean(v))
    if len(v) < 2:
        return number(m, 3), m
    half = t_quantile(len(v) - 1, LEVEL) * float(np.std(v, ddof=1)) / math.sqrt(len(v))
    return f"{number(m, 3)} [{number(m - half, 3)}, {number(m + half, 3)}]", m


def _arms(t: pd.DataFrame) -> tuple[list, list]:
    """(growing arms, fixed groups): each (label, schedule text or 'fixed', its trials)."""
    grow = [(v, text, g) for (v, text), g in t[t["batch_schedule"].map(_growing)].groupby(["variant",
                                                                                           "batch_schedule"])]
    fixed_t = t[~t["batch_schedule"].map(_growing)]
    fixed = [(f"batch {batch_label(b)}" + (f" ({v})" if fixed_t["variant"].nunique() > 1 else ""), "fixed", g)
             for (v, b), g in fixed_t.groupby(["variant", "global_batch"])]
    return grow, fixed


def _saving(arm: pd.DataFrame, ctrl: pd.DataFrame, column: str) -> tuple[float, float, float] | None:
    """The ratio of `column` (arm over fixed) from the trials that measured it; None where a side has none."""
    from lbscale.analysis.schedule import log_ratio_interval

    a, c = arm[column].dropna().astype(float), ctrl[column].dropna().astype(float)
    if not len(a) or not len(c) or (a <= 0).any() or (c <= 0).any():
        return None
    return log_ratio_interval(list(a), list(c), LEVEL)


def _brackets(frame: pd.DataFrame) -> list[tuple[float, float]]:
    """Each trial's steps to the target as (low, high]: the evaluation before its crossing and the one that met it;
    a trial that missed: (its last evaluation, inf)."""
    out = []
    for _, r in frame.iterrows():
        steps, before, last = (r.get(k) for k in ("steps", "step_before", "last_step"))
        if pd.notna(steps):
            out.append((float(before) if pd.notna(before) else 0.0, float(steps)))
        else:
            out.append((float(last) if pd.notna(last) else 0.0, math.inf))
    return out


def _steps_ratio(arm: pd.DataFrame, ctrl: pd.DataFrame) -> tuple | None:
    """The arm's steps over the fixed batch's, every seed counted (`analysis.schedule.bracketed_ratio`); None where
    either has no trial."""
    from lbscale.analysis.schedule import bracketed_ratio

    if not len(arm) or not len(ctrl):
        return None
    return bracketed_ratio(_brackets(arm), _brackets(ctrl), LEVEL)


def _pct(r: tuple | None, fewer: bool = True) -> str:
    """A ratio (arm over fixed) as a percent change, '38 [21, 52]% fewer' or '12 [-3, 30]% more' by the side of 1
    its point lies on: the point rounded, the interval's ends rounded outward; where an end is open a bound ('at
    least 12% fewer', 'at most 30% fewer'), where both are 'not resolved'; '-' where not measured. `r`: (point or
    None, lo, hi[, kind]); without a point the interval alone ('21 to 52% fewer'). `fewer` is kept for the
    callers' reading (steps and samples are written alike)."""
    if r is None:
        return "-"
    point, lo, hi = r[:3]
    if not lo > 0 and not math.isfinite(hi):
        return "not resolved"
    if not math.isfinite(hi):  # the ratio is above lo only
        return f"at most {math.ceil(100 * (1 - lo) - 1e-9)}% fewer" if lo < 1 else \
            f"at least {math.floor(100 * (lo - 1) + 1e-9)}% more"
    if not lo > 0:  # below hi only
        return f"at least {math.floor(100 * (1 - hi) + 1e-9)}% fewer" if hi < 1 else \
            f"at most {math.ceil(100 * (hi - 1) - 1e-9)}% more"
    x = point if point is not None else math.sqrt(lo * hi)
    if x <= 1:
        text, a, b = f"{100 * (1 - x):.0f}", 100 * (1 - hi), 100 * (1 - lo)
        word = "fewer"
    else:
        text, a, b = f"{100 * (x - 1):.0f}", 100 * (lo - 1), 100 * (hi - 1)
        word = "more"
    ends = f"{math.floor(a + 1e-9)}, {math.ceil(b - 1e-9)}"
    return f"{text} [{ends}]% {word}" if point is not None else f"{ends.replace(', ', ' to ')}% {word}"


def _phases(trial_dir, steps: float, first: int) -> list[tuple[int, int]]:
    """(batch, optimizer steps at it) up to `steps`: from the trial's summary.json's batch of every step (a fixed
    batch: one phase)."""
    from lbscale.results import SUMMARY, read_json

    changes = (read_json(trial_dir / SUMMARY) or {}).get("batch_schedule") or [{"step": 0, "global_batch": first}]
    out = []
    for c, nxt in zip(changes, changes[1:] + [{"step": math.inf}]):
        n = min(nxt["step"], steps) - c["step"]
        if n > 0:
            out.append((int(c["global_batch"]), int(n)))
    return out


def modelled_seconds(model: dict, phases: list[tuple[int, int]], per_gpu: int) -> float:
    """Seconds to the target on GPUs that grow with the batch (batch / `per_gpu` of them), from the step-time
    model of `report --allreduce` (`time_to_target.step_model`: compute + data at the per-GPU batch, plus the
    exposed ring all-reduce at that GPU count): the start-up once, then each phase's steps at its step time."""
    from lbscale.report.time_to_target import step_seconds

    none = pd.DataFrame(columns=["per_gpu", "gpus", "train_seconds"])
    total = model.get("startup", 0.0)
    for batch, n in phases:
        gpus = max(1, batch // per_gpu)
        total += n * step_seconds(model, none, float(per_gpu), gpus)[0]
    return total


def _modelled(study: Study, per: pd.DataFrame, t: pd.DataFrame, times) -> tuple[pd.Series, int] | None:
    """(each trial's modelled time to the target on GPUs that grow with its batch, the per-GPU batch: the smallest
    first batch of the check); None without `report --allreduce`."""
    if times is None or "results" not in t:
        return None
    from pathlib import Path

    per_gpu = int(t["global_batch"].min())
    out = {}
    for _, r in t.iterrows():
        key = (r["results"], r["trial"])
        steps = per["steps"].get(key) if key in per.index else None
        if steps is not None and pd.notna(steps):
            out[key] = modelled_seconds(times.model, _phases(Path(r["results"]) / r["trial"], float(steps),
                                                             int(r["global_batch"])), per_gpu)
    return pd.Series(out, dtype=float), per_gpu


def _modelled_cells(label: str, a: pd.DataFrame, s: pd.DataFrame, vs, modelled) -> dict:
    if modelled is None:
        return {}
    per_gpu = modelled[1]
    return {f"Modelled time on batch / {per_gpu} GPUs [s]": _mean_ci(s["modelled"])[0],
            f"{label}'s modelled time": _pct(_saving(a, s, "modelled"), True).replace("fewer", "less")
            if vs is not None else "-"}


def _sentence(text: str) -> str:
    """The first letter up, the rest as written (str.capitalize would lower 8K, LARS, val_mAP)."""
    return text[:1].upper() + text[1:]


def _against(name: str, a: pd.DataFrame, s: pd.DataFrame, fewer, more) -> str:
    """One comparison of the verdict: the schedule's steps against fixed batch `name`, with its samples where
    every seed of both reached the target, else how many did."""
    said_steps = _pct(fewer, True)
    seeds = f"{int(a['steps'].notna().sum())} of {len(a)} and {int(s['steps'].notna().sum())} of {len(s)} seeds reached"
    steps = f"{said_steps} steps than {name}" if said_steps != "not resolved" else f"steps not resolved against {name}"
    return steps + (f" (at {_pct(more, False)} samples)" if more else f" ({seeds})")


def schedule_table(study: Study, metric: str, target: float, per_trial: pd.DataFrame, times=None) -> Table | None:
    """Each growing schedule beside every fixed batch of the study (fixed trials, and one-point schedule arms):
    steps, samples and time to the target over seeds with t intervals, and the schedule's steps and samples
    against each fixed batch as ratios of geometric means with Welch intervals; the verdict line first among the
    notes. None where the study has no growing schedule."""
    t = study.trials
    if "batch_schedule" not in t or not t["batch_schedule"].map(_growing).any():
        return None
    if "state" in t:
        t = t[t["state"].isin(FINISHED)]
    keys = [k for k in ("results", "trial") if k in t and k in per_trial]
    per = per_trial.assign(samples=_samples(study, per_trial)).set_index(keys)
    modelled = _modelled(study, per, t, times)
    if modelled is not None:
        per = per.assign(modelled=modelled[0].reindex(per.index))
    grow, fixed = _arms(t.assign(batch_schedule=t["batch_schedule"].where(t["batch_schedule"].notna(), None)))
    disp, tidy, verdicts = [], [], []
    for label, text, arm in grow:
        said = False  # this arm's first comparison names it
        if sum(g_label == label for g_label, _, _ in grow) > 1:
            label = f"{label} ({text})"
        a = per.reindex(pd.MultiIndex.from_frame(arm[keys]) if len(keys) > 1 else arm[keys[0]])
        for name, sched, g, vs in [(label, text, arm, None)] + [(n, s_, g, g) for n, s_, g in fixed]:
            s = per.reindex(pd.MultiIndex.from_frame(g[keys]) if len(keys) > 1 else g[keys[0]])
            steps_cell, mean = _mean_ci(s["steps"])
            fewer = _steps_ratio(a, s) if vs is not None else None
            reached = a["steps"].notna().all() and s["steps"].notna().all()
            more = _saving(a, s, "samples") if vs is not None and reached else None
            disp.append({"Arm": name, "Schedule": sched, "Reached": f"{int(s['steps'].notna().sum())} of {len(g)}",
                         "Steps to target": steps_cell, "Samples to target": _mean_ci(s["samples"])[0],
                         "Time to target [s]": _mean_ci(s["seconds"])[0],
                         f"{label}'s steps": _pct(fewer, True) if vs is not None else "-",
                         f"{label}'s samples": _pct(more, False) if vs is not None else "-",
                         **_modelled_cells(label, a, s, vs, modelled)})
            tidy.append({"arm": label, "row": name, "schedule": sched, "reached": int(s["steps"].notna().sum()),
                         "seeds": len(g), "steps_mean": mean, "steps_ratio": fewer[0] if fewer else None,
                         "steps_ratio_lo": fewer[1] if fewer else None, "steps_ratio_hi": fewer[2] if fewer else None,
                         "steps_ratio_kind": fewer[3] if fewer else None,
                         "samples_ratio": more[0] if more else None})
            if vs is not None and fewer:
                verdicts.append((f"the schedule {label} reached {metric} {target:g} in " if not said else "")
                                + _against(name, a, s, fewer, more))
                said = True
    return Table("schedules", f"Batch-size schedules beside fixed batches: steps to {metric} {target:g}",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 [_sentence("; ".join(verdicts)) + f" ({LEVEL:.0%} intervals over seeds: ratios of geometric "
                  "means, Welch t on the logs, each seed's steps between the evaluation before its crossing and the "
                  "one that met the target, a seed that missed it at more steps than it ran)" if verdicts else
                  "No schedule and fixed batch both reached the target: no comparison",
                  "Steps to target: optimizer steps as they were taken (a schedule's larger steps count one each); "
                  "samples: the training samples seen at that evaluation; on fixed hardware a batch grown by "
                  "accumulation saves steps, not time: its time here is this machine's"]
                 + ([f"Modelled time (not measured): the GPUs grow with the batch, batch / {modelled[1]} of them "
                     f"({modelled[1]} samples per GPU), each step at the step-time model of --allreduce (compute + "
                     "data at that per-GPU batch, plus the exposed ring all-reduce at that GPU count; see the time "
                     "to target section), the start-up once; a schedule's steps at the batch each took"]
                    if modelled is not None else []))


def figure(study: Study, metric: str, target: float | None):
    """The check's curves: `metric` against optimizer steps (log) for each growing schedule and each fixed batch,
    one thin line per seed, the target as a line; None where the study has no growing schedule."""
    import matplotlib.pyplot as plt

    t = study.trials
    if "batch_schedule" not in t or not t["batch_schedule"].map(_growing).any() or metric not in study.steps:
        return None
    grow, fixed = _arms(t.assign(batch_schedule=t["batch_schedule"].where(t["batch_schedule"].notna(), None)))
    ev = study.steps.dropna(subset=[metric])
    ev = ev[(ev["kind"] == "step") & (ev["step"] > 0)] if "kind" in ev else ev[ev["step"] > 0]
    on_subset = "subset" in ev and ev["subset"].notna().any()
    if on_subset:  # one kind of evaluation per line: the subset's, evaluated throughout (the whole split only near
        ev = ev[ev["subset"].notna()]  # the target would make each curve jump where both were taken; a check that
        if "check" in ev:  # stopped early read a subset of another size: not the curve's either)
            ev = ev[ev["check"].isna()]
    keys = [k for k in ("results", "trial") if k in ev and k in t]
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for i, (label, _, g) in enumerate(grow + fixed):
        color, width = f"C{i}", 1.8 if i < len(grow) else 1.0
        for _, r in g.iterrows():
            c = ev[np.logical_and.reduce([ev[k] == r[k] for k in keys])].sort_values("step")
            ax.plot(c["step"], c[metric], color=color, lw=width, alpha=0.8)
        ax.plot([], [], color=color, lw=width, label=f"{label} ({len(g)} seed{'' if len(g) == 1 else 's'})")
    if target is not None:
        ax.axhline(target, color="k", ls=":", lw=1, label=f"target {target:g}")
    ax.set_xscale("log")
    ax.set_xlabel("optimizer steps (a schedule's larger steps count one each)")
    ax.set_ylabel(metric + (" (the evaluation subset)" if on_subset else ""))
    ax.set_title(f"The schedule beside fixed batches: {metric} against steps", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
