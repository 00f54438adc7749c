"""The critical-batch fit and its views: one model over every trial of an arm (`steps_model.fit`: S = S_min (1 +
B_crit / B) with the LR's bowl where the LR was searched, censored trials included, profile-likelihood intervals),
read as
- a tuned study's fits per arm (`variant_fits`, `fits_of`, `tuned_fits`: B_crit, alpha, S_min, E_min with their
  limits, and what would resolve an open one, `resolve_hint`), and the arms' ratios (`arm_ratios`);
- a rule-based study's model per variant (`arm_model`, `arm_models`: no bowl, one LR per batch);
- a tuned study's B_crit for other commands (`tuned_critical_batch`: lbscale branch's band).
Without a target, alpha comes from the batches' best LRs (`fits.lr_power_law`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from lbscale.analysis.intervals import LEVEL
from lbscale.errors import LbscaleError
from lbscale.report import steps_model
from lbscale.report.fits import lr_power_law
from lbscale.report.options import tuned_study
from lbscale.report.steps_model import Estimate, Observations
from lbscale.report.tuned import arms, batch_optima, trial_outcomes, unfinished_per_arm


def observations(o: pd.DataFrame, lr: str | None) -> Observations:
    """One arm's trials as the steps model reads them: a trial that reached the target lies between the
    evaluation before the crossing and the crossing (interval-censored), one that stopped without it needed more
    steps than its last evaluation (right-censored), one that diverged without it (or never learned, `unstable`)
    measured no steps: its LR is above the stability edge at its batch (`Observations.unstable`); `lr` None: no
    LR (the model without the bowl)."""
    reached = o["reached"].astype(bool).to_numpy()
    hit = pd.to_numeric(o["steps_to_target"], errors="coerce").to_numpy(float)
    before = pd.to_numeric(o.get("steps_before", pd.Series(np.nan, index=o.index)), errors="coerce").to_numpy(float)
    last = pd.to_numeric(o.get("last_step", pd.Series(np.nan, index=o.index)), errors="coerce").to_numpy(float)
    low = np.where(reached, np.nan_to_num(before, nan=0.0), np.nan_to_num(last, nan=0.0))
    high = np.where(reached, hit, np.inf)
    rates = None if lr is None else o[lr].to_numpy(float)
    return Observations.of(o["global_batch"].to_numpy(float), rates, low, high, unstable(o, rates))


def unstable(o: pd.DataFrame, rates: np.ndarray | None) -> np.ndarray | None:
    """The trials past the stability edge at their batch, without reaching the target: diverged, or never learned
    (`tuned.never_learned`: at chance to the end) at an LR above one that learned at that batch; below every
    learner, never learning is an LR too small to learn in the budget, right-censored steps like any other."""
    if "state" not in o:
        return None
    reached = o["reached"].astype(bool).to_numpy()
    diverged = o["state"].eq("diverged").to_numpy() & ~reached
    stuck = o["never_learned"].fillna(False).astype(bool).to_numpy() if "never_learned" in o else ~reached & False
    if rates is None or not stuck.any():
        return diverged
    batch = o["global_batch"].to_numpy(float)
    learnt = ~diverged & ~stuck
    floor = {b: rates[learnt & (batch == b)].min() for b in np.unique(batch[learnt])}
    above = np.array([r > floor.get(b, np.inf) for b, r in zip(batch, rates)], bool)
    return diverged | (stuck & above)


def _estimate_columns(prefix: str, e: Estimate | None, reason: str) -> dict:
    if e is None:
        return {prefix: None, f"{prefix}_lo": None, f"{prefix}_hi": None, f"{prefix}_kind": "none",
                f"{prefix}_reason": reason}
    return {prefix: e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi, f"{prefix}_kind": e.kind,
            f"{prefix}_reason": e.reason}


def resolve_hint(kind: str, batches: list[float], edges: str, seeds_best: int, dof: int | None = None) -> str:
    """What would resolve B_crit where the study left a side open: batches past it, seeds, a wider LR range,
    more trials where few are left over the model's parameters."""
    lo, hi = f"{min(batches):,.0f}", f"{max(batches):,.0f}"
    more = []
    if kind in ("lower", "none"):
        more.append(f"batches above {hi}, where the steps stop falling in proportion")
    if kind in ("upper", "none"):
        more.append(f"batches below {lo}, where they still fall in proportion")
    if dof is not None and 1 <= dof < 5:  # below 1 the reason says so already (no residual degree of freedom)
        more.append(f"more trials that reach the target (only {dof} left over the model's parameters)")
    if kind == "none":
        more.append("more seeds at each batch's best LR" + (f" (now {seeds_best})" if seeds_best else ""))
        if edges:
            more.append(f"a wider LR range at {edges.replace(',', ', ')}")
    return "what would resolve it: " + "; ".join(more)


def variant_fits(o: pd.DataFrame, target: float | None, maximize: bool, level: float) -> dict:
    """One variant's fits: with a target, the steps model over every trial (`steps_model.fit`: B_crit, alpha,
    S_min, E_min with their profile-likelihood intervals, censored trials included); without one, alpha of the
    batches' best LRs (least squares, its t-interval). The batches' optima, edges and unreached batches named."""
    optima = batch_optima(o, "peak_lr", target, maximize)
    hit = optima[optima["reached"]] if len(optima) else optima
    row = {"batches": len(optima), "reached": len(hit),
           "unreached": ",".join(f"{v:.0f}" for v in optima.loc[~optima["reached"], "global_batch"])
           if len(optima) else "",
           "edges": ",".join(f"{r.global_batch:.0f} ({r.edge})" for r in hit.itertuples()
                             if isinstance(r.edge, str)),
           "trials": len(o), "seeds_best": int(hit["seeds_best"].max()) if len(hit) else 0,
           "seeds_others": int(hit["seeds_others"].max()) if len(hit) else 0}
    if target is None:
        alpha = lr_power_law(hit["global_batch"], hit["lr_star"]) if len(hit) else lr_power_law([], [])
        row.update({"alpha": alpha.value, "alpha_lo": alpha.lo, "alpha_hi": alpha.hi,
                    "alpha_kind": "interval" if alpha.ok else "none", "alpha_reason": alpha.reason,
                    "lr_tuned": True})
        return {"row": row, "optima": optima, "model": None}
    obs = observations(o, "peak_lr")
    model = steps_model.fit(obs, level)
    diverged = int((o["state"].eq("diverged") & ~o["reached"].astype(bool)).sum()) if "state" in o else 0
    row.update({"censored": int(obs.censored.sum()), "diverged": diverged,
                "never_learned": int((~obs.stable).sum()) - diverged})
    if model is None:
        why = f"{len(hit)} batch{'' if len(hit) == 1 else 'es'} reached the target; the model needs 2"
        for q in ("b_crit", "alpha", "s_min", "e_min"):
            row.update(_estimate_columns(q, None, why))
        row["lr_tuned"] = bool(optima["points"].max() > 1) if len(optima) else False
        return {"row": row, "optima": optima, "model": None}
    row["lr_tuned"] = model.bowl
    for q in ("b_crit", "alpha", "s_min", "e_min"):
        row.update(_estimate_columns(q, model.estimates.get(q), "one LR per batch: the LR was not tuned"
                                     if q == "alpha" else ""))
    row.update(shape_columns(model, level))
    if row["b_crit_kind"] != "interval":
        hint = resolve_hint(row["b_crit_kind"], list(model.batches), row["edges"], row["seeds_best"],
                            model.n - model.p)
        row["b_crit_reason"] = "; ".join(x for x in (row["b_crit_reason"], hint) if x)
    row.update({"dof": model.n - model.p, "n_fit": model.n, "params": model.p,
                "sigma_lo": float(model.sigma(min(model.batches))), "sigma_hi": float(model.sigma(max(model.batches))),
                "bowl_k": math.exp(model.params["log_k"]) if model.bowl else None,
                "c": math.exp(model.params["lr0"] - model.params["alpha"] * model.x0) if model.bowl else None})
    row.update(_tests_columns(model))
    return {"row": row, "optima": optima, "model": model}


def shape_columns(model, level: float) -> dict:
    """The curve's shape as columns: the knee g with its interval (or why it was not fitted), the batches where a
    doubling saves 45% and 10% of the steps, whether the verdict may say them (`steps_model.thresholds_supported`),
    and otherwise the steps between the measured batches with what each saved (`steps_model.doublings`, as JSON)."""
    fewer = (f"{len(model.batches)} batches reached the target; the knee needs {steps_model.MIN_KNEE_BATCHES}: "
             "g = 1 (McCandlish's) assumed, not tested" if len(model.batches) < steps_model.MIN_KNEE_BATCHES else
             f"{model.n} trials reached the target for {model.p} parameters; a knee needs "
             f"{steps_model.MIN_KNEE_DOF} left over after its own: g = 1 (McCandlish's) assumed, not tested")
    out = {}
    for q in ("knee", *steps_model.WORDS):
        out.update(_estimate_columns(q, model.estimates.get(q), "" if "knee" in model.estimates else fewer))
    out["thresholds"] = steps_model.thresholds_supported(model.estimates)
    out["doublings"] = None if out["thresholds"] else json.dumps(
        [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}
         for d in steps_model.doublings(model, level)])
    return out


def _tests_columns(model) -> dict:
    """The model's tests as columns: the LR's form (`steps_model.lr_forms`) and the curve's lack of fit
    (`steps_model.lack_of_fit`: its F test's p, dof, the scale phi a rejected fit's intervals take)."""
    forms = model.extra.get("lr_forms") or {}
    lack = model.extra["lack_of_fit"]
    return {"lr_tested": bool(forms.get("tested")), "lr_model": forms.get("named"),
            **{k: forms.get(k) for k in ("p_power", "p_saturating", "b_lr", "b_lr_lo", "b_lr_hi", "b_lr_kind",
                                         "eps_max")},
            **{f"lack_of_fit_{k}": lack[k] for k in ("p", "dof", "pure_dof", "phi", "rejected")}}


def arm_ratios(models: dict, level: float = LEVEL) -> pd.DataFrame:
    """B_crit of each arm over the first arm's (by name) with the ratio's profile-likelihood interval
    (`steps_model.ratio`): whether an optimizer or a warm-up extends the critical batch, as a number with its
    limits. Arms without a model are left out."""
    fitted = {k: m for k, m in sorted(models.items(), key=lambda kv: str(kv[0])) if m is not None}
    rows = []
    if len(fitted) >= 2:
        (ref, base), *rest = fitted.items()
        for name, m in rest:
            e = steps_model.ratio(m, base, level)
            rows.append({"arm": name, "reference": ref, "ratio": e.value, "ratio_lo": e.lo, "ratio_hi": e.hi,
                         "ratio_kind": e.kind})
    return pd.DataFrame(rows, columns=["arm", "reference", "ratio", "ratio_lo", "ratio_hi", "ratio_kind"])


FIT_COLUMNS = ["batches", "reached", "unreached", "edges", "trials", "censored", "diverged", "never_learned",
               "unfinished", "seeds_best",
               "seeds_others", "lr_tuned", "alpha", "alpha_lo", "alpha_hi", "alpha_kind", "alpha_reason", "lr_tested",
               "lr_model", "p_power", "p_saturating", "b_lr", "b_lr_lo", "b_lr_hi", "b_lr_kind", "eps_max", "b_crit",
               "b_crit_lo", "b_crit_hi", "b_crit_kind", "b_crit_reason", "s_min", "s_min_lo", "s_min_hi", "s_min_kind",
               "e_min", "e_min_lo", "e_min_hi", "e_min_kind", "knee", "knee_lo", "knee_hi", "knee_kind", "knee_reason",
               "saves_45", "saves_45_lo", "saves_45_hi", "saves_45_kind", "saves_10", "saves_10_lo", "saves_10_hi",
               "saves_10_kind", "thresholds", "doublings", "lack_of_fit_p", "lack_of_fit_dof",
               "lack_of_fit_pure_dof", "lack_of_fit_phi", "lack_of_fit_rejected", "dof", "n_fit", "params",
               "sigma_lo", "sigma_hi", "bowl_k", "c", "alpha_effective", "alpha_effective_lo", "alpha_effective_hi"]


def tuned_fits(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, target: float | None, maximize: bool,
               by: str = "variant", level: float = LEVEL) -> pd.DataFrame:
    """Per `by` (variant): `variant_fits` (B_crit, alpha, S_min, E_min of the steps model, each with its limits
    and interval), and with momentum searched, alpha of the effective LR lr / (1 - momentum) (Shallue et al.)
    beside the raw LR's; the unfinished trials each arm leaves out (`tuned.unfinished_per_arm`). Columns: by +
    FIT_COLUMNS."""
    outcomes = trial_outcomes(trials, steps, metric, target, maximize)
    return fits_of(outcomes, target, maximize, by, level, left_out=unfinished_per_arm(trials, outcomes, by))


def fits_of(outcomes: pd.DataFrame, target: float | None, maximize: bool, by: str = "variant",
            level: float = LEVEL, models: dict | None = None, left_out: dict | None = None) -> pd.DataFrame:
    """`tuned_fits` of `trial_outcomes` already taken; `models` (a dict) collects each arm's `ModelFit`;
    `left_out` the unfinished trials each arm leaves out (`tuned.unfinished_per_arm`; none where not given)."""
    rows = []
    for name, o in arms(outcomes, by):
        fitted = variant_fits(o, target, maximize, level)
        if models is not None:
            models[name] = fitted["model"]
        row = {by: name, **fitted["row"], "unfinished": int((left_out or {}).get(name, 0))}
        momentum = pd.to_numeric(o["momentum"], errors="coerce") if "momentum" in o else None
        if target is not None and momentum is not None and momentum.nunique() > 1 and (momentum < 1).all():
            eff = o.assign(effective_lr=o["peak_lr"].astype(float) / (1 - momentum))
            model = steps_model.fit(observations(eff, "effective_lr"), level, quantities=("alpha",))
            e = model.estimates.get("alpha") if model is not None else None
            if e is not None:
                row.update({"alpha_effective": e.value, "alpha_effective_lo": e.lo, "alpha_effective_hi": e.hi})
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=[by, *FIT_COLUMNS])


def arm_models(steps: pd.DataFrame) -> dict:
    """`arm_model` of each variant's trials in `target_steps` (by variant; None where it has no fit)."""
    if not len(steps) or "steps" not in steps:
        return {}
    return {v: arm_model(g) for v, g in steps.groupby(steps["variant"].fillna("-"), sort=True)}


def arm_model(steps: pd.DataFrame):
    """The steps model (`steps_model.fit`, no LR bowl) of one arm's per-trial `target_steps`; None where fewer
    than two batches reached the target."""
    frame = pd.DataFrame({"global_batch": steps["global_batch"], "reached": steps["steps"].notna(),
                          "steps_to_target": steps["steps"], "steps_before": steps.get("step_before"),
                          "last_step": steps.get("last_step")})
    return steps_model.fit(observations(frame, None), LEVEL, quantities=("b_crit", "s_min"))


def tuned_critical_batch(path) -> pd.DataFrame:
    """A tuned study's critical batch per variant, as its report's verdict has it (variant, b_crit, b_crit_lo,
    b_crit_hi, b_crit_kind, target): for a branch study's figure. One line where it is not one."""
    study, m, target, maximize = tuned_study(path, "no B_crit to draw")
    if target is None:
        raise LbscaleError(f"{path}: its trials have no target: no B_crit")
    outcomes = trial_outcomes(study.trials, study.steps, m, target, maximize)
    fits = fits_of(outcomes, target, maximize)
    return fits[["variant", "b_crit", "b_crit_lo", "b_crit_hi", "b_crit_kind"]].assign(target=target)
