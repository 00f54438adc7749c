"""`lbscale predict RESULTS --at 0.84`: B_crit where training ends, from the sweep the budget afforded.

The sweep measured B_crit at a ladder of targets up to its own; the reference run (the best trial at the smallest
batch that reached it) is trained on from its checkpoint at that target to the named one (kept in
RESULTS/predict-T/reference: a constant LR trained on is the longer trial, so its curve is the longer trial's), and
the gradient noise scale B_simple is measured at both ends (`lbscale gns` on each checkpoint). The report's ladder
(report/ladder.py) then places every target by the samples the reference run took to it, fits the law and
predicts B_crit at the named target, beside B_simple there times the study's own B_crit / B_simple."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.results import CHECKPOINT, CONFIG, SUMMARY, read_json

EXTEND = 8  # the reference run's budget past its checkpoint: this many times its own epochs (it stops at the target)


@dataclass
class PredictOptions:
    target: float
    epochs: int | None = None
    variant: str | None = None


def reference(results: Path, o: PredictOptions):
    """(study, metric, the sweep's own target, the reference trial's row, None where `o.target` is at or below the
    sweep's own: a measurement); one line where the results cannot give one."""
    from lbscale.report import tuned
    from lbscale.report.ladder import reference_of
    from lbscale.report.options import tuned_study
    from lbscale.task import Task

    study, metric, target, maximize = tuned_study(results, "a prediction rests on each batch's tuned LR")
    if target is None:
        raise LbscaleError(f"{results}: its trials have no target: no ladder of targets to predict from")
    Task.check_target(metric, o.target, "--at")
    best = tuned.best_trials(study.trials, study.steps, metric, target, maximize)
    arms = sorted(best["variant"].fillna("-").unique())
    if len(arms) > 1 and o.variant is None:
        raise LbscaleError(f"{results}: {len(arms)} arms ({', '.join(arms)}); name one with --variant")
    variant = o.variant or arms[0]
    if variant not in arms:
        raise LbscaleError(f"--variant {variant}: {results} has {', '.join(arms)}")
    if not study.task.reached(metric, o.target, target) or o.target == target:
        return study, metric, target, None
    ref = reference_of(best, variant)
    if ref is None:
        raise LbscaleError(f"{results}: no batch of {variant} reached {metric} {target:g}: nothing to train on")
    return study, metric, target, ref


def continuation(results: Path, ref, o: PredictOptions, metric: str):
    """The reference trial trained on to `o.target`: its SweepTrial, in RESULTS/predict-T/reference (the
    checkpoint copied whole or not at all); one line where the trial cannot be trained on as the same run."""
    from lbscale.report.ladder import REFERENCE, folder
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.config import FIELDS, load_config
    from lbscale.train.plan import resolve_plan

    parent = Path(ref["results"]) / ref["trial"]
    described = read_json(parent / CONFIG) or {}
    config, plan = described.get("config"), described.get("plan")
    if not config or not plan or not (parent / CHECKPOINT).is_dir():
        raise LbscaleError(f"{parent}: no config.json or checkpoint: the reference run cannot be trained on")
    if config.get("schedule") != "constant" or config.get("batch_schedule"):
        raise LbscaleError(f"{parent}: its LR schedule is {config.get('schedule')!r}: trained on, it would be another "
                           "run; a prediction needs a constant LR (as `lbscale design` specs train)")
    out = folder(results, o.target) / REFERENCE
    if not out.exists():
        part = out.with_name(f".{REFERENCE}.part")
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(parent / CHECKPOINT, part / CHECKPOINT)
        part.rename(out)
    own = config.get("target")
    targets = sorted({*(own if isinstance(own, list) else [own]), o.target}) if own is not None else [o.target]
    options = {k: v for k, v in config.items() if k in FIELDS}
    options.update(out=str(out), resume=True, target=targets, target_metric=metric, stop_at_target=True,
                   epochs=o.epochs or EXTEND * int(config["epochs"]), prune="none", keep_checkpoints=None,
                   preempt_after_steps=None)
    cfg = load_config(None, **options)
    p = resolve_plan(cfg, plan["world_size"], plan["train_samples"])
    return SweepTrial(REFERENCE, plan["world_size"], 1, cfg, p, sweep="predict"), parent


def train(trial) -> None:
    from lbscale.sweep.follow import SweepProgress
    from lbscale.sweep.launch import LocalLauncher, select, write_trial_files

    write_trial_files([trial])
    if select([trial], retry_failed=True):
        LocalLauncher().run_rounds([trial], SweepProgress())


def run_predict(results: Path, o: PredictOptions) -> str:
    """Train the reference run on where it is not there yet, measure B_simple at both ends, predict; the outcome
    line."""
    from lbscale.report.analysed import analyse_tuned
    from lbscale.report.ladder import detail_lines
    from lbscale.report.options import ReportOptions
    from lbscale.studies.gns import measure_trial

    results = Path(results)
    study, metric, own, ref = reference(results, o)
    if ref is None:
        return measured(results, study, metric, own, o)
    trial, parent = continuation(results, ref, o, metric)
    print(f"predict: {parent.name} (batch {int(ref['global_batch'])}) trained on from {metric} {own:g} to "
          f"{o.target:g} in {trial.out}", flush=True)
    train(trial)
    summary = read_json(trial.out / SUMMARY) or {}
    if summary.get("status") == "failed":
        raise LbscaleError(f"{trial.out}: the reference run failed ({summary.get('error') or 'see its train.log'})")
    reached = f"{o.target:g}" in (summary.get("targets") or {})
    for d in (parent, trial.out):
        if reached and not (d / "gns.json").is_file():
            measure_trial(d)
    a = analyse_tuned(study, replace(ReportOptions(), predict_at=str(o.target)), metric)
    variant = ref["variant"] if isinstance(ref["variant"], str) else "-"
    for line in detail_lines(a.ladders, variant):
        print(f"- {line}", flush=True)
    lad = next((x for x in a.ladders if x.variant == variant), None)
    said = headline(lad.predictions[0] if lad and lad.predictions else (None, None), metric, o.target)
    if reached:
        return (f"predict: {said}; from the ladder up to {own:g} and the reference run in {trial.out} "
                f"(lbscale report {results} shows it beside the rest)")
    if summary.get("status") == "diverged":
        return (f"predict: the reference run diverged before {o.target:g} (its constant LR, trained on, in "
                f"{trial.out}): B_crit at {metric} {o.target:g} not predicted; a study whose own target is nearer "
                f"{o.target:g} would measure it")
    return (f"predict: the reference run did not reach {o.target:g} in {trial.config.epochs} epochs: {said}; "
            f"a longer run (--epochs) may reach it")


def headline(pair, metric: str, target: float) -> str:
    """The outcome's figure: each predictor's interval where it gave one, the law's reason where neither did."""
    from lbscale.report.numbers import estimate_cell, whole

    law, simple = pair
    given = [f"{estimate_cell(q.value, q.lo, q.hi, q.kind, whole)} {name}" for q, name in
             ((law, "by the law"), (simple, "by B_simple")) if q is not None and q.kind == "interval"]
    if given:
        return f"B_crit at {metric} {target:g} ~ " + "; ".join(given)
    return f"B_crit at {metric} {target:g} not predicted ({law.reason if law else 'no ladder'})"


def measured(results: Path, study, metric: str, own: float, o: PredictOptions) -> str:
    """At or below the sweep's own target B_crit is measured, not predicted: the steps model's fit there, said so."""
    from lbscale.report.analysed import analyse_tuned
    from lbscale.report.numbers import estimate_cell, whole
    from lbscale.report.options import ReportOptions

    a = analyse_tuned(study, replace(ReportOptions(), target=[o.target]), metric)
    rows = a.fits[a.fits["variant"].fillna("-") == (o.variant or a.fits["variant"].fillna("-").iloc[0])]
    f = rows.iloc[0] if not rows.empty else {}
    kind = f.get("b_crit_kind") if isinstance(f.get("b_crit_kind"), str) else "none"
    cell = estimate_cell(f.get("b_crit"), f.get("b_crit_lo"), f.get("b_crit_hi"), kind, whole)
    shows = f"lbscale report {results}" + (f" --target {o.target:g},{own:g}" if o.target != own else "")
    return (f"predict: {metric} {o.target:g} is at or below the sweep's own target {own:g}: B_crit there is measured, "
            f"not predicted: {cell} ({shows} shows it)")
