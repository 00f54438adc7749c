"""What a report shows, in order, from one list: `TABLES` and `FIGURES` name every table and figure of the
report, the kinds of study that show it (rule-based, tuned, a branch study) and when it appears; `build` computes a
study's analysis once (`report.analysed`) and walks the lists. A new table or figure is one entry here."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from importlib import import_module
from typing import Callable

import pandas as pd

from lbscale.report import branch_study
from lbscale.report.schedules import has_schedule
from lbscale.report.tables import Table
from lbscale.report.analysed import Analysis, analyse_branches, analyse_rule_based, analyse_tuned
from lbscale.report.load import Study
from lbscale.report.options import ReportOptions, resolve_metric

RULE, TUNED, BRANCH = ("rule",), ("tuned",), ("branch",)
BOTH, ALL = RULE + TUNED, RULE + TUNED + BRANCH  # rule-based and tuned; every kind


@dataclass(frozen=True)
class Entry:
    """A table or a figure: its name, the kinds of study that show it, the function that makes it ("module.name"
    in report/, imported when the report is built: plots loads matplotlib), its arguments from the analysis (and
    `keywords`), and when it appears. A table is made later, while the figures draw, unless `eager` (it may turn
    out to be None: then it is left out)."""

    name: str
    kinds: tuple
    fn: str
    args: Callable[[Analysis], tuple]
    when: Callable[[Analysis], object] = lambda a: True
    eager: bool = False
    keywords: Callable[[Analysis], dict] = lambda a: {}

    def make(self, a: Analysis):
        """The table or figure (or the function that makes it) for `a`; None where it does not appear."""
        if a.kind not in self.kinds or not self.when(a):
            return None
        module, _, name = self.fn.partition(".")
        f = import_module(f"lbscale.report.{module}")
        for part in name.split("."):
            f = getattr(f, part)
        args, kw = self.args(a), self.keywords(a)
        return f(*args, **kw) if self.eager else partial(f, *args, **kw)


def _several(axis: str):
    return lambda a: a.study.trials[axis].fillna("-").nunique() > 1


def _no_steps(a: Analysis) -> pd.DataFrame:
    return a.steps if a.steps is not None else pd.DataFrame()


TABLES = [
    Entry("local-critical-batch", BRANCH, "branch_study.local_table", lambda a: [a.local]),
    Entry("branches", BRANCH, "branch_study.branches_table", lambda a: [a.branches]),
    Entry("accuracy", RULE, "tables.accuracy_table", lambda a: [a.study, a.metric, a.compare]),
    Entry("lr", RULE, "tables.lr_table", lambda a: [a.study, a.metric, a.compare]),
    Entry("tuned-best", TUNED, "tuned_tables.best_trial_table",
          lambda a: [a.study, a.best, a.metric, a.target, a.optima]),
    Entry("tuned-fits", TUNED, "tuned_tables.fits_table", lambda a: [a.study, a.every, a.target, a.at_target]),
    Entry("critical-batch-estimates", TUNED, "estimates.estimates_table", lambda a: [a.three, a.target, a.metric],
          lambda a: a.three is not None),
    Entry("ladder", TUNED, "ladder.table", lambda a: [a, a.ladders], lambda a: a.ladders, eager=True),
    Entry("rounds", TUNED, "rounds_tables.rounds_table", lambda a: [a.rounds], lambda a: a.rounds),
    Entry("tuned-budget", TUNED, "tuned_tables.budget_table", lambda a: [a.view, a.metric]),
    Entry("time", BOTH, "tables.time_table", lambda a: [a.study, a.compare], keywords=lambda a: {"trials": a.winners}),
    Entry("time-split", BOTH, "tables.time_split_table", lambda a: [a.study]),
    Entry("by-variant", RULE, "tables.axis_table", lambda a: [a.study, "variant", a.metric], _several("variant")),
    Entry("by-warmup", RULE, "tables.axis_table", lambda a: [a.study, "warmup", a.metric], _several("warmup")),
    Entry("target", RULE, "tables.target_table", lambda a: [a.study, a.per_epoch, a.target, a.steps],
          lambda a: a.steps is not None),
    Entry("schedules", RULE, "schedules.schedule_table", lambda a: [a.study, a.per_epoch, a.target, a.steps],
          lambda a: a.steps is not None, eager=True, keywords=lambda a: {"times": a.times}),
    Entry("time-to-target", BOTH, "gpus.TimeToTarget.table", lambda a: [a.times], lambda a: a.times, eager=True),
    Entry("time-published", BOTH, "gpus.TimeToTarget.published", lambda a: [a.times],
          lambda a: a.times, eager=True),
    Entry("scaling", BOTH, "tables.scaling_table", lambda a: [a.study], lambda a: a.scaling),
    Entry("scaling-model", BOTH, "scaling_model.scaling_model_table",
          lambda a: [a.study, a.predicted, a.notes, a.model], lambda a: a.model is not None),
    Entry("critical-batch", RULE, "tables.critical_batch_table", lambda a: [a.study, _no_steps(a), a.models],
          lambda a: a.steps is not None or a.study.trials["gns_b_simple"].notna().any()),
    Entry("unfinished", ALL, "tables.trials_table", lambda a: [a.study]),
]


def _scaling_figures(kinds: tuple) -> list[Entry]:
    """The scaling section's figures: a rule-based report draws them after its lead, a tuned one after its curves."""
    return [Entry("time-to-target", kinds, "gpus.TimeToTarget.figure", lambda a: [a.times], lambda a: a.times),
            Entry("time-vs-gpus", kinds, "plots.time_vs_gpus", lambda a: [a.study, a.compare, a.predicted],
                  lambda a: a.scaling),
            Entry("speedup", kinds, "plots.speedup", lambda a: [a.study, a.predicted], lambda a: a.scaling)]


def _published_epochs(a: Analysis) -> pd.DataFrame | None:
    return a.compare if a.compare is not None and "epochs_to_target" in a.compare else None


FIGURES = [
    Entry("local-critical-batch", BRANCH, "branch_study.figure", lambda a: [a.local, a.branches]),
    Entry("metric-vs-batch", RULE, "plots.metric_vs_batch", lambda a: [a.study, a.metric, a.compare]),
    Entry("steps-to-result", TUNED, "plots.steps_to_result",
          lambda a: [a.optima, a.outcomes, a.fits, a.metric, a.target], lambda a: a.reached,
          keywords=lambda a: {"easier": {t: o for t, (_, o) in a.by_target.items()}}),
    Entry("critical-batch-estimates", TUNED, "estimates.figure", lambda a: [a.three, a.target, a.metric],
          lambda a: a.three is not None),
    Entry("ladder", TUNED, "ladder.figure", lambda a: [a, a.ladders], lambda a: any(x.law for x in a.ladders)),
    Entry("optimal-lr", TUNED, "plots.optimal_lr", lambda a: [a.optima, a.outcomes, a.fits]),
    Entry("budget", TUNED, "plots.budget", lambda a: [a.view, a.metric]),
    *_scaling_figures(RULE),
    Entry("training-curves", RULE, "plots.training_curves", lambda a: [a.study, a.per_epoch]),
    Entry("training-curves", TUNED, "plots.best_curves", lambda a: [a.study, a.best, a.metric]),
    *_scaling_figures(TUNED),
    Entry("schedules", RULE, "schedules.figure", lambda a: [a.study, a.per_epoch, a.target],
          lambda a: has_schedule(a.study.trials) and a.per_epoch in a.study.steps),
    Entry("lr-schedules", RULE, "plots.lr_schedules", lambda a: [a.study]),
    Entry("time-split", RULE, "plots.time_split", lambda a: [a.study]),
    Entry("time-split", TUNED, "plots.time_split", lambda a: [a.study, a.winners, "each batch's best trial"]),
    Entry("steps-to-target", RULE, "plots.steps_to_target",
          lambda a: [a.steps, a.per_epoch, a.target, _published_epochs(a), a.models], lambda a: a.steps is not None),
]


@dataclass
class Built:
    """What a report shows, in order: the verdict and its figure (`lead`) first, then the tables, then the
    other figures."""
    metric: str
    target: float | None
    source: str | None
    verdict: list[str]  # one line per variant (tuned) or the headline (rule-based)
    metric_line: str
    tables: list  # functions that make them (or the tables), in order: `write_report` makes them while figures draw
    figures: dict  # name -> a function that draws the figure (or the figure), the lead figure first
    lead: str | None
    prediction: str | None = None  # with --allreduce: the scaling model's headline
    outcome: str | None = None  # the command's closing line's figures (default: the verdict's lines)


def build(study: Study, o: ReportOptions, model=None) -> Built:
    """The study's analysis (rule-based, tuned or a branch study: `report.analysed`), then its tables and figures
    in the lists' order."""
    found = branch_study.folders(study, o)
    if found:
        a = analyse_branches(study, found)
    else:
        a = (analyse_tuned if study.tuned else analyse_rule_based)(study, o, resolve_metric(study, o.metric), model)
    tables = [t for t in (e.make(a) for e in TABLES) if t is not None]
    figures = {e.name: f for e, f in ((e, e.make(a)) for e in FIGURES) if f is not None}
    if a.lead_first and a.lead_first in figures:  # e.g. nothing reached the target: the budget figure leads
        figures = {a.lead_first: figures.pop(a.lead_first), **figures}
    return Built(a.metric, a.target, a.source, _schedule_first(tables) + a.verdict, a.metric_line, tables, figures,
                 next(iter(figures)) if figures else None, a.prediction, a.outcome)


def _schedule_first(tables: list) -> list[str]:
    """The schedules table's verdict line (a batch-size schedule beside fixed batches: what the check found), to
    lead the verdict; none where the study has no schedule or nothing to compare."""
    t = next((t for t in tables if isinstance(t, Table) and t.name == "schedules"), None)
    if t is None or not len(t.tidy) or t.tidy["steps_ratio"].notna().sum() == 0:
        return []
    return [t.notes[0]]
