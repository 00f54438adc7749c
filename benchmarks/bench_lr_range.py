"""The designed LR search against each batch's optimum (issue 68 item 6), on simulated pilots: how often the range
`lbscale design` writes holds every designed batch's optimum inside it, away from its edges.

A pilot as the designer runs it: three LRs a factor sqrt(10) apart at batch 64 about a guess of lr* off by up to a
factor 3 either way, three at batch 256 about the middle one's best moved by the square-root rule; each trial's
curve m(s) = P - (P - c) exp(-s / tau), tau = tau0 (1 + k ln^2(lr / lr*(B))) e^(0.1 z), read at 8 evaluations on
1,500 images (Binomial noise); the best LR of each stage by its highest 3-evaluation running mean, as
`analysis.pilot.best_of` reads it. The truth: lr*(B) = 0.05 (B / 64)^alpha. The designed range is
`analysis.lr_search.lr_choice` then `covering` for batches 16 .. 256 about 64 (what a designed study runs); each
batch's optimum in base-LR units (its lr* moved back to batch 64 by the chosen rule) is inside where it lies in the
range with a sixth of its log width to spare at both ends (the search's outer points: an optimum there is on an
edge as the report calls it). Beside it, the range before `covering` (4x about the two best LRs, the rule from them).

`python benchmarks/bench_lr_range.py` (LBSCALE_LR_PILOTS, 500 by default: seconds).
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np


def pilot_stage(rng, batch: int, lrs, alpha: float, k: float = 1.0):
    """(lr, curve) of each LR at `batch`: 8 evaluations of the whole 1,500-image split."""
    star = 0.05 * (batch / 64) ** alpha
    s = np.linspace(1, 8, 8) * 3000.0
    out = []
    for lr in lrs:
        tau = 6000.0 * (1 + k * math.log(lr / star) ** 2) * math.exp(0.1 * rng.standard_normal())
        m = 0.88 - 0.78 * np.exp(-s / tau)
        out.append((float(f"{lr:.4g}"), list(zip(s.tolist(), (rng.binomial(1500, m) / 1500).tolist()))))
    return out


def study(rng, alpha: float):
    from lbscale.analysis.lr_search import RULES, covering, lr_choice
    from lbscale.analysis.pilot import LR_STEP, Pilot, PilotRecord, Timing, best_of
    from lbscale.analysis.pricing import Costs

    guess = 0.05 * 3.0 ** rng.uniform(-1, 1)
    mid = pilot_stage(rng, 64, [guess / LR_STEP, guess, guess * LR_STEP], alpha)
    moved = best_of(mid)[0] * 2
    top = pilot_stage(rng, 256, [moved / LR_STEP, moved, moved * LR_STEP], alpha)
    record = PilotRecord({}, 64, 256, guess, 8, 8, Timing(0.01, 0.1, 1500, 1.0), "sim")
    pilot = Pilot(record, {"mid": mid, "largest": top}, Costs({64: 1e-3}, 1e-4, 1.0))
    rule, base, span = lr_choice(pilot)
    batches = [16, 32, 64, 128, 256]
    wide = covering(base, span, rule.value, batches, 64)
    a = RULES[rule.value]

    def held(rng_range) -> bool:
        lo, hi = map(math.log, rng_range)
        margin = (hi - lo) / 6
        return all(lo + margin <= math.log(0.05 * (b / 64) ** alpha / (b / 64) ** a) <= hi - margin for b in batches)
    return held(base.value), held(wide.value), wide.value[1] / wide.value[0]


def main():
    pilots = int(os.environ.get("LBSCALE_LR_PILOTS", "500"))
    rng = np.random.default_rng(0)
    print(f"the designed LR range on simulated pilots: {pilots} per truth; held: every batch 16..256's optimum "
          "inside, a sixth of the range to spare at each end")
    print("| truth alpha | held (designed: covering the span) | held (the range before it is widened: 4x about the "
          "two best LRs) | median width (hi / lo) |")
    print("|---|---|---|---|")
    for alpha in (0.0, 0.3, 0.5, 0.6, 0.8, 1.0):
        rows = [study(rng, alpha) for _ in range(pilots)]
        held, before = np.mean([r[1] for r in rows]), np.mean([r[0] for r in rows])
        print(f"| {alpha:g} | {100 * held:.1f}% | {100 * before:.1f}% | {np.median([r[2] for r in rows]):.0f} |",
              flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    main()
