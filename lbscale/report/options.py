"""What `lbscale report` is asked for (`ReportOptions`) and how a study reads it: the metric (--metric auto), the
targets (--target, else the trials' own), and a tuned study's default reading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.report.load import Study, load_results
from lbscale.task import Task

FORMATS = ("md", "latex", "csv", "html")  # what --format may name


@dataclass
class ReportOptions:
    out: Path | None = None
    formats: tuple = FORMATS
    metric: str = "auto"
    compare: str | None = None
    target: object = None  # a number, several ("0.9,0.95" or a list), or None: the trials' own
    allreduce: Path | None = None  # `lbscale bench allreduce`'s fit: predict the scaling series' time per epoch
    predict_gpus: str | None = None  # "128,1024": where to predict (default: doubling up to 1,024)
    gpu_budget: int | None = None  # with allreduce: the fastest configuration within this many GPUs
    deadline: float | None = None  # with allreduce: the cheapest configuration (GPU-hours) within these hours
    predict_at: object = None  # B_crit predicted at these targets (default: those `lbscale predict` trained to)


def resolve_metric(study: Study, metric: str) -> str:
    """--metric as the report reads it: "auto" is the test split's primary metric where the trials have it, else
    the task's; another name must be one the task produces. One line where the study mixes tasks or has none."""
    task = study.task
    if task is None:
        tasks = sorted(study.trials["task"].dropna().unique())
        if not tasks:
            raise LbscaleError(_none_trained(study.trials))
        raise LbscaleError(f"the results mix tasks ({', '.join(tasks)}): report them separately")
    if metric == "auto":  # the test split's figures where the trials have them, as the papers report
        test = task.primary_on("test")
        has_test = f"final_{test}" in study.trials and study.trials[f"final_{test}"].notna().any()
        return test if has_test else task.primary_metric
    task.check_target_metric(metric, splits=("val", "test"), option="--metric")  # does this task produce it?
    return metric


def _none_trained(trials) -> str:
    """Why a study has no trial to read (none wrote its config.json): not started yet, or failed before it trained
    (a full disk, a bad data file), with the first failure's error."""
    failed = trials[trials["state"] == "failed"] if "state" in trials else trials.iloc[0:0]
    if failed.empty:
        return "no trial has started yet (no config.json): nothing to report"
    errors = failed["error"].dropna() if "error" in failed else []
    error = str(errors.iloc[0]).splitlines()[0] if len(errors) else None
    if len(failed) == len(trials):
        first = f"; the first: {error}" if error else ""
        return f"every trial failed before it trained ({len(trials)} trials{first}): nothing to report"
    first = f" (the first: {error})" if error else ""
    return (f"no trial has trained yet: {len(failed)} of {len(trials)} failed before they trained{first}, the rest "
            "have not started: nothing to report")


def parse_targets(target) -> list[float]:
    """--target as given: None, a number, '0.90,0.95' or a list; LbscaleError where it is not numbers."""
    if target is None:
        return []
    items = target.split(",") if isinstance(target, str) else (target if isinstance(target, (list, tuple))
                                                                else [target])
    try:
        values = sorted({float(t) for t in items if str(t).strip()})
    except ValueError:
        values = []
    if not values:  # ',,' fell back to the trials' own target (a value that is not finite: Task.check_target)
        raise LbscaleError(f"--target {target}: expected a number or several, like 0.9,0.95")
    return values


def report_targets(study: Study, metric: str, target) -> list[float]:
    """The targets of the report, easiest first (a loss: highest first): --target, else the trials' own for
    `metric` where they agree. The last is the headline's."""
    given, option = parse_targets(target), "--target"
    if not given:
        own = study.trials.dropna(subset=["targets"]) if "targets" in study.trials else study.trials.iloc[0:0]
        own = own[own["target_metric"] == metric]["targets"].unique()
        given, option = (parse_targets(own[0]) if len(own) == 1 else []), "the trials' own target"
    for t in given:
        Task.check_target(metric, t, option)
    return given[::-1] if metric.endswith("loss") else given


def hardest_target(study: Study, metric: str, target) -> float | None:
    """The last of `report_targets`: the headline's."""
    targets = report_targets(study, metric, target)
    return targets[-1] if targets else None


def step_metric(study: Study, metric: str) -> str:
    """The metric the evaluations carry: `metric`, or its val figure where the test split was evaluated only at
    the end (as `tables.per_epoch`)."""
    s = study.steps
    if len(s) and metric in s and s[metric].notna().any():
        return metric
    return "val_" + metric.partition("_")[2]


def tuned_study(path, why: str):
    """A tuned study as its report reads it by default: (study, the evaluations' metric, its hardest target or None,
    whether higher is better); one line, ending in `why`, where the results are not a tuned study."""
    study = load_results([path])
    if not study.tuned:
        raise LbscaleError(f"{path}: not a tuned study (no search per batch): {why}")
    m = step_metric(study, resolve_metric(study, "auto"))
    targets = report_targets(study, m, None)
    return study, m, targets[-1] if targets else None, study.task.higher_is_better(m)


def predicted_targets(study: Study, metric: str, given) -> list[float]:
    """The targets B_crit is predicted at: --predict-at (checked as targets of `metric`), else every target a
    reference run was trained on to (`lbscale predict`: RESULTS/predict-T/reference) under the study's results."""
    if given is not None:
        values = parse_targets(given)
        for t in values:
            Task.check_target(metric, t, "--predict-at")
        return values
    found = set()
    for source in study.sources:
        for p in Path(source).glob("predict-*/reference"):
            try:
                found.add(float(p.parent.name.removeprefix("predict-")))
            except ValueError:
                continue
    return sorted(found)
