"""A tuned scaling study (a hyperparameter search per batch) as pure DataFrame functions.

In the shape of google-research batch_science's measurement_utils: the objective column, its direction
(`maximize`) and the grouping are arguments, never guessed. `steps` is `Study.steps` (one row per evaluation,
step and epoch records), `trials` is `Study.trials`. Per (variant, batch) the best trial is the one that reaches
the target in the fewest steps (Shallue et al. 2019, "Measuring the Effects of Data Parallelism"); from the best
trials follow the optimal LR's exponent, LR* ~ B^alpha, and the critical batch of S(B) = S_min (1 + B_noise / B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import math

import numpy as np
import pandas as pd

from lbscale.report.fits import Fit, lr_model, lr_power_law, regimes
from lbscale.report.fits import critical_batch as critical_batch_fit
from lbscale.report.load import HP
from lbscale.report.optimum import (critical_batches, line_slopes, optimum, percentile_interval, point_index,
                                    resample_weights)
from lbscale.report.scaling import fit_critical_batch, positive_pairs
from lbscale.task import reaches

TRIAL = ("results", "trial")
GROUP = ("variant", "global_batch")
REACHED = ["steps_to_target", "epochs_to_target", "seconds_to_target"]
TRIAL_COLUMNS = ["gpus", "warmup", "seed", "state", "peak_lr", "base_lr", "momentum", "point"]


def _first_per_group(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The first row of each group in the frame's order, groups sorted by their keys."""
    return (df.groupby(keys, sort=False, dropna=False).head(1)
            .sort_values(keys, kind="stable").reset_index(drop=True))


def whole_split(df: pd.DataFrame) -> pd.DataFrame:
    """The evaluations of the whole split: an evaluation of a subset (`subset`: its images, a noisy estimate a
    trial makes between its whole-split evaluations) stays in the record, but never reaches a target nor counts
    as a trial's best value."""
    return df[df["subset"].isna()] if "subset" in df else df


def steps_to_result(df: pd.DataFrame, col: str, threshold: float, maximize: bool,
                    group_by=TRIAL) -> pd.DataFrame:
    """Per group, the first evaluation (by step) whose `col` reaches `threshold` (>= when maximize, else <=):
    group_by + step, epoch, elapsed_seconds. Groups that never reach it are absent. An evaluation of a subset of
    the split (`subset`: its images) never reaches it: the trial evaluates the whole split where a subset meets
    the target, and that evaluation counts (as for the trial's own steps to target)."""
    keys = list(group_by)
    d = whole_split(df.dropna(subset=[col]))
    d = d[reaches(d[col], threshold, maximize)]
    d = d.sort_values(["step", "elapsed_seconds"], kind="stable")
    return _first_per_group(d, keys)[keys + ["step", "epoch", "elapsed_seconds"]]


def best_measurement(df: pd.DataFrame, col: str, maximize: bool, group_by) -> pd.DataFrame:
    """Per group, the row (all its columns) of the best `col`: the highest when maximize, else the lowest;
    the earliest step among equal values."""
    keys = list(group_by)
    order = [col] + (["step"] if "step" in df else [])
    d = df.dropna(subset=[col]).sort_values(order, ascending=[not maximize] + [True] * (len(order) - 1),
                                            kind="stable")
    return _first_per_group(d, keys)


def gns_at_target(steps: pd.DataFrame, best: pd.DataFrame) -> pd.Series:
    """The smoothed noise scale (--gns-every's B_simple near the step, McCandlish et al.'s comparison point) of
    each best trial at the evaluation where it reached the target, by trial; absent where it was not measured."""
    if "gns_b_simple" not in steps or not len(best):
        return pd.Series(dtype=float)
    hit = best[best["reached"].astype(bool)][["results", "trial", "steps_to_target"]]
    at = steps.merge(hit, on=["results", "trial"])
    at = at[(at["step"] == at["steps_to_target"]) & at["gns_b_simple"].notna()]
    return at.groupby("trial")["gns_b_simple"].last()


def apply_epoch_budget(df: pd.DataFrame, epochs: float) -> pd.DataFrame:
    """The evaluations within a budget of `epochs` (fractional epochs <= the budget)."""
    return df[df["epoch"] <= epochs + 1e-9]


def hp_columns(df: pd.DataFrame) -> list[str]:
    """The searched hyperparameters' columns (`hp_base_lr`, `hp_momentum`, ...)."""
    return [c for c in df.columns if str(c).startswith(HP)]


def trial_outcomes(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, target: float | None,
                   maximize: bool, group_by=GROUP) -> pd.DataFrame:
    """Per trial with evaluations of `metric` (pruned, failed or running ones too: their records are real):
    reached, steps/epochs/seconds to target (NaN where not reached, or no target), best_value over all its
    whole-split evaluations (`whole_split`; within its budget), best_step and last_step (its last evaluation:
    where a trial that missed the target stopped), beside the trial's group_by columns and hyperparameters."""
    keys = list(TRIAL)
    if metric not in steps:
        steps = steps.assign(**{metric: np.nan})
    best = best_measurement(whole_split(steps), metric, maximize, keys)[keys + [metric, "step"]]
    best = best.rename(columns={metric: "best_value", "step": "best_step"})
    last = steps.dropna(subset=[metric]).groupby(keys, sort=False)["step"].max().rename("last_step").reset_index()
    # every trial with an evaluation: one pruned before its first whole-split evaluation was searched all the
    # same, with no best value
    out = last.merge(best, on=keys, how="left")[keys + ["best_value", "best_step", "last_step"]]
    if target is None:
        out = out.assign(**{c: np.nan for c in REACHED})
    else:
        hit = steps_to_result(steps, metric, target, maximize, keys)
        out = out.merge(hit.rename(columns=dict(zip(["step", "epoch", "elapsed_seconds"], REACHED))), on=keys,
                        how="left")
    out["reached"] = out["steps_to_target"].notna()
    cols = [c for c in dict.fromkeys([*group_by, *GROUP, *TRIAL_COLUMNS, *hp_columns(trials)]) if c in trials]
    return trials[keys + cols].merge(out, on=keys, how="inner")


def _ranked(outcomes: pd.DataFrame, maximize: bool) -> pd.DataFrame:
    """Trials best first: reached before not, then fewer steps, the better value, the name. Not the seconds:
    measured time is noise on a shared machine, and the best trial must be the same in a rerun."""
    key = -outcomes["best_value"] if maximize else outcomes["best_value"]
    ranked = outcomes.assign(_missed=~outcomes["reached"].astype(bool), _key=key)
    ranked = ranked.sort_values(["_missed", "steps_to_target", "_key", "trial", "results"],
                                na_position="last", kind="stable")
    return ranked.drop(columns=["_missed", "_key"])


def best_trials(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, target: float | None, maximize: bool,
                group_by=GROUP) -> pd.DataFrame:
    """Per group the best trial: the fewest steps to `target` (ties: the better best value); where no trial of the
    group reached it (or target is None), the best `metric` over its whole-split evaluations. Columns: group_by,
    trial, results, reached, steps/epochs/seconds_to_target, best_value, best_step, peak_lr, base_lr, momentum,
    every hp_*."""
    keys = list(group_by)
    outcomes = trial_outcomes(trials, steps, metric, target, maximize, keys)
    best = _first_per_group(_ranked(outcomes, maximize), keys)
    cols = keys + ["trial", "results", "reached"] + REACHED + ["best_value", "best_step"]
    rest = [c for c in TRIAL_COLUMNS + ["variant", "global_batch"] + hp_columns(best) if c in best and c not in cols]
    return best[cols + rest]


@dataclass(frozen=True)
class LrFit:
    alpha: float  # LR* ~ B^alpha: 1 the linear rule, 0.5 the square-root rule
    c: float
    points: int

    def lr(self, batch):
        return self.c * np.asarray(batch, dtype=float) ** self.alpha


def fit_lr_exponent(batches, lrs) -> LrFit | None:
    """Least squares of log LR* = log c + alpha log B; None with fewer than two distinct batches (no limits: the
    report's fits are `fits.lr_power_law`'s, which need three and give an interval)."""
    b, lr = positive_pairs(batches, lrs)
    if len(np.unique(b)) < 2:
        return None
    alpha, log_c = np.polyfit(np.log(b), np.log(lr), 1)
    return LrFit(float(alpha), float(np.exp(log_c)), int(len(b)))


@dataclass(frozen=True)
class Estimate:
    value: float | None  # from the best trials of all the data
    lo: float | None  # the bootstrap's percentile interval; -inf / inf where failed resamples leave it open
    hi: float | None
    resamples: int  # every resample, failed ones included (they count as unbounded)
    failed: int = 0  # resamples whose statistic does not exist (a fit that fails)


def bootstrap(outcomes: pd.DataFrame, statistic: Callable[[pd.DataFrame], float | None], maximize: bool,
              group_by=GROUP, n: int = 1000, seed: int = 0, level: float = 0.9) -> Estimate:
    """Resample with replacement the trials inside each group (seeds and search points alike), take each
    group's best trial of the resample, and apply `statistic` (best trials -> number or None); the percentile
    interval at `level`, a resample whose statistic fails counting as unbounded (`optimum.percentile_interval`).
    Seeded: the same call gives the same interval."""
    keys = list(group_by)
    ranked = _ranked(outcomes, maximize).reset_index(drop=True)
    value = statistic(_first_per_group(ranked, keys)) if len(ranked) else None
    rng = np.random.default_rng(seed)
    # the best of a resample is its drawn trial of the lowest rank: one draw of n x m ranks per group
    groups = [g.index.to_numpy() for _, g in ranked.groupby(keys, sort=True, dropna=False)]
    picks = np.stack([g[rng.integers(0, len(g), size=(n, len(g))).min(axis=1)] for g in groups], axis=1) \
        if groups else np.empty((n, 0), dtype=int)
    values = np.array([np.nan if v is None else float(v) for v in (statistic(ranked.iloc[row]) for row in picks)])
    lo, hi, failed = percentile_interval(values, level)
    return Estimate(value, lo, hi, len(values), failed)


def lr_exponent(best: pd.DataFrame, lr: str = "peak_lr") -> float | None:
    """alpha of the best trials' LR vs their batch (a statistic for `bootstrap`)."""
    fit = fit_lr_exponent(best["global_batch"], best[lr]) if lr in best else None
    return fit.alpha if fit else None


def critical_batch(best: pd.DataFrame) -> float | None:
    """B_noise of the best trials' steps to target vs their batch, those that reached it (for `bootstrap`)."""
    hit = best[best["reached"].astype(bool)]
    fit = fit_critical_batch(hit["global_batch"], hit["steps_to_target"])
    return fit.b_noise if fit else None


def _objective(o: pd.DataFrame, target: float | None, maximize: bool) -> np.ndarray:
    """What a batch's search minimises per trial: log steps to the target (NaN where not reached); without a
    target the best value (negated where higher is better), NaN for a trial pruned before its first whole-split
    evaluation: like a seed that missed the target, it keeps its point from counting (`optimum.optimum`)."""
    if target is not None:
        return np.where(o["reached"].astype(bool), np.log(o["steps_to_target"].astype(float)), np.nan)
    v = o["best_value"].astype(float).to_numpy()
    return -v if maximize else v


def batch_searches(o: pd.DataFrame, lr: str, target: float | None, maximize: bool) -> list[dict]:
    """One variant's searches, per batch (increasing): its trials' points in log LR, objective and names."""
    out = []
    for b, g in o.groupby("global_batch", sort=True):
        g = g[g[lr].astype(float) > 0]
        if g.empty:
            continue
        points = g["point"].to_numpy() if "point" in g and g["point"].notna().all() else None
        x, index = point_index(g[lr].astype(float).to_numpy(), points)
        out.append({"batch": float(b), "x": x, "index": index, "y": _objective(g, target, maximize),
                    "trials": g["trial"].to_numpy(), "seeds": int(np.bincount(index).max())})
    return out


def batch_optima(o: pd.DataFrame, lr: str, target: float | None, maximize: bool, resamples: int = 0,
                 seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Per batch of one variant's outcomes: the optimum of its search (`optimum.optimum`): LR*, S* (steps at it,
    where a target is given), the best point's LR and trial, whether the parabola placed it, whether the best
    point is on the edge of the search (low / high), the searched LR range; and, with `resamples`, the bootstrap's
    (R, batches) arrays of log LR* and log S* (the seeds inside each point resampled)."""
    searches = batch_searches(o, lr, target, maximize)
    rng = np.random.default_rng(seed)
    rows, boot_lr, boot_steps = [], [], []
    for s in searches:
        full = optimum(s["x"], s["index"], s["y"], np.ones((1, len(s["index"]))))
        best = int(full["best"][0])
        reached = best >= 0
        rows.append({"global_batch": s["batch"], "reached": reached, "lr_star": float(np.exp(full["log_lr"][0])),
                     "steps_star": float(np.exp(full["log_steps"][0])) if target is not None else np.nan,
                     "best_lr": float(np.exp(s["x"][best])) if reached else np.nan,
                     "trial": s["trials"][s["index"] == best][0] if reached else None,
                     "refined": bool(full["refined"][0]),
                     "edge": (("low" if best == 0 else "high" if best == len(s["x"]) - 1 else None)
                              if reached and len(s["x"]) > 1 else None),
                     "lr_lo": float(np.exp(s["x"][0])), "lr_hi": float(np.exp(s["x"][-1])),
                     "points": len(s["x"]), "seeds": s["seeds"]})
        if resamples:
            r = optimum(s["x"], s["index"], s["y"], resample_weights(s["index"], resamples, rng))
            boot_lr.append(r["log_lr"])
            boot_steps.append(r["log_steps"])
    boot = {"log_lr": np.stack(boot_lr, axis=1), "log_steps": np.stack(boot_steps, axis=1)} if boot_lr else None
    return pd.DataFrame(rows), boot


def _union(fit: Fit, lo: float, hi: float, span: tuple[float, float] | None = None) -> tuple[float, float]:
    """The interval of a fit joined with the bootstrap's [lo, hi]; with `span` (a positive quantity measured over
    batches span[0]..span[1]) an end past the span is open (0 or inf)."""
    lo, hi = min(fit.lo, lo), max(fit.hi, hi)
    if span is not None:
        lo = lo if lo >= span[0] else 0.0
        hi = hi if hi <= span[1] else math.inf
    return lo, hi


def _fit_row(prefix: str, fit: Fit, boot: np.ndarray | None, level: float, span=None) -> dict:
    """Columns `prefix`, _lo, _hi, _kind, _reason, _dof, _resamples, _failed of one fit with its bootstrap."""
    row = {prefix: fit.value, f"{prefix}_lo": fit.lo, f"{prefix}_hi": fit.hi, f"{prefix}_kind": fit.kind,
           f"{prefix}_reason": fit.reason, f"{prefix}_dof": fit.dof, f"{prefix}_resamples": 0, f"{prefix}_failed": 0}
    if boot is not None:
        lo, hi, failed = percentile_interval(boot, level)
        row.update({f"{prefix}_resamples": len(boot), f"{prefix}_failed": failed})
        if fit.ok:
            row[f"{prefix}_lo"], row[f"{prefix}_hi"] = _union(fit, lo, hi, span)
    return row


def variant_fits(o: pd.DataFrame, target: float | None, maximize: bool, n: int, seed: int, level: float) -> dict:
    """One variant's fits: LR* ~ c B^alpha and the saturating LR model over the batches whose search found an
    optimum (those that reached the target), S(B) = S_min (1 + B_noise / B) over the same, each with its limits
    and its interval (the t-interval on the fit's residuals joined with the bootstrap over the seeds inside each
    point); the regimes; the edges and unreached batches named."""
    optima, boot = batch_optima(o, "peak_lr", target, maximize, n, seed)
    hit = optima[optima["reached"]] if len(optima) else optima
    b = hit["global_batch"].to_numpy(float)
    batches = optima["global_batch"].to_numpy(float)
    row = {"batches": len(optima), "reached": len(hit),
           "unreached": ",".join(f"{v:.0f}" for v in optima.loc[~optima["reached"], "global_batch"])
           if len(optima) else "",
           "edges": ",".join(f"{r.global_batch:.0f} ({r.edge})" for r in hit.itertuples()
                             if isinstance(r.edge, str))}
    alpha = lr_power_law(b, hit["lr_star"]) if len(hit) else lr_power_law([], [])
    row.update(_fit_row("alpha", alpha, line_slopes(np.log(np.broadcast_to(batches, boot["log_lr"].shape)),
                                                    boot["log_lr"]) if boot else None, level))
    row["c"] = alpha.extra.get("c")
    model = lr_model(b, hit["lr_star"]) if len(hit) else {"better": None, "saturating": Fit("none"), "slopes": []}
    sat = model["saturating"]
    row.update({"lr_model": model["better"], "b_lr": sat.value, "b_lr_lo": sat.lo, "b_lr_hi": sat.hi,
                "b_lr_kind": sat.kind, "eps_max": sat.extra.get("eps_max"),
                "slopes": ",".join(f"{v:.2f}" for v in model["slopes"])})
    if target is not None:
        crit = critical_batch_fit(b, hit["steps_star"]) if len(hit) else critical_batch_fit([], [])
        span = (float(b.min()), float(b.max())) if len(b) else None
        row.update(_fit_row("b_noise", crit, critical_batches(batches, np.exp(boot["log_steps"])) if boot else None,
                            level, span))
        row["s_min"] = crit.extra.get("s_min")
        reg = regimes(Fit("fit", row["b_noise"], row["b_noise_lo"], row["b_noise_hi"]) if crit.ok else crit)
        for name, value in reg.items():
            row.update(dict(zip([name, f"{name}_lo", f"{name}_hi"], value or (None, None, None))))
    return {"row": row, "optima": optima}


FIT_COLUMNS = ["batches", "reached", "unreached", "edges", "alpha", "alpha_lo", "alpha_hi", "alpha_kind",
               "alpha_reason", "alpha_dof", "alpha_resamples", "alpha_failed", "c", "lr_model", "b_lr", "b_lr_lo",
               "b_lr_hi", "b_lr_kind", "eps_max", "slopes", "b_noise", "b_noise_lo", "b_noise_hi", "b_noise_kind",
               "b_noise_reason", "b_noise_dof", "b_noise_resamples", "b_noise_failed", "s_min", "perfect_end",
               "perfect_end_lo", "perfect_end_hi", "diminishing_end", "diminishing_end_lo", "diminishing_end_hi",
               "alpha_effective", "alpha_effective_lo", "alpha_effective_hi"]


def tuned_fits(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, target: float | None, maximize: bool,
               by: str = "variant", n: int = 1000, seed: int = 0, level: float = 0.9) -> pd.DataFrame:
    """Per `by` (variant): `variant_fits` (alpha, the LR model, B_noise, S_min, the regimes, each with its limits
    and interval), and with momentum searched, alpha of the effective LR lr / (1 - momentum) (Shallue et al.)
    beside the raw LR's. Columns: by + FIT_COLUMNS."""
    return fits_of(trial_outcomes(trials, steps, metric, target, maximize), target, maximize, by, n, seed, level)


def _by(outcomes: pd.DataFrame, by: str):
    o = outcomes.assign(**{by: outcomes[by].fillna("-") if by in outcomes else "-"})
    return o.groupby(by, sort=True, dropna=False)


def fits_of(outcomes: pd.DataFrame, target: float | None, maximize: bool, by: str = "variant", n: int = 1000,
            seed: int = 0, level: float = 0.9) -> pd.DataFrame:
    """`tuned_fits` of `trial_outcomes` already taken."""
    rows = []
    for name, o in _by(outcomes, by):
        row = {by: name, **variant_fits(o, target, maximize, n, seed, level)["row"]}
        momentum = pd.to_numeric(o["momentum"], errors="coerce") if "momentum" in o else None
        if momentum is not None and momentum.nunique() > 1 and (momentum < 1).all():
            eff = o.assign(effective_lr=o["peak_lr"].astype(float) / (1 - momentum))
            optima, _ = batch_optima(eff, "effective_lr", target, maximize)
            hit = optima[optima["reached"]]
            fit = lr_power_law(hit["global_batch"], hit["lr_star"])
            row.update({"alpha_effective": fit.value, "alpha_effective_lo": fit.lo, "alpha_effective_hi": fit.hi})
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=[by, *FIT_COLUMNS])


def optima_of(outcomes: pd.DataFrame, target: float | None, maximize: bool, by: str = "variant") -> pd.DataFrame:
    """Per (variant, batch) the optimum of its search (`batch_optima`): for the tables and figures."""
    frames = [batch_optima(o, "peak_lr", target, maximize)[0].assign(**{by: name}) for name, o in _by(outcomes, by)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["global_batch", "reached", "lr_star", "steps_star", "best_lr", "trial", "refined", "edge", "lr_lo",
                 "lr_hi", "points", "seeds", by])


def budget_view(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, maximize: bool, budgets,
                group_by=GROUP) -> pd.DataFrame:
    """Per group and epoch budget, the best `metric` any of `trials` reached within that many epochs (on the
    whole split): group_by + budget, best_value, trial, step, epoch. A group without an evaluation in a budget is
    absent."""
    keys = list(group_by)
    s = whole_split(steps).merge(trials[list(TRIAL)], on=list(TRIAL)) if metric in steps else steps.iloc[0:0]
    frames = []
    for b in budgets:
        best = best_measurement(apply_epoch_budget(s, b), metric, maximize, keys) if len(s) else s
        frames.append(best.reindex(columns=keys + ["trial", "step", "epoch", metric])
                      .rename(columns={metric: "best_value"}).assign(budget=float(b)))
    columns = keys + ["budget", "best_value", "trial", "step", "epoch"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
