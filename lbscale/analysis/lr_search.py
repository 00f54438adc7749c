"""The designed study's learning rate (`lbscale design`): the scaling rule and the searched range, from the pilot's
best LRs at its two batches. Each best LR is known to half the pilot's LR step either way, so alpha (lr* ~
B^alpha) from two of them is a span, not a number (`alpha_span`); the rule sits in its middle, and the search is
widened so each designed batch's optimum stays inside for every alpha there (`covering`) and reaches past the LRs
fastest to the chosen target (`widened`)."""

from __future__ import annotations

import math

from lbscale.analysis.pilot import LR_STEP, Pilot, best_of
from lbscale.analysis.pricing import Choice
from lbscale.analysis.sampling import loguniform, unit_points

SEARCH_TRIALS = 6
RULES = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}  # an LR scaling rule's exponent alpha: lr ~ B^alpha
ALPHA_RANGE = (0.0, 1.0)  # the exponents a search covers where the pilot cannot tell them apart (none to linear)


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
