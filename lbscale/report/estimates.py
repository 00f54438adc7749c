"""Three estimates of the critical batch side by side, each with its interval: the tuned sweep's B_crit (steps to
the target against the batch, S = S_min (1 + B_crit / B): McCandlish et al. 2018, eq. 2.11), the gradient noise
scale B_simple = tr(Sigma) / |G|^2 measured at the target's weights (their predictor of B_crit, close to it for SGD
only up to a factor), and the local critical batch of a branch study at the target's point (Merrill et al. 2025:
the largest batch that, branched from the run's weights there, keeps up with the smaller ones over a window).

They answer different questions: B_crit is one number for the whole run to the target; B_simple is the noise
scale at one point of one run; the local critical batch is the largest batch worth switching to at one point,
and it grows as training goes on. They agree where the noise scale tracks the curve; a factor between them is
what the papers found, not a defect."""

from __future__ import annotations

import math

import pandas as pd

from lbscale.report.branch_study import BRANCH_TABLE, branch_studies, local_at
from lbscale.report.numbers import estimate_cell, whole
from lbscale.analysis.intervals import LEVEL
from lbscale.report.tables import Table

KINDS = ("tuned", "gns", "branch")


def _kind(lo, hi) -> str:
    lo_ok = lo is not None and not pd.isna(lo) and lo > 0
    hi_ok = hi is not None and not pd.isna(hi) and math.isfinite(hi)
    return {(True, True): "interval", (True, False): "lower", (False, True): "upper"}.get((lo_ok, hi_ok), "none")


def estimates(fit: pd.Series, gns: pd.DataFrame, local: dict | None, branch_of: str | None) -> pd.DataFrame:
    """The three estimates of one variant as rows (kind, value, lo, hi, interval kind, what it rests on). `gns`:
    noise_scale.gns_at_target's rows of the variant; B_simple is the best trial's at the batch nearest B_crit (the
    tuned estimate, else the middle of the measured ones)."""
    rows = [{"estimate": "tuned", "value": fit.get("b_crit"), "lo": fit.get("b_crit_lo"), "hi": fit.get("b_crit_hi"),
             "interval": fit.get("b_crit_kind"),
             "rests_on": f"steps to the target of every trial, {fit.get('reached')} of {fit.get('batches')} batches "
                         f"reached; {100 * LEVEL:.0f}% profile-likelihood interval"}]
    if len(gns):
        if fit.get("b_crit_kind") == "interval":
            pick = gns.iloc[int((gns["global_batch"] / fit["b_crit"]).map(math.log).abs().to_numpy().argmin())]
        else:
            pick = gns.iloc[len(gns) // 2]
        rows.append({"estimate": "gns", "value": pick["b_simple"], "lo": pick["lo"], "hi": pick["hi"],
                     "interval": _kind(pick["lo"], pick["hi"]),
                     "rests_on": f"{pick['trial']} (batch {int(pick['global_batch']):,}) at the step it reached the "
                                 f"target; {100 * LEVEL:.0f}% Fieller interval over its micro-batch groups; "
                                 f"{len(gns)} batches measured, median {gns['b_simple'].median():,.0f}"
                                 if pick["source"] != "training" else
                                 f"{pick['trial']} (batch {int(pick['global_batch']):,}): --gns-every's smoothed "
                                 "value at the step it reached the target (no interval)"})
    if local is not None:
        rows.append({"estimate": "branch", "value": local["value"], "lo": local["lo"], "hi": local["hi"],
                     "interval": local["kind"],
                     "rests_on": f"branches of {branch_of} from its checkpoint {local['checkpoint']} (step "
                                 f"{local['parent_step']:,}); " + (
                                     f"{100 * LEVEL:.0f}% interval over {local['repeats']} repeats per batch (the "
                                     "data order re-drawn past the checkpoint)" if local["repeats"] > 1 else
                                     "the interval: the batches tried on either side (one run per batch; "
                                     "--repeats 3 gives a statistical one)")})
    return pd.DataFrame(rows)


NAMES = {"tuned": "B_crit: the tuned sweep's steps to target against the batch",
         "gns": "B_simple: the gradient noise scale at the target",
         "branch": "Local critical batch: branches at the target's point"}


def estimates_table(rows: pd.DataFrame, target: float, metric: str) -> Table:
    several = rows["variant"].nunique() > 1 if "variant" in rows else False
    disp = [{**({"Variant": r["variant"]} if several else {}), "Estimate": NAMES[r["estimate"]],
             "Value [interval]": estimate_cell(r["value"], r["lo"], r["hi"], r["interval"], whole),
             "Rests on": r["rests_on"]} for _, r in rows.iterrows()]
    return Table("critical-batch-estimates", f"Three estimates of the critical batch ({metric} {target:g})",
                 pd.DataFrame(disp), rows.assign(target=target),
                 ["B_crit answers the question for the whole run to the target: the batch where doubling it saves "
                  "25% of the steps (perfect scaling: 50%). B_simple (McCandlish et al. 2018) predicts B_crit from the "
                  "gradient noise at one point; it matches B_crit only up to a factor, and it changes over training "
                  "(it grew as the loss fell in their runs): here it is taken where the target was reached. The "
                  "local critical batch (Merrill et al. 2025) is the largest batch worth switching to at that point "
                  "of training; it grows as training goes on, so at the target it may exceed the run's B_crit, "
                  "which averages over the whole run",
                  "Intervals: B_crit's is the steps model's profile likelihood; B_simple's is Fieller's over the "
                  "measurement's groups; the local critical batch's is a t interval over repeated branches where "
                  "lbscale branch ran --repeats, else the batches tried on either side (a grid of factors, not a "
                  "statistical interval)"])


def figure(rows: pd.DataFrame, target: float, metric: str):
    """The estimates as points with their intervals on one log axis (an open end drawn as an arrow)."""
    import matplotlib.pyplot as plt

    finite = [v for c in ("value", "lo", "hi") for v in rows[c] if v is not None and not pd.isna(v)
              and 0 < v < math.inf]
    finite = finite or [1.0]
    left, right = min(finite) / 2, max(finite) * 2
    fig, ax = plt.subplots(figsize=(6.4, 2.2 + 0.45 * len(rows)))
    for y, (_, r) in enumerate(rows.iloc[::-1].iterrows()):
        lo = r["lo"] if r["lo"] is not None and not pd.isna(r["lo"]) and r["lo"] > 0 else left
        hi = r["hi"] if r["hi"] is not None and not pd.isna(r["hi"]) and math.isfinite(r["hi"]) else right
        ax.plot([lo, hi], [y, y], color=f"C{KINDS.index(r['estimate'])}", lw=3, alpha=0.5)
        if lo == left:
            ax.annotate("", (left, y), (left * 1.5, y), arrowprops={"arrowstyle": "->"})
        if hi == right:
            ax.annotate("", (right, y), (right / 1.5, y), arrowprops={"arrowstyle": "->"})
        if r["interval"] == "interval":
            ax.plot([r["value"]], [y], "o", color=f"C{KINDS.index(r['estimate'])}")
    ax.set_xscale("log", base=2)
    ax.set_xlim(left, right)
    ticks = [2 ** k for k in range(math.ceil(math.log2(left)), math.floor(math.log2(right)) + 1)]
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    several = rows["variant"].nunique() > 1 if "variant" in rows else False
    labels = [NAMES[r["estimate"]].split(":")[0] + (f" ({r['variant']})" if several else "")
              for _, r in rows.iloc[::-1].iterrows()]
    ax.set_yticks(range(len(rows)), labels)
    ax.set_xlabel("global batch")
    ax.set_title(f"Three estimates of the critical batch ({metric} {target:g})", fontsize=10)
    fig.tight_layout()
    return fig


def section(study, fits: pd.DataFrame, gns_all: pd.DataFrame | None, target: float | None, metric: str):
    """The estimates' rows (for the table and the figure) where the study has more than its tuned B_crit to set
    beside it (a noise scale at the target: `gns_all`, noise_scale.gns_at_target's frame; a branch study in its
    results), else None."""
    if target is None or fits.empty:
        return None
    gns_all = gns_all if gns_all is not None else pd.DataFrame()  # by trial
    trials = set(study.trials["trial"])
    branches = [(d, pd.read_csv(d / BRANCH_TABLE)) for d in branch_studies(study.trials["results"].unique(), trials)]
    out = []
    for _, fit in fits.iterrows():
        variant = fit["variant"] if pd.notna(fit["variant"]) else "-"
        mine = set(study.trials.loc[study.trials["variant"].fillna("-") == variant, "trial"])
        gns = gns_all[gns_all.index.isin(mine)].rename_axis("trial").reset_index()
        local, branch_of = None, None
        for folder, table in branches:
            parent = table["parent"].iloc[0] if "parent" in table and len(table) else folder.name.removesuffix(
                "-branches")
            if parent in mine:
                steps = study.trials.loc[study.trials["trial"] == parent, "steps_to_target"]
                local = local_at(table, float(steps.iloc[0]) if len(steps) and pd.notna(steps.iloc[0]) else None)
                branch_of = parent
                break
        if len(gns) or local is not None:
            out.append(estimates(fit, gns, local, branch_of).assign(variant=variant))
    return pd.concat(out, ignore_index=True) if out else None
