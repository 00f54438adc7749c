"""A study's analysis as its report shows it, computed once: `analyse_rule_based` (the papers' tables over
seeds), `analyse_tuned` (the best trial per batch, LR* ~ B^alpha and the critical batch with their intervals),
each with the scaling section, or `analyse_branches` (a branch study: its local critical batch per checkpoint);
and the verdict's lines. `report.sections` turns an `Analysis` into tables and figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.report.load import Study
from lbscale.report.options import ReportOptions, hardest_target, predicted_targets, report_targets, step_metric
from lbscale.report.published import published


@dataclass
class Analysis:
    """What the tables and figures of one report read. `kind`: "rule", "tuned" or "branch"; the fields of the
    other kinds keep their defaults."""

    kind: str
    study: Study
    metric: str
    target: float | None
    metric_line: str = ""
    verdict: list = field(default_factory=list)
    source: str | None = None
    compare: pd.DataFrame | None = None
    model: object = None  # the all-reduce fit (--allreduce), `scaling_model.ScalingModel`
    scaling: bool = False  # a scaling section: two GPU counts or more, or an all-reduce fit
    times: object = None  # `gpus.TimeToTarget`, with an all-reduce fit and steps to target
    predicted: pd.DataFrame | None = None
    notes: list | None = None
    prediction: str | None = None
    advice: str | None = None
    outcome: str | None = None
    lead_first: str | None = None  # a figure that leads though the lists put it later
    # rule-based
    per_epoch: str | None = None  # the metric the epochs carry (`tables.per_epoch`)
    steps: pd.DataFrame | None = None  # `scaling.target_steps`: per trial, steps to the target
    models: dict = field(default_factory=dict)  # the steps model per arm
    # tuned
    outcomes: pd.DataFrame | None = None
    best: pd.DataFrame | None = None
    fits: pd.DataFrame | None = None
    every: pd.DataFrame | None = None  # `fits` and the easier targets' fits, with their target
    optima: pd.DataFrame | None = None
    by_target: dict = field(default_factory=dict)  # the easier targets: target -> (fits, optima)
    view: pd.DataFrame | None = None  # the best metric within epoch budgets
    winners: pd.DataFrame | None = None  # the trials of each batch's best (search points are not seeds)
    at_target: pd.DataFrame | None = None  # B_simple at the target
    three: pd.DataFrame | None = None  # the critical batch's estimates side by side
    ladders: list = field(default_factory=list)  # B_crit against the target, and where training ends (`ladder`)
    rounds: list = field(default_factory=list)
    reached: bool = False  # a batch reached the target
    # a branch study
    branches: pd.DataFrame | None = None  # lbscale branch's table, one row per branch
    local: pd.DataFrame | None = None  # the local critical batch per checkpoint, with its interval


def scaling_section(a: Analysis, reached, o: ReportOptions) -> None:
    """The scaling section: given an all-reduce fit (`a.model`), time to target and GPU-hours (`gpus`, from
    `reached`: (per-batch optima, per-trial steps, models) or None) and its recommendation line; the scaling
    table and figures; the model's table, its points in the figures and its headline. Nothing for a study run at
    one GPU count without a fit."""
    from lbscale.report import gpus
    from lbscale.report.scaling_model import predict_scaling, prediction_line

    if a.model is None and a.study.trials["gpus"].nunique() < 2:  # one GPU count: no series, no empty frames
        return
    a.scaling = True
    if a.model is not None and reached is not None:
        a.times = gpus.predicted_times(a.study, *reached, a.model, o.gpu_budget, o.deadline, compare=a.compare)
        a.advice = a.times.advice if a.times else None
    if a.model is not None:
        a.predicted, a.notes = predict_scaling(a.study.trials, a.model.doc, a.model.gpus)
        a.prediction = prediction_line(a.predicted)


def analyse_rule_based(study: Study, o: ReportOptions, metric: str, model=None) -> Analysis:
    """A rule-based study: the papers' tables over seeds, steps to the target per trial and the critical batch
    of every trial's steps (no LR bowl: one LR per batch)."""
    from lbscale.report import gpus, tables
    from lbscale.report.critical_batch import arm_models
    from lbscale.report.scaling import target_steps
    from lbscale.report.verdict import headline

    compare, source = published(o.compare) if o.compare else (None, None)
    per_epoch = tables.per_epoch(study, metric)
    target = hardest_target(study, per_epoch, o.target)
    a = Analysis("rule", study, metric, target, source=source, compare=compare, model=model, per_epoch=per_epoch)
    reached = None
    if target is not None:
        a.steps = target_steps(study, per_epoch, target, study.task)
        reached = (gpus.reached_per_batch(a.steps), gpus.study_steps(a.steps), None)
    scaling_section(a, reached, o)
    a.models = arm_models(a.steps) if a.steps is not None else {}  # the table's and the figure's fit
    a.metric_line = f"Metric: {metric} (final, after the last epoch){'' if target is None else f'; target {target:g}'}"
    a.verdict = [headline(study, metric)] + ([a.advice] if a.advice else [])
    return a


def analyse_tuned(study: Study, o: ReportOptions, metric: str, model=None) -> Analysis:
    """A tuned study: the best trial per batch (`report.tuned`), LR* ~ B^alpha and the critical batch with their
    intervals; the rule-based tables that average over seeds would average over search points here."""
    from lbscale.report import estimates, gpus, noise_scale, rounds_tables, tuned as t, tuned_tables
    from lbscale.report.critical_batch import fits_of
    from lbscale.report.verdict import joined, tuned_verdict

    if o.compare:
        raise LbscaleError("--compare: published tables are rule-based; a tuned study (a search per batch) "
                           "has no row to put beside them")
    m = step_metric(study, metric)
    targets = report_targets(study, m, o.target)
    a = Analysis("tuned", study, m, targets[-1] if targets else None, model=model)  # the hardest: the headline's
    maximize = study.task.higher_is_better(m)
    a.outcomes = t.trial_outcomes(study.trials, study.steps, m, a.target, maximize)
    a.best = t.best_trials(study.trials, study.steps, m, a.target, maximize)
    a.fits = fits_of(a.outcomes, a.target, maximize, models=a.models,
                     left_out=t.unfinished_per_arm(study.trials, a.outcomes))
    a.optima = t.optima_of(a.outcomes, a.target, maximize)
    for easier in targets[:-1]:  # B_crit per target (McCandlish et al.: it grows as the target tightens)
        o_t = t.trial_outcomes(study.trials, study.steps, m, easier, maximize)
        a.by_target[easier] = (fits_of(o_t, easier, maximize, left_out=t.unfinished_per_arm(study.trials, o_t)),
                               t.optima_of(o_t, easier, maximize))
    a.view = t.budget_view(study.trials, study.steps, m, maximize, tuned_tables.epoch_budgets(study))
    scaling_section(a, (a.optima, gpus.per_trial_of(a.outcomes), a.models) if a.target is not None else None, o)
    a.winners = study.trials[study.trials["trial"].isin(a.best["trial"])]
    a.every = pd.concat([f.assign(target=x) for x, (f, _) in {**a.by_target, a.target: (a.fits, a.optima)}.items()],
                        ignore_index=True) if a.by_target else a.fits
    if a.target is not None:
        a.at_target = noise_scale.gns_at_target(study.steps, a.best, study.trials)
    a.rounds = rounds_tables.study_rounds(study)
    a.three = estimates.section(study, a.fits, a.at_target, a.target, m)
    named = predicted_targets(study, m, o.predict_at) if a.target is not None else []
    if a.target is not None and (len(targets) >= 3 or named):
        from lbscale.report.ladder import ladders

        a.ladders = ladders(a, [t for t in named if study.task.reached(m, t, a.target) and t != a.target])
    a.reached = a.target is not None and bool(a.optima["reached"].any()) if len(a.optima) else False
    if a.target is not None and not a.reached:  # nothing reached the target: the budget figure leads
        a.lead_first = "budget"
    a.metric_line = (f"Metric: {m} (every evaluation, steps and epochs; best trial per batch)"
                     + ("" if a.target is None else f"; target {a.target:g}"))
    a.verdict = tuned_verdict(a)
    a.prediction, a.outcome = joined(a.prediction, a.advice), tuned_tables.headline(a.fits, a.target)
    return a


def analyse_branches(study: Study, found: list) -> Analysis:
    """A branch study (`found`: its folders): the local critical batch per checkpoint from the table `lbscale
    branch` wrote, with the interval the batches tried give."""
    from lbscale.report import branch_study

    rows = branch_study.read(found)
    local = branch_study.per_checkpoint(rows)
    lines = branch_study.verdict(local)
    return Analysis("branch", study, "loss", None, metric_line=f"Judged by: {branch_study.judged_by(rows)}",
                    verdict=lines, branches=rows, local=local, outcome="; ".join(x[0].lower() + x[1:] for x in lines))
