"""The tables and the verdict of a tuned study (a hyperparameter search per batch), from `report.tuned`'s frames:
the best trial per batch, the fits of LR* ~ B^alpha and of the critical batch with their intervals, the best
metric within epoch budgets."""

from __future__ import annotations

import math

import pandas as pd

from lbscale.report.fits import LEVEL  # the intervals' level, the bootstrap's too, as tables and verdict name it
from lbscale.report.load import HP, Study
from lbscale.report.numbers import bounded, number, whole
from lbscale.report.tables import Table, b_noise_cell, batch_label, metric_label
from lbscale.report.tuned import gns_at_target, hp_columns


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
    gns = gns_at_target(study.steps, best) if target is not None else pd.Series(dtype=float)
    test = f"final_{study.task.primary_on('test')}"
    test_label = f"Final {metric_label(test.removeprefix('final_'))}"
    if test in study.trials and study.trials[test].notna().any() and not metric.startswith("test_"):
        final = study.trials.set_index(["results", "trial"])[test]
        best = best.assign(**{test: [final.get((r["results"], r["trial"])) for _, r in best.iterrows()]})
    disp = []
    for _, r in best.iterrows():
        row = {"Variant": r["variant"]} if study.varies("variant") else {}
        row.update({"Batch size": batch_label(r["global_batch"]), "Trial": r["trial"]})
        if target is not None:
            row.update({"Reached": "yes" if r["reached"] else "no", "Steps to target": whole(r["steps_to_target"]),
                        "Epochs to target": number(r["epochs_to_target"], 2),
                        "Time to target [s]": number(r["seconds_to_target"], 1)})
        row[f"Best {label}"] = number(r["best_value"])
        if test in best:
            row[test_label] = number(r[test])
        row["Peak LR"] = _hp(r.get("peak_lr"))
        if len(gns):
            row["B_simple at target"] = number(gns.get(r["trial"]))
        row.update({c.removeprefix(HP): _hp(r[c]) for c in hps if c != f"{HP}peak_lr"})
        disp.append(row)
    goal = (f"the fewest steps to {label} {target:g} (ties: the better best value, then the trial id); where no "
            f"trial reached it, the best {metric} of any whole-split evaluation" if target is not None
            else f"the best {metric} of any whole-split evaluation (no target given)")
    return Table("tuned-best", "Best trial per batch (tuned)", pd.DataFrame(disp), best.reset_index(drop=True),
                 [f"Best trial: {goal}; every trial with evaluations counts, pruned ones included",
                  "Steps / epochs / time to target: the first whole-split evaluation (step or epoch) at or past "
                  "the target (a subset evaluation that meets it is confirmed on the whole split first)"]
                 + ([f"{test_label}: the best trial's model at its end on the test split, reported beside it and not "
                     "used to choose it"] if test in best else [])
                 + (["B_simple at target: the trial's gradient noise scale near that step (--gns-every, smoothed "
                     "over the last measured steps), where McCandlish et al. compare it with the critical batch"]
                    if len(gns) else []))


def _two(v) -> str:
    return f"{v:.2f}"


def _cell(f) -> str:
    """B_noise in a table cell: the value with its interval, the bound alone, or 'no fit'."""
    return b_noise_cell(f.get("b_noise_kind"), f["b_noise"], f["b_noise_lo"], f["b_noise_hi"], f["b_noise_reason"])


def critical_text(f) -> str:
    """The critical batch as the data support it: a value with its interval, a bound, or no fit and why."""
    kind = f.get("b_noise_kind")
    if kind == "fit":
        return f"critical batch B_noise ~ {bounded(f['b_noise'], f['b_noise_lo'], f['b_noise_hi'], whole)}"
    if kind in ("lower", "upper"):
        return f["b_noise_reason"]
    return f"no critical-batch fit ({f.get('b_noise_reason') or 'no target'})"


def regimes_text(f) -> str:
    """Shallue et al.'s regimes from B_noise (fits.regimes), each with its interval; empty without a fit."""
    if f.get("b_noise_kind") != "fit":
        return ""
    return (f"perfect scaling up to ~{bounded(f['perfect_end'], f['perfect_end_lo'], f['perfect_end_hi'], whole)}, "
            f"diminishing returns up to ~"
            f"{bounded(f['diminishing_end'], f['diminishing_end_lo'], f['diminishing_end_hi'], whole)} "
            "(doubling the batch saves under 10% of the steps past it)")


def _rule(lo, hi) -> str:
    names = [name for name, a in (("the linear rule", 1.0), ("the square-root rule", 0.5)) if lo <= a <= hi]
    if len(names) == 2:
        return "; it cannot tell the linear from the square-root rule"
    return f"; consistent with {names[0]}" if names else "; neither the linear nor the square-root rule"


def lr_text(f) -> str:
    """LR* as the data support it: the power law with its interval, or the saturating form where it fits better
    ("LR grows linearly up to ~200, flat past it"), the local slopes, and the effective LR's exponent."""
    if f.get("alpha_kind") != "fit":
        return f"LR*: no fit ({f.get('alpha_reason')})"
    alpha = bounded(f["alpha"], f["alpha_lo"], f["alpha_hi"], _two)
    text = f"LR* ~ B^alpha with alpha = {alpha}{_rule(f['alpha_lo'], f['alpha_hi'])}"
    if f.get("lr_model") == "saturating" and f.get("b_lr_kind") == "fit":
        text = (f"LR grows linearly up to ~{bounded(f['b_lr'], f['b_lr_lo'], f['b_lr_hi'], whole)}, flat past it "
                f"(LR* = eps_max / (1 + B_lr / B) fits better than a power law: lower AIC; as a power law {text})")
    elif f.get("lr_model") == "either":
        text += " (a saturating form eps_max / (1 + B_lr / B) fits as well)"
    if f.get("slopes"):
        text += f"; local slopes {f['slopes'].replace(',', ', ')}"
    if pd.notna(f.get("alpha_effective")):
        text += (f"; of the effective LR lr / (1 - momentum): alpha = "
                 f"{bounded(f['alpha_effective'], f['alpha_effective_lo'], f['alpha_effective_hi'], _two)}")
    return text


def rests_on(f, metric: str, target: float | None, search: dict) -> str:
    """What a variant's numbers rest on: reached batches of batches, search points and seeds per batch, edges,
    and what the intervals are."""
    seeds = search.get("seeds", 1)
    # with several seeds a point reaches where every seed of it did: a batch whose best trial reached the target
    # (the best-trial table's "yes") but whose confirmation seed did not is unreached here
    rule = "; a batch counts as reached where every seed of one of its points reached the target" if seeds > 1 else ""
    reach = (f"{f['reached']} of {f['batches']} batches reached {metric} {target:g}"
             + (f" (not reached: {f['unreached'].replace(',', ', ')}{rule})" if f.get("unreached") else "")
             if target is not None else f"{f['batches']} batches, best {metric} within the budget")
    grid = f"{search.get('points', '?')} search points x {seeds} seed{'s' if seeds != 1 else ''} per batch"
    edge = (f"; edge: {f['edges'].replace(',', ', ')}: the optimum may lie outside the search" if f.get("edges")
            else "")
    dof = [f"{k} {int(f[f'{p}_dof'])} dof" for k, p in (("alpha", "alpha"), ("B_noise", "b_noise"))
           if f.get(f"{p}_kind") == "fit"]
    boot = int(f.get("alpha_resamples") or 0)
    failed = [f"{int(f[f'{p}_failed'])} {k}" for k, p in (("alpha", "alpha"), ("B_noise", "b_noise"))
              if pd.notna(f.get(f"{p}_failed"))]
    intervals = (f"{100 * LEVEL:.0f}% intervals: t on each fit's residuals ({', '.join(dof)}) joined with {boot:,} "
                 f"resamples of the seeds inside each point (failed, counted as unbounded: {', '.join(failed)})"
                 if dof else "no interval without a fit")
    return f"rests on {reach}; {grid}{edge}; {intervals}"


def fits_table(study: Study, fits: pd.DataFrame, target: float | None, gns: pd.Series | None = None) -> Table:
    """Per variant: the critical batch, the regimes and the optimal LR, each as the data support it, with what
    the numbers rest on."""
    pct = f"{100 * LEVEL:.0f}%"
    disp, tidy = [], []
    for _, f in fits.iterrows():
        g = study.trials[study.trials["variant"].fillna("-") == (f["variant"] if pd.notna(f["variant"]) else "-")]
        at = gns[gns.index.isin(g["trial"])] if gns is not None else pd.Series(dtype=float)
        disp.append({"Variant": f["variant"], **({"Target": f"{f['target']:g}"} if "target" in f else {}),
                     "Batches reached": f"{f['reached']} of {f['batches']}"
                     if target is not None else "-",
                     f"B_noise [{pct}]": _cell(f) if target is not None else "-",
                     "S_min [steps]": whole(f["s_min"]) if pd.notna(f.get("s_min")) else "-",
                     f"alpha [{pct}]": bounded(f["alpha"], f["alpha_lo"], f["alpha_hi"], _two)
                     if f["alpha_kind"] == "fit" else f"no fit ({f['alpha_reason']})",
                     "LR model": {"saturating": "saturating", "power": "power law",
                                  "either": "either"}.get(f["lr_model"], "-"),
                     "Edges": f["edges"] or "-",
                     "B_simple at target (GNS)": number(float(at.median())) if len(at) else "-"})
        tidy.append({**f.to_dict(), "gns_b_simple": float(at.median()) if len(at) else None})
    return Table("tuned-fits", "Critical batch and optimal LR of each batch's search (tuned)",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["B_noise: S = S_min (1 + B_noise / B) fitted to the steps to target at each batch's optimum "
                  "(McCandlish et al. 2018), over the batches that reached the target; a value past the measured "
                  "batches is a bound (> the largest: still in perfect scaling), fewer than 3 batches no fit",
                  "B_simple at target: the median over the batches' best trials of the noise scale where each "
                  "reached the target (--gns-every; McCandlish et al.'s predictor of B_noise)",
                  "alpha: log LR* = log c + alpha log B over the same batches; LR model: the power law against "
                  "eps_max / (1 + B_lr / B), the lower AIC on the log residuals ('either' within 2)",
                  "A batch's optimum: its best search point, placed between grid points by the parabola through it "
                  "and its two neighbours where both reached the target; Edges: a best point at the lowest or "
                  "highest LR searched",
                  f"[{pct}]: the t-interval on the fit's residuals (the scatter of the batches' optima about the "
                  "fit: seed noise and the search grid) joined with a percentile bootstrap over the seeds inside "
                  "each search point (resampled with replacement: the seed noise a confirmation stage measured; a "
                  "point with one seed keeps it); a failed resample counts as unbounded; an end past the measured "
                  "batches is open"])


def budget_table(view: pd.DataFrame, metric: str) -> Table:
    """The best metric per batch within each epoch budget (columns: the budgets)."""
    cells: dict = {}
    for _, r in view.iterrows():
        key = (r["variant"], r["global_batch"])
        cells.setdefault(key, {})[epochs_label(r["budget"])] = number(r["best_value"])
    variants = view["variant"].fillna("-").nunique() > 1 if len(view) else False
    disp = [{**({"Variant": v} if variants else {}), "Batch size": batch_label(b), **c}
            for (v, b), c in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))]
    return Table("tuned-budget", f"Best {metric_label(metric)} within an epoch budget (tuned)",
                 pd.DataFrame(disp).fillna("-"), view.reset_index(drop=True),
                 ["The best whole-split evaluation of any trial of the batch within the first N epochs"])


def verdict(fits: pd.DataFrame, metric: str, target: float | None, searches: dict | None = None) -> list[str]:
    """Three lines per variant: the critical batch and its regimes, the optimal LR, each as the data support it,
    and what they rest on. `searches`: per variant {points, seeds} of the search per batch."""
    if fits.empty:
        return [f"no evaluations of {metric} yet: nothing to fit"]
    lines = []
    for _, f in fits.iterrows():
        if target is None:
            crit = (f"no critical batch (no target: give --target; the best trial per batch is the one with the "
                    f"best {metric} within its budget, and the steps-to-result figure is skipped)")
        else:
            crit = critical_text(f)
            reg = regimes_text(f)
            crit = f"{crit}; {reg}" if reg else crit
        search = (searches or {}).get(f["variant"], {})
        lines += [f"{f['variant']}: {crit}", f"{f['variant']}: {lr_text(f)}",
                  f"{f['variant']}: {rests_on(f, metric, target, search)}"]
    return lines


def headline(fits: pd.DataFrame, target: float | None) -> str:
    """The report command's outcome: per variant B_noise (or its bound) and alpha, each with its interval."""
    parts = []
    for _, f in fits.iterrows():
        crit = ("no target" if target is None else
                f"B_noise ~ {bounded(f['b_noise'], f['b_noise_lo'], f['b_noise_hi'], whole)}"
                if f["b_noise_kind"] == "fit" else f["b_noise_reason"].split(":")[0]
                if f["b_noise_kind"] in ("lower", "upper") else "no B_noise fit")
        lr = (f"alpha = {bounded(f['alpha'], f['alpha_lo'], f['alpha_hi'], _two)}" if f["alpha_kind"] == "fit"
              else "no alpha fit")
        parts.append(f"{f['variant']}: {crit}, {lr} ({f['reached']} of {f['batches']} batches reached)")
    return "; ".join(parts)


def per_target_line(fits: dict, metric: str) -> str:
    """B_noise at each target, easiest first: McCandlish et al. find the critical batch grows as the target
    tightens."""
    parts = []
    for t, f in fits.items():
        for _, r in f.iterrows():
            value = critical_text(r).removeprefix("critical batch B_noise ~ ")
            variant = "" if len(f) == 1 else f" ({r['variant']})"
            parts.append(f"{metric} {t:g}{variant}: {value}")
    return "B_noise by target (it grows as the target tightens, McCandlish et al. 2018): " + "; ".join(parts)
