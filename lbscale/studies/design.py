"""`lbscale design DATA --model M --wall 20m --out my-study.yaml`: a pilot measures what a batch-size study's
choices depend on, and writes the tuned spec `lbscale sweep --until-resolved` runs within the budget.

The inputs are checked first (studies/design_inputs.py), the pilot runs (studies/pilot_run.py), every choice from
what it measured is analysis/design.py's, and the spec's text studies/design_spec.py's.
"""

from __future__ import annotations

from pathlib import Path

from lbscale.analysis import design as d
from lbscale.analysis.lr_search import SEARCH_TRIALS
from lbscale.analysis.pricing import CONFIRM_TOP
from lbscale.results import write_atomic
from lbscale.studies.design_inputs import DesignOptions, check_inputs
from lbscale.studies.pilot_run import run_pilot
from lbscale.sweep.budget import parse_wall

__all__ = ["DesignOptions", "check_inputs", "design"]


def design(o: DesignOptions) -> str:
    """Run (or reuse) the pilot, decide, write the spec atomically; the one-line outcome."""
    from lbscale.studies.design_spec import spec_text

    wall = parse_wall(o.wall)
    facts = check_inputs(o, wall)
    pilot, folder = run_pilot(o, facts, Path(o.results) if o.results else Path("results") / o.out.stem, wall)
    chosen = d.decide(pilot, facts, wall, o.target, o.for_target)
    text = spec_text(o, facts, folder, pilot, chosen, wall)
    o.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(o.out, text)
    plan, left = chosen.plan, chosen.left / 60
    cut = ("" if (plan.points, plan.confirm) == (SEARCH_TRIALS, CONFIRM_TOP) else
           f"; the study cut to {len(plan.batches)} batches, {plan.points} search points, {plan.confirm} confirmed")
    over = "" if plan.fits else " (past its share: the rounds get little or nothing)"
    return (f"design: wrote {o.out}: target {facts.metric} {plan.target:g}, batches {plan.batches[0]}.."
            f"{plan.batches[-1]}, grid predicted {plan.seconds / 60:.1f} min of the {left:.1f} min the pilot left "
            f"({pilot.record.seconds:.0f} s){over}{cut}; next: lbscale sweep {o.out} --until-resolved")
