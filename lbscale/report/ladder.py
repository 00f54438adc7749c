"""B_crit against the target from one sweep, and B_crit where training ends: the report's view of
analysis/ladder.py.

Every trial's curve crosses the targets below its own, so a tuned sweep fits B_crit at each target of its ladder
(the trials' own targets: a designed study checks the whole split near each; `Analysis.by_target` holds the fits).
Each rung is placed by the training it takes to reach its target, read off a reference run: the best trial at the
smallest batch that reached the study's target, and, past that target, the same trial trained on by `lbscale
predict` (kept in RESULTS/predict-T/reference). The law fitted to the rungs predicts B_crit at a named target the
reference run reached; beside it, B_simple measured there by the reference run times the ratio B_crit / B_simple the
study measured at its own target. Rows, a table, a figure and the verdict's lines."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lbscale.analysis.intervals import LEVEL
from lbscale.analysis.ladder import Law, Prediction, Rung, disagree, fit_law, on_law, predict, ratio_prediction
from lbscale.report.numbers import estimate_cell, whole
from lbscale.results import read_json

FOLDER = "predict-{target:g}"  # under the study's results: the reference run trained on to the named target
REFERENCE = "reference"


def folder(results: Path, target: float) -> Path:
    return Path(results) / FOLDER.format(target=target)


@dataclass
class Ladder:
    """One arm's ladder: its rungs, the reference run (its batch and trial), the law, and the predictions at the
    named targets (by the law and by B_simple)."""

    variant: str
    rungs: list
    batch: int | None
    trial: str | None
    law: Law | None
    predictions: list  # (law's Prediction, B_simple's Prediction or None)
    reached: dict = field(default_factory=dict)  # named target -> the reference run's samples to it


def samples_to(evaluations: pd.DataFrame, metric: str, target: float, maximize: bool, batch: int) -> float | None:
    """The samples a run at `batch` had trained where it crossed `target`: read linearly between the whole-split
    evaluation before the crossing and the first at or past it (`tuned.steps_to_result`'s `crossing`; that
    evaluation's where none came before it); None where it never reached it. Evaluations spaced geometrically put
    two near targets at the same evaluation: read between them, each has its own."""
    from lbscale.report.tuned import steps_to_result

    hit = steps_to_result(evaluations, metric, target, maximize)
    if not len(hit):
        return None
    at = hit["crossing"].iloc[0]
    return float(at if pd.notna(at) else hit["step"].iloc[0]) * batch


def reference_of(best: pd.DataFrame, variant: str) -> pd.Series | None:
    """The arm's reference run: its best trial at the smallest batch that reached the target."""
    b = best[(best["variant"].fillna("-") == variant) & best["reached"].astype(bool)]
    return b.sort_values("global_batch").iloc[0] if len(b) else None


def rungs_of(a, variant: str, reference: pd.Series) -> list[Rung]:
    """The arm's rungs: B_crit at each target of the report (`Analysis.by_target` and the study's own), placed at
    the samples the reference run took to each."""
    fits = {**{t: f for t, (f, _) in a.by_target.items()}, a.target: a.fits}
    ev = a.study.steps
    mine = ev[(ev["results"] == reference["results"]) & (ev["trial"] == reference["trial"])]
    maximize = a.study.task.higher_is_better(a.metric)
    out = []
    for t in sorted(fits, reverse=not maximize):
        row = fits[t][fits[t]["variant"].fillna("-") == variant]
        if row.empty:
            continue
        f = row.iloc[0]
        x = samples_to(mine, a.metric, t, maximize, int(reference["global_batch"]))
        kind = f.get("b_crit_kind") if isinstance(f.get("b_crit_kind"), str) else "none"
        out.append(Rung(float(t), x if x else math.nan, _num(f.get("b_crit")), _num(f.get("b_crit_lo")),
                        _num(f.get("b_crit_hi")), kind))
    return out


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def b_simple_at(trial_dir: Path) -> tuple[float, float, float] | None:
    """(B_simple, lo, hi) of the trial's checkpoint (its gns.json, `lbscale gns`); None where not measured."""
    g = read_json(Path(trial_dir) / "gns.json")
    if not g or g.get("b_simple") is None:
        return None
    return float(g["b_simple"]), float(g.get("b_simple_lo") or 0.0), float(g.get("b_simple_hi") or math.inf)


def ladders(a, named: list[float]) -> list[Ladder]:
    """Per arm the ladder, its law and the predictions at `named` targets (a target the study itself reached is
    a measurement: its rung)."""
    from lbscale.report.load import load_results

    out = []
    for variant in a.fits["variant"].fillna("-").unique():
        ref = reference_of(a.best, variant)
        if ref is None:
            out.append(Ladder(variant, [], None, None, None, []))
            continue
        batch = int(ref["global_batch"])
        rungs = rungs_of(a, variant, ref)
        law = fit_law([r for r in rungs if math.isfinite(r.x)], batch)
        top = next((r for r in rungs if r.target == a.target), None)
        own_simple = b_simple_at(Path(ref["results"]) / ref["trial"])  # B_simple at the study's own target
        preds, reached = [], {}
        for t in named:
            long_dir = folder(Path(ref["results"]), t) / REFERENCE
            x_star = None
            if long_dir.is_dir():
                study = load_results([long_dir])
                x_star = samples_to(study.steps, a.metric, t, a.study.task.higher_is_better(a.metric), batch)
                if x_star is not None:
                    reached[t] = x_star
            p = predict(law, top, t, x_star, batch) if top is not None else None
            simple = ratio_prediction(b_simple_at(long_dir), top, own_simple, t) if top is not None else None
            preds.append((p, simple))
        out.append(Ladder(variant, rungs, batch, str(ref["trial"]), law, preds, reached))
    return out


def _cell(value, lo, hi, kind) -> str:
    return estimate_cell(value, lo, hi, kind, whole)


def prediction_text(p: Prediction | None) -> str:
    if p is None:
        return "not predicted"
    if p.kind != "interval":
        return f"not predicted ({p.reason})"
    return f"{_cell(p.value, p.lo, p.hi, p.kind)} ({p.stretch:.1f}x the study's training)" if p.stretch else \
        _cell(p.value, p.lo, p.hi, p.kind)


def table(a, found: list[Ladder]):
    """The ladder: per arm and target, B_crit with its interval, the reference run's samples there, and the
    predictions at the named targets; None where no arm has three rungs."""
    from lbscale.report.tables import Table

    disp, tidy = [], []
    for lad in found:
        for r in lad.rungs:
            disp.append({"Arm": lad.variant, f"Target ({a.metric})": f"{r.target:g}",
                         f"B_crit [{LEVEL:.0%}]": _cell(r.value, r.lo, r.hi, r.kind),
                         f"Samples to it at batch {lad.batch}": whole(r.x) if math.isfinite(r.x) else "-",
                         "From": "the sweep"})
            tidy.append({"variant": lad.variant, "target": r.target, "b_crit": r.value, "b_crit_lo": r.lo,
                         "b_crit_hi": r.hi, "b_crit_kind": r.kind, "samples": r.x, "source": "sweep"})
        for p, simple in lad.predictions:
            for name, q in (("the law", p), ("B_simple x the study's ratio", simple)):
                if q is None:
                    continue
                disp.append({"Arm": lad.variant, f"Target ({a.metric})": f"{q.target:g}",
                             f"B_crit [{LEVEL:.0%}]": prediction_text(q),
                             f"Samples to it at batch {lad.batch}": whole(lad.reached[q.target])
                             if q.target in lad.reached else "-",
                             "From": f"predicted: {name}"})
                tidy.append({"variant": lad.variant, "target": q.target, "b_crit": q.value, "b_crit_lo": q.lo,
                             "b_crit_hi": q.hi, "b_crit_kind": q.kind, "samples": lad.reached.get(q.target),
                             "source": name})
    if not any(len([r for r in lad.rungs if r.two_sided]) >= 3 for lad in found):
        return None
    notes = [law_text(lad, a.metric) for lad in found if lad.law is not None]
    return Table("ladder", f"B_crit against the target ({a.metric})", pd.DataFrame(disp), pd.DataFrame(tidy),
                 notes + ["Each target's B_crit is the steps model's fit over every trial at that target (the trials "
                          "check the whole split near each of their targets); a target is placed by the samples "
                          "the reference run (the best trial at the smallest batch) took to reach it; the law and "
                          "the prediction: docs/verdict.md, \"B_crit where training ends\""])


def law_text(lad: Ladder, metric: str) -> str:
    law = lad.law
    lo, hi = law.gamma_interval()
    lack = (f"; the rungs scatter about it more than their intervals allow (p = {law.lack_p:.2g})"
            if law.lack_p is not None and law.lack_p < 0.1 else
            f"; lack of fit p = {law.lack_p:.2f}" if law.lack_p is not None else "")
    return (f"{lad.variant}: B_crit ~ E^gamma with gamma = {law.gamma:.2f} [{lo:.2f}, {hi:.2f}] over {law.rungs} "
            f"targets (E: the training to the target at the small-batch limit){lack}")


def verdict_part(found: list[Ladder], variant: str) -> str:
    """What the first line adds for an arm: its predictions at the named targets."""
    lad = next((x for x in found if x.variant == variant), None)
    if lad is None or not lad.predictions:
        return ""
    parts = []
    for p, simple in lad.predictions:
        if p.kind == "interval":
            parts.append(f"predicted {_cell(p.value, p.lo, p.hi, p.kind)} at {p.target:g}")
        elif simple is not None and simple.kind == "interval":
            parts.append(f"predicted {_cell(simple.value, simple.lo, simple.hi, simple.kind)} at {p.target:g} "
                         "(by B_simple)")
        else:
            parts.append(f"not predicted at {p.target:g}")
    return "; " + "; ".join(parts)


def detail_lines(found: list[Ladder], variant: str) -> list[str]:
    """The sub-lines of an arm: each prediction with what it rests on, the second predictor beside it, and where
    they disagree."""
    lad = next((x for x in found if x.variant == variant), None)
    if lad is None:
        return []
    out = []
    for p, simple in lad.predictions:
        if p.kind == "interval":
            out.append(f"B_crit at {p.target:g} by the law over the ladder: {_cell(p.value, p.lo, p.hi, p.kind)} "
                       f"({p.stretch:.1f}x the training of the study's own target; {LEVEL:.0%} prediction interval)")
        else:
            out.append(f"B_crit at {p.target:g} by the law over the ladder: not predicted ({p.reason})")
        if simple is not None:
            out.append(f"B_crit at {simple.target:g} by B_simple there x the study's B_crit / B_simple: "
                       + (_cell(simple.value, simple.lo, simple.hi, simple.kind) if simple.kind == "interval"
                          else f"not predicted ({simple.reason})"))
            if disagree(p, simple):
                out.append(f"the two predictions at {p.target:g} disagree beyond their intervals: the law's "
                           "extrapolation or the noise scale's calibration does not hold here")
    return out


def figure(a, found: list[Ladder]):
    """B_crit against the training its target takes (the reference run's samples, log-log): each rung with its
    interval and target, the law through them, and each prediction at its named target (the law's, and B_simple's
    beside it); None without a law."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    drawn = [lad for lad in found if lad.law is not None]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for i, lad in enumerate(drawn):
        color = f"C{i}"
        shown = [r for r in lad.rungs if r.two_sided]
        for r in shown:
            ax.plot([r.x, r.x], [r.lo, r.hi], color=color, lw=2, alpha=0.45)
            ax.plot([r.x], [r.value], "o", color=color)
            ax.annotate(f"{r.target:g}", (r.x, r.hi), fontsize=7, ha="center", va="bottom")
        law, b = lad.law, lad.batch
        top = next(r for r in lad.rungs if r.target == a.target)
        xs = [r.x for r in shown] + [lad.reached[p.target] for p, _ in lad.predictions
                                     if p.kind == "interval" and p.target in lad.reached]
        grid = np.exp(np.linspace(math.log(min(xs)) - 0.1, math.log(max(xs)) + 0.1, 60))
        ax.plot(grid, [on_law(law, float(x), b, top.value)[0] for x in grid], "-", color=color, lw=1,
                label=f"{lad.variant}: the law, gamma {law.gamma:.2f}")
        for p, simple in lad.predictions:
            for q, marker, shift in ((p, "D", 1.0), (simple, "s", 1.06)):
                if q is None or q.kind != "interval" or q.target not in lad.reached:
                    continue
                x = lad.reached[q.target] * shift  # the reference run's samples at the target
                ax.plot([x, x], [q.lo, q.hi], color=color, lw=2, ls=":" if marker == "s" else "-")
                ax.plot([x], [q.value], marker, color=color, mfc="none")
                ax.annotate(f"{q.target:g}", (x, q.hi), fontsize=7, ha="center", va="bottom")
        ax.plot([], [], "o", color=color, label=f"{lad.variant}: B_crit at each target (the sweep)")
        if any(p is not None and p.kind == "interval" for p, _ in lad.predictions):
            ax.plot([], [], "D", color=color, mfc="none", label="predicted by the law")
        if any(s is not None and s.kind == "interval" for _, s in lad.predictions):
            ax.plot([], [], "s", color=color, mfc="none", label="predicted by B_simple x the study's ratio")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel(f"samples to the target at the reference batch ({', '.join(str(x.batch) for x in drawn)})")
    ax.set_ylabel(f"B_crit ({LEVEL:.0%} interval)")
    ax.set_title(f"B_crit against the target ({a.metric}): the ladder and where training ends", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
