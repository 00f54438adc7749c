"""The rounds of `lbscale sweep --until-resolved`, as trials: what a round's actions (`analysis.rounds`) add to the
plan, and `rounds.json` in the results directory, where each round's answer, actions, reasons and trials are
written as it is decided. A rerun (a resumed sweep, a SLURM array task, the follow-up job) plans the same trials
from that file; only the next decision needs a fit.

- batch B: the spec's grid at B (every variant, search point and seed; its halving groups and confirmation as at
  any batch);
- lr: the point `key` again at one LR past the edge of its batch's search (base_lr scaled by the new LR over the
  point's), a new point id, not pruned;
- seeds: the point `key` with the next seed, not pruned (as the confirmation stage reruns a point);
- budget: the trial `key` again with twice its epochs (`...-p2-e80-s0`), its point and seed at a longer budget (it
  supersedes the shorter run in the report), not pruned.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

from lbscale.analysis.rounds import Action, Round, answer_text, describe
from lbscale.train.config import NO_PRUNING
from lbscale.errors import LbscaleError
from lbscale.results import ROUNDS, read_json, write_json
from lbscale.sweep.plan import SweepTrial, build_plan, point_id
from lbscale.analysis.sampling import round_value
from lbscale.train.plan import resolve_plan



def stem(p: SweepTrial) -> str:
    """A trial's point: its id without the seed."""
    return point_id(p.trial_id)


def read_rounds(results: Path) -> list[dict]:
    return (read_json(Path(results) / ROUNDS) or {}).get("rounds", [])


def check_adaptive(spec) -> None:
    """What --until-resolved needs of a spec: batches on grid.batch (it adds batches there), a tuned search of
    base_lr (it extends the LR range), and a target."""
    if spec.points:
        raise LbscaleError(f"{spec.path}: --until-resolved adds batches to grid.batch; this spec gives grid.points")
    spaces = [s for s in [spec.search, *spec.variant_search.values()] if s]
    if not spaces or not all(s.tune and "base_lr" in s.names for s in spaces):
        raise LbscaleError(f"{spec.path}: --until-resolved needs a tuned grid.search over base_lr (each batch's LR "
                           "is searched; the rounds extend its range where an optimum sits on an edge)")
    if spec.trial.get("target") is None or not spec.trial.get("target_metric"):
        raise LbscaleError(f"{spec.path}: --until-resolved needs trial.target_metric and trial.target (the steps "
                           "to it are what the critical batch is fitted to)")


def realise(spec, plans: list[SweepTrial], actions, results: Path, gpus_per_node: int, overrides: dict) -> list[dict]:
    """The trials of `actions` (each {action, trials: [...]}, as rounds.json keeps them), given the plans so far."""
    out = []
    taken = {p.trial_id for p in plans}
    next_point = max((p.point for p in plans if p.point is not None), default=-1) + 1
    for a in actions:
        if a.kind == "batch":
            new = build_plan(spec, results, gpus_per_node, batch=str(a.batch), **overrides)
            trials = [{"id": p.trial_id} for p in new if p.trial_id not in taken]
        elif a.kind == "budget":
            trials = [_longer(plans, a.key, taken)]
        else:
            template = _template(plans, a.key)
            seed = max(p.config.seed for p in plans if stem(p) == a.key) + 1
            if a.kind == "lr":
                factor = a.lr / template.plan.peak_lr
                head = template.trial_id.rsplit(f"-p{template.point}", 1)[0]
                trials = [{"id": f"{head}-p{next_point}-s{template.config.seed}", "from": template.trial_id,
                           "point": next_point, "base_lr": round_value(template.config.base_lr * factor)}]
                next_point += 1
            else:
                trials = [{"id": f"{a.key}-s{seed + i}", "from": template.trial_id, "seed": seed + i}
                          for i in range(a.seeds)]
        taken |= {t["id"] for t in trials}
        out.append({"action": dataclasses.asdict(a), "trials": trials})
    return out


def _longer(plans: list[SweepTrial], trial: str, taken: set) -> dict:
    """The trial `trial` again with twice its epochs, under an id that says so (`...-p0-e4-s1`): its point and
    seed at a longer budget, which supersedes it in the report (`report.tuned.superseded`)."""
    template = next((p for p in plans if p.trial_id == trial), None)
    if template is None:
        raise LbscaleError(f"{ROUNDS}: no trial {trial!r} in this sweep's plan (was the spec changed?)")
    epochs = template.config.epochs * 2
    head = re.sub(r"-e\d+$", "", stem(template))
    while f"{head}-e{epochs}-s{template.config.seed}" in taken:
        epochs *= 2
    return {"id": f"{head}-e{epochs}-s{template.config.seed}", "from": template.trial_id, "epochs": epochs}


def _template(plans: list[SweepTrial], key: str) -> SweepTrial:
    found = [p for p in plans if stem(p) == key and not p.confirms]
    if not found:
        raise LbscaleError(f"{ROUNDS}: no trial {key!r} in this sweep's plan (was the spec changed?)")
    return min(found, key=lambda p: p.config.seed)


def trials_of(spec, plans: list[SweepTrial], added: list[dict], results: Path, gpus_per_node: int,
              overrides: dict, number: int) -> list[SweepTrial]:
    """The TrialPlans of one round's recorded actions (`realise`'s output), given the plans before it."""
    out: list[SweepTrial] = []
    for entry in added:
        a = Action(**entry["action"])
        if a.kind == "batch":
            new = build_plan(spec, results, gpus_per_node, batch=str(a.batch), **overrides)
            wanted = {t["id"] for t in entry["trials"]}
            out += [dataclasses.replace(p, round=number) for p in new if p.trial_id in wanted]
            continue
        for t in entry["trials"]:
            template = next(p for p in plans + out if p.trial_id == t["from"])
            out.append(dataclasses.replace(_again(template, t, results), round=number))
    return out


def _again(p: SweepTrial, t: dict, results: Path) -> SweepTrial:
    """The trial `t` of a round from its template `p`: another seed, or another base_lr as a new point; never
    pruned (it is no candidate of the halving that ran before it)."""
    changes = {"out": str(Path(results) / t["id"]), **NO_PRUNING}
    if "seed" in t:
        changes["seed"] = t["seed"]
    if "base_lr" in t:
        changes["base_lr"] = t["base_lr"]
    if "epochs" in t:
        changes["epochs"] = t["epochs"]
    cfg = dataclasses.replace(p.config, **changes)
    plan = resolve_plan(cfg, p.gpus, p.plan.train_samples) if "base_lr" in t or "epochs" in t else p.plan
    search = {**(p.search or {}), "base_lr": t["base_lr"]} if "base_lr" in t else p.search
    return dataclasses.replace(p, trial_id=t["id"], config=cfg, plan=plan, peers=(),
                               point=t.get("point", p.point), search=search, confirms="seed" in t)


def replayed(spec, plans: list[SweepTrial], results: Path, gpus_per_node: int, overrides: dict) -> list[SweepTrial]:
    """Every trial the recorded rounds added, in order (each round given the plans before it)."""
    out: list[SweepTrial] = []
    for r in read_rounds(results):
        out += trials_of(spec, plans + out, r.get("added", []), results, gpus_per_node, overrides, r["round"])
    return out


def record(results: Path, answer: dict, decided: Round, added: list[dict], settings: dict, planned: int) -> dict:
    """Write one round's decision to rounds.json: B_crit as fitted, the stop or the actions with their reasons and
    trials, and the trials planned after it."""
    data = read_json(Path(results) / ROUNDS) or {}  # the wall budget's periods stay beside the rounds
    rounds = data.get("rounds", [])
    entry = {"round": len(rounds) + 1, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "answer": answer,
             "stop": decided.stop, "notes": list(decided.notes), "added": added, "planned": planned, **settings}
    write_json(Path(results) / ROUNDS, {**data, "rounds": [*rounds, entry]})
    return entry


def parse_budget(text) -> tuple[str, float]:
    """--budget: 'N' trials in all (the grid's included) or 'Hh' GPU-hours; a one-line error otherwise."""
    t = str(text).strip().lower()
    try:
        if t.endswith("h"):
            hours = float(t[:-1])
            if hours > 0 and hours != float("inf"):
                return "hours", hours
        elif int(t) >= 1:
            return "trials", int(t)
    except ValueError:
        pass
    raise LbscaleError(f"--budget {text!r}: give N trials in all (60) or H GPU-hours (12h), > 0")


class Rounds:
    """The sweep's `more` with --until-resolved: the confirmation stage first, then, once every trial has ended, a
    round decided by `decide` (studies.resolve), written to rounds.json and planned as trials; none once it stops."""

    def __init__(self, spec, o, results: Path, gpus_per_node: int, overrides: dict, decide, wall=None):
        self.spec, self.o, self.results, self.gpn, self.overrides, self.decide = (spec, o, Path(results),
                                                                                  gpus_per_node, overrides, decide)
        self.wall = wall  # sweep.budget.WallBudget, or None
        # the steps model's version (`decide.model`) with them: a stop an older model decided is not replayed
        self.settings = {"ratio": o.ratio, "budget": o.budget,
                         **({"wall": round(wall.seconds)} if wall is not None else {}),
                         **({"model": decide.model} if getattr(decide, "model", None) is not None else {})}

    def more(self, plans: list[SweepTrial]) -> list[SweepTrial]:
        from lbscale.results import FINISHED
        from lbscale.sweep.launch import failed_for_environment
        from lbscale.sweep.preflight import check_plan_data
        from lbscale.sweep.confirm import confirmation
        from lbscale.sweep.state import trial_state

        ids = {p.trial_id for p in plans}
        confirming = [p for p in confirmation(self.spec, plans) if p.trial_id not in ids]
        if confirming or self.decide is None:
            return confirming
        if not all(trial_state(p.out)["state"] in (*FINISHED, "failed") for p in plans):
            return []
        retried = [p for p in plans if failed_for_environment(p)]
        if retried:  # the next sweep retries them: a decision now would rest on trials that measured nothing
            print(f"until resolved: no round decided while {len(retried)} trial{'s' if len(retried) > 1 else ''} "
                  "that failed for the environment wait for a retry (run the same command again)", flush=True)
            return []
        done = read_rounds(self.results)
        last = (done or [{}])[-1]
        if last.get("stop") and last.get("planned") == len(plans) and last.get("settings") == self.settings:
            print(f"until resolved: {last['stop']} (round {last['round']}, {self.results / ROUNDS})", flush=True)
            return []
        answers, decided = self.decide(self.results, self._left(plans), self._per_batch(plans),
                                       max(p.plan.train_samples or 0 for p in plans) or None)
        added = [] if decided.stop else realise(self.spec, plans, decided.actions, self.results, self.gpn,
                                                self.overrides)
        new = trials_of(self.spec, plans, added, self.results, self.gpn, self.overrides, len(done) + 1)
        if new:
            check_plan_data(self.spec.path, new)
        entry = record(self.results, answers, decided, added, {"settings": self.settings},
                       planned=len(plans) + len(new))
        said = "; ".join(f"{arm}: {answer_text(a)}" if len(answers) > 1 else answer_text(a)
                         for arm, a in answers.items())
        if decided.stop:
            print(f"until resolved: {decided.stop} (round {entry['round']}, {self.results / ROUNDS})", flush=True)
        else:
            print(f"round {entry['round']}: B_crit {said}; adding {len(new)} trials:", flush=True)
            for line in describe(added):
                print(f"  {line}", flush=True)
        for n in decided.notes:
            print(f"  note: {n}", flush=True)
        return new

    def _left(self, plans: list[SweepTrial]) -> int | None:
        if self.wall is not None and self.wall.over():
            return 0  # the wall-clock budget is spent: no more rounds
        if self.o.budget is None:
            return None
        kind, amount = parse_budget(self.o.budget)
        if kind == "trials":
            return int(amount) - len(plans)
        hours = sum(p.gpus * ((read_json(p.out / "summary.json") or {}).get("wall_seconds") or 0.0)
                    for p in plans) / 3600
        return None if hours < amount else 0

    @staticmethod
    def _per_batch(plans: list[SweepTrial]) -> int:
        """The trials a new batch adds: the search's points x variants x seeds at one batch of the grid."""
        search = [p for p in plans if not p.confirms]
        first = min(p.plan.global_batch for p in search)
        return sum(p.plan.global_batch == first for p in search)
