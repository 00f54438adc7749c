"""The papers' tables from a Study: each a display frame (cells as the papers write them) and a tidy frame
(exact numbers, one row per group) for CSV.

Groups are (variant, warm-up, global batch, GPUs); statistics are over seeds. A group where seeds diverged
shows `diverges` in its metric cells, while its time per epoch is still the measured one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lbscale.report.load import Study
from lbscale.report.numbers import estimate_cell, number, whole
from lbscale.results import FINISHED
from lbscale.report.scaling import GROUP, scaling_series, speedup_efficiency
from lbscale.analysis.intervals import LEVEL
from lbscale.report.critical_batch import arm_models, resolve_hint

LABELS = {"top1": "Accuracy", "top5": "Top-5 accuracy", "f1_micro": "F1", "f1_macro": "F1 macro",
          "precision": "Precision", "recall": "Recall", "loss": "Loss"}


def metric_label(metric: str, split: bool = True) -> str:
    """`test_top1` -> 'Accuracy (test)': every table and figure says which split it shows."""
    where, _, name = metric.partition("_")
    if name not in LABELS:
        return metric
    return f"{LABELS[name]} ({where})" if split else LABELS[name]


def loss_of(metric: str) -> str:
    """The loss of the metric's split: test_top1 -> test_loss."""
    return metric.partition("_")[0] + "_loss"


def per_epoch(study: Study, metric: str) -> str:
    """The metric the epoch records carry: `metric` itself, or the val figure where the test split was only
    evaluated at the end (training curves and steps to target come from the per-epoch evaluations)."""
    ep = study.epochs
    if len(ep) and metric in ep and ep[metric].notna().any():
        return metric
    return "val_" + metric.partition("_")[2]


@dataclass
class Table:
    name: str
    title: str
    display: pd.DataFrame
    tidy: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def batch_label(b) -> str:
    """As the papers write batches: multiples of 1024 in truncated thousands (8K = 8192, 65K = 65536), anything
    else as the integer (1000, 7680, 30000). No two batches share a label: a multiple of 1000 written nK would
    collide with the 1024 multiple next to it (1K: 1000 and 1024)."""
    b = int(b)
    if b >= 1024 and b % 1024 == 0:
        return f"{b // 1000}K"
    return str(b)


def mean_std(values, digits=3) -> tuple[str, float | None, float | None, int]:
    """Over seeds: ('mean ± std (n=k)', or the value alone for one seed; '-' for none), mean, std, k."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return "-", None, None, 0
    mean = float(np.mean(vals))
    std = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
    text = number(mean, digits) if std is None else f"{number(mean, digits)} ± {number(std, digits)} (n={len(vals)})"
    return text, mean, std, len(vals)


def _floats(column: pd.Series) -> np.ndarray:
    """A column as floats, missing values (None, NaN, NA) as NaN."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _metric_cell(g: pd.DataFrame, col: str, digits=3) -> tuple[str, float | None, float | None]:
    """Mean ± std of a group's final metric over the seeds that have one: completed runs, and diverged runs
    trained to the end (--on-divergence continue), shown as the papers do: "0.64 (diverged)". Seeds stopped
    at divergence have no final metric: "diverges (k of n)"."""
    n = len(g)  # numpy, not pandas, per group: a report has a cell per (variant, warm-up, batch, GPUs) and metric
    values = _floats(g[col]) if col in g else np.full(n, np.nan)
    state = np.asarray(g["state"], dtype=object)
    diverged = state == "diverged"
    with np.errstate(invalid="ignore"):  # an unknown epoch count (NaN) compares False, as pandas compares it
        trained_out = (state == "completed") | (diverged & (_floats(g["epochs_done"]) >= _floats(g["epochs"])))
    has = ~np.isnan(values) & trained_out  # a run stopped at divergence keeps an earlier epoch's metric: not final
    stopped = int((diverged & ~has).sum())
    if not has.any():
        return ("diverges" if n == 1 else f"diverges ({stopped} of {n})") if stopped else "-", None, None
    text, mean, std, _ = mean_std(values[has], digits)
    ran_on = int((diverged & has).sum())
    if ran_on:
        text += " (diverged)" if ran_on == int(has.sum()) else f" ({ran_on} of {n} diverged)"
    if stopped:
        text += f"; diverges {stopped} of {n}"
    return text, mean, std


def _groups(study: Study, finished_only=True, trials: pd.DataFrame | None = None):
    t = study.trials if trials is None else trials
    if finished_only:
        t = t[t["state"].isin(FINISHED)]
    t = t.assign(warmup=t["warmup"].fillna("-"), variant=t["variant"].fillna("-"))
    return t.groupby(GROUP, sort=True, dropna=False)


def _lead(keys: dict, study: Study) -> dict:
    """The leading display columns of a group row: variant / warm-up only where the grid varies them."""
    out = {}
    if study.varies("variant"):
        out["Variant"] = keys["variant"]
    if study.varies("warmup"):
        out["Warm-up"] = keys["warmup"]
    out["Batch size"] = batch_label(keys["global_batch"])
    out["N. GPUs"] = int(keys["gpus"])
    return out


def accuracy_table(study: Study, metric: str, compare: pd.DataFrame | None = None) -> Table:
    """SAT-4/SAT-6 LAMB study: Batch size | N. GPUs | metric | Loss | Time [s] per epoch."""
    label, paper = metric_label(metric), f"Paper {metric_label(metric, split=False).lower()}"
    disp, tidy = [], []
    for keys, g in _groups(study):
        keys = dict(zip(GROUP, keys))
        n, k = len(g), int((g["state"] == "diverged").sum())
        m_text, m_mean, m_std = _metric_cell(g, f"final_{metric}")
        l_text, l_mean, l_std = _metric_cell(g, f"final_{loss_of(metric)}")
        t_text, t_mean, t_std, _ = mean_std(g["epoch_seconds"], 2)
        if g["epoch_seconds_estimated"].any():
            t_text += " (partial epoch)"
        disp.append({**_lead(keys, study), label: m_text, metric_label(loss_of(metric)): l_text,
                     "Time [s] per epoch": t_text})
        tidy.append({**keys, "seeds": n, "diverged": k, f"{metric}_mean": m_mean, f"{metric}_std": m_std,
                     "loss_mean": l_mean, "loss_std": l_std, "epoch_seconds_mean": t_mean,
                     "epoch_seconds_std": t_std})
    display, tidy = pd.DataFrame(disp), pd.DataFrame(tidy)
    if compare is not None and not display.empty:
        display, tidy = _side_by_side(display, tidy, compare, {"metric": paper,
                                                               "loss": "Paper loss",
                                                               "epoch_seconds": "Paper time [s]"})
    return Table("accuracy", f"{label}, loss and time per epoch by global batch", display, tidy,
                 [f"{label}: final {metric} after the last epoch, mean ± std over seeds (n)",
                  "Time per epoch: training seconds of a full pass of the train split (summary.json's "
                  "mean_epoch_seconds), mean after the first (start-up) epoch; "
                  "a run that diverged in its first epoch shows its pace extrapolated to a whole epoch"])


PAPER_DIGITS = {"step_seconds": 3}  # the records' time per step is given to the millisecond


def _paper_cell(row, col) -> str:
    v = row.get(col)
    missing = v is None or (isinstance(v, float) and math.isnan(v))
    if col == "metric" and bool(row.get("diverged")):
        return "diverges" if missing else f"{number(float(v), 2)} (diverged)"
    return "-" if missing else number(float(v), PAPER_DIGITS.get(col, 2))


def _arm(variant) -> str | None:
    """The data arm of a variant where the data is a grid axis (`nf:sgd-linear` -> `nf`), else None."""
    return str(variant).split(":", 1)[0] if isinstance(variant, str) and ":" in variant else None


def _paper_rows(paper: pd.DataFrame, batch, gpus, variant) -> pd.DataFrame:
    """The paper's rows for one of ours: same global batch, same GPUs (or none given), and where the table
    names data arms (full / nf / rf) and our variant has one, the same arm (or none given)."""
    match = paper[(paper["global_batch"] == batch) & (paper["gpus"].fillna(gpus) == gpus)]
    arm = _arm(variant)
    if arm is not None and "dataset" in paper:
        match = match[match["dataset"].fillna(arm) == arm]
    return match


def _paper_value(match: pd.DataFrame, col: str) -> str:
    """One paper figure; where several rows still match (arms the table does not name), each with its arm."""
    if not len(match) or col not in match:
        return "-"
    if len(match) == 1:
        return _paper_cell(match.iloc[0], col)
    named = "dataset" in match
    return "; ".join(_paper_cell(r, col) + (f" ({r['dataset']})" if named and isinstance(r["dataset"], str) else "")
                     for _, r in match.iterrows())


def _side_by_side(display, tidy, paper: pd.DataFrame, columns: dict):
    """Paper figures next to ours (`_paper_rows`); paper rows without a run of ours stay. The tidy table gets the
    same figures as numbers where exactly one paper row matches."""
    prefixed = paper.add_prefix("paper_")
    rows, numbers, shown, attached = [], [], set(), set()
    for i, own in tidy.reset_index(drop=True).iterrows():
        match = _paper_rows(paper, own["global_batch"], own["gpus"], own.get("variant"))
        shown |= set(match.index)
        row = dict(display.iloc[i])
        for col, title in columns.items():
            row[title] = _paper_value(match, col)
        rows.append(row)
        one = len(match) == 1 and match.index[0] not in attached
        if one:
            attached.add(match.index[0])
        numbers.append(dict(prefixed.loc[match.index[0]]) if one else {})
    for j, p in paper.iterrows():
        if j not in shown:  # a paper row without a run of ours: a row of its own
            row = {c: "-" for c in display.columns}
            row["Batch size"] = batch_label(p["global_batch"])
            row["N. GPUs"] = "-" if pd.isna(p.get("gpus")) else int(p["gpus"])
            for col, title in columns.items():
                row[title] = _paper_cell(p, col) if col in paper else "-"
            rows.append(row)
    # tidy: every paper row once, beside the one run of ours it alone matches, else on a row of its own
    alone = prefixed.loc[[j for j in paper.index if j not in attached]]
    merged = pd.concat([pd.concat([tidy.reset_index(drop=True), pd.DataFrame(numbers, index=range(len(tidy)))],
                                  axis=1), alone], ignore_index=True)
    return pd.DataFrame(rows), merged


def lr_table(study: Study, metric: str, compare: pd.DataFrame | None = None) -> Table:
    """BigEarthNet LARS study: Batch size | N. GPUs | Warm-up | Initial LR | metric."""
    label, paper = metric_label(metric), f"Paper {metric_label(metric, split=False).lower()}"
    disp, tidy = [], []
    for keys, g in _groups(study):
        keys = dict(zip(GROUP, keys))
        m_text, m_mean, _ = _metric_cell(g, f"final_{metric}")
        k = int((g["state"] == "diverged").sum())
        warm, lr = float(g["warmup_epochs"].iloc[0]), float(g["peak_lr"].iloc[0])
        row = _lead(keys, study)
        row.pop("Warm-up", None)
        disp.append({**row, "Warm-up [epochs]": number(warm, 2), "Initial LR": number(lr, 4), label: m_text})
        tidy.append({**keys, "warmup_epochs": warm, "initial_lr": lr, f"{metric}_mean": m_mean, "diverged": k})
    display, tidy = pd.DataFrame(disp), pd.DataFrame(tidy)
    if compare is not None and not display.empty:
        display, tidy = _side_by_side(display, tidy, compare, {"initial_lr": "Paper initial LR",
                                                               "metric": paper})
    return Table("lr", "Warm-up and initial (peak) LR by global batch", display, tidy,
                 ["Initial LR: the peak LR after warm-up, from the scaling rule"])


def time_table(study: Study, compare: pd.DataFrame | None = None, trials: pd.DataFrame | None = None) -> Table:
    """BigEarthNet LARS study: Batch size | N. GPUs | Total training time [s]; beside a published table that
    gives steps and time per step (the ImageNet records), ours and the paper's too. `trials`: the ones to count
    (a tuned study's best trial per batch: its search points are not seeds to average)."""
    with_steps = compare is not None and "steps" in compare and compare["steps"].notna().any()
    s = study.steps
    stepped = (s[s["kind"] == "step"].groupby(["results", "trial"])["epoch"].max()
               if len(s) and "kind" in s else pd.Series(dtype=float))
    disp, tidy = [], []
    for keys, g in _groups(study, trials=trials):
        keys = dict(zip(GROUP, keys))
        text, mean, _, _ = mean_std(g["total_train_seconds"], 1)
        # the epochs trained: those completed, or where a step evaluation was later (a trial that stopped at its
        # target, or was pruned, mid-epoch)
        last = stepped.reindex(pd.MultiIndex.from_arrays([g["results"], g["trial"]])).to_numpy(dtype=float)
        trained = np.fmax(_floats(g["epochs_done"]), last)
        whole = bool(np.all(np.isnan(trained) | (trained % 1 == 0)))
        ep, ep_mean, _, _ = mean_std(trained, 0 if whole else 2)
        row = {**_lead(keys, study), "Epochs": ep, "Total training time [s]": text}
        numbers = {"epochs_mean": math.nan if ep_mean is None else ep_mean, "total_train_seconds_mean": mean}
        if with_steps:
            steps = pd.to_numeric(g["steps"], errors="coerce")
            row["Steps"], numbers["steps_mean"], _, _ = mean_std(steps, 0)
            per_step = pd.to_numeric(g["total_train_seconds"], errors="coerce") / steps
            row["Time per step [s]"], numbers["step_seconds_mean"], _, _ = mean_std(per_step, 3)
        disp.append(row)
        tidy.append({**keys, **numbers})
    display, tidy = pd.DataFrame(disp), pd.DataFrame(tidy)
    if compare is not None and not display.empty and "total_seconds" in compare:
        paper = {"total_seconds": "Paper total time [s]"}
        if with_steps:
            paper.update(steps="Paper steps", step_seconds="Paper time per step [s]")
        display, tidy = _side_by_side(display, tidy, compare, paper)
    return Table("time", "Total training time by global batch", display, tidy,
                 ["Total training time: training seconds of all epochs (evaluation excluded)"
                  + ("; of each batch's best trial (the other search points are not seeds of it)"
                     if trials is not None else ""),
                  "Epochs: the epochs trained, a fraction where a trial stopped at its target or was pruned between "
                  "two epochs' ends"]
                 + (["Time per step: total training time / optimizer steps"] if with_steps else []))


def time_split_table(study: Study) -> Table:
    """Each finished trial's training seconds: waiting for data, computing, the gradient all-reduce and the wait
    for slower ranks ("-" where the trial's lbscale counted the all-reduce in compute, or the wait for slower
    ranks in the all-reduce)."""
    t = study.trials[study.trials["state"].isin(FINISHED)]
    t = t.assign(variant=t["variant"].fillna("-")).sort_values(["variant", "global_batch", "gpus", "seed", "trial"])
    data, compute, comm, imbalance = (pd.to_numeric(t[c], errors="coerce").astype(float)
                                      for c in ("data_seconds", "compute_seconds", "comm_seconds",
                                                "imbalance_seconds"))
    train = data + compute + (comm.fillna(0.0) + imbalance.fillna(0.0))
    columns = {"trial": t["trial"], "variant": t["variant"], "global_batch": t["global_batch"], "gpus": t["gpus"],
               "seed": t["seed"], "data_seconds": data, "compute_seconds": compute, "comm_seconds": comm,
               "imbalance_seconds": imbalance, "train_seconds": train}
    tidy = {k: v.tolist() for k, v in columns.items()}  # one row per trial, as Python values: as its rows had them
    share = ["-" if math.isnan(c) or not s else f"{100 * c / s:.1f}%" for c, s in zip(tidy["comm_seconds"],
                                                                                      tidy["train_seconds"])]
    disp = {"Trial": tidy["trial"], **({"Variant": tidy["variant"]} if study.varies("variant") else {}),
            "Batch size": [batch_label(b) for b in tidy["global_batch"]], "N. GPUs": [int(k) for k in tidy["gpus"]],
            **{title: [number(v) for v in tidy[c]] for title, c in (("Data [s]", "data_seconds"),
                                                                    ("Compute [s]", "compute_seconds"),
                                                                    ("Communication [s]", "comm_seconds"),
                                                                    ("Imbalance [s]", "imbalance_seconds"))},
            "Communication share": share}
    return Table("time-split", "Training time per trial: data wait, compute, communication, imbalance",
                 pd.DataFrame(disp if len(t) else []), pd.DataFrame(tidy if len(t) else []),
                 ["Seconds over all epochs; communication: the gradient all-reduce each step still waited for after "
                  "its backward finished; imbalance: the time the fastest rank waited for the slowest to reach it "
                  "(docs/results.md); '-' for trials of an lbscale that counted these in compute or communication"])


def axis_table(study: Study, axis: str, metric: str) -> Table:
    """The metric by batch (rows) and by one more axis of the grid (columns: variant or warm-up)."""
    label = metric_label(metric)
    t = study.trials[study.trials["state"].isin(FINISHED)].copy()
    t[axis] = t[axis].fillna("-")
    tidy, cells = [], {}
    for (b, a), g in t.groupby(["global_batch", axis], sort=True):
        text, mean, std = _metric_cell(g, f"final_{metric}")
        cells.setdefault(b, {})[str(a)] = text  # keyed by the number: labels are for display
        tidy.append({"global_batch": b, axis: a, f"{metric}_mean": mean, f"{metric}_std": std,
                     "seeds": len(g), "diverged": int((g["state"] == "diverged").sum())})
    display = pd.DataFrame([{"Batch size": batch_label(b), **c} for b, c in cells.items()]).fillna("-")
    return Table(f"by-{axis}", f"{label} by global batch and {axis}", display, pd.DataFrame(tidy))


def target_table(study: Study, metric: str, target: float, per_trial: pd.DataFrame) -> Table:
    disp, tidy = [], []
    if len(per_trial):
        for keys, g in per_trial.assign(warmup=per_trial["warmup"].fillna("-"),
                                        variant=per_trial["variant"].fillna("-")).groupby(GROUP, sort=True):
            keys = dict(zip(GROUP, keys))
            reached = g.dropna(subset=["steps"])
            st, s_mean, _, _ = mean_std(reached["steps"], 0)
            et, _, _, _ = mean_std(reached["epochs"], 1)
            tt, t_mean, _, _ = mean_std(reached["seconds"], 1)
            disp.append({**_lead(keys, study), "Reached": f"{len(reached)} of {len(g)}", "Steps to target": st,
                         "Epochs to target": et, "Time to target [s]": tt})
            tidy.append({**keys, "reached": len(reached), "seeds": len(g), "steps_mean": s_mean,
                         "seconds_mean": t_mean})
    label = metric_label(metric)
    return Table("target", f"Steps and time to {label} {target:g}", pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["First evaluation (step or epoch) at or past the target; mean over the seeds that reached it"])


def scaling_table(study: Study) -> Table:
    """Time per epoch, throughput, speedup and efficiency against the fewest GPUs, per scaling series."""
    disp, tidy = [], []
    for variant, regime, per in scaling_series(study.trials[study.trials["state"].isin(FINISHED)]):
        speedup, eff = speedup_efficiency(per["gpus"], per["epoch_seconds"])
        for i, r in per.iterrows():
            row = {"Variant": variant} if study.varies("variant") else {}
            disp.append({**row, "Regime": f"{regime} scaling", "N. GPUs": int(r["gpus"]),
                         "Batch size": batch_label(r["global_batch"]), "Local batch": int(r["local_batch"]),
                         "Time [s] per epoch": number(r["epoch_seconds"]), "Images/s": number(r["images_per_second"]),
                         "Speedup": number(speedup[i], 2), "Efficiency": f"{100 * eff[i]:.0f}%"})
            tidy.append({"variant": variant, "regime": regime, **r.to_dict(), "speedup": speedup[i],
                         "efficiency": eff[i]})
    notes = ["weak scaling: fixed local batch, the global batch grows with the GPUs; strong scaling: fixed "
             "global batch split over more GPUs; ideal time per epoch ~ 1/GPUs in both"]
    if not disp:
        notes.insert(0, "no series with two or more GPU counts at a fixed local or global batch")
    return Table("scaling", "Scaling: time per epoch, speedup and efficiency against the fewest GPUs",
                 pd.DataFrame(disp), pd.DataFrame(tidy), notes)


def critical_batch_table(study: Study, steps: pd.DataFrame, models: dict | None = None) -> Table:
    """The critical batch per variant from every trial's steps to target (`steps_model.fit` without the LR bowl:
    a rule-based study ran one LR per batch), as the data support it (a value with its interval, a bound, or not
    resolved and what would resolve it), beside the gradient noise scale. `models`: `arm_models(steps)` where
    already fitted."""
    disp, tidy = [], []
    models = arm_models(steps) if models is None else models
    for variant, g in study.trials.groupby(study.trials["variant"].fillna("-"), sort=True):
        s = steps[steps["variant"].fillna("-") == variant] if len(steps) and "steps" in steps else pd.DataFrame()
        model = models.get(variant)
        e = model.estimates if model is not None else {}
        crit, s_min = e.get("b_crit"), e.get("s_min")
        reached = int(s["steps"].notna().sum()) if len(s) else 0
        why = ("no --target" if not len(steps) or "steps" not in steps else
               f"{len(model.batches) if model else len(set(s.dropna(subset=['steps'])['global_batch']))} reached "
               "batches; the model needs 2" if model is None else "")
        kind = crit.kind if crit else "none"
        hint = (resolve_hint(kind, list(model.batches), "", 0) if model is not None and kind != "interval"
                else "")
        cell = (estimate_cell(crit.value, crit.lo, crit.hi, kind, whole) if crit else "no fit")
        cell += f" ({why or hint})" if (why or hint) else ""
        gns = g["gns_b_simple"].dropna() if "gns_b_simple" in g else pd.Series(dtype=float)
        disp.append({"Variant": variant, f"B_crit [{LEVEL:.0%}]": cell,
                     f"S_min [steps, {LEVEL:.0%}]": estimate_cell(s_min.value, s_min.lo, s_min.hi, s_min.kind, whole)
                     if s_min else "-", "Trials (reached)": f"{len(s)} ({reached})",
                     "Predicted B_simple (GNS)": number(float(gns.median())) if len(gns) else "-"})
        tidy.append({"variant": variant, "b_crit_kind": kind, "b_crit": crit.value if crit else None,
                     "b_crit_lo": crit.lo if crit else None, "b_crit_hi": crit.hi if crit else None,
                     "b_crit_reason": why or hint or None, "s_min": s_min.value if s_min else None,
                     "s_min_lo": s_min.lo if s_min else None, "s_min_hi": s_min.hi if s_min else None,
                     "trials": len(s), "reached": reached, "gns_b_simple": float(gns.median()) if len(gns) else None})
    return Table("critical-batch", "Critical batch: the steps' curve over every trial, and the gradient "
                 "noise scale", pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["B_crit: the batch where a doubling saves 25% of the steps, on S = S_min (1 + (B_c / B)^g)^(1 / g) "
                  "(the knee g fitted where 4 batches or more reached the target, else g = 1: McCandlish et al. "
                  "2018's S_min (1 + B_crit / B)), fitted to every trial's steps to target by maximum likelihood (a "
                  "crossing between two evaluations interval-censored, a trial that did not reach the target "
                  "right-censored; log-normal noise whose sigma may change with the batch; docs/scaling-model.md). "
                  "The LR was not tuned: one LR per batch by the study's rule, so B_crit holds for that rule",
                  f"[lo, hi]: {LEVEL:.0%} profile-likelihood interval; '> x' where only the lower end is bounded "
                  "(still close to perfect scaling at the largest batch), '< x' only the upper, 'not resolved' "
                  "neither, each with what would resolve it; nothing is clipped to the measured batches",
                  "B_simple: tr(Sigma) / |G|^2 measured from gradients (median over trials), McCandlish et al.'s "
                  "predictor of B_crit (up to a factor)"])


def trials_table(study: Study) -> Table:
    """Every trial that is not finished (running, interrupted, submitted, pending, failed): nothing dropped."""
    t = study.trials[~study.trials["state"].isin(FINISHED)]
    display = pd.DataFrame({"Trial": t["trial"], "State": t["state"], "Epochs": t["epochs_done"],
                            "Error": t["error"].fillna("")}) if len(t) else pd.DataFrame()
    return Table("unfinished", "Trials without a result yet (or failed)", display,
                 t[["results", "trial", "state", "epochs_done", "error"]].reset_index(drop=True))
