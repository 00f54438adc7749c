"""The gradient noise scale in the report: B_simple where each best trial reached the target, from --gns-every's
step records or from the trial's gns.json at that step (--gns-at-target, or `lbscale gns` on a checkpoint taken
there), with where each value came from (the tuned report's best-trial and fits tables and its verdict)."""

from __future__ import annotations

import math

import pandas as pd

from lbscale.report.tables import batch_label

GNS_SOURCES = {  # where a B_simple at the target comes from, as the tables' notes name it
    "training": "--gns-every (smoothed over the last measured steps)",
    "target": "gns.json of --gns-at-target (measured at those weights)",
    "checkpoint": "gns.json of lbscale gns on a checkpoint taken there",
}


def gns_at_target(steps: pd.DataFrame, best: pd.DataFrame, trials: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each best trial's noise scale at the evaluation where it reached the target (McCandlish et al.'s comparison
    point), by trial, with its variant, batch and `source` (GNS_SOURCES): --gns-every's smoothed B_simple at that
    step (`training`), else the trial's gns.json (`trials`' gns_* columns) where its step is the trial's steps to
    target, with its interval (lo, hi: NaN where not measured, an open upper end inf); absent where neither was
    measured there."""
    columns = ["variant", "global_batch", "b_simple", "source", "lo", "hi"]
    if not len(best):
        return pd.DataFrame(columns=columns)
    hit = best[best["reached"].astype(bool)][["results", "trial", "variant", "global_batch", "steps_to_target"]]
    found = []
    if "gns_b_simple" in steps:
        at = steps[["results", "trial", "step", "gns_b_simple"]].merge(hit, on=["results", "trial"])
        at = at[(at["step"] == at["steps_to_target"]) & at["gns_b_simple"].notna()]
        found.append(at.groupby(["results", "trial"], sort=False).tail(1).assign(source="training"))
    if trials is not None and "gns_step" in trials:
        cols = ["results", "trial", "gns_b_simple", "gns_step", "gns_source", "gns_b_simple_lo", "gns_b_simple_hi"]
        g = trials[[c for c in cols if c in trials]].merge(hit, on=["results", "trial"])
        g = g[g["gns_b_simple"].notna() & (pd.to_numeric(g["gns_step"], errors="coerce") == g["steps_to_target"])]
        g = g.rename(columns={"gns_source": "source", "gns_b_simple_lo": "lo", "gns_b_simple_hi": "hi"})
        if "hi" in g:  # measured with an open upper end: inf
            g["hi"] = pd.to_numeric(g["hi"], errors="coerce").where(g["hi"].notna() | g["lo"].isna(), math.inf)
        found.append(g)
    if not found:
        return pd.DataFrame(columns=columns)
    out = pd.concat(found, ignore_index=True).drop_duplicates(["results", "trial"])  # --gns-every's first
    out = out.rename(columns={"gns_b_simple": "b_simple"})
    for c in ("lo", "hi"):
        out[c] = pd.to_numeric(out[c], errors="coerce") if c in out else math.nan
    return out.set_index("trial")[columns].astype({"b_simple": float})


def gns_note(gns: pd.DataFrame, variants: bool) -> str:
    """Where each best trial's B_simple at the target came from (`gns_at_target`'s sources), by batch."""
    where = []
    for source, g in gns.groupby("source", sort=False):
        at = ", ".join((f"{v} " if variants else "") + batch_label(b)
                       for v, b in sorted(zip(g["variant"].fillna("-"), g["global_batch"])))
        where.append(f"from {GNS_SOURCES.get(source, source)} at batch {at}")
    return ("B_simple at target: the trial's gradient noise scale at the evaluation where it reached the target, "
            "where McCandlish et al. compare it with the critical batch; " + "; ".join(where))


def gns_sources(gns: pd.DataFrame) -> str:
    """How many values came from each source: '3 from gns.json of --gns-at-target (...), 1 from --gns-every ...'."""
    return ", ".join(f"{n} from {GNS_SOURCES.get(source, source)}"
                     for source, n in gns["source"].value_counts(sort=False).items())


def variant_gns(gns: pd.DataFrame | None, variant) -> pd.Series:
    """The B_simple values at the target of one variant's best trials."""
    if gns is None or not len(gns):
        return pd.Series(dtype=float)
    return gns[gns["variant"].fillna("-") == (variant if pd.notna(variant) else "-")]["b_simple"].dropna()
