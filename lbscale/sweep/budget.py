"""Budgets every batch can reach the target in: once a batch has reached it in S_b steps, a larger batch B needs at
least S_b b / B steps (perfect scaling is the most a larger batch can buy); a trial planned for fewer steps cannot
reach the target whatever its LR, and the sweep says so with the epochs that would give it the steps."""

from __future__ import annotations

import math

from lbscale.results import SUMMARY, read_json


def short_budgets(reached: dict, budgets: dict) -> list[str]:
    """`reached`: {(arm, batch): fewest steps to the target}; `budgets`: {(arm, batch): (steps planned, epochs)}.
    One line per (arm, batch) whose planned steps are below the tightest perfect-scaling line from a smaller
    batch of its arm that reached the target."""
    lines = []
    for (arm, batch), (steps, epochs) in sorted(budgets.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        lines_from = [(s * b / batch, b, s) for (a, b), s in reached.items() if a == arm and b < batch]
        if not lines_from:
            continue
        need, b, s = max(lines_from)
        if steps < need:
            more = math.ceil(epochs * need / steps)
            lines.append(f"{arm}: batch {batch} trains {steps} steps, below the {need:.0f} that perfect scaling "
                         f"from batch {b} ({s} steps to the target) requires: it cannot reach the target; give it "
                         f"at least {epochs:g} epochs x {need:.0f} / {steps} = {more} epochs")
    return lines


def budget_warnings(plans) -> list[str]:
    """`short_budgets` of a sweep's plans from the summaries written so far."""
    reached, budgets = {}, {}
    for p in plans:
        if p.plan.total_steps is None:
            continue
        key = (p.variant, p.plan.global_batch)
        budgets[key] = (p.plan.total_steps, p.config.epochs)
        steps = (read_json(p.out / SUMMARY) or {}).get("steps_to_target")
        if steps is not None:
            reached[key] = min(steps, reached.get(key, steps))
    return short_budgets(reached, budgets)
