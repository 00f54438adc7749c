"""The study designer's decisions (`lbscale design`): from a pilot's measurements to the study's choices, as pure
functions on typed records. studies/pilot_run.py runs the pilot and studies/design.py writes the spec; everything
decided from what the pilot measured is here, each decision tested on hand-made pilots (tests/analysis/).

The pilot's own shape (its batches, epochs, course, what it spent) is analysis/pilot.py. The study's choices: `decide`
(the LR rule and range, the target, the batches, evaluations, pruning and epochs, with the grid's price), each a
`Choice` with its measured reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lbscale.analysis import curves as c
from lbscale.analysis.evaluations import NEAR_SE
from lbscale.analysis.ladder import ladder_targets
from lbscale.analysis.lr_search import ALPHA_RANGE, SEARCH_TRIALS, covering, lr_choice, search_ratios, widened
from lbscale.analysis.pilot import SMALLEST, DataFacts, Pilot, at_target, best_of, fastest
from lbscale.analysis.pricing import (CONFIRM_TOP, SUBSETS, Choice, EvalChoice, evaluation_choice, grid_seconds,
                                     per_sample_at, rung_choice)
from lbscale.errors import LbscaleError

# where the budget does not pay for the grid, what may be cut, in order: batches down to 4, the search to 4 points,
# the confirmation to the best point alone, batches down to 3 (the fewest a critical batch is fitted from)
REDUCED_TRIALS, REDUCED_TOP, FEWEST_BATCHES = 4, 1, 3
LADDER, LADDER_SPAN = 5, 0.15  # targets of the study: its own and a ladder below it over this share of the way
# from chance (each checked on the whole split: B_crit against the target, analysis/ladder.py)
EPOCHS_X = 3  # each batch's budget: this many times its predicted samples to the target (a rerun doubles a miss)
GRID_SHARE = 0.5  # the grid and its confirmation may take half the sweep's budget: the rounds get the rest



@dataclass(frozen=True)
class Plan:
    """The batches, their samples and epochs, evaluations, rung and the grid's price for one target."""

    target: float
    s_mid: float
    s_top: float
    reached_top: bool
    guess: tuple
    batches: list
    samples: dict
    epochs: dict
    eval: EvalChoice
    rung: Choice
    seconds: float
    fits: bool
    bowl: dict
    bowl_lr: float
    lr_range: Choice  # the searched base LR at the middle batch, covering each batch's optimum
    points: int = SEARCH_TRIALS  # search points a batch
    confirm: int = CONFIRM_TOP  # the best points run again with one more seed
    ladder: tuple = ()  # the trials' targets: a ladder below `target`, and `target` last
    fastest_lrs: tuple = ()  # the middle batch's LRs that reached `target` at the same first evaluation


@dataclass(frozen=True)
class LongRun:
    """Where B_crit is predicted (`target`, and how it was named) and the reference run's price to train on
    there: from the study's target at `batch`, `samples` in all (`stretch`: x the study's own, from the pilot's
    curve; None: the pilot's curve did not reach it), `seconds` set aside from the sweep's budget."""

    target: float
    how: str
    batch: int
    samples: float
    stretch: float | None
    seconds: float


@dataclass(frozen=True)
class Design:
    """The design: the plan, where its target sits (chance, the plateau, how it was chosen), the LR rule, the
    grid's budget (`left`: all the sweep has, the pilot's seconds and the long run's taken from the wall), and
    where B_crit is predicted (`long_run`; None where the study's own target is there already)."""

    plan: Plan
    chance: float
    level: float
    how: str
    rule: Choice
    budget: float
    left: float
    long_run: LongRun | None = None


# --- the plan for one target -------------------------------------------------------------------------------------


def study_shapes(ranges: list[list[int]], reduce: bool) -> list[tuple[list[int], int, int]]:
    """(batches, search points, confirmed) of the study, whole first, each cut once more where the grid before it
    does not fit its budget: a batch fewer down to 4 (`ranges`: each range one batch fewer, `curves.trimmings`);
    with `reduce`, then the search to REDUCED_TRIALS points, the confirmation to REDUCED_TOP, and a batch fewer
    down to FEWEST_BATCHES."""
    wide = [(r, SEARCH_TRIALS, CONFIRM_TOP) for r in ranges if len(r) > 4]
    four = ranges[len(wide)]
    shapes = wide + [(four, SEARCH_TRIALS, CONFIRM_TOP)]
    if not reduce:
        return shapes
    points, confirm = SEARCH_TRIALS, CONFIRM_TOP
    if points > REDUCED_TRIALS:
        points = REDUCED_TRIALS
        shapes.append((four, points, confirm))
    if confirm > REDUCED_TOP:
        confirm = REDUCED_TOP
        shapes.append((four, points, confirm))
    return shapes + [(r, points, confirm) for r in ranges[len(wide) + 1:] if len(r) >= FEWEST_BATCHES]


def plan_for(target: float, pilot: Pilot, facts: DataFacts, budget: float, lr_range: Choice,
             rule: str = "sqrt", span: tuple[float, float] = ALPHA_RANGE, reduce: bool = False) -> Plan | None:
    """The batches, evaluations, rung, the searched LR range (`covering`) and the grid's price for one target;
    None where the middle batch never reached it in the pilot (the pilot cannot price it). Where the grid does not
    fit `budget`, a batch fewer (5 to 4); with `reduce`, further cuts as REDUCED_TRIALS and FEWEST_BATCHES say, as
    far as it must (`study_shapes`)."""
    mid, largest, top = pilot.record.mid, pilot.record.largest, pilot.stages.get("largest")
    at = at_target(pilot, target, facts.val, SUBSETS, NEAR_SE)
    if at is None:
        return None
    lo, hi = c.batch_range(at.guess, SMALLEST, max(SMALLEST * 2, c.pow2_floor(facts.train / 4)))
    ranges = c.trimmings(lo, hi, at.guess, FEWEST_BATCHES)
    predicted = {b: c.predicted_samples(b, at.guess, mid, at.s_mid, largest, at.s_top) for b in ranges[0]}
    shapes = study_shapes(ranges, reduce)
    covered = [covering(lr_range, span, rule, batches, mid) for batches, _, _ in shapes]
    ratios = [search_ratios(searched.value, at.lr, points) for (_, points, _), searched in zip(shapes, covered)]
    for i, (batches, _, confirm) in enumerate(shapes):
        samples = {b: predicted[b] for b in batches}
        epochs = {b: max(2, math.ceil(EPOCHS_X * samples[b] / facts.train)) for b in batches}
        rung = rung_choice(at.settled, len(top or pilot.stages["mid"]), facts.val, batches, samples,
                           largest if top else mid)
        ev = evaluation_choice(batches, samples, pilot.costs, facts, at.near, target, LADDER)
        seconds = grid_seconds(batches, samples, pilot.costs, facts, ev, rung.value, at.bowl, ratios[i], epochs,
                               confirm, LADDER)
        if seconds <= budget:
            break
    return Plan(target, at.s_mid, at.s_top, at.reached_top, at.guess, batches, samples, epochs, ev, rung, seconds,
                seconds <= budget, at.bowl, at.lr, covered[i], shapes[i][1], confirm, fastest_lrs=tuple(at.fastest_lrs))


# --- the target and the whole design -----------------------------------------------------------------------------


def target_level(pilot: Pilot, facts: DataFacts) -> tuple[float, float, bool]:
    """(chance, the plateau's level, whether the middle batch's best curve still rose): refused where the pilot's
    curves never rose above chance by more than an evaluation's noise."""
    curves = [curve for stage in pilot.stages.values() for _, curve in stage if curve]
    best, *rest = [c.plateau([v for _, v in curve], facts.val) for curve in [best_of(pilot.stages["mid"])[1], *curves]]
    level, rising = max(q.level for q in rest), best.rising
    chance = facts.chance if facts.chance is not None else min(curve[0][1] for curve in curves)
    if level - chance <= c.Z_SETTLED * c.binomial_se(chance, facts.val):  # within an evaluation's noise of chance
        raise LbscaleError(f"design: the pilot's trials never rose above chance ({facts.metric} at most {level:.3f}, "
                       f"chance {chance:.3f}): no target to place; give a larger --wall (a longer pilot), another "
                       "--lr, or check the data's labels")
    return chance, level, rising


def choose_target(target: float | None, pilot: Pilot, facts: DataFacts, budget: float, lr_range: Choice,
                  rule: str, span: tuple[float, float], levels: tuple | None = None) -> tuple[Plan, float, float, str]:
    """The user's target, or the hardest fraction of the way from chance to the plateau whose grid fits the
    budget (at least 0.7 of the way); its plan with the LR range widened to the LRs fastest to it and the grid
    priced again over it; (plan, chance, plateau level, how the target was chosen). `levels`: the pilot's
    `target_level` where it was read already."""
    chance, level, rising = levels or target_level(pilot, facts)
    rec = pilot.record

    def price(at: float, reduce: bool = False, lrs: Choice = lr_range) -> Plan | None:
        return plan_for(at, pilot, facts, budget, lrs, rule, span, reduce)

    if target is not None:
        plan = price(target)
        plan = plan if plan is None or plan.fits else price(target, True)
        if plan is None:
            raise LbscaleError(f"--target {target}: the pilot's best trial at batch {rec.mid} did not reach it in "
                               f"{rec.epochs} epochs (its best {level:.3f}); give an easier target or a larger --wall")
        how = "given (--target)"
    else:
        full = [p for f in c.TARGET_FRACTIONS if (p := price(c.target_value(chance, level, f)))]
        if not full:
            raise LbscaleError(f"design: the pilot's best trial at batch {rec.mid} reached no target "
                               f"{c.TARGET_FRACTIONS[-1]:g} of the way from chance ({chance:.3f}) to its plateau "
                               f"({level:.3f}); give --target, or a larger --wall for a longer pilot")
        fitting = [p for p in full if p.fits] or [p for f in c.TARGET_FRACTIONS
                                                  if (p := price(c.target_value(chance, level, f), True)) and p.fits]
        plan = fitting[0] if fitting else price(full[-1].target, True)
        how = ("the hardest the budget pays for" if fitting and fitting[0] in full else
               "the hardest the budget pays for with the study cut" if fitting else
               "the easiest allowed; the budget pays for none (the smallest grid is priced past its share)")
        how += (f"; batch {rec.mid}'s best LR trained on to {rec.epochs_long} epochs, its curve having risen at the "
                f"end of {rec.epochs}") if rec.epochs_long else ""
        how += "; the pilot's curve still rose at its end" if rising else ""
    wide = widened(lr_range, list(plan.fastest_lrs), rec.mid)
    if wide is not lr_range:  # the grid priced again over the wider search, at the chosen target
        plan = price(plan.target, plan.points < SEARCH_TRIALS or plan.confirm < CONFIRM_TOP or len(plan.batches) < 4,
                     wide) or plan
    return plan, chance, level, how


def decide(pilot: Pilot, facts: DataFacts, wall: float, target: float | None = None,
           for_target: float | None = None) -> Design:
    """The whole design from the pilot: where B_crit is to be predicted (`for_target`, else the pilot's plateau)
    and the long run's price set aside; the LR rule and range, the target and its plan within the grid's share of
    what is left of `wall` (`choose_target`); the ladder of targets below it. Refused, with the --wall that would
    do, where even the smallest study is priced past all that is left."""
    levels = target_level(pilot, facts)
    rule, lr_range, span = lr_choice(pilot)
    chance, level, _ = levels
    named, named_how = ((for_target, "given (--for-target)") if for_target is not None else
                        (math.floor(level * 1000) / 1000, "the pilot's plateau (--for-target names another)"))
    reserve = long_run(pilot, facts, named, named_how, chance, level)
    left = max(wall - pilot.record.seconds - (reserve.seconds if reserve else 0.0), 0.0)
    budget = GRID_SHARE * left
    plan, chance, level, how = choose_target(target, pilot, facts, budget, lr_range, rule.value, span, levels)
    if plan.seconds > left:
        need = pilot.record.seconds + (reserve.seconds if reserve else 0.0) + plan.seconds / GRID_SHARE
        raise LbscaleError(f"--wall {wall_text(wall)}: the smallest study the pilot prices ({len(plan.batches)} "
                           f"batches, {plan.points} search points each, at {plan.target:g}) takes "
                           f"{plan.seconds / 60:.1f} min, more than the {left / 60:.1f} min the pilot left; give "
                           f"--wall of at least {math.ceil(need / 60)}m (the pilot is kept and reused)")
    plan = replace(plan, ladder=tuple(ladder_targets(plan.target - LADDER_SPAN * (plan.target - chance),
                                                       plan.target, LADDER)))
    if reserve is not None and named <= plan.target:
        reserve = None  # the study's own target is there already: B_crit measured, not predicted
    return Design(plan, chance, level, how, rule, budget, left, reserve)


GNS_SAMPLES = 32 * 8 * 16  # `lbscale gns`'s measurement: 16 groups of 8 micro-batch gradients of 32 images


def long_run(pilot: Pilot, facts: DataFacts, named: float, how: str, chance: float, level: float) -> LongRun | None:
    """The reference run's price to train on to `named`, at the smallest batch the study may run (its samples
    from the pilot's middle batch's curve: the stretch from the hardest target the study may choose, 0.9 of the
    way, to `named`; MAX_STRETCH where the curve did not reach it): the training, a whole-split evaluation at each
    15% step past the study's target, a start-up, and B_simple measured at both ends (each GNS_SAMPLES images
    forward and backward, priced as training)."""
    from lbscale.analysis.ladder import MAX_STRETCH

    if named <= chance:
        return None
    own, there = [fastest(pilot.stages["mid"], t)[1]
                  for t in (c.target_value(chance, level, c.TARGET_FRACTIONS[0]), named)]
    stretch = max(there / own, 1.0) if own and there else None
    samples = (own or 0.0) * (stretch or MAX_STRETCH) * SMALLEST / pilot.record.mid
    per = per_sample_at(pilot.costs, SMALLEST)
    evals = math.log(stretch or MAX_STRETCH) / math.log(1.15) + 2
    seconds = ((samples + 2 * GNS_SAMPLES) * per + evals * facts.val * pilot.costs.per_eval_example
               + 3 * pilot.costs.startup)
    return LongRun(named, how, SMALLEST, samples, stretch, seconds)


def wall_text(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"
