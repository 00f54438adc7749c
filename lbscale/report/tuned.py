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

import numpy as np
import pandas as pd

from lbscale.report.load import HP
from lbscale.report.scaling import fit_critical_batch, positive_pairs

TRIAL = ("results", "trial")
GROUP = ("variant", "global_batch")
REACHED = ["steps_to_target", "epochs_to_target", "seconds_to_target"]
TRIAL_COLUMNS = ["gpus", "warmup", "seed", "state", "peak_lr", "base_lr", "momentum"]


def _first_per_group(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The first row of each group in the frame's order, groups sorted by their keys."""
    return (df.groupby(keys, sort=False, dropna=False).head(1)
            .sort_values(keys, kind="stable").reset_index(drop=True))


def steps_to_result(df: pd.DataFrame, col: str, threshold: float, maximize: bool,
                    group_by=TRIAL) -> pd.DataFrame:
    """Per group, the first evaluation (by step) whose `col` reaches `threshold` (>= when maximize, else <=):
    group_by + step, epoch, elapsed_seconds. Groups that never reach it are absent."""
    keys = list(group_by)
    d = df.dropna(subset=[col])
    d = d[d[col] >= threshold] if maximize else d[d[col] <= threshold]
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
    evaluations (within its budget) and best_step, beside the trial's group_by columns and hyperparameters."""
    keys = list(TRIAL)
    if metric not in steps:
        steps = steps.assign(**{metric: np.nan})
    best = best_measurement(steps, metric, maximize, keys)[keys + [metric, "step"]]
    out = best.rename(columns={metric: "best_value", "step": "best_step"})
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
    """Per group the best trial: the fewest steps to `target` (ties: the better best value); where no trial of the group
    reached it (or target is None), the best `metric` over its evaluations. Columns: group_by, trial, results,
    reached, steps/epochs/seconds_to_target, best_value, best_step, peak_lr, base_lr, momentum, every hp_*."""
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
    """Least squares of log LR* = log c + alpha log B; None with fewer than two distinct batches."""
    b, lr = positive_pairs(batches, lrs)
    if len(np.unique(b)) < 2:
        return None
    alpha, log_c = np.polyfit(np.log(b), np.log(lr), 1)
    return LrFit(float(alpha), float(np.exp(log_c)), int(len(b)))


@dataclass(frozen=True)
class Estimate:
    value: float | None  # from the best trials of all the data
    lo: float | None  # the bootstrap's percentile interval
    hi: float | None
    resamples: int  # resamples whose statistic exists (a fit can fail on a resample)


def bootstrap(outcomes: pd.DataFrame, statistic: Callable[[pd.DataFrame], float | None], maximize: bool,
              group_by=GROUP, n: int = 1000, seed: int = 0, level: float = 0.9) -> Estimate:
    """Resample with replacement the trials inside each group (seeds and search points alike), take each
    group's best trial of the resample, and apply `statistic` (best trials -> number or None); the percentile
    interval at `level` over the successful resamples. Seeded: the same call gives the same interval."""
    keys = list(group_by)
    ranked = _ranked(outcomes, maximize).reset_index(drop=True)
    value = statistic(_first_per_group(ranked, keys)) if len(ranked) else None
    rng = np.random.default_rng(seed)
    # the best of a resample is its drawn trial of the lowest rank: one draw of n x m ranks per group
    groups = [g.index.to_numpy() for _, g in ranked.groupby(keys, sort=True, dropna=False)]
    picks = np.stack([g[rng.integers(0, len(g), size=(n, len(g))).min(axis=1)] for g in groups], axis=1) \
        if groups else np.empty((n, 0), dtype=int)
    values = [v for v in (statistic(ranked.iloc[row]) for row in picks) if v is not None and np.isfinite(v)]
    if not values:
        return Estimate(value, None, None, 0)
    lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return Estimate(value, float(lo), float(hi), len(values))


def lr_exponent(best: pd.DataFrame, lr: str = "peak_lr") -> float | None:
    """alpha of the best trials' LR vs their batch (a statistic for `bootstrap`)."""
    fit = fit_lr_exponent(best["global_batch"], best[lr]) if lr in best else None
    return fit.alpha if fit else None


def critical_batch(best: pd.DataFrame) -> float | None:
    """B_noise of the best trials' steps to target vs their batch, those that reached it (for `bootstrap`)."""
    hit = best[best["reached"].astype(bool)]
    fit = fit_critical_batch(hit["global_batch"], hit["steps_to_target"])
    return fit.b_noise if fit else None


def tuned_fits(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, target: float | None, maximize: bool,
               by: str = "variant", n: int = 1000, seed: int = 0, level: float = 0.9) -> pd.DataFrame:
    """Per `by` (variant): LR* ~ c B^alpha and S(B) = S_min (1 + B_noise / B) fitted to the best trial per batch,
    each with its bootstrap interval (`bootstrap`). Columns: by, batches, reached, alpha, alpha_lo, alpha_hi,
    alpha_resamples, c, b_noise, b_noise_lo, b_noise_hi, b_noise_resamples, s_min."""
    outcomes = trial_outcomes(trials, steps, metric, target, maximize)
    outcomes[by] = outcomes[by].fillna("-") if by in outcomes else "-"
    group = [by, "global_batch"]
    rows = []
    for name, o in outcomes.groupby(by, sort=True, dropna=False):
        best = _first_per_group(_ranked(o, maximize), group)
        lr = fit_lr_exponent(best["global_batch"], best["peak_lr"]) if "peak_lr" in best else None
        hit = best[best["reached"].astype(bool)]
        steps_fit = fit_critical_batch(hit["global_batch"], hit["steps_to_target"])
        alpha = bootstrap(o, lr_exponent, maximize, group, n, seed, level)
        b_noise = bootstrap(o, critical_batch, maximize, group, n, seed, level) if target is not None \
            else Estimate(None, None, None, 0)
        rows.append({by: name, "batches": len(best), "reached": len(hit),
                     "alpha": alpha.value, "alpha_lo": alpha.lo, "alpha_hi": alpha.hi,
                     "alpha_resamples": alpha.resamples, "c": lr.c if lr else None,
                     "b_noise": b_noise.value, "b_noise_lo": b_noise.lo, "b_noise_hi": b_noise.hi,
                     "b_noise_resamples": b_noise.resamples, "s_min": steps_fit.s_min if steps_fit else None})
    columns = [by, "batches", "reached", "alpha", "alpha_lo", "alpha_hi", "alpha_resamples", "c", "b_noise",
               "b_noise_lo", "b_noise_hi", "b_noise_resamples", "s_min"]
    return pd.DataFrame(rows, columns=columns)


def budget_view(trials: pd.DataFrame, steps: pd.DataFrame, metric: str, maximize: bool, budgets,
                group_by=GROUP) -> pd.DataFrame:
    """Per group and epoch budget, the best `metric` any of `trials` reached within that many epochs:
    group_by + budget, best_value, trial, step, epoch. A group without an evaluation in a budget is absent."""
    keys = list(group_by)
    s = steps.merge(trials[list(TRIAL)], on=list(TRIAL)) if metric in steps else steps.iloc[0:0]
    frames = []
    for b in budgets:
        best = best_measurement(apply_epoch_budget(s, b), metric, maximize, keys) if len(s) else s
        frames.append(best.reindex(columns=keys + ["trial", "step", "epoch", metric])
                      .rename(columns={metric: "best_value"}).assign(budget=float(b)))
    columns = keys + ["budget", "best_value", "trial", "step", "epoch"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
