"""When a trial evaluates and what its evaluations read, as pure arithmetic: the geometric spacing of step
evaluations (`geometric_steps`), the whole-split check near the target that reads the split in parts and stops
once clearly below it (`check_parts`, `clearly_below`), and what those cost a trial that stops at its target
(`evals_to`, `near_evals`, `check_share`, ...). The trial (train/evaluation.py) runs them; the designer and
`sweep --estimate` price them by the same functions.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from lbscale.task import binomial_se

NEAR_SE = 2.0  # standard errors of a subset's value within which the whole split is evaluated too
CHECK_SE = 2.5  # a check near the target stops where its value so far is this many standard errors below it
CHECK_SEED = 0xC4EC  # the order a whole-split check near the target reads the split in (`check_parts`)
CHECK_LOOKS = (8, 4, 2)  # a check looks after 1/8, 1/4 and 1/2 of the split (those of at least MIN_LOOK images)
MIN_LOOK = 20
NEAR_REACH = 1.5  # a search point within this x the optimum's samples is priced with its checks near the target


def geometric_steps(first: int, spacing: float, total_steps: int) -> list[int]:
    """The optimizer steps below `total_steps` that --eval-spacing evaluates at: `first`, then each at most
    `spacing` of the steps after the previous one (floor of s (1 + spacing)), and at least one step on. The crossing
    of a target then lies in a bracket no wider than `spacing` of its upper end, or one step."""
    out, s = [], first
    while s < total_steps:
        out.append(s)
        s = max(s + 1, math.floor(s * (1 + spacing) + 1e-9))
    return out


def clearly_below(value: float, target: float, n: int, total: int) -> bool:
    """Whether a value on `n` of a split's `total` examples, read in a random order, lies more than CHECK_SE
    standard errors of the difference from the whole split's value below `target` (higher is better): binomial,
    with the finite-population factor sqrt(1 - n / total), since the rest of the split is what is still unknown.
    With looks at 1/8, 1/4 and 1/2 of 1,600 examples, a split whose whole value is at the target is stopped in
    about 1% of orders, one 0.04 below it after reading 43% of it on average (simulated; tests/train)."""
    if value is None or not math.isfinite(value) or n >= total:
        return False
    return value + CHECK_SE * binomial_se(value, n) * math.sqrt(1 - n / total) < target


def check_parts(n: int, looks=CHECK_LOOKS, min_look: int = MIN_LOOK) -> list[np.ndarray]:
    """A split of `n` samples cut, in one fixed random order (CHECK_SEED), into parts read one after another by a
    whole-split check near the target: the first ends at n / looks[0], each next at n / looks[k], the last at n;
    a look of fewer than `min_look` samples is skipped. Every prefix of parts is a random sample of the split, so
    the check can stop after any part where the value so far is clearly below the target."""
    order = np.random.default_rng(CHECK_SEED).permutation(n)
    ends = sorted({n // k for k in looks if n // k >= min_look} | {n})
    return [order[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def evals_to(first: int, spacing: float, steps: float) -> list[int]:
    """The steps `--eval-spacing` evaluates at from step `first` in a trial whose target lies after `steps` steps, up
    to the first at or past them, where the trial finds its crossing and stops."""
    out = geometric_steps(first, spacing, max(first + 1, math.ceil(steps * (1 + spacing)) + 2))
    return out[:next(i for i, s in enumerate(out) if s >= steps) + 1]


def spaced_evals(first: int, spacing: float, steps: float) -> int:
    """The step evaluations of `--eval-spacing` from step `first` in a trial that ends after `steps` steps (one
    that stops at its target makes one more where `steps` falls between two: `evals_to`)."""
    return len(geometric_steps(first, spacing, max(2, math.ceil(steps) + 1)))


def near_evals(first: int, spacing: float, steps: float, near: float) -> int:
    """The step evaluations of `--eval-spacing` from step `first` to a crossing after `steps` steps that a
    subset's value brings within its noise of the target, so that the whole split is evaluated too: those from
    `near` x `steps` on (`curves.near_fraction`), the crossing's own (the first at or past `steps`) included."""
    return sum(s >= near * steps for s in evals_to(first, spacing, steps))


def near_checks(first: int, spacing: float, steps: float, optimum_steps: float, factor: float | None,
                near: float) -> int:
    """The whole-split checks near the target of a trial on a subset that trains `steps` steps where its batch's
    optimum needs `optimum_steps` (its LR's `pricing.bowl_factor`: `factor`): `near_evals` up to NEAR_REACH x the
    optimum's steps where it reaches the target near the optimum, none where it does not (factor None or past
    NEAR_REACH). The designer prices its grid by this rule and `--estimate` its trials."""
    if factor is None or factor > NEAR_REACH:
        return 0
    return near_evals(first, spacing, min(steps, NEAR_REACH * optimum_steps), near)


def check_reads(checks: int, share: float) -> float:
    """The whole splits `checks` checks near the target read in a trial that reaches the target: the crossing's own
    reads all of it (its value is at the target or past it: no look stops it), each miss before it `share` of it
    on average (`check_share`)."""
    return min(checks, 1) + max(checks - 1, 0) * share


@functools.lru_cache(maxsize=256)
def check_share(target: float, subset: int, total: int, draws: int = 2000) -> float:
    """The share of a `total`-example split that a check near `target` reads on average (the parts of
    `check_parts`, stopped where `clearly_below`), over the checks a trial on an n-example `subset` makes: their
    whole values taken evenly from NEAR_SE binomial standard errors of the subset below the target up to it (where
    the subset's value brings them near). Each part's count ~ Binomial(part, value), seeded: the same inputs, the
    same share."""
    sizes = [len(p) for p in check_parts(total)]
    if len(sizes) < 2:
        return 1.0
    ends = np.cumsum(sizes)
    rng = np.random.default_rng(0)
    rules = [np.array([clearly_below(c / int(n), target, int(n), total) for c in range(int(n) + 1)])
             for n in ends[:-1]]  # at each look, by the count read so far: stop or not
    shares = []
    for value in np.linspace(target - NEAR_SE * binomial_se(target, subset), target, 9):
        counts = np.cumsum(rng.binomial(sizes, min(max(value, 0.0), 1.0), size=(draws, len(sizes))), axis=1)
        read = np.full(draws, float(total))
        for k in reversed(range(len(sizes) - 1)):  # the first look that stops decides
            read[rules[k][counts[:, k]]] = ends[k]
        shares.append(read.mean() / total)
    return float(np.mean(shares))
