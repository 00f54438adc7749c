"""The study designer's decisions (`lbscale design`): from a pilot's measurements to the study's choices, as pure
functions on typed records. studies/design.py runs the pilot and writes the spec; everything it decides from
what the pilot measured is here, each decision tested on hand-made pilots (tests/analysis/test_design.py).

The pilot's own shape (its batches, epochs, what it spent) is analysis/pilot.py. The study's choices: `decide`
(the LR rule and range, the target, the batches, evaluations, pruning and epochs, with the grid's price), each a
`Choice` with its measured reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbscale.analysis import curves as c
from lbscale.analysis.evaluations import NEAR_SE
from lbscale.analysis.pilot import LR_STEP, SMALLEST, DataFacts, PilotRecord
from lbscale.analysis.pricing import (CONFIRM_TOP, SUBSETS, Costs, EvalChoice, evaluation_choice,
                                     grid_seconds)
from lbscale.analysis.sampling import loguniform, unit_points
from lbscale.errors import LbscaleError

SEARCH_TRIALS = 6
# where the budget does not pay for the grid, what may be cut, in order: batches down to 4, the search to 4 points,
# the confirmation to the best point alone, batches down to 3 (the fewest a critical batch is fitted from)
REDUCED_TRIALS, REDUCED_TOP, FEWEST_BATCHES = 4, 1, 3
RULES = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}  # an LR scaling rule's exponent alpha: lr ~ B^alpha
ALPHA_RANGE = (0.0, 1.0)  # the exponents a search covers where the pilot cannot tell them apart (none to linear)
EPOCHS_X = 3  # each batch's budget: this many times its predicted samples to the target (a rerun doubles a miss)
GRID_SHARE = 0.5  # the grid and its confirmation may take half the sweep's budget: the rounds get the rest

Curve = list  # [(samples, value)] at each evaluation
Stage = list  # [(lr, Curve)] of one pilot batch, in the order run


@dataclass(frozen=True)
class Pilot:
    """What the pilot measured: its record, each stage's (lr, curve) list and its prices."""

    record: PilotRecord
    stages: dict  # "mid" and "largest" -> Stage
    costs: Costs


@dataclass(frozen=True)
class Choice:
    """One decision of the design: its value and the measured reason the spec's comment gives."""

    value: object
    why: str


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


@dataclass(frozen=True)
class Design:
    """The design: the plan, where its target sits (chance, the plateau, how it was chosen), the LR rule, and
    the grid's budget (`left`: all the sweep has, the pilot's seconds taken from the wall)."""

    plan: Plan
    chance: float
    level: float
    how: str
    rule: Choice
    budget: float
    left: float


# --- reading the stages ------------------------------------------------------------------------------------------


def final_value(curve: Curve) -> float:
    """How good a pilot trial got: its highest 3-evaluation running mean (-inf for a trial that measured
    nothing); one noisy evaluation does not decide, and of two LRs the one that got higher sooner wins."""
    values = [v for _, v in curve]
    return max(c.running_mean(values)) if values else -math.inf


def best_of(stage: Stage) -> tuple[float, Curve]:
    return max(stage, key=lambda s: final_value(s[1]))


def edge_lr(stage: Stage) -> float | None:
    """One more LR past the edge where the stage's best is its lowest or highest; None where it is inside."""
    ranked = sorted(stage, key=lambda s: s[0])
    best = max(range(len(ranked)), key=lambda i: final_value(ranked[i][1]))
    if best not in (0, len(ranked) - 1):
        return None
    return ranked[best][0] * (LR_STEP if best else 1 / LR_STEP)


def reached_at(stage: Stage, target: float) -> list[tuple[float, float]]:
    """(samples, LR) of each of the stage's LRs that reached `target`, at the first evaluation at or past it."""
    return [(s, lr) for lr, curve in stage if (s := c.samples_to(curve, target)) is not None]


def fastest(stage: Stage, target: float) -> tuple[float | None, float | None]:
    """(LR, samples) of the stage's LR that reached `target` in the fewest samples, read between the evaluations
    around its crossing (`crossing_samples`: a pilot evaluates a few times an epoch, and the first evaluation past
    the target can lie far past the crossing); the study tunes the LR per batch: its optimum is the fastest, not
    the one with the highest plateau. (None, None) where none did."""
    crossed = [(s, lr) for lr, curve in stage if (s := c.crossing_samples(curve, target)) is not None]
    return (min(crossed)[1], min(crossed)[0]) if crossed else (None, None)


def fastest_lrs(stage: Stage, target: float) -> list[float]:
    """The stage's LRs that reached `target` in the fewest samples, ties included (reached at the same evaluation:
    the pilot cannot tell them apart), in order; [] where none did."""
    reached = reached_at(stage, target)
    return sorted(lr for s, lr in reached if s == min(reached)[0]) if reached else []


def bowl_of(stage: Stage, target: float, s_ref: float, lr_ref: float) -> dict:
    """The pilot's LR bowl at its middle batch for `target`: LR / lr_ref -> samples to the target (its crossing)
    / s_ref (None where that LR did not reach it in the pilot)."""
    out = {}
    for lr, curve in sorted(stage):
        reached = c.crossing_samples(curve, target)
        out[float(f"{lr / lr_ref:.4g}")] = round(reached / s_ref, 3) if reached else None
    return out


# --- the LR ------------------------------------------------------------------------------------------------------


def alpha_span(pilot: Pilot) -> tuple[float, float, float | None]:
    """(lo, hi, the estimate) of the LR exponent alpha (lr* ~ B^alpha) the pilot's two batches allow: each batch's
    best LR is known to half the pilot's LR step either way, so the ratio of the two to a whole step, alpha to
    ln(LR_STEP) / ln(largest / mid) either side of ln(lr ratio) / ln(batch ratio) (0.83 with batches 64 and 256),
    clipped to ALPHA_RANGE where the two meet (else not: the pilot then saw an exponent outside the usual rules);
    all of ALPHA_RANGE, with no estimate, where the pilot ran no larger batch."""
    mid, largest = pilot.record.mid, pilot.record.largest
    if not pilot.stages.get("largest"):
        return ALPHA_RANGE[0], ALPHA_RANGE[1], None
    lr_mid, lr_top = best_of(pilot.stages["mid"])[0], best_of(pilot.stages["largest"])[0]
    alpha = math.log(lr_top / lr_mid) / math.log(largest / mid)
    spread = math.log(LR_STEP) / math.log(largest / mid)
    lo, hi = max(ALPHA_RANGE[0], alpha - spread), min(ALPHA_RANGE[1], alpha + spread)
    return (lo, hi, alpha) if lo <= hi else (alpha - spread, alpha + spread, alpha)  # outside the usual rules


def lr_choice(pilot: Pilot) -> tuple[Choice, Choice, tuple[float, float]]:
    """The LR rule, the searched base LR at the middle batch before it is widened for the study's batches
    (`covering`), and alpha's span: the rule nearest the middle of the span alpha may lie in (`alpha_span`), the
    range 4x either side of the middle batch's best LR and of the largest's moved back by that rule."""
    mid, largest = pilot.record.mid, pilot.record.largest
    lo_a, hi_a, alpha = alpha_span(pilot)
    rule = min(RULES, key=lambda r: abs(RULES[r] - (lo_a + hi_a) / 2))
    lr_mid = best_of(pilot.stages["mid"])[0]
    if alpha is None:
        why = (f"the pilot ran no batch past {mid} (it spent its limit): alpha not measured, the search covers "
               f"{lo_a:g} to {hi_a:g}")
        return Choice(rule, why), Choice((float(f"{lr_mid / 4:.3g}"), float(f"{lr_mid * 4:.3g}")),
                                         f"4x either side of {lr_mid:.4g}, batch {mid}'s best"), (lo_a, hi_a)
    lr_top = best_of(pilot.stages["largest"])[0]
    back = lr_top / (largest / mid) ** RULES[rule]
    lo, hi = float(f"{min(lr_mid, back) / 4:.3g}"), float(f"{max(lr_mid, back) * 4:.3g}")
    why = (f"the pilot's best LR at batch {mid} was {lr_mid:.4g}, at batch {largest} {lr_top:.4g}: alpha ~ "
           f"{alpha:.2f}, anywhere in [{lo_a:.2f}, {hi_a:.2f}] on the pilot's sqrt(10) steps: the rule nearest its "
           "middle, and a search wide enough for all of it")
    return Choice(rule, why), Choice((lo, hi), f"4x either side of {lr_mid:.4g} and {back:.4g} (batch {largest}'s "
                                               f"best moved to batch {mid} by the {rule} rule)"), (lo_a, hi_a)


def covering(lr_range: Choice, span: tuple[float, float], rule: str, batches: list[int], ref: int) -> Choice:
    """The searched base LR (at `ref`, scaled to each batch by `rule`) widened so that every batch's optimum stays
    inside it whatever alpha in `span` holds: at batch B the optimum moves by (B / ref)^(alpha - rule's alpha)."""
    a = RULES[rule]
    factors = [(b / ref) ** (x - a) for b in batches for x in span]
    down, up = min(1.0, *factors), max(1.0, *factors)
    if down == 1.0 and up == 1.0:
        return lr_range
    lo, hi = lr_range.value
    return Choice((float(f"{lo * down:.3g}"), float(f"{hi * up:.3g}")),
                  f"{lr_range.why}; widened {1 / down:.3g}x down and {up:.3g}x up so that each batch "
                  f"{batches[0]}..{batches[-1]}'s optimum stays inside for alpha {span[0]:.2f} to {span[1]:.2f}")


def widened(lr_range: Choice, fast: list[float], batch: int) -> Choice:
    """The searched range, widened to 4x past each LR in `fast` (the pilot's fastest to the chosen target at
    `batch`) where it does not reach that far: the range follows the best final value, a constant LR's lowest
    noise, while the study's optimum is the fastest to the target. The same Choice where it already does."""
    (lo, hi), need_lo, need_hi = lr_range.value, min(fast, default=math.inf) / 4, max(fast, default=0.0) * 4
    if not fast or (lo <= need_lo and hi >= need_hi):
        return lr_range
    names = " and ".join(f"{lr:.4g}" for lr in fast)
    return Choice((min(lo, float(f"{need_lo:.3g}")), max(hi, float(f"{need_hi:.3g}"))),
                  f"{lr_range.why}; widened to 4x past {names}, the pilot's LRs fastest to the target at batch {batch}")


def search_ratios(lr_range: tuple[float, float], lr_ref: float, points: int = SEARCH_TRIALS) -> list[float]:
    """The search's LRs over the pilot's best: the points `sweep` will plan from the spec's base_lr range
    (`points` Halton points, log-uniform, seed 0)."""
    return [loguniform(*lr_range, float(u[0])) / lr_ref for u in unit_points(1, points, "halton", 0)]


# --- the plan for one target -------------------------------------------------------------------------------------


def doubling(lo: int, hi: int) -> list[int]:
    out, b = [], lo
    while b <= hi:
        out.append(b)
        b *= 2
    return out


def predicted_samples(batch: float, guess: tuple[str, float], mid: int, s_mid: float, largest: int,
                      s_top: float) -> float:
    """Samples to the target at `batch` from the pilot's two batches (McCandlish et al.'s E(B)): with a B_crit
    guess through it; past perfect scaling up to the largest batch, as if B_crit were that batch (the cheapest
    assumption that still costs samples above it); with no saving at all, the largest batch's steps at every
    batch."""
    kind, b = guess
    if kind in ("value", "none"):  # none: no larger batch measured, B_crit taken at the middle batch
        return c.samples_at(batch, mid, s_mid, b)
    if kind == "above":
        return c.samples_at(batch, mid, s_mid, float(largest))
    return s_top * batch / largest


def rung_choice(top: Stage, facts: DataFacts, batches: list[int], samples: dict, largest: int) -> Choice:
    """The first rung of successive halving: where the LRs' order at the largest batch settled (`settled_samples`),
    unless it never did or only past half the fewest samples to the target."""
    settled = c.settled_samples([curve for _, curve in top], facts.val)
    if settled is None:
        return Choice(None, f"the pilot's {len(top)} LRs at batch {largest} never led one another by more than "
                            f"{c.Z_SETTLED:g} standard errors on the {facts.val:,}-image val split: no pruning")
    fewest = min(samples[b] for b in batches)
    if settled > fewest / 2:
        return Choice(None, f"the LRs' order at batch {largest} settled after {settled:,.0f} samples, more than half "
                            f"the fewest samples to the target ({fewest:,.0f}): pruning would save little; none")
    return Choice(int(math.ceil(settled)), f"the LRs' order at batch {largest} settled (the best ahead by "
                                           f"> {c.Z_SETTLED:g} SE from then on) after {settled:,.0f} samples")


def top_samples(pilot: Pilot, target: float, s_mid: float) -> tuple[float, bool]:
    """(samples to `target` at the pilot's largest batch, whether it reached it there): where it did not, 1.5x what
    its pilot trained (1.5x the middle batch's scaled to the larger batch where it ran no trial)."""
    mid, largest = pilot.record.mid, pilot.record.largest
    s_top = fastest(pilot.stages.get("largest") or [], target)[1]
    if s_top is not None:
        return s_top, True
    top = pilot.stages.get("largest")
    curve = best_of(top)[1] if top else []
    return (1.5 * curve[-1][0] if curve else 1.5 * s_mid * largest / mid), False


def guess_of(pilot: Pilot, s_mid: float, s_top: float) -> tuple[str, float]:
    """The critical batch's guess from the pilot's two batches (`curves.b_crit_from_two`); ('none', mid) where it
    ran no larger batch: the study's batches then centre on the middle one."""
    if not pilot.stages.get("largest"):
        return "none", float(pilot.record.mid)
    return c.b_crit_from_two(pilot.record.mid, s_mid, pilot.record.largest, s_top)


def plan_for(target: float, pilot: Pilot, facts: DataFacts, budget: float, lr_range: Choice,
             rule: str = "sqrt", span: tuple[float, float] = ALPHA_RANGE, reduce: bool = False) -> Plan | None:
    """The batches, evaluations, rung, the searched LR range (`covering`) and the grid's price for one target;
    None where the middle batch never reached it in the pilot (the pilot cannot price it). Where the grid does not
    fit `budget`, a batch fewer (5 to 4); with `reduce`, further cuts as REDUCED_TRIALS and FEWEST_BATCHES say, as
    far as it must."""
    mid, largest, stages = pilot.record.mid, pilot.record.largest, pilot.stages
    lr_ref, s_mid = fastest(stages["mid"], target)
    if s_mid is None:
        return None
    s_top, reached_top = top_samples(pilot, target, s_mid)
    guess = guess_of(pilot, s_mid, s_top)
    lo, hi = c.batch_range(guess, SMALLEST, max(SMALLEST * 2, c.pow2_floor(facts.train / 4)))
    bowl = bowl_of(stages["mid"], target, s_mid, lr_ref)
    curve = dict(stages["mid"])[lr_ref]
    near = {n: c.near_fraction(curve, target, n, NEAR_SE) for n in [facts.val, *SUBSETS] if n <= facts.val}
    points, confirm = SEARCH_TRIALS, CONFIRM_TOP
    while True:
        batches = doubling(lo, hi)
        searched = covering(lr_range, span, rule, batches, mid)
        samples = {b: predicted_samples(b, guess, mid, s_mid, largest, s_top) for b in batches}
        epochs = {b: max(2, math.ceil(EPOCHS_X * samples[b] / facts.train)) for b in batches}
        ev = evaluation_choice(batches, samples, pilot.costs, facts, near, target)
        rung = rung_choice(stages.get("largest") or stages["mid"], facts, batches, samples,
                           largest if stages.get("largest") else mid)
        seconds = grid_seconds(batches, samples, pilot.costs, facts, ev, rung.value, bowl,
                               search_ratios(searched.value, lr_ref, points), epochs, confirm)
        if seconds <= budget:
            break
        if len(batches) > 4:
            lo, hi = c.trimmed(lo, hi, guess)  # the budget does not pay for all five
        elif not reduce:
            break
        elif points > REDUCED_TRIALS:
            points = REDUCED_TRIALS
        elif confirm > REDUCED_TOP:
            confirm = REDUCED_TOP
        elif len(batches) > FEWEST_BATCHES:
            lo, hi = c.trimmed(lo, hi, guess)
        else:
            break
    return Plan(target, s_mid, s_top, reached_top, guess, batches, samples, epochs, ev, rung, seconds,
                seconds <= budget, bowl, lr_ref, searched, points, confirm)


# --- the target and the whole design -----------------------------------------------------------------------------


def target_level(pilot: Pilot, facts: DataFacts) -> tuple[float, float, bool]:
    """(chance, the plateau's level, whether the middle batch's best curve still rose): refused where the pilot's
    curves never rose above chance by more than an evaluation's noise."""
    curves = [curve for stage in pilot.stages.values() for _, curve in stage if curve]
    level = max(c.plateau([v for _, v in curve], facts.val).level for curve in curves)
    rising = c.plateau([v for _, v in best_of(pilot.stages["mid"])[1]], facts.val).rising
    chance = facts.chance if facts.chance is not None else min(curve[0][1] for curve in curves)
    if level - chance <= c.Z_SETTLED * c.binomial_se(chance, facts.val):  # within an evaluation's noise of chance
        raise LbscaleError(f"design: the pilot's trials never rose above chance ({facts.metric} at most {level:.3f}, "
                       f"chance {chance:.3f}): no target to place; give a larger --wall (a longer pilot), another "
                       "--lr, or check the data's labels")
    return chance, level, rising


def choose_target(target: float | None, pilot: Pilot, facts: DataFacts, budget: float, lr_range: Choice,
                  rule: str, span: tuple[float, float]) -> tuple[Plan, float, float, str]:
    """The user's target, or the hardest fraction of the way from chance to the plateau whose grid fits the
    budget (at least 0.7 of the way); (plan, chance, plateau level, how the target was chosen)."""
    chance, level, rising = target_level(pilot, facts)
    rec = pilot.record
    if target is not None:
        plan = plan_for(target, pilot, facts, budget, lr_range, rule, span)
        plan = plan if plan is None or plan.fits else plan_for(target, pilot, facts, budget, lr_range, rule, span, True)
        if plan is None:
            raise LbscaleError(f"--target {target}: the pilot's best trial at batch {rec.mid} did not reach it in "
                               f"{rec.epochs} epochs (its best {level:.3f}); give an easier target or a larger --wall")
        return plan, chance, level, "given (--target)"
    def plans(reduce: bool) -> list[Plan]:
        return [p for f in c.TARGET_FRACTIONS if (p := plan_for(c.target_value(chance, level, f), pilot, facts,
                                                                budget, lr_range, rule, span, reduce))]
    full = plans(False)
    if not full:
        raise LbscaleError(f"design: the pilot's best trial at batch {rec.mid} reached no target "
                           f"{c.TARGET_FRACTIONS[-1]:g} of the way from chance ({chance:.3f}) to its plateau "
                           f"({level:.3f}); give --target, or a larger --wall for a longer pilot")
    fitting = [p for p in full if p.fits] or [p for p in plans(True) if p.fits]
    plan = fitting[0] if fitting else plan_for(full[-1].target, pilot, facts, budget, lr_range, rule, span, True)
    how = ("the hardest the budget pays for" if fitting and fitting[0] in full else
           "the hardest the budget pays for with the study cut" if fitting else
           "the easiest allowed; the budget pays for none (the smallest grid is priced past its share)")
    longer = (f"; batch {rec.mid}'s best LR trained on to {rec.epochs_long} epochs, its curve having risen at the "
              f"end of {rec.epochs}") if rec.epochs_long else ""
    return plan, chance, level, how + longer + ("; the pilot's curve still rose at its end" if rising else "")


def decide(pilot: Pilot, facts: DataFacts, wall: float, target: float | None = None) -> Design:
    """The whole design from the pilot: the LR rule and range, the target and its plan within the grid's share of
    what the pilot left of `wall`; the range widened to the LRs fastest to the chosen target, and the grid priced
    again over it. Refused, with the --wall that would do, where even the smallest study is priced past all the
    pilot left."""
    left = max(wall - pilot.record.seconds, 0.0)
    budget = GRID_SHARE * left
    rule, lr_range, span = lr_choice(pilot)
    plan, chance, level, how = choose_target(target, pilot, facts, budget, lr_range, rule.value, span)
    wide = widened(lr_range, fastest_lrs(pilot.stages["mid"], plan.target), pilot.record.mid)
    if wide is not lr_range:  # the grid priced again over the wider search, at the chosen target
        cut = plan.points < SEARCH_TRIALS or plan.confirm < CONFIRM_TOP or len(plan.batches) < 4
        plan = plan_for(plan.target, pilot, facts, budget, wide, rule.value, span, cut) or plan
    if plan.seconds > left:
        need = pilot.record.seconds + plan.seconds / GRID_SHARE
        raise LbscaleError(f"--wall {wall_text(wall)}: the smallest study the pilot prices ({len(plan.batches)} "
                           f"batches, {plan.points} search points each, at {plan.target:g}) takes "
                           f"{plan.seconds / 60:.1f} min, more than the {left / 60:.1f} min the pilot left; give "
                           f"--wall of at least {math.ceil(need / 60)}m (the pilot is kept and reused)")
    return Design(plan, chance, level, how, rule, budget, left)


def wall_text(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"
