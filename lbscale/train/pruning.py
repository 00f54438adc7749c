"""Successive halving of hopeless trials (ASHA: Li et al., "A System for Massively Parallel Hyperparameter
Tuning", MLSys 2020), decided from the peers' records in the results directory.

Rungs sit at r, r*eta, r*eta^2, ... optimizer steps (--prune-min-steps r), or at the steps by which r, r*eta,
r*eta^2, ... training samples have been trained (--prune-min-samples r: the same amount of training at every
batch, where a rung in steps is 16 times more training at batch 512 than at batch 32), below the trial's last
step. At a rung a trial publishes
its metric in its own `rungs.json` (atomically, so a reader sees a whole file), and only then reads its peers'
(the trials of its group, e.g. one batch and variant of a sweep: the siblings its sweep's current plan lists in
the trial's peers.json, or for a standalone trial the siblings that name the same --prune-group). So of two
trials deciding at the same moment, the later one always sees the earlier one, whichever array task runs where.

The rule at a rung, in both modes: the kept cut is the best max(1, n // eta)-th of the n values published there
(its own included), and a trial is pruned only where its value is worse than the cut by more than the margin:
PRUNE_Z standard errors of the difference, each value's the evaluation's noise (binomial, sqrt(p (1 - p) / m) on
the m examples it was evaluated on, `task.evaluation_noise`). A rung whose values lie within noise of each other
decides nothing: every trial goes on, in any order of arrival (Optuna's and Ray Tune's pruners likewise wait for
a difference that is there). A loss has no known noise: its margin is null and the plain rank rule decides.

- `asha` (asynchronous): it decides at once from the values published at that rung so far. The first to arrive
  alone always continues: decisions between values further apart than noise depend on arrival order, and no
  trial ever waits. Two trials that publish before either reads (array tasks arriving within milliseconds) see
  each other and are compared as sha would; in every order the best value at a rung goes on. Each record
  carries its arrival number, so the order a decision rested on is on file.
- `sha` (synchronous): it waits until every peer has published at that rung or ended before it, then applies
  the same rule to all of them: the same decisions in any order, for studies that must repeat exactly. A
  waiting trial checkpoints and exits (REQUEUE_EXIT); its sweep runs it again when the others have caught up.

Each rung's record keeps the value, the examples it was evaluated on and its noise, the peers' values the
decision was based on, the cut and the margin, how many were kept and the decision, so every prune can be
audited after the fact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lbscale.results import PEERS, SUMMARY, TRIAL_YAML, read_json, write_json
from lbscale.task import evaluation_noise

RUNGS_FILE = "rungs.json"
MODES = {"none": "every trial trains its whole budget",
         "asha": "asynchronous successive halving: decide at once from the peers that reached the rung",
         "sha": "synchronous successive halving: wait for every peer at each rung (repeatable)"}


def rung_steps(min_steps: int, eta: int, total_steps: int) -> list[int]:
    """r, r*eta, r*eta^2, ... below `total_steps` (a rung at the last step would prune nothing)."""
    out, s = [], min_steps
    while s < total_steps:
        out.append(s)
        s *= eta
    return out


def rung_steps_in_samples(min_samples: int, eta: int, global_batch: int, total_steps: int) -> list[int]:
    """The optimizer steps by which r, r*eta, r*eta^2, ... samples have been trained at `global_batch`:
    ceil(samples / global_batch), at least 1, each once (small rungs of a large batch share a step), below
    `total_steps`."""
    out, samples = [], min_samples
    while (step := max(1, -(-samples // global_batch))) < total_steps:
        if not out or step != out[-1]:
            out.append(step)
        samples *= eta
    return out


def keep_count(n: int, eta: int) -> int:
    """How many of n trials at a rung go on: the top 1/eta, at least one."""
    return max(1, n // eta)


# Standard errors of the difference between a value and the kept cut past which a trial is pruned: a trial truly as
# good as the cut is then pruned by the evaluation's noise alone about 2% of the time (one-sided normal), and values
# within it of each other (all within noise) go on whatever order they arrived in
PRUNE_Z = 2.0


def _signed(value, maximize: bool) -> float:
    """`value` where lower is better, a value that is not finite (a diverging trial) last."""
    if value is None or not math.isfinite(value):
        return math.inf
    return -value if maximize else value


def promoted(value: float, values: list[float], eta: int, maximize: bool, margin: float = 0.0) -> bool:
    """Whether `value` is no worse than the best keep_count(len(values), eta)-th of `values` (which include it; the
    cut) by more than `margin`; a value that is not finite (a diverging trial) is never promoted, and sorts last."""
    if value is None or not math.isfinite(value):
        return False
    ranked = sorted(_signed(v, maximize) for v in values)
    return _signed(value, maximize) <= ranked[keep_count(len(values), eta) - 1] + margin


def rung_margin(metric: str, value: float, evaluated: int | None, cut: float, cut_evaluated: int | None
                ) -> float | None:
    """PRUNE_Z standard errors of the difference between `value` and the `cut` (each evaluated on its examples,
    `task.evaluation_noise`), taken as independent: two trials evaluated on one subset are correlated, so this
    overstates the noise of their difference, and errs towards letting a trial go on. None where the noise is not
    known (a loss, or examples not on record)."""
    a, b = evaluation_noise(metric, value, evaluated), evaluation_noise(metric, cut, cut_evaluated)
    return None if a is None or b is None else PRUNE_Z * math.hypot(a, b)


def judge(value: float, evaluated: int | None, others: list[tuple[float, int | None]], eta: int, metric: str,
          maximize: bool) -> dict:
    """A rung's decision for `value` (on `evaluated` examples) among the `others` published there (value,
    examples): it is pruned only where it is worse than the kept cut (the keep_count-th best of all) by more than
    the margin (`rung_margin`; without known noise, by anything: the plain rank rule). The fields a rung record
    keeps to audit it: the cut, the margin, how many were kept of how many, the decision."""
    everyone = [(value, evaluated), *others]
    kept = keep_count(len(everyone), eta)
    cut, cut_evaluated = sorted(everyone, key=lambda e: _signed(e[0], maximize))[kept - 1]
    cut = cut if math.isfinite(_signed(cut, maximize)) else None  # fewer finite values than kept: no cut
    margin = rung_margin(metric, value, evaluated, cut, cut_evaluated) if cut is not None else None
    go_on = promoted(value, [v for v, _ in everyone], eta, maximize, margin or 0.0)
    return {"cut": cut, "margin": margin, "kept": kept, "of": len(everyone),
            "decision": "continue" if go_on else "prune"}


@dataclass
class Peer:
    name: str
    rungs: dict  # rung -> value published there
    ended: bool  # a summary exists: it will publish nothing more
    arrivals: dict = field(default_factory=dict)  # rung -> its arrival number there (absent in older records)
    evaluated: dict = field(default_factory=dict)  # rung -> the examples its value was evaluated on (where known)


@dataclass
class Pruner:
    """One trial's side of successive halving: its rungs, what it published and decided (checkpointed)."""

    out: Path
    mode: str
    group: str
    eta: int
    metric: str
    maximize: bool
    steps: list[int]
    rung_samples: list[int] = field(default_factory=list)  # trained by each rung's step (step x global batch)
    records: list[dict] = field(default_factory=list)  # one per rung reached: value, peers, decision

    def rung_at(self, step: int) -> int | None:
        return self.steps.index(step) + 1 if step in self.steps else None

    @property
    def pending(self) -> dict | None:
        """The last rung published but not decided (a synchronous wait a checkpoint carried over)."""
        return self.records[-1] if self.records and self.records[-1]["decision"] is None else None

    def publish(self, rung: int, step: int, value: float, evaluated: int | None = None) -> None:
        """Write this trial's value at `rung` with its arrival: 1 + the latest arrival among the peers already
        there (two trials that publish before either sees the other share a number: they raced)."""
        self.records = [r for r in self.records if r["rung"] != rung]  # a resumed trial may replay a rung
        arrival = 1 + max((p.arrivals[rung] for p in self.peers() if rung in p.arrivals), default=0)
        self.records.append({"rung": rung, "step": step, "metric": self.metric, "value": value, "decision": None,
                             "arrival": arrival, "evaluated": evaluated,
                             "noise": evaluation_noise(self.metric, value, evaluated)})
        self._write()

    def decide(self) -> str | None:
        """'continue' or 'prune' for the pending rung, or None (sha: peers still to report)."""
        record = self.pending
        peers = self.peers()
        rung = record["rung"]
        values = {p.name: p.rungs[rung] for p in peers if rung in p.rungs}
        if self.mode == "sha" and any(rung not in p.rungs and not p.ended for p in peers):
            waiting = sorted(p.name for p in peers if rung not in p.rungs and not p.ended)
            record["waiting_for"] = waiting
            self._write()
            return None
        record.pop("waiting_for", None)
        own = record.get("evaluated")
        # a peer's examples where its record has them, else this trial's: the sweep evaluates a group on one subset
        evaluated = {p.name: p.evaluated.get(rung) for p in peers}
        others = [(v, evaluated.get(name) or own) for name, v in values.items()]
        record.update(peers=values, **judge(record["value"], own, others, self.eta, self.metric, self.maximize))
        self._write()
        return record["decision"]

    def peers(self) -> list[Peer]:
        """The other trials of this group: those its sweep listed in peers.json (the current plan's, and no
        others); without that file (a standalone `lbscale train --prune-group G`), the siblings in the results
        directory whose trial.yaml or rungs.json name the group."""
        listed = read_json(self.out / PEERS)
        if listed is not None:
            return [self._peer(self.out.parent / name, declared=True) for name in listed["members"]]
        found = []
        for d in sorted(self.out.parent.iterdir()) if self.out.parent.is_dir() else []:
            if d == self.out or not d.is_dir():
                continue
            peer = self._peer(d, declared=_declared_group(d) == self.group)
            if peer is not None:
                found.append(peer)
        return found

    def _peer(self, d: Path, declared: bool) -> Peer | None:
        """What trial directory `d` published under this group (nothing yet: no rungs); None where it is not
        of the group."""
        published = read_json(d / RUNGS_FILE) if (d / RUNGS_FILE).exists() else None
        records = published["rungs"] if published and published.get("group") == self.group else None
        if records is None and not declared:
            return None
        records = records or []
        return Peer(d.name, {r["rung"]: r["value"] for r in records}, (d / SUMMARY).exists(),
                    {r["rung"]: r["arrival"] for r in records if "arrival" in r},
                    {r["rung"]: r["evaluated"] for r in records if r.get("evaluated")})

    def _write(self) -> None:
        write_json(self.out / RUNGS_FILE, {"group": self.group, "mode": self.mode, "eta": self.eta,
                                           "metric": self.metric, "maximize": self.maximize,
                                           "rung_steps": self.steps, "rung_samples": self.rung_samples,
                                           "rungs": self.records})

    def collective_decision(self, is_main: bool, all_reduce_sum, device) -> str | None:
        """Rank 0 decides from the peers' records; every rank learns the decision ('pruned', 'wait' or None to
        train on) through `all_reduce_sum` (a sum over ranks of a tensor on `device`: collective)."""
        import torch

        code = {"continue": 0.0, "prune": 1.0, None: 2.0}[self.decide()] if is_main else 0.0
        code = all_reduce_sum(torch.tensor(code, dtype=torch.float64, device=device)).item()
        return {0.0: None, 1.0: "pruned", 2.0: "wait"}[code]

    def state_dict(self) -> dict:
        return {"records": [dict(r) for r in self.records]}

    def load_state_dict(self, state: dict) -> None:
        self.records = [dict(r) for r in state["records"]]


def make_pruner(cfg, task, total_steps: int) -> Pruner | None:
    """A trial's pruner from its config (`TrialConfig`), or None without --prune: rungs below the last step (from
    --prune-min-samples at the trial's global batch, or --prune-min-steps), the metric (--prune-metric, else the
    target's, else the task's primary one) and its direction from the task."""
    if cfg.prune == "none":
        return None
    metric = cfg.prune_metric or cfg.target_metric or task.primary_on(cfg.eval_split)
    if cfg.prune_min_samples is not None:
        steps = rung_steps_in_samples(cfg.prune_min_samples, cfg.prune_eta, cfg.global_batch, total_steps)
    else:
        steps = rung_steps(cfg.prune_min_steps, cfg.prune_eta, total_steps)
    return Pruner(Path(cfg.out), cfg.prune, cfg.prune_group, cfg.prune_eta, metric, task.higher_is_better(metric),
                  steps, [s * cfg.global_batch for s in steps])


def _declared_group(d: Path) -> str | None:
    try:
        cfg = yaml.safe_load((d / TRIAL_YAML).read_text())
    except (FileNotFoundError, yaml.YAMLError):
        return None
    return cfg.get("prune_group") if isinstance(cfg, dict) and cfg.get("prune", "none") != "none" else None
