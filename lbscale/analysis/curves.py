"""Reading a pilot's learning curves (`lbscale design`): where a curve levels off, when it reaches a target,
where the learning rates' ranking settles, and the critical batch's first guess from two batches. Pure
functions, no torch; the designer's choices from them are analysis/design.py.

A pilot curve is the validation metric against training samples, (samples, value) at each evaluation. What is
read from it:
- the plateau: the level the curve has reached (the highest 3-evaluation running mean) and whether it still rose
  over its last quarter by more than the evaluation's noise (then the plateau is at least that level);
- samples to a target: the first evaluation at or past it (the study's own rule: a target counts where an
  evaluation reaches it);
- where the learning rates' ranking settles: the first evaluation from which the LR that is best at the end
  leads every other by more than z standard errors of a difference, at every later evaluation.
From two batches' samples to the target the critical batch follows McCandlish et al. 2018's samples
E(B) = E_min (1 + B / B_crit) (their eq. 2.11), which places the study's batches around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbscale.ranges import doubling
from lbscale.task import binomial_se  # the one binomial standard error (pruning's rungs use it too)

Z_SETTLED = 2.0  # standard errors of a difference by which the best LR must lead: about a 5% one-sided error
TARGET_FRACTIONS = (0.9, 0.85, 0.8, 0.75, 0.7)  # of the way from chance to the plateau, hardest first (>= 0.7)


def running_mean(values: list[float], k: int = 3) -> list[float]:
    """The mean of each value and the (k - 1) before it (fewer at the start)."""
    return [sum(values[max(0, i - k + 1):i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(values))]


@dataclass(frozen=True)
class Plateau:
    level: float  # the highest 3-evaluation running mean
    rising: bool  # the last quarter's mean above the one before by more than 2 standard errors of a difference


def plateau(values: list[float], n_eval: int) -> Plateau:
    """Where a curve levels off (see the module's note); values in evaluation order, n_eval the examples each
    evaluation read."""
    if not values:
        raise ValueError("an empty curve")
    level = max(running_mean(values))
    q = max(1, len(values) // 4)
    last, before = values[-q:], values[-2 * q:-q] or values[:1]
    gain = sum(last) / len(last) - sum(before) / len(before)
    se = binomial_se(level, n_eval) * math.sqrt(1 / len(last) + 1 / len(before))
    return Plateau(level, gain > 2 * se)


def samples_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """The samples of the first evaluation at or past `target` (higher is better); None where none is."""
    for s, v in curve:
        if v >= target:
            return float(s)
    return None


def crossing_samples(curve: list[tuple[float, float]], level: float) -> float | None:
    """The samples at which `curve` first reaches `level` (higher is better), read linearly between the evaluation
    before and the first at or past it (that evaluation's where it is the first); None where none reaches it."""
    before = None
    for s, v in curve:
        if v >= level:
            return float(s) if before is None else before[0] + (s - before[0]) * (level - before[1]) / (v - before[1])
        before = (s, v)
    return None


def near_fraction(curve: list[tuple[float, float]], target: float, n: int, z: float) -> float:
    """Where a step evaluation on an n-example subset starts to be checked on the whole split: the samples at which
    `curve` first reaches within z binomial standard errors (on n examples, at the target) of `target`, over the
    samples at which it reaches the target, both read between the pilot's evaluations (`crossing_samples`: a
    pilot evaluates a few times an epoch, and both often lie between the same two); 1.0 where it reaches both at
    once. A trial runs its whole-split checks from there to its crossing."""
    at = crossing_samples(curve, target)
    near = crossing_samples(curve, target - z * binomial_se(target, n))
    if at is None or near is None or at <= 0:
        return 1.0
    return min(near / at, 1.0)


def settled_samples(curves: list[list[tuple[float, float]]], n_eval: int, z: float = Z_SETTLED) -> float | None:
    """The first sample count from which the curve best at the end leads every other curve by more than z
    standard errors of a difference (binomial, n_eval examples each) at every later evaluation; None where it
    never does (the ranking is noise at every point the pilot saw). Curves are compared at the evaluations they
    share (the same sample counts)."""
    if len(curves) < 2:
        return None
    common = sorted(set.intersection(*[{s for s, _ in c} for c in curves]))
    if not common:
        return None
    at = [dict(c) for c in curves]
    best = max(range(len(curves)), key=lambda i: at[i][common[-1]])
    settled = None
    for s in common:
        b = at[best][s]
        ahead = all(b - at[j][s] > z * math.sqrt(binomial_se(b, n_eval) ** 2 + binomial_se(at[j][s], n_eval) ** 2)
                    for j in range(len(curves)) if j != best)
        if ahead and settled is None:
            settled = s
        elif not ahead:
            settled = None
    return settled


def b_crit_from_two(b_small: float, e_small: float, b_large: float, e_large: float) -> tuple[str, float]:
    """B_crit from the samples to a target at two batches under E(B) = E_min (1 + B / B_crit):
    r = E(b2) / E(b1) = (1 + b2 / Bc) / (1 + b1 / Bc), so Bc = (b2 - r b1) / (r - 1). ('value', Bc) where
    1 < r < b2 / b1; ('above', b2) where r <= 1 (no cost in samples up to b2: B_crit lies beyond it);
    ('below', b1) where r >= b2 / b1 (no saving in steps: B_crit lies below b1)."""
    r = e_large / e_small
    if r <= 1.0:
        return "above", float(b_large)
    if r >= b_large / b_small:
        return "below", float(b_small)
    return "value", (b_large - r * b_small) / (r - 1.0)


def samples_at(batch: float, b_ref: float, e_ref: float, b_crit: float) -> float:
    """E(batch) from E(b_ref) under E(B) = E_min (1 + B / B_crit)."""
    return e_ref * (1 + batch / b_crit) / (1 + b_ref / b_crit)


def predicted_samples(batch: float, guess: tuple[str, float], mid: int, s_mid: float, largest: int,
                      s_top: float) -> float:
    """Samples to the target at `batch` from a pilot's two batches (McCandlish et al.'s E(B)): with a B_crit
    guess through it; past perfect scaling up to the largest batch, as if B_crit were that batch (the cheapest
    assumption that still costs samples above it); with no saving at all, the largest batch's steps at every
    batch."""
    kind, b = guess
    if kind in ("value", "none"):  # none: no larger batch measured, B_crit taken at the middle batch
        return samples_at(batch, mid, s_mid, b)
    if kind == "above":
        return samples_at(batch, mid, s_mid, float(largest))
    return s_top * batch / largest


def pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(x, 1.0)))))


def pow2_ceil(x: float) -> int:
    return 1 << max(0, int(math.ceil(math.log2(max(x, 1.0)) - 1e-9)))


def batch_range(guess: tuple[str, float], smallest: int, largest: int, count: int = 5) -> tuple[int, int]:
    """`count` doubling batches that bracket the critical batch: from a quarter of the guess (where samples
    grow by 25% at most: perfect scaling still nearly holds) upwards, so the top batch sits 4x past it; clipped to
    [smallest, largest], keeping as many batches as the clip allows. A guess past the pilot's largest batch
    starts the range at the top; one below its smallest at the bottom; none (the pilot ran no larger batch): B_crit
    taken at the middle batch, as a value."""
    kind, b = guess
    lo = {"value": pow2_floor(b / 4), "none": pow2_floor(b / 4), "above": pow2_floor(b / 2), "below": smallest}[kind]
    lo = min(max(lo, smallest), largest)
    hi = min(lo << (count - 1), largest)
    lo = max(smallest, min(lo, hi >> (count - 1)))
    return lo, hi


def trimmed(lo: int, hi: int, guess: tuple[str, float]) -> tuple[int, int]:
    """One batch fewer where the budget does not pay for the range [lo, hi]: the top one, unless that would leave
    the top less than a doubling past a B_crit guess (a critical batch near the largest batch is poorly bounded
    from above: with the knee fitted such a study's interval widens), then the smallest."""
    kind, b = guess
    if kind == "value" and hi // 2 < 2 * b:
        return lo * 2, hi
    return lo, hi // 2


def trimmings(lo: int, hi: int, guess: tuple[str, float], fewest: int) -> list[list[int]]:
    """The doubling batches of [lo, hi], then each with one batch fewer (`trimmed`), down to `fewest` batches."""
    out = [doubling(lo, hi)]
    while len(out[-1]) > fewest:
        lo, hi = trimmed(lo, hi, guess)
        out.append(doubling(lo, hi))
    return out


def target_value(chance: float, level: float, fraction: float) -> float:
    """chance + fraction (plateau - chance), rounded up to 3 decimals (never easier than the fraction says)."""
    return math.ceil((chance + fraction * (level - chance)) * 1000 - 1e-6) / 1000
