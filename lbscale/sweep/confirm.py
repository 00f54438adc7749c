"""The confirmation stage of a tuned sweep (`grid.search.confirm: {top: K, seeds: S}`): once every search trial of
a cell (batch, GPUs, dataset, variant, warm-up) has finished, its K best points train again with S more seeds, so
the report's intervals measure the winners' seed noise (Nado et al. 2021: a best-of-k minimum from one seed each
is not a statistic to bootstrap). Ranked as the report ranks: reached the target first, then fewer steps to it,
then the better value of the metric on the whole split, then the trial id; ids are the point's with the new seeds
(`...-p3-s1`), so a rerun plans the same trials.
"""

from __future__ import annotations

import dataclasses
import math

from lbscale.train.config import NO_PRUNING
from lbscale.results import FINISHED, METRICS, SUMMARY, read_json, read_jsonl
from lbscale.sweep.plan import SweepTrial, point_id
from lbscale.sweep.spec import SweepSpec


def _cell(p: SweepTrial) -> tuple:
    return (p.plan.global_batch, p.gpus, p.dataset, p.variant, p.warmup)


def _rank(p: SweepTrial) -> tuple:
    """A finished search trial's place: (missed the target, steps to it, the metric's best value on the whole
    split negated where higher is better, the id). An evaluation of a subset (`subset`: its images) is a noisy
    estimate that never ranks a trial, as in the report (`report.tuned.whole_split`)."""
    summary = read_json(p.out / SUMMARY) or {}
    steps = summary.get("steps_to_target")
    metric = p.config.target_metric or p.config.prune_metric
    values = [r[metric] for r in read_jsonl(p.out / METRICS) if r.get(metric) is not None
              and r.get("subset") is None] if metric else []
    values = [v for v in values if v == v]  # NaN: a diverged evaluation
    best = (max(values) if not metric.endswith("loss") else min(values)) if values else None
    key = math.inf if best is None else (-best if not metric.endswith("loss") else best)
    return (steps is None, steps if steps is not None else math.inf, key, p.trial_id)


def _search_cells(plans: list[SweepTrial]) -> dict[tuple, list[SweepTrial]]:
    """The search trials of each cell, never its confirmations."""
    cells: dict[tuple, list[SweepTrial]] = {}
    for p in plans:
        if p.point is not None and p.tune and not p.confirms:
            cells.setdefault(_cell(p), []).append(p)
    return cells


def _rerun(spec: SweepSpec, members: list[SweepTrial], ranked: list[SweepTrial]) -> list[SweepTrial]:
    """The confirmation trials of one cell: the first K points of `ranked`, each with S new seeds (none where the
    spec asks for none)."""
    confirm = getattr(spec.variant_search.get(members[0].variant, spec.search), "confirm", None)
    if not confirm:
        return []
    top, seeds = confirm
    first = max(p.config.seed for p in members) + 1
    out = []
    for point in list(dict.fromkeys(p.point for p in ranked))[:top]:
        template = next(p for p in members if p.point == point)
        out += [_again(template, seed) for seed in range(first, first + seeds)]
    return out


def confirmation(spec: SweepSpec, plans: list[SweepTrial]) -> list[SweepTrial]:
    """The confirmation trials of every cell whose search has finished (none where the spec asks for none, or
    while a search trial of the cell still runs or waits)."""
    out = []
    for members in _search_cells(plans).values():
        if all((read_json(p.out / SUMMARY) or {}).get("status") in FINISHED for p in members):
            out += _rerun(spec, members, sorted(members, key=_rank))
    return out


def confirmation_to_come(spec: SweepSpec, plans: list[SweepTrial]) -> list[SweepTrial]:
    """Stand-ins for the confirmation trials a sweep will add to `plans` (K points x S seeds in each cell whose
    confirmations are not planned yet): the cell's first K points, whose trials cost what the winners' will, for
    `--estimate` to price."""
    planned = {_cell(p) for p in plans if p.confirms}
    return [q for cell, members in _search_cells(plans).items() if cell not in planned
            for q in _rerun(spec, members, members)]


def _again(p: SweepTrial, seed: int) -> SweepTrial:
    """The search trial `p` with another seed, not pruned (it is no candidate any more: its point was chosen)."""
    trial_id = f"{point_id(p.trial_id)}-s{seed}"
    out = p.out.parent / trial_id
    cfg = dataclasses.replace(p.config, seed=seed, out=str(out), **NO_PRUNING)
    return dataclasses.replace(p, trial_id=trial_id, config=cfg, peers=(), confirms=True)
