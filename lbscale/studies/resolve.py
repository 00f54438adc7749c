"""The decisions of `lbscale sweep --until-resolved`: after each round, the report's fit of every arm
(`report.critical_batch.fits_of`: the steps model's B_crit with its profile interval) and each batch's search,
handed to the round planner (`analysis.rounds.plan_round`). The sweep (sweep/command.py) turns the actions into
trials and writes them down; this module only reads results and decides."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbscale.analysis.rounds import Action, Answer, BatchState, Point, Round, plan_round
from lbscale.report.load import load_results
from lbscale.report.critical_batch import fits_of
from lbscale.report.steps_model import VERSION
from lbscale.report.tuned import arms, batch_optima, eval_shares, trial_outcomes
from lbscale.sweep.plan import point_id
from lbscale.task import Task


def decider(metric: str, target: float, ratio: float):
    """decide(results, trials_left, trials_per_batch, max_batch) -> ({arm: answer}, Round) for a sweep's rounds."""
    maximize = Task.higher_is_better(metric)

    def decide(results: Path, trials_left: int | None, trials_per_batch: int, max_batch: int | None):
        study = load_results([results])
        outcomes = trial_outcomes(study.trials, study.steps, metric, target, maximize)
        fits = fits_of(outcomes, target, maximize).set_index("variant")
        answers, rounds = {}, []
        for arm, o in arms(outcomes, "variant"):
            row = fits.loc[arm]
            kind = row["b_crit_kind"] if isinstance(row["b_crit_kind"], str) else "none"
            p = row.get("lack_of_fit_p")
            answer = Answer(kind, float(row["b_crit_lo"]) if kind != "none" else 0.0,
                            float(row["b_crit_hi"]) if kind != "none" else float("inf"),
                            float(p) if p is not None and p == p else None)
            answers[str(arm)] = {"kind": kind, "value": _num(row["b_crit"]),  # an open end is null (strict JSON)
                                 "lo": _num(answer.lo) if answer.lo > 0 else None, "hi": _num(answer.hi)}
            rounds.append(plan_round(answer, states(o, target, maximize, study.epochs), ratio, trials_left,
                                     trials_per_batch, max_batch=max_batch))
        return answers, merged(rounds, list(answers))
    decide.model = VERSION  # a stop recorded by another version of the steps model is decided again
    return decide


def _num(x):
    return None if x is None or (isinstance(x, float) and not np.isfinite(x)) else float(x)


def states(o, target: float, maximize: bool, epochs=None) -> list[BatchState]:
    """Each batch's search of one arm: its points by increasing peak LR (each named by a trial of it, without the
    seed), the best one (`batch_optima`), and the evaluations' median share of its trials' training (`epochs`: the
    study's epoch records; `tuned.eval_shares`)."""
    optima = batch_optima(o, "peak_lr", target, maximize).set_index("global_batch")
    shares = {} if epochs is None else eval_shares(epochs[epochs["trial"].isin(set(o["trial"]))]
                                                   ).groupby("batch")["share"].median().to_dict()
    out = []
    for b, g in o.groupby("global_batch", sort=True):
        lrs = sorted(g["peak_lr"].astype(float).unique())
        points = []
        for lr in lrs:
            at = g[g["peak_lr"].astype(float) == lr]
            points.append(Point(lr, point_id(str(sorted(at["trial"])[0])), len(at)))
        best = None
        if b in optima.index and bool(optima.loc[b, "reached"]):
            best = int(np.argmin([abs(np.log(lr / optima.loc[b, "best_lr"])) for lr in lrs]))
        share = shares.get(b)
        out.append(BatchState(int(b), best is not None, tuple(points), best,
                              short=None if best is not None else _closest(g, maximize),
                              eval_share=None if share is None else float(share)))
    return out


def _closest(g, maximize: bool) -> str | None:
    """Of a batch that never reached the target, the trial that came closest of those that trained their whole
    budget (completed: not pruned, not diverged), what a longer budget extends; None where none did. A trial a
    longer run superseded is not among them (`trial_outcomes`), so no run is extended twice."""
    ran = g[(g["state"] == "completed") & ~g["reached"].astype(bool)].dropna(subset=["best_value"])
    if ran.empty:
        return None
    top = ran.sort_values(["best_value", "trial"], ascending=[not maximize, True]).iloc[0]
    return str(top["trial"])


def merged(rounds: list[Round], names: list[str]) -> Round:
    """One round for several arms: it stops where every arm's stops; else every arm's actions (a batch once)."""
    if all(r.stop for r in rounds):
        stops = [r.stop for r in rounds]
        text = stops[0] if len(set(stops)) == 1 else "; ".join(f"{a}: {s}" for a, s in zip(names, stops))
        return Round(text, (), tuple(n for r in rounds for n in r.notes))
    actions: list[Action] = []
    for r in rounds:
        for a in r.actions:
            if a.kind == "batch" and any(x.kind == "batch" and x.batch == a.batch for x in actions):
                continue
            actions.append(a)
    return Round(None, tuple(actions), tuple(n for r in rounds for n in r.notes))
