"""The tables and the verdict of a tuned study (a hyperparameter search per batch), from `report.tuned`'s frames:
the best trial per batch, the fits of LR* ~ B^alpha and of the critical batch with their intervals, the best
metric within epoch budgets."""

from __future__ import annotations

import json
import math

import pandas as pd

from lbscale.report.load import HP, Study
from lbscale.report.numbers import SUB, bounded, estimate_cell, estimate_text, number, whole
from lbscale.analysis.intervals import LEVEL
from lbscale.report.tables import Table, batch_label, metric_label
from lbscale.report.noise_scale import gns_at_target, gns_note, gns_sources, variant_gns
from lbscale.report.tuned import hp_columns


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


def best_trial_table(study: Study, best: pd.DataFrame, metric: str, target: float | None,
                     optima: pd.DataFrame | None = None) -> Table:
    """Per (variant, batch): the best trial, its steps / epochs / seconds to target or its best metric, and its
    hyperparameters; with `optima`, the batch's optimum as the figure draws it (the seed mean at its best search
    point) beside the best single trial's steps, named so."""
    label = metric_label(metric)
    hps = hp_columns(best)
    gns = gns_at_target(study.steps, best if target is not None else best.iloc[0:0], study.trials)
    test = f"final_{study.task.primary_on('test')}"
    test_label = f"Final {metric_label(test.removeprefix('final_'))}"
    if test in study.trials and study.trials[test].notna().any() and not metric.startswith("test_"):
        final = study.trials.set_index(["results", "trial"])[test]
        best = best.assign(**{test: [final.get((r["results"], r["trial"])) for _, r in best.iterrows()]})
    optimum = None
    if optima is not None and len(optima) and target is not None:
        hit = optima[optima["reached"].astype(bool)]
        optimum = {(v if pd.notna(v) else "-", b): s for v, b, s in
                   zip(hit["variant"], hit["global_batch"], hit["steps_star"])}
        best = best.assign(steps_optimum=[optimum.get((v if pd.notna(v) else "-", b)) for v, b in
                                          zip(best["variant"], best["global_batch"])])
    if len(gns):
        best = best.assign(gns_b_simple=[gns["b_simple"].get(t) for t in best["trial"]],
                           gns_source=[gns["source"].get(t) for t in best["trial"]])
    disp = []
    for _, r in best.iterrows():
        row = {"Variant": r["variant"]} if study.varies("variant") else {}
        row.update({"Batch size": batch_label(r["global_batch"]), "Trial": r["trial"]})
        if target is not None:
            if optimum is not None:
                row["Optimum: steps (seed mean)"] = whole(optimum.get((r["variant"], r["global_batch"])))
            row.update({"Reached": "yes" if r["reached"] else "no",
                        "Best single trial: steps to target": whole(r["steps_to_target"]),
                        "Epochs to target": number(r["epochs_to_target"], 2),
                        "Time to target [s]": number(r["seconds_to_target"], 1)})
        row[f"Best {label}"] = number(r["best_value"])
        if test in best:
            row[test_label] = number(r[test])
        row["Peak LR"] = _hp(r.get("peak_lr"))
        if len(gns):
            row["B_simple at target"] = number(r["gns_b_simple"])
        row.update({c.removeprefix(HP): _hp(r[c]) for c in hps if c != f"{HP}peak_lr"})
        disp.append(row)
    goal = (f"the fewest steps to {label} {target:g} (ties: the better best value, then the trial id); where no "
            f"trial reached it, the best {metric} of any whole-split evaluation" if target is not None
            else f"the best {metric} of any whole-split evaluation (no target given)")
    return Table("tuned-best", "Best trial per batch (tuned)", pd.DataFrame(disp), best.reset_index(drop=True),
                 [f"Best trial: {goal}; every trial with evaluations counts, pruned ones included; an unfinished "
                  "one (interrupted, still running) only once it reached the target"]
                 + (["Optimum: the batch's optimum as the figure draws it: the geometric mean of the steps of every "
                     "seed at its best search point (placed between points by a parabola where its neighbours "
                     "reached the target); the best single trial beside it is one draw of the seed noise"]
                    if optimum is not None else [])
                 + ["Steps / epochs / time to target: the first whole-split evaluation (step or epoch) at or past "
                    "the target (a subset evaluation that meets it is confirmed on the whole split first)"]
                 + ([f"{test_label}: the best trial's model at its end on the test split, reported beside it and not "
                     "used to choose it"] if test in best else [])
                 + ([gns_note(gns, study.varies("variant"))] if len(gns) else []))


def _two(v) -> str:
    return f"{v:.2f}"


def _cell(f) -> str:
    """B_crit in a table cell: the value with its interval, a bound, or 'not resolved'."""
    return estimate_cell(f.get("b_crit"), f.get("b_crit_lo"), f.get("b_crit_hi"), f.get("b_crit_kind"), whole)


def knee_range() -> str:
    """The knees B_crit's interval is profiled over: '0.5 to 2'."""
    from lbscale.report.likelihood import KNEE_LIMITS

    return " to ".join(f"{math.exp(x):.2g}" for x in KNEE_LIMITS)


def p_text(p) -> str:
    """A p-value: two decimals, one significant figure below 0.01 (2e-47)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1g}"


def _flag(f, key: str) -> bool:
    """A yes / no column of a fits row, whichever way the row was read (Python's or numpy's bool; empty: no)."""
    v = f.get(key)
    return bool(v) if v is not None and pd.notna(v) else False


def lack_of_fit_text(f) -> str:
    """Where the curve's lack-of-fit test rejected it (`steps_model.lack_of_fit`): that it does not describe the
    trials, with its p, and that the curve's intervals were widened to the batches' scatter; '' otherwise."""
    if not _flag(f, "lack_of_fit_rejected"):
        return ""
    return (f"the curve does not describe these trials well, p = {p_text(f['lack_of_fit_p'])} (lack of fit: the "
            "batches scatter about the fitted curve more than the trials within each allow; F on "
            f"{int(f['lack_of_fit_dof'])} and {int(f['lack_of_fit_pure_dof'])} dof); intervals widened to their "
            "scatter (B_crit, S_min, E_min)")


def lack_of_fit_cell(f) -> str:
    """The lack-of-fit test's p in the fits table, '(rejected)' below 10%; '-' where it was not tested."""
    p = f.get("lack_of_fit_p")
    if p is None or pd.isna(p):
        return "-"
    return p_text(p) + (" (rejected)" if _flag(f, "lack_of_fit_rejected") else "")


def regimes_text(f) -> str:
    """What a doubling of the batch buys, as far as the data carry it: the knee g with its interval; where the
    shape is resolved (`steps_model.thresholds_supported`) and B_crit two-sided, the batches below which a
    doubling saves >= 45% of the steps and above which under 10%; otherwise what each step between the measured
    batches saved (`steps_model.doublings`), not thresholds extrapolated from an assumed shape; S_min and E_min
    (the fewest steps, the fewest samples)."""
    parts = [knee_text(f)] if f.get("knee_kind") is not None and pd.notna(f.get("knee_kind")) else []
    if _flag(f, "thresholds") and f.get("b_crit_kind") == "interval":
        below = estimate_cell(f["saves_45"], f["saves_45_lo"], f["saves_45_hi"], "interval", whole)
        above = estimate_cell(f["saves_10"], f["saves_10_lo"], f["saves_10_hi"], "interval", whole)
        parts.append(f"a doubling of the batch saves >= 45% of the steps below ~{below}, under 10% above ~{above} "
                     "(both ends together at the stated level)")
    elif isinstance(f.get("doublings"), str):
        steps = json.loads(f["doublings"])
        if steps:
            parts.append("the steps' fall past the measured batches is not resolved (" + _why_no_words(f)
                         + "); measured: " + ", ".join(_step_text(d) for d in steps))
    for name, q, unit in (("S_min", "s_min", "steps"), ("E_min", "e_min", "samples")):
        if f.get("b_crit_kind") == "interval" and f.get(f"{q}_kind") in ("interval", "lower", "upper"):
            parts.append(estimate_text(name, f[q], f[f"{q}_lo"], f[f"{q}_hi"], f[f"{q}_kind"], whole, LEVEL)
                         + f" {unit}")
    return "; ".join(parts)


def knee_text(f) -> str:
    """The curve's knee g (1: McCandlish's S_min (1 + B_crit / B); below 1 softer, above sharper) with its
    interval, or why it was not fitted."""
    if f.get("knee_kind") == "none":
        reason = f.get("knee_reason")
        return f"knee not resolved{f' ({reason})' if isinstance(reason, str) and reason else ''}"
    lo, hi = f["knee_lo"], f["knee_hi"]
    says = ("consistent with McCandlish's g = 1" if lo < 1 < hi else "softer than McCandlish's" if hi <= 1
            else "sharper than McCandlish's")
    level = (1 + LEVEL) / 2  # the knee's words are one-sided claims either way (`steps_model.fit`)
    if f["knee_kind"] == "interval":
        return f"knee g = {estimate_cell(f['knee'], lo, hi, 'interval', _two)} ({100 * level:.0f}%; {says})"
    return f"{estimate_text('knee g', f['knee'], lo, hi, f['knee_kind'], _two, level)}: {says}"


def _why_no_words(f) -> str:
    """Why the steps' fall past the batches gets no words; the knee's own text stands just before it."""
    if f.get("knee_kind") == "none":
        return "it rests on the knee"
    if f.get("knee_kind") != "interval":
        return "the knee has only one bound"
    if f.get("b_crit_kind") != "interval":
        return "B_crit is not two-sided"
    return "the 45% and 10% batches are not both bounded"


def _step_text(d: dict) -> str:
    """What one measured step saved, in whole percent: the value rounded, its interval's ends rounded outward (the
    printed interval holds the computed one); a bound that says nothing (from below at 1% or less, from above at the
    most the step can save, 1 - B1 / B2) is 'not resolved', as is a step with no interval."""
    word = "a doubling" if abs(d["b2"] / d["b1"] - 2) < 1e-6 else f"x{d['b2'] / d['b1']:.3g}"
    step = f"{whole(d['b1'])} -> {whole(d['b2'])} ({word})"
    lo, hi = math.floor(100 * d["saving_lo"] + 1e-9), math.ceil(100 * d["saving_hi"] - 1e-9)
    ceiling = math.floor(100 * (1 - d["b1"] / d["b2"]) + 1e-9)
    empty = {"none": True, "lower": lo <= 1, "upper": hi >= ceiling, "interval": lo <= 0 and hi >= ceiling}
    if empty[d["kind"]]:
        return f"{step}: its saving not resolved"
    cell = {"interval": f"{100 * d['saving']:.0f} [{lo}, {hi}]", "lower": f"> {lo}", "upper": f"< {hi}"}[d["kind"]]
    return f"{step} saved {cell}% of the steps"


def _rule(lo, hi) -> str:
    names = [name for name, a in (("the linear rule", 1.0), ("the square-root rule", 0.5)) if lo < a < hi]
    if len(names) == 2:
        return "; it cannot tell the linear from the square-root rule"
    return f"; consistent with {names[0]}" if names else "; neither the linear nor the square-root rule"


def lr_text(f) -> str:
    """LR* as the data support it: alpha, the slope of log LR* over log B across the measured batches, with its
    interval and the rule it is consistent with; where the study ran one LR per batch, that the LR was not tuned."""
    if f.get("lr_tuned") is False:
        return ("LR not tuned (one LR per batch): B_crit holds for this LR rule; a search per batch finds the "
                "optimum (Shallue et al. 2019)")
    if f.get("alpha_kind") not in ("interval", "lower", "upper"):
        reason = f.get("alpha_reason")
        return f"LR*: alpha not resolved{f' ({reason})' if isinstance(reason, str) and reason else ''}"
    alpha = estimate_cell(f["alpha"], f["alpha_lo"], f["alpha_hi"], f["alpha_kind"], _two)
    text = (f"LR* ~ B^alpha over the measured batches with alpha = {alpha}"
            f"{_rule(f['alpha_lo'], f['alpha_hi'])}")
    text += _form_text(f)
    if pd.notna(f.get("alpha_effective")):
        text += (f"; of the effective LR lr / (1 - momentum): alpha = "
                 f"{bounded(f['alpha_effective'], f['alpha_effective_lo'], f['alpha_effective_hi'], _two)}")
    return text


def _form_text(f) -> str:
    """The LR's form as the lack-of-fit tests name it (`steps_model.lr_forms`), or why none is named."""
    if not f.get("lr_tested"):
        reached = int(f.get("reached") or 0)
        return ("; power law and saturating form not distinguishable here (a test needs 6 reached batches or more"
                f" and replicates, {reached} batches here)")
    p = f"lack of fit p = {f['p_power']:.2f} for the power law, {f['p_saturating']:.2f} for the saturating form"
    if f.get("lr_model") == "saturating":
        b_lr = estimate_cell(f["b_lr"], f["b_lr_lo"], f["b_lr_hi"], f["b_lr_kind"], whole)
        return (f"; but LR* saturates: eps_max / (1 + B_lr / B) with B_lr {b_lr} (it grows about linearly below "
                f"B_lr, flat past it; the power law is rejected at 10%: {p})")
    if f.get("lr_model") == "power":
        return f"; a power law (the saturating form is rejected at 10%: {p})"
    return f"; power law and saturating form not distinguishable here ({p})"


def rests_on(f, metric: str, target: float | None, search: dict) -> str:
    """What a variant's numbers rest on: reached batches of batches, trials (and the shorter runs a longer run of
    their point superseded), search points, the seeds at each batch's best point and at the others, censored
    trials, edges, and what the intervals are."""
    # with several seeds a point reaches where every seed of it did: a batch whose best trial reached the target
    # (the best-trial table's "yes") but whose confirmation seed did not is unreached here
    several = search.get("seeds", 1) > 1 or (f.get("seeds_best") or 0) > 1
    rule = "; a batch counts as reached where every seed of one of its points reached the target" if several else ""
    reach = (f"{f['reached']} of {f['batches']} batches reached {metric} {target:g}"
             + (f" (not reached: {f['unreached'].replace(',', ', ')}{rule})" if f.get("unreached") else "")
             if target is not None else f"{f['batches']} batches, best {metric} within the budget")
    seeds = f"seeds: {_count(f.get('seeds_best'))} at each batch's best point, {_count(f.get('seeds_others'))} " \
            "at the others (at most)"
    n = search.get("superseded") or 0
    runs = (f" ({n} shorter run{'s' if n > 1 else ''} superseded by a longer run of their point and seed)"
            if n else "")
    grid = f"{int(f.get('trials') or 0)} trials{runs}, {search.get('points', '?')} search points per batch; {seeds}"
    censored = (f"; {int(f['censored'])} did not reach the target (censored: more steps than they ran)"
                if pd.notna(f.get("censored")) and f.get("censored") else "")
    edge = [f"{int(f[c])} {words}" for c, words in (("diverged", "diverged"), ("never_learned", "never learned"))
            if pd.notna(f.get(c)) and f.get(c)]
    if edge:
        censored += f"; {', '.join(edge)} (no steps: each keeps lr* below its LR)"
    edge = (f"; edge: {f['edges'].replace(',', ', ')}: the optimum may lie outside the search" if f.get("edges")
            else "")
    left = _unfinished(f)
    left = f"; {left} (interrupted, still running or failed: no evidence either way)" if left else ""
    if target is None:
        intervals = f"{100 * LEVEL:.0f}% t-interval of alpha over the batches' best LRs"
    elif pd.notna(f.get("n_fit")):
        intervals = (f"one model over every trial, {100 * LEVEL:.0f}% profile-likelihood intervals "
                     f"({int(f['n_fit'])} trials reached the target, {int(f['params'])} parameters)")
    else:
        intervals = "no model fit"
    return f"rests on {reach}; {grid}{censored}{left}{edge}; {intervals}"


def _unfinished(f) -> str:
    """'2 unfinished trials left out' (`tuned.unfinished_per_arm`), or '' where none was."""
    n = int(f.get("unfinished")) if pd.notna(f.get("unfinished")) else 0
    return f"{n} unfinished trial{'' if n == 1 else 's'} left out" if n else ""


def _count(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{int(v)}"


def fits_table(study: Study, fits: pd.DataFrame, target: float | None, gns: pd.DataFrame | None = None) -> Table:
    """Per variant: the critical batch, S_min, E_min and the optimal LR's exponent, each as the data support it,
    with what the numbers rest on; beside them B_simple at the target (`noise_scale.gns_at_target`)."""
    pct = f"{100 * LEVEL:.0f}%"
    disp, tidy = [], []
    for _, f in fits.iterrows():  # B_simple where the hardest target (`target`) was reached: on its rows only
        at = variant_gns(gns, f["variant"]) if f.get("target", target) == target else pd.Series(dtype=float)
        cell = {q: estimate_cell(f.get(q), f.get(f"{q}_lo"), f.get(f"{q}_hi"), f.get(f"{q}_kind"), whole)
                if target is not None else "-" for q in ("b_crit", "s_min", "e_min")}
        disp.append({"Variant": f["variant"], **({"Target": f"{f['target']:g}"} if "target" in f else {}),
                     "Batches reached": f"{f['reached']} of {f['batches']}" if target is not None else "-",
                     f"B_crit [{pct}]": cell["b_crit"], f"S_min [steps, {pct}]": cell["s_min"],
                     f"E_min [samples, {pct}]": cell["e_min"],
                     f"alpha [{pct}]": estimate_cell(f["alpha"], f["alpha_lo"], f["alpha_hi"], f["alpha_kind"], _two)
                     if f.get("lr_tuned") is not False else "LR not tuned",
                     f"Knee g [{pct}]": estimate_cell(f.get("knee"), f.get("knee_lo"), f.get("knee_hi"),
                                                       f.get("knee_kind"), _two) if pd.notna(f.get("knee"))
                     else "g = 1 (not tested)" if target is not None and pd.notna(f.get("b_crit")) else "-",
                     "Edges": f["edges"] or "-",
                     "Noise sigma (smallest, largest batch)": f"{f['sigma_lo']:.2f}, {f['sigma_hi']:.2f}"
                     if pd.notna(f.get("sigma_lo")) else "-",
                     "Lack of fit p": lack_of_fit_cell(f),
                     "B_simple at target (GNS)": number(float(at.median())) if len(at) else "-"})
        tidy.append({**f.to_dict(), "gns_b_simple": float(at.median()) if len(at) else None})
    return Table("tuned-fits", "Critical batch and optimal LR: one model over every trial (tuned)",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["Model: log S = log S_min + (1 / g) log(1 + (B_c / B)^g) + log(1 + k d^2) + e, d = ln(lr / "
                  "lr*(B)), lr*(B) = c B^alpha, e normal with log sigma linear in log B; fitted to every trial by "
                  "maximum likelihood: a crossing between two evaluations is interval-censored, a trial that did not "
                  "reach the target right-censored, one that diverged keeps lr*(B) below its LR "
                  "(docs/scaling-model.md)",
                  "B_crit: the batch where a doubling saves 25% of the steps; at g = 1 McCandlish et al. 2018's "
                  "critical batch, S = S_min (1 + B_crit / B), where a doubling saves >= 45% below B_crit / 9 and "
                  "under 10% above 4 B_crit; E_min = S_min B_c: the fewest training samples (the small-batch limit)",
                  "Knee g: the curve's knee, fitted where 4 batches or more reached the target (1: McCandlish's; "
                  "below 1 a softer knee, the steps falling on past B_crit; above, a sharper one); the verdict says "
                  "where a doubling saves >= 45% and under 10% only where g's interval has both ends, otherwise what "
                  "each step between the measured batches saved",
                  f"[{pct}]: profile-likelihood intervals (deviance threshold n log(1 + t^2 / (n - p))); '> x' "
                  "where only the lower end is bounded, '< x' only the upper, 'not resolved' neither: nothing is "
                  "clipped to the measured batches",
                  "alpha: the slope of log lr* over log B across the measured batches",
                  "Lack of fit p: the curve against a free level of log S per batch (F on batches - 3, or - 2 with "
                  "the knee held at 1, and the replicates' degrees of freedom); where it is below 0.1 (rejected) "
                  "the curve does not describe the trials well and the intervals of B_crit, S_min and E_min take "
                  "the batches' scatter about it; '-' "
                  "where too few replicates were left to judge it by",
                  "B_simple at target: the median over the batches' best trials of the noise scale where each "
                  "reached the target (McCandlish et al.'s predictor of B_crit, up to a factor)"
                  + (f": {gns_sources(gns)}" if gns is not None and len(gns) else
                     " (--gns-every, or --gns-at-target on one process)"),
                  "Edges: a best point at the lowest or highest LR searched"]
                 + list(dict.fromkeys(f"{f['variant']}: {_unfinished(f)} of the optima and the fit (interrupted or "
                                      "still running, short of the target: evidence of nothing yet; each counts once "
                                      "it has a result)" for _, f in fits.iterrows() if _unfinished(f))))


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


HEADLINE_LIMIT = 200  # a verdict's first line per arm: the answer a reader came for


def verdict(fits: pd.DataFrame, metric: str, target: float | None, searches: dict | None = None,
            gns: pd.DataFrame | None = None, ladders: list | None = None) -> list[str]:
    """Per variant a first line that answers (`answer_line`: B_crit with its interval at the target, at most
    HEADLINE_LIMIT characters), then its detail as sub-lines (SUB): what would resolve it, the knee and what each
    doubling saved, S_min and E_min, a rejected fit (`lack_of_fit_text`), B_simple at the target where its best
    trials measured it (`gns`: `noise_scale.gns_at_target`), the optimal LR and what it all rests on; with
    `ladders` (report/ladder.py), B_crit predicted where training ends, on the first line and in detail below it.
    `searches`: per variant {points, seeds} of the search per batch."""
    from lbscale.report.ladder import detail_lines, verdict_part

    if fits.empty:
        return [f"no evaluations of {metric} yet: nothing to fit"]
    lines = []
    for _, f in fits.iterrows():
        lines.append(answer_line(f, metric, target) + verdict_part(ladders or [], f["variant"]))
        details = detail_lines(ladders or [], f["variant"])
        if target is not None:
            reason = f.get("b_crit_reason")
            details += [reason if isinstance(reason, str) and reason else "", regimes_text(f), lack_of_fit_text(f)]
        at = variant_gns(gns, f["variant"]) if target is not None else pd.Series(dtype=float)
        if len(at):
            details.append(f"B_simple at target ~ {number(float(at.median()))} (the median of {len(at)} of "
                           f"{f['batches']} batches' best trials, each at the evaluation that reached the target; "
                           "McCandlish et al.'s predictor of B_crit, up to a factor)")
        details += [lr_text(f), rests_on(f, metric, target, (searches or {}).get(f["variant"], {}))]
        lines += [SUB + d for d in details if d]
    return lines


def answer_line(f, metric: str, target: float | None) -> str:
    """An arm's answer in one line: 'sgd-sqrt: B_crit ~ 75 [41, 140] at val_top1 0.95', a bound, or not resolved;
    where the knee was fitted and the data leave it open, over which knees the interval holds."""
    if target is None:
        return (f"{f['variant']}: no critical batch (no target: give --target; the best trial per batch is the one "
                f"with the best {metric} within its budget, and the steps-to-result figure is skipped)")
    text = estimate_text("B_crit", f.get("b_crit"), f.get("b_crit_lo"), f.get("b_crit_hi"), f.get("b_crit_kind"),
                         whole, LEVEL)
    knees = (f" (over knees g {knee_range()})" if f.get("knee_kind") in ("lower", "upper", "none")
             and pd.notna(f.get("knee")) and f.get("b_crit_kind") != "none" else "")
    return f"{f['variant']}: {text} at {metric} {target:g}{knees}"


def chance_line(at: pd.DataFrame, halved: int) -> str | None:
    """A warning where trials were pruned at chance level (`tuned.pruned_at_chance`): their first rung may have
    come before any LR had learnt anything, and then halving ranks noise."""
    if at.empty:
        return None
    levels = "; ".join(f"{m} {'>=' if m.endswith('loss') else '<='} "
                       + " or ".join(f"{b:#.2g}" for b in sorted(g["chance_bound"].unique()))
                       for m, g in at.groupby("pruned_metric"))
    return (f"{len(at)} of {halved} trials were pruned at chance level ({levels} at their rung): the first rung may "
            "be too early; give --prune-min-samples a larger value")


DOUBTS = {"noise": "all within the evaluation's noise of each other",
          "chance": "the best within noise of chance level",
          "arrival": "a trial went on by arrival order while a better one, beyond noise, was pruned"}


def undecided_lines(undecided: pd.DataFrame) -> list[str]:
    """One warning per halving group whose rung could not tell its trials apart, or whose decisions the arrival
    order made (`tuned.undecided_rungs`), naming the batch, the rung's samples, the values' range and why, with
    what would decide it."""
    lines = []
    for r in undecided.itertuples():
        variant = f" ({r.variant})" if isinstance(r.variant, str) else ""
        later = f"; so did {r.later} later rung{'s' if r.later > 1 else ''}" if r.later else ""
        order = r.doubts == ("arrival",)  # told apart, but the order decided
        said = f"was decided by arrival order among its {r.trials} trials" if order else \
            f"could not tell its {r.trials} trials apart"
        fix = ("--prune sha decides in any order" if order else
               "give --prune-min-samples a larger value (a larger --eval-subset narrows the noise)")
        lines.append(f"batch {batch_label(r.global_batch)}{variant}: rung {r.rung} at {int(r.samples):,} samples "
                     f"{said} ({r.metric} {r.lo:#.2g}-{r.hi:#.2g}: {'; '.join(DOUBTS[d] for d in r.doubts)})"
                     f"{later}: {fix}")
    return lines


def ratio_lines(ratios: pd.DataFrame) -> list[str]:
    """One line per arm against the reference arm: B_crit's ratio with its interval, and what it says."""
    lines = []
    for r in ratios.itertuples():
        cell = estimate_cell(r.ratio, r.ratio_lo, r.ratio_hi, r.ratio_kind, _two)
        says = ("larger" if r.ratio_lo > 1 else "smaller" if r.ratio_hi < 1 else None) \
            if r.ratio_kind != "none" else None
        meaning = (f"{r.arm} takes a {says} critical batch than {r.reference}" if says else
                   "the study does not tell the two apart")
        lines.append(f"B_crit of {r.arm} / {r.reference}: {cell} ({100 * LEVEL:.0f}% profile-likelihood interval of "
                     f"the ratio): {meaning}")
    return lines


def headline(fits: pd.DataFrame, target: float | None) -> str:
    """The report command's outcome: per variant B_crit (or its bound, or not resolved) and alpha."""
    parts = []
    for _, f in fits.iterrows():
        crit = ("no target" if target is None else
                estimate_text("B_crit", f["b_crit"], f["b_crit_lo"], f["b_crit_hi"], f["b_crit_kind"], whole, LEVEL))
        lr = ("LR not tuned" if f.get("lr_tuned") is False else
              f"alpha = {estimate_cell(f['alpha'], f['alpha_lo'], f['alpha_hi'], f['alpha_kind'], _two)}"
              if f["alpha_kind"] in ("interval", "lower", "upper") else "alpha not resolved")
        parts.append(f"{f['variant']}: {crit}, {lr} ({f['reached']} of {f['batches']} batches reached)")
    return "; ".join(parts)


def per_target_line(fits: dict, metric: str) -> str:
    """B_crit at each target, easiest first: McCandlish et al. find the critical batch grows as the target
    tightens."""
    parts = []
    for t, f in fits.items():
        for _, r in f.iterrows():
            value = estimate_cell(r["b_crit"], r["b_crit_lo"], r["b_crit_hi"], r["b_crit_kind"], whole)
            variant = "" if len(f) == 1 else f" ({r['variant']})"
            parts.append(f"{metric} {t:g}{variant}: {value}")
    return "B_crit by target (it grows as the target tightens, McCandlish et al. 2018): " + "; ".join(parts)


def eval_share_line(epochs: pd.DataFrame) -> str | None:
    """The time the evaluations inside epochs took, as a share of each trial's training time (measured: the epoch
    records' step_eval_seconds over train_seconds); None where no trial evaluated inside its epochs."""
    from lbscale.report.tuned import eval_shares

    per = eval_shares(epochs)
    if per.empty:
        return None
    share = per["share"]
    top = share.idxmax()
    return (f"Evaluations inside epochs took {100 * share.median():.1f}% of training time (median over {len(per)} "
            f"trials; the most {100 * share[top]:.1f}%, at batch {per.loc[top, 'batch']:.0f}): docs/designing.md "
            "says how to choose the spacing")
