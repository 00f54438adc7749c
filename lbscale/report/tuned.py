"""A tuned scaling study (a hyperparameter search per batch) as pure DataFrame functions.

In the shape of google-research batch_science's measurement_utils: the objective column, its direction
(`maximize`) and the grouping are arguments, never guessed. `steps` is `Study.steps` (one row per evaluation,
step and epoch records), `trials` is `Study.trials`. Per (variant, batch) the best trial is the one that reaches
the target in the fewest steps (Shallue et al. 2019, "Measuring the Effects of Data Parallelism"). The critical
batch B_crit of S(B) = S_min (1 + B_crit / B) and the optimal LR's exponent, LR* ~ B^alpha, come from one model over
every trial of a variant (`report.steps_model`), censored trials included, not from a curve through the optima:
the fit's views are `report.critical_batch`'s.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lbscale.report.load import HP
from lbscale.report.optimum import optimum, point_index
from lbscale.task import TASKS, evaluation_noise, reaches
from lbscale.train.pruning import PRUNE_Z

TRIAL = ("results", "trial")
GROUP = ("variant", "global_batch")
REACHED = ["steps_to_target", "epochs_to_target", "seconds_to_target", "steps_before", "steps_crossing"]
TRIAL_COLUMNS = ["gpus", "warmup", "seed", "state", "peak_lr", "base_lr", "momentum", "point"]
# started, with no final status yet (stopped by Ctrl-C or a preemption, still running, waiting at a rung): until
# it reaches the target such a trial is evidence of nothing, neither a crossing nor "it needed more steps"
UNFINISHED = ("running", "interrupted", "waiting")
# trials whose stop says nothing of the steps they would have needed: unfinished ones, and failed ones (a crash, a
# full disk); left out of the optima and the fit unless they reached the target before they stopped
NO_EVIDENCE = (*UNFINISHED, "failed")


def _first_per_group(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The first row of each group in the frame's order, groups sorted by their keys."""
    return (df.groupby(keys, sort=False, dropna=False).head(1)
            .sort_values(keys, kind="stable").reset_index(drop=True))


def _last_per_group(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The last row of each group in the frame's order."""
    return df.groupby(keys, sort=False, dropna=False).tail(1).reset_index(drop=True)


def whole_split(df: pd.DataFrame) -> pd.DataFrame:
    """The evaluations of the whole split: an evaluation of a subset (`subset`: its images, a noisy estimate a
    trial makes between its whole-split evaluations) stays in the record, but never reaches a target nor counts
    as a trial's best value."""
    return df[df["subset"].isna()] if "subset" in df else df


def steps_to_result(df: pd.DataFrame, col: str, threshold: float, maximize: bool,
                    group_by=TRIAL) -> pd.DataFrame:
    """Per group, the first evaluation (by step) whose `col` reaches `threshold` (>= when maximize, else <=):
    group_by + step, epoch, elapsed_seconds, and step_before (the whole-split evaluation before it, a check of
    the whole split that stopped early below the threshold, clearly below the trial's target, or a subset's value
    clearly below the threshold, `below_on_subset`: the crossing lies between the two). Groups that never reach
    it are absent. An evaluation of a subset of the split (`subset`: its images) never reaches it: the trial
    evaluates the whole split where a subset meets the target, and that evaluation counts (as for the trial's own
    steps to target)."""
    keys = list(group_by)
    valued = df.dropna(subset=[col])
    evaluated = whole_split(valued)
    d = evaluated[reaches(evaluated[col], threshold, maximize)]
    d = d.sort_values(["step", "elapsed_seconds"], kind="stable")
    hit = _first_per_group(d, keys)[keys + ["step", "epoch", "elapsed_seconds"]]
    # the evaluation before the crossing: the steps to target lie in (step_before, step] (NaN: none before it); a
    # check of the whole split that stopped clearly below the target bounds it as a whole-split miss does, and so
    # does a subset's value clearly below the threshold (`below_on_subset`)
    misses = evaluated
    if "subset" in valued:
        part = valued["subset"].notna()
        stopped = (valued["check"].notna() & part & ~reaches(valued[col], threshold, maximize) if "check" in valued
                   else False)
        misses = valued[~part | stopped | below_on_subset(valued, col, threshold, maximize)]
    ev = misses[keys + ["step", col]].merge(
        hit[keys + ["step"]].rename(columns={"step": "_hit"}), on=keys)
    ev = ev[ev["step"] < ev["_hit"]].sort_values("step", kind="stable")
    before = _last_per_group(ev, keys)[keys + ["step", col]].rename(columns={"step": "step_before", col: "_before"})
    at = _first_per_group(d, keys)[keys + [col]].rename(columns={col: "_at"})
    out = hit.merge(before, on=keys, how="left").merge(at, on=keys, how="left")
    out["crossing"] = crossing(out["step_before"], out["_before"], out["step"], out["_at"], threshold)
    return out.drop(columns=["_before", "_at"])


def below_on_subset(df: pd.DataFrame, col: str, threshold: float, maximize: bool) -> np.ndarray:
    """Per row: a step evaluation on a subset (`subset`: its images, not a check) whose value lies clearly below
    `threshold` (higher is better): more than CHECK_SE binomial standard errors on its images, the rule that stops
    a check (`train.evaluation.clearly_below`; the subset is a random sample of the split, as a check's first part
    is; without the finite-population factor, so no looser). A loss has no such error: never."""
    from lbscale.analysis.evaluations import clearly_below

    if not maximize or "subset" not in df:
        return np.zeros(len(df), bool)
    plain = df["check"].isna() if "check" in df else pd.Series(True, index=df.index)
    n = pd.to_numeric(df["subset"], errors="coerce")
    value = pd.to_numeric(df[col], errors="coerce")
    return np.array([bool(p) and pd.notna(k) and k >= 1 and clearly_below(float(v), threshold, int(k), math.inf)
                     for p, k, v in zip(plain, n, value)], bool)


def crossing(s0, v0, s1, v1, threshold: float) -> np.ndarray:
    """Where the metric crosses `threshold` between the evaluation before it (step s0, value v0; NaN: none) and the
    one that reached it (s1, v1): linear in log steps; s1 where there is no evaluation before, or no slope."""
    s0, v0, s1, v1 = (np.asarray(pd.to_numeric(x, errors="coerce"), float) for x in (s0, v0, s1, v1))
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.clip((threshold - v0) / (v1 - v0), 0.0, 1.0)
        at = np.exp(np.log(s0) + f * (np.log(s1) - np.log(s0)))
    return np.where(np.isfinite(at) & (s0 > 0), at, s1)


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
    """Per trial with evaluations of `metric` (pruned and failed ones too: their records are real): reached,
    steps/epochs/seconds to target (NaN where not reached, or no target), best_value over all its whole-split
    evaluations (`whole_split`; within its budget), best_step and last_step (its last evaluation: where a trial
    that missed the target stopped), beside the trial's group_by columns and hyperparameters. A trial a longer run
    of its point and seed supersedes (`superseded`) has none. An unfinished trial (`UNFINISHED`) is left out until
    it has reached the target (`unfinished_trials` names those left out): where it stopped says nothing of the
    steps it would have needed; so is a failed one (`NO_EVIDENCE`: a crash or a full disk is not a lack of steps).
    `never_learned`: ran to its end at chance level (`never_learned`)."""
    keys = list(TRIAL)
    trials = trials[~superseded(trials)]
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
        names = dict(zip(["step", "epoch", "elapsed_seconds", "step_before", "crossing"], REACHED))
        out = out.merge(hit.rename(columns=names), on=keys, how="left")
    out["reached"] = out["steps_to_target"].notna()
    cols = [c for c in dict.fromkeys([*group_by, *GROUP, *TRIAL_COLUMNS, *hp_columns(trials)]) if c in trials]
    out = trials[keys + cols].merge(out, on=keys, how="inner")
    out["never_learned"] = never_learned(out, trials, metric)
    return out[~(out["state"].isin(NO_EVIDENCE) & ~out["reached"])] if "state" in out else out


def never_learned(outcomes: pd.DataFrame, trials: pd.DataFrame, metric: str) -> np.ndarray:
    """Per row of `outcomes` (`trial_outcomes`): the trial ran to its end (completed) without reaching the target
    and its best value of `metric` stayed at chance level (`Task.at_chance` with the trial's task and classes).
    A pruned trial is not: it stopped at a rung, and may have learnt later."""
    keys = list(TRIAL)
    if "task" not in trials or "num_classes" not in trials or "state" not in outcomes or not len(outcomes):
        return np.zeros(len(outcomes), bool)
    info = outcomes[keys].merge(trials[keys + ["task", "num_classes"]].drop_duplicates(keys), on=keys, how="left")
    at = [TASKS[t].at_chance(metric, float(v), int(k)) if t in TASKS and pd.notna(k) and pd.notna(v) else False
          for t, k, v in zip(info["task"], info["num_classes"], outcomes["best_value"])]
    return (outcomes["state"].eq("completed") & ~outcomes["reached"].astype(bool)).to_numpy() & np.array(at, bool)


def unfinished_trials(trials: pd.DataFrame, outcomes: pd.DataFrame) -> pd.DataFrame:
    """The unfinished and failed trials (`NO_EVIDENCE`) that `outcomes` (`trial_outcomes`) leave out: the rows
    of `trials`."""
    if "state" not in trials:
        return trials.iloc[:0]
    kept = outcomes.set_index(list(TRIAL)).index
    return trials[trials["state"].isin(NO_EVIDENCE) & ~trials.set_index(list(TRIAL)).index.isin(kept)]


def superseded(trials: pd.DataFrame) -> pd.Series:
    """The trials a longer run of their point with their seed supersedes: `sweep --until-resolved` runs a point
    whose trial missed the target again with twice the epochs, under an id of its own. That run is the point's
    trial at a longer budget, not another seed of it; the short run's miss only says the target lies past its
    budget, so of one point's runs with one seed the longest budget alone counts."""
    if "epochs" not in trials or "point" not in trials or "seed" not in trials:
        return pd.Series(False, index=trials.index)
    keys = [trials[c] for c in ("results", "variant", "warmup", "global_batch", "gpus", "point", "seed", "peak_lr")
            if c in trials]
    epochs = pd.to_numeric(trials["epochs"], errors="coerce")
    longest = epochs.groupby(keys, dropna=False).transform("max")
    return trials["point"].notna() & trials["seed"].notna() & (epochs < longest)


def pruned_at_chance(trials: pd.DataFrame, task) -> tuple[pd.DataFrame, int]:
    """The trials pruned at a rung where their value was at chance level (`Task.at_chance` with each trial's
    classes), with that level as `chance_bound`, and how many trials ran under successive halving."""
    pruned = trials["state"].eq("pruned")
    halved = int((pruned | (trials["prune"].notna() & trials["prune"].ne("none")) if "prune" in trials
                  else pruned).sum())
    if task is None or "pruned_value" not in trials:
        return trials.iloc[:0].assign(chance_bound=[]), halved
    rows = trials[pruned]
    known = [(m, v, int(k)) if isinstance(m, str) and pd.notna(k) else (None, None, None)
             for m, v, k in zip(rows["pruned_metric"], rows["pruned_value"], rows["num_classes"])]
    at = [m is not None and task.at_chance(m, float(v), k) for m, v, k in known]
    bounds = [task.chance_bound(m, k) if m is not None else None for m, _, k in known]
    return rows.assign(chance_bound=bounds)[at], halved


RUNG_KEYS = ["results", "prune_group", "rung"]


def rung_values(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per trial and rung it published (`rung_records`: rungs.json): results, prune_group, variant,
    global_batch, trial, metric, num_classes, rung, step, samples (trained by the rung: step x batch where the
    record does not say), value, evaluated, decision."""
    cols = ["rung", "step", "samples", "value", "evaluated", "decision"]
    rows = [{"results": t.results, "prune_group": t.prune_group, "variant": t.variant, "global_batch": t.global_batch,
             "trial": t.trial, "metric": t.rung_metric, "num_classes": t.num_classes, **dict(zip(cols, r))}
            for t in trials.itertuples() for r in (getattr(t, "rung_records", None) or ())]
    out = pd.DataFrame(rows, columns=["results", "prune_group", "variant", "global_batch", "trial", "metric",
                                      "num_classes", *cols])
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    steps = pd.to_numeric(out["step"], errors="coerce") * pd.to_numeric(out["global_batch"], errors="coerce")
    out["samples"] = pd.to_numeric(out["samples"], errors="coerce").fillna(steps)
    return out


def _noise(metric: str, value: float, evaluated) -> float | None:
    return evaluation_noise(metric, value, int(evaluated) if pd.notna(evaluated) else None)


def _margin(metric: str, a: pd.Series, b: pd.Series) -> float | None:
    """PRUNE_Z standard errors of the difference between two rung rows' values (None: noise unknown)."""
    na, nb = _noise(metric, a["value"], a["evaluated"]), _noise(metric, b["value"], b["evaluated"])
    return None if na is None or nb is None else PRUNE_Z * float(np.hypot(na, nb))


def _rung_doubts(g: pd.DataFrame, task) -> list[str]:
    """Why one group's rung `g` (its rows of `rung_values`, finite values) could not decide: its values within
    noise of each other ('noise'), its best within noise of chance ('chance'), or a trial that went on by arrival
    while a better one beyond noise was pruned ('arrival')."""
    metric = g["metric"].iloc[0]
    maximize = task.higher_is_better(metric)
    ranked = g.sort_values("value", ascending=not maximize, kind="stable")
    best, worst = ranked.iloc[0], ranked.iloc[-1]
    doubts = []
    margin = _margin(metric, best, worst)
    if len(g) > 1 and margin is not None and abs(best["value"] - worst["value"]) <= margin:
        doubts.append("noise")
    bound = task.chance_bound(metric, int(g["num_classes"].iloc[0])) if pd.notna(g["num_classes"].iloc[0]) else None
    se = _noise(metric, best["value"], best["evaluated"])
    if bound is not None and (task.at_chance(metric, best["value"], int(g["num_classes"].iloc[0]))
                              or (se is not None and best["value"] <= bound + PRUNE_Z * se)):
        doubts.append("chance")
    pruned, went_on = ranked[ranked["decision"].eq("prune")], ranked[ranked["decision"].eq("continue")]
    if len(pruned) and len(went_on):
        better, behind = pruned.iloc[0], went_on.iloc[-1]
        gap = (better["value"] - behind["value"]) * (1 if maximize else -1)
        if gap > (_margin(metric, better, behind) or 0.0):
            doubts.append("arrival")
    return doubts


def undecided_rungs(trials: pd.DataFrame, task) -> pd.DataFrame:
    """Per halving group, its first rung that could not tell its trials apart (`_rung_doubts`): results,
    prune_group, variant, global_batch, rung, samples, metric, lo, hi (the values' range), trials, doubts (the
    reasons, in a tuple), later (how many later rungs of the group had doubts too)."""
    cols = [*RUNG_KEYS, "variant", "global_batch", "samples", "metric", "lo", "hi", "trials", "doubts", "later"]
    if task is None or "rung_records" not in trials:
        return pd.DataFrame(columns=cols)
    values = rung_values(trials)
    values = values[np.isfinite(values["value"]) & values["metric"].notna()]
    found = []
    for (results, group, rung), g in values.groupby(RUNG_KEYS, sort=True):
        doubts = _rung_doubts(g, task)
        if doubts:
            found.append({"results": results, "prune_group": group, "rung": rung, "variant": g["variant"].iloc[0],
                          "global_batch": g["global_batch"].iloc[0], "samples": g["samples"].max(),
                          "metric": g["metric"].iloc[0], "lo": g["value"].min(), "hi": g["value"].max(),
                          "trials": len(g), "doubts": tuple(doubts)})
    flagged = pd.DataFrame(found, columns=cols[:-1])
    later = flagged.groupby(["results", "prune_group"])["rung"].transform("size") - 1
    return _first_per_group(flagged.assign(later=later), ["results", "prune_group"])[cols]


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


def _objective(o: pd.DataFrame, target: float | None, maximize: bool) -> np.ndarray:
    """What a batch's search minimises per trial: log steps to the target, at the crossing interpolated between
    the two evaluations that bracket it (NaN where not reached); without a
    target the best value (negated where higher is better), NaN for a trial pruned before its first whole-split
    evaluation: like a seed that missed the target, it keeps its point from counting (`optimum.optimum`)."""
    if target is not None:  # the crossing interpolated between its two evaluations, where there are two
        steps = pd.to_numeric(o.get("steps_crossing", o["steps_to_target"]), errors="coerce")
        steps = steps.fillna(pd.to_numeric(o["steps_to_target"], errors="coerce")).astype(float)
        return np.where(o["reached"].astype(bool), np.log(steps), np.nan)
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
                    "trials": g["trial"].to_numpy(), "seeds": int(np.bincount(index).max()),
                    "counts": np.bincount(index, minlength=len(x))})
    return out


def batch_optima(o: pd.DataFrame, lr: str, target: float | None, maximize: bool) -> pd.DataFrame:
    """Per batch of one variant's outcomes: the optimum of its search (`optimum.optimum`): LR*, S* (the seed mean
    of log steps at it, where a target is given), the best point's LR and trial, whether the parabola placed it,
    whether the best point is on the edge of the search (low / high), the searched LR range, the seeds at the best
    point and at the others."""
    rows = []
    for s in batch_searches(o, lr, target, maximize):
        full = optimum(s["x"], s["index"], s["y"], np.ones((1, len(s["index"]))))
        best = int(full["best"][0])
        reached = best >= 0
        others = np.delete(s["counts"], best) if reached else s["counts"]
        rows.append({"global_batch": s["batch"], "reached": reached, "lr_star": float(np.exp(full["log_lr"][0])),
                     "steps_star": float(np.exp(full["log_steps"][0])) if target is not None else np.nan,
                     "best_lr": float(np.exp(s["x"][best])) if reached else np.nan,
                     "trial": s["trials"][s["index"] == best][0] if reached else None,
                     "refined": bool(full["refined"][0]),
                     "edge": (("low" if best == 0 else "high" if best == len(s["x"]) - 1 else None)
                              if reached and len(s["x"]) > 1 else None),
                     "lr_lo": float(np.exp(s["x"][0])), "lr_hi": float(np.exp(s["x"][-1])),
                     "points": len(s["x"]), "seeds": s["seeds"],
                     "seeds_best": int(s["counts"][best]) if reached else 0,
                     "seeds_others": int(others.max()) if len(others) else 0})
    return pd.DataFrame(rows)


def arms(outcomes: pd.DataFrame, by: str):
    """The arms: `by` (the variant), with the grid's warm-up axis where it has several values (an arm each: a
    warm-up study is never pooled into one model; a warm-up searched per batch is a hyperparameter, not an axis)."""
    key = arm_names(outcomes, by, _warmup_arms(outcomes))
    return outcomes.assign(**{by: key}).groupby(by, sort=True, dropna=False)


def _warmup_arms(outcomes: pd.DataFrame) -> bool:
    return "warmup" in outcomes and outcomes["warmup"].dropna().nunique() > 1


def arm_names(frame: pd.DataFrame, by: str, warmup: bool) -> pd.Series:
    """Each row's arm as `arms` names it: `by`, and with `warmup` its warm-up."""
    key = frame[by].fillna("-").astype(str) if by in frame else pd.Series("-", index=frame.index)
    return key + ", warm-up " + frame["warmup"].fillna("-").astype(str) if warmup else key


def unfinished_per_arm(trials: pd.DataFrame, outcomes: pd.DataFrame, by: str = "variant") -> dict:
    """How many unfinished trials each arm of `outcomes` leaves out (`unfinished_trials`), by the arm's name."""
    left = unfinished_trials(trials, outcomes)
    return arm_names(left, by, _warmup_arms(outcomes)).value_counts().to_dict() if len(left) else {}


def optima_of(outcomes: pd.DataFrame, target: float | None, maximize: bool, by: str = "variant") -> pd.DataFrame:
    """Per (variant, batch) the optimum of its search (`batch_optima`): for the tables and figures."""
    frames = [batch_optima(o, "peak_lr", target, maximize).assign(**{by: name}) for name, o in arms(outcomes, by)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["global_batch", "reached", "lr_star", "steps_star", "best_lr", "trial", "refined",
                 "edge", "lr_lo", "lr_hi", "points", "seeds", "seeds_best", "seeds_others", by])


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


def eval_shares(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per trial that evaluated inside its epochs: the evaluations' seconds (the epoch records' step_eval_seconds)
    over its training seconds (`share`), and its `batch`; empty where none did."""
    if "step_eval_seconds" not in epochs or "train_seconds" not in epochs or epochs.empty:
        return pd.DataFrame(columns=["eval", "train", "batch", "share"])
    e = epochs.assign(step_eval_seconds=pd.to_numeric(epochs["step_eval_seconds"], errors="coerce"),
                      train_seconds=pd.to_numeric(epochs["train_seconds"], errors="coerce"))
    per = e.groupby([c for c in ("results", "trial") if c in e]).agg(
        eval=("step_eval_seconds", "sum"), train=("train_seconds", "sum"), batch=("global_batch", "first"))
    per = per[(per["train"] > 0) & (per["eval"] > 0)]
    return per.assign(share=per["eval"] / per["train"])
