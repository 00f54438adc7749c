"""The critical batch over training by three methods, one table (`rows`: method, label, samples, value, lo, hi,
kind, rests_on) and one figure (`draw`): B_crit of a tuned sweep at a ladder of targets, each placed where a
reference run reached it; the local critical batch at the reference's kept checkpoints (its branch study); and
the gradient noise scale B_simple at the same checkpoints. `lbscale schedule` measures them and derives a
batch-size schedule from the table (analysis/schedule.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lbscale.results import read_json, read_jsonl


def evaluations(trial: Path, metric: str) -> pd.DataFrame:
    rows = [r for r in read_jsonl(trial / "metrics.jsonl") if r.get("kind") == "step" and r.get(metric) is not None]
    return pd.DataFrame(rows, columns=["step", "samples_seen", metric, "subset"])


def first_reach(ev: pd.DataFrame, metric: str, target: float, maximize: bool) -> float | None:
    hit = ev[ev[metric] >= target] if maximize else ev[ev[metric] <= target]
    return float(hit["samples_seen"].iloc[0]) if len(hit) else None


def local_rows(branches: Path) -> pd.DataFrame:
    """The local critical batch per checkpoint of the branch study, with its interval (`report.branch_study`)."""
    from lbscale.report.branch_study import per_checkpoint, read

    table = read([branches])
    most = int(table["factor"].max())
    return pd.DataFrame([{"method": "local critical batch", "label": r["checkpoint"], "samples": float(r["samples"]),
                          "value": r["critical_batch"], "lo": r["lo"], "hi": r["hi"], "kind": r["kind"],
                          "rests_on": f"branches at 1..{most} x the reference's batch, {int(r['repeats'])} repeats "
                                      f"each; {r['why']}"} for _, r in per_checkpoint(table).iterrows()])


def gns_rows(reference: Path) -> pd.DataFrame:
    """B_simple at each kept checkpoint of the reference and at its target, with Fieller's interval."""

    rows = []
    for label, folder in measured_at(reference).items():
        g, info = read_json(folder / "gns.json"), read_json(folder / "info.json") or {}
        if not g:
            continue
        lo, hi = g.get("b_simple_lo"), g.get("b_simple_hi")
        value = g.get("b_simple")
        kind = "none" if value is None or lo is None else ("interval" if hi is not None else "lower")
        rows.append({"method": "B_simple", "label": label, "samples": float(info.get("samples_seen", math.nan)),
                     "value": value, "lo": lo, "hi": hi if hi is not None else math.inf, "kind": kind,
                     "rests_on": f"gradient noise scale, {g.get('groups')} groups of {g.get('k')} x "
                                 f"{g.get('micro_batch')} (Fieller 90%)"})
    return pd.DataFrame(rows)


def measured_at(reference: Path) -> dict[str, Path]:
    """The reference's checkpoints the noise scale is measured at, by label: the kept ones and its target's."""
    from lbscale.train.kept import kept as kept_checkpoints

    return {**kept_checkpoints(reference), "target": reference / "checkpoint"}


def ladder(reference: Path, ev: pd.DataFrame, metric: str, target: float, maximize: bool) -> list[float]:
    """The targets of the B_crit ladder: the reference run's `metric` at its last evaluation at or before each
    kept checkpoint (rounded to 0.01), and the sweep's own target; none in the first quarter of the way from its
    first evaluation to the target (near chance every batch takes a step or two: B_crit there says nothing)."""
    from lbscale.train.kept import kept as kept_checkpoints

    out = []
    floor = float(ev[metric].iloc[0]) + 0.25 * (target - float(ev[metric].iloc[0])) if len(ev) else target
    for folder in kept_checkpoints(reference).values():
        step = (read_json(folder / "info.json") or {}).get("step", 0)
        before = ev[ev["step"] <= step]
        if len(before):
            x = float(before[metric].iloc[-1])  # to 0.01 toward the curve's start: a value it had reached there
            v = math.floor(x * 100 + 1e-9) / 100 if maximize else math.ceil(x * 100 - 1e-9) / 100
            if ((floor <= v < target) if maximize else (floor >= v > target)):  # not at the curve's start
                out.append(v)
    return sorted(set(out), reverse=not maximize) + [target]


def bcrit_rows(study, metric: str, target: float, maximize: bool, reference: Path, variant) -> pd.DataFrame:
    """B_crit of the tuned sweep at each target of the ladder (each its own fit of the report's steps model),
    placed at the samples where the reference run first reached it. Below the sweep's own target the trials'
    evaluations of a subset count too (they were evaluated on the whole split only near their target); said."""
    from lbscale.analysis.intervals import LEVEL
    from lbscale.report import steps_model
    from lbscale.report.critical_batch import observations
    from lbscale.report.tuned import trial_outcomes

    ev, rows = evaluations(reference, metric), []
    subset = "subset" in study.steps and study.steps["subset"].notna().any()
    for t in ladder(reference, ev, metric, target, maximize):
        steps = study.steps.drop(columns=["subset"]) if (t != target and subset) else study.steps
        outcomes = trial_outcomes(study.trials, steps, metric, t, maximize)
        if variant is not None:
            outcomes = outcomes[outcomes["variant"] == variant]
        model = steps_model.fit(observations(outcomes, "peak_lr"), LEVEL, quantities=("b_crit",))  # the report's
        e = model.estimates.get("b_crit") if model is not None else None  # B_crit, only its profile computed
        fit = {"b_crit": e.value, "b_crit_lo": e.lo, "b_crit_hi": e.hi, "b_crit_kind": e.kind} if e else {}
        n = int(outcomes["reached"].astype(bool).sum())
        on = "their subset and whole-split evaluations" if (t != target and subset) else "whole-split evaluations"
        placed = ev if t != target or "subset" not in ev else ev[ev["subset"].isna()]  # as its fit: whole split
        rows.append({"method": "B_crit", "label": f"{metric} {t:g}", "samples": first_reach(placed, metric, t,
                                                                                              maximize),
                     "value": fit.get("b_crit"), "lo": fit.get("b_crit_lo"), "hi": fit.get("b_crit_hi"),
                     "kind": fit.get("b_crit_kind") or "none",
                     "rests_on": f"the tuned sweep's fit at {metric} {t:g}: {n} trials reached it ({on}); placed "
                                 "where the reference run reached it"})
    return pd.DataFrame(rows)


def disagreements(table: pd.DataFrame) -> list[str]:
    """Where two estimates at (about) the same place in training have intervals that do not overlap."""
    def span(r):
        lo = r["lo"] if pd.notna(r["lo"]) else 0.0
        hi = r["hi"] if pd.notna(r["hi"]) else math.inf
        return lo, hi

    out = []
    at = table[table["kind"] != "none"]
    local = at[at["method"] == "local critical batch"]
    for _, r in local.iterrows():
        for method in ("B_simple", "B_crit"):
            other = at[at["method"] == method].dropna(subset=["samples"])
            if other.empty:
                continue
            o = other.iloc[(other["samples"] - r["samples"]).abs().argsort().iloc[0]]
            (a0, a1), (b0, b1) = span(r), span(o)
            if a1 < b0 or b1 < a0:
                out.append(f"at {r['samples']:,.0f} samples ({r['label']}) the local critical batch "
                           f"{cell(r)} and {method} {cell(o)} ({o['label']}) disagree beyond their intervals")
    return out


def cell(r) -> str:
    from lbscale.report.numbers import estimate_cell, whole

    if r["kind"] == "none" or r["value"] is None or (isinstance(r["value"], float) and math.isnan(r["value"])):
        return "not resolved"
    return estimate_cell(r["value"], r["lo"], r["hi"], r["kind"], whole)


def draw(table: pd.DataFrame, switches, batches: list[int], path: Path, title: str) -> None:
    """The three estimates against the reference run's samples (log-log): a point with its interval, an open
    triangle at a bound's end (up: at least, down: below), nothing where not resolved; the derived schedule as a
    step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    styles = {"B_crit": ("C0", "s", -0.03), "local critical batch": ("C1", "o", 0.0), "B_simple": ("C2", "D", 0.03)}
    shown = table[(table["kind"] != "none") & table["samples"].notna()]
    floor, ceil = batches[0] / 4, batches[-1] * 4
    for method, (color, marker, shift) in styles.items():
        g = shown[shown["method"] == method]
        for _, r in g.iterrows():
            x = r["samples"] * 10 ** shift
            lo = r["lo"] if pd.notna(r["lo"]) and r["lo"] > 0 else floor
            hi = r["hi"] if pd.notna(r["hi"]) and math.isfinite(r["hi"]) else ceil
            ax.plot([x, x], [lo, hi], color=color, lw=2, alpha=0.45)
            at, m = {"lower": (r["lo"], "^"), "upper": (r["hi"], "v")}.get(r["kind"], (r["value"], marker))
            ax.plot([x], [at], m, color=color, mfc="none" if m in "^v" else color)
        ax.plot([], [], marker, color=color, label=f"{method} (90% interval)")
    xs = [s.samples for s in switches[1:]] or [shown["samples"].min()]
    right = max(shown["samples"].max(), max(xs)) * 1.5
    left = shown["samples"].min() / 1.5
    steps_x = [left] + [s.samples for s in switches[1:]] + [right]
    steps_y = [s.batch for s in switches] + [switches[-1].batch]
    ax.step(steps_x, steps_y, where="post", color="k", lw=1.2, label="the derived schedule")
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_ylim(floor, ceil)
    ticks = [b for b in (2 ** i for i in range(30)) if floor <= b <= ceil]
    ax.set_yticks(ticks, [f"{b:,}" for b in ticks])
    ax.set_xlabel("training samples of the reference run (B_crit: where it reached that target)")
    ax.set_ylabel("batch")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
