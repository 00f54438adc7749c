"""The tables and the verdict of a tuned study (a hyperparameter search per batch), from `report.tuned`'s frames:
the best trial per batch, the fits of LR* ~ B^alpha and of the critical batch with their intervals, the best
metric within epoch budgets."""

from __future__ import annotations

import math

import pandas as pd

from lbscale.report.load import HP, Study
from lbscale.report.tables import Table, _num, batch_label, metric_label
from lbscale.report.tuned import hp_columns

LEVEL = 0.9  # the bootstrap intervals' level, as the tables and the verdict name it


def step_metric(study: Study, metric: str) -> str:
    """The metric the evaluations carry: `metric`, or its val figure where the test split was evaluated only at
    the end (as `tables.per_epoch`)."""
    s = study.steps
    if len(s) and metric in s and s[metric].notna().any():
        return metric
    return "val_" + metric.partition("_")[2]


def epoch_budgets(study: Study) -> list[float]:
    """A quarter, half and all of the longest trial's epochs (half and all below 4 epochs): the budget figure's
    lines."""
    epochs = pd.to_numeric(study.trials["epochs"], errors="coerce").dropna()
    if epochs.empty:
        epochs = study.steps["epoch"].dropna() if len(study.steps) else epochs
    if epochs.empty:
        return []
    most = float(epochs.max())
    return sorted({most / 4, most / 2, most}) if most >= 4 else sorted({most / 2, most})


def epochs_label(n: float) -> str:
    return f"{n:g} epoch" + ("" if n == 1 else "s")


def _whole(v) -> str:
    """Steps and batches: whole numbers without a thousands comma (an interval [128, 2688] stays readable)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.0f}" if abs(v) >= 10 else f"{v:.2g}"


def _hp(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _interval(lo, hi, fmt) -> str:
    missing = any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (lo, hi))
    return "[-]" if missing else f"[{fmt(lo)}, {fmt(hi)}]"


def best_trial_table(study: Study, best: pd.DataFrame, metric: str, target: float | None) -> Table:
    """Per (variant, batch): the best trial, its steps / epochs / seconds to target or its best metric, and its
    hyperparameters."""
    label = metric_label(metric)
    hps = hp_columns(best)
    disp = []
    for _, r in best.iterrows():
        row = {"Variant": r["variant"]} if study.varies("variant") else {}
        row.update({"Batch size": batch_label(r["global_batch"]), "Trial": r["trial"]})
        if target is not None:
            row.update({"Reached": "yes" if r["reached"] else "no", "Steps to target": _whole(r["steps_to_target"]),
                        "Epochs to target": _num(r["epochs_to_target"], 2),
                        "Time to target [s]": _num(r["seconds_to_target"], 1)})
        row.update({f"Best {label}": _num(r["best_value"]), "Peak LR": _hp(r.get("peak_lr"))})
        row.update({c.removeprefix(HP): _hp(r[c]) for c in hps if c != f"{HP}peak_lr"})
        disp.append(row)
    goal = (f"the fewest steps to {label} {target:g} (ties: the better best value, then the trial id); where no "
            f"trial reached it, the best {metric} of any evaluation" if target is not None
            else f"the best {metric} of any evaluation (no target given)")
    return Table("tuned-best", "Best trial per batch (tuned)", pd.DataFrame(disp), best.reset_index(drop=True),
                 [f"Best trial: {goal}; every trial with evaluations counts, pruned ones included",
                  "Steps / epochs / time to target: the first evaluation (step or epoch) at or past the target"])


def fits_table(study: Study, fits: pd.DataFrame, target: float | None) -> Table:
    """Per variant: the critical batch and the optimal LR's exponent, each with its bootstrap interval."""
    pct = f"{100 * LEVEL:.0f}%"
    disp, tidy = [], []
    for _, f in fits.iterrows():
        g = study.trials[study.trials["variant"].fillna("-") == (f["variant"] if pd.notna(f["variant"]) else "-")]
        gns = g["gns_b_simple"].dropna() if "gns_b_simple" in g else pd.Series(dtype=float)
        disp.append({"Variant": f["variant"], "Batches reached": f"{f['reached']} of {f['batches']}"
                     if target is not None else "-",
                     f"B_noise [{pct}]": "-" if pd.isna(f["b_noise"]) else
                     f"{_whole(f['b_noise'])} {_interval(f['b_noise_lo'], f['b_noise_hi'], _whole)}",
                     "S_min [steps]": _whole(f["s_min"]) if pd.notna(f["s_min"]) else "-",
                     f"alpha [{pct}]": "-" if pd.isna(f["alpha"]) else
                     f"{f['alpha']:.2f} {_interval(f['alpha_lo'], f['alpha_hi'], lambda v: f'{v:.2f}')}",
                     "Resamples": f"{f['alpha_resamples']} / {f['b_noise_resamples']}",
                     "Predicted B_simple (GNS)": _num(float(gns.median())) if len(gns) else "-"})
        tidy.append({**f.to_dict(), "gns_b_simple": float(gns.median()) if len(gns) else None})
    return Table("tuned-fits", "Critical batch and optimal-LR exponent of the best trials (tuned)",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["B_noise: S = S_min (1 + B_noise / B) fitted to the best trial's steps to target per batch "
                  "(McCandlish et al. 2018); alpha: log LR* = log c + alpha log B fitted to the best trial's peak LR",
                  f"[{pct}]: percentile bootstrap over the trials inside each batch (resampled with replacement, "
                  "the best trial taken again, refitted); Resamples: the fits that succeeded (alpha / B_noise)"])


def budget_table(view: pd.DataFrame, metric: str) -> Table:
    """The best metric per batch within each epoch budget (columns: the budgets)."""
    cells: dict = {}
    for _, r in view.iterrows():
        key = (r["variant"], r["global_batch"])
        cells.setdefault(key, {})[epochs_label(r["budget"])] = _num(r["best_value"])
    variants = view["variant"].fillna("-").nunique() > 1 if len(view) else False
    disp = [{**({"Variant": v} if variants else {}), "Batch size": batch_label(b), **c}
            for (v, b), c in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))]
    return Table("tuned-budget", f"Best {metric_label(metric)} within an epoch budget (tuned)",
                 pd.DataFrame(disp).fillna("-"), view.reset_index(drop=True),
                 ["The best evaluation of any trial of the batch within the first N epochs"])


def verdict(fits: pd.DataFrame, metric: str, target: float | None) -> list[str]:
    """One line per variant: the critical batch and LR* ~ B^alpha, each with its interval."""
    if fits.empty:
        return [f"no evaluations of {metric} yet: nothing to fit"]
    lines = []
    for _, f in fits.iterrows():
        if target is None:
            crit = (f"no critical batch (no target: give --target; the best trial per batch is the one with the "
                    f"best {metric} within its budget, and the steps-to-result figure is skipped)")
        elif pd.isna(f["b_noise"]):
            crit = f"no critical-batch fit ({f['reached']} of {f['batches']} batches reached {metric} {target:g})"
        else:
            crit = (f"critical batch B_noise ~ {_whole(f['b_noise'])} "
                    f"{_interval(f['b_noise_lo'], f['b_noise_hi'], _whole)}")
        if pd.isna(f["alpha"]):
            lr = "LR*: no fit (fewer than two batches with a best trial's peak LR)"
        else:
            lr = (f"LR* ~ B^alpha with alpha = {f['alpha']:.2f} "
                  f"{_interval(f['alpha_lo'], f['alpha_hi'], lambda v: f'{v:.2f}')} (linear rule 1, square-root 0.5)")
        lines.append(f"{f['variant']}: {crit}; {lr}")
    return lines
