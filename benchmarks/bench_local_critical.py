"""The local critical batch's interval scored on a noisy quadratic model (benchmarks/nqm.py) whose truth is in
closed form: per regime, simulated branch studies (factors 1..32 from batch 16) with R repeats each, read by
`analysis.critical.local_critical_interval` at 90 %; beside it, the single-run bracket the report gave before
(the batches tried on either side of the rule's answer, `report.branch_study.bracket`'s convention).

Scored strictly: an interval covers where the truth lies in [lo, hi], a lower bound where the truth is >= lo, an
upper bound where it is <= hi; "not resolved" is counted apart and never as covered.

    python benchmarks/bench_local_critical.py            # 300 studies per regime (LBSCALE_LOCAL_STUDIES)
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.nqm import model  # noqa: E402
from lbscale.analysis.critical import local_critical_batch, local_critical_interval  # noqa: E402

FACTORS = [1, 2, 4, 8, 16, 32]
BASE = 16
# (name, model options, tolerance as a fraction of the base's expected loss); the first five were set to put the
# truth inside the grid at three noise levels; the held-out ones change the spectrum, the dimension and the window
REGIMES = [
    ("linear, quiet", dict(lr=0.06, noise=1), 0.02),
    ("linear, noisy", dict(lr=0.05, noise=10), 0.02),
    ("linear, noisier", dict(lr=0.06, noise=10), 0.02),
    ("sqrt, quiet", dict(lr=0.05, noise=1, rule="sqrt"), 0.30),
    ("sqrt, noisy", dict(lr=0.2, noise=10, rule="sqrt"), 0.10),
    ("held out: spread 1e4, d 64", dict(lr=0.05, noise=5, spread=1e4, d=64), 0.02),
    ("held out: spread 1e2, window 4096", dict(lr=0.04, noise=3, spread=1e2, window=4096), 0.01),
    ("held out: sqrt, d 16", dict(lr=0.1, noise=3, d=16, rule="sqrt"), 0.15),
]


def covered(kind: str, lo, hi, truth: float) -> bool:
    if kind == "interval":
        return lo <= truth <= hi
    if kind == "lower":
        return truth >= lo
    if kind == "upper":
        return truth <= hi
    return False


def grid_bracket(losses: dict[int, float], tolerance: float) -> tuple[str, float, float]:
    """The single-run answer as the report bracketed it: [the rule's batch, the next one tried]."""
    value, why = local_critical_batch(losses, tolerance, base=BASE)
    tried = sorted(losses)
    if value is None:
        return "none", math.nan, math.nan
    if why.startswith("every factor"):
        return "lower", value, math.inf
    above = [b for b in tried if b > value]
    return ("upper", 0.0, above[0]) if value <= tried[0] else ("interval", value, above[0])


def score(name: str, options: dict, fraction: float, repeats: int, studies: int, seed: int) -> dict:
    m = model(**options, base=BASE)
    tolerance = fraction * m.expected_loss(BASE)
    truth = m.truth(tolerance, top=BASE * FACTORS[-1] * 16)
    rng = np.random.default_rng(seed)
    got = {"stated": 0, "covered": 0, "none": 0, "grid_covered": 0, "grid_stated": 0, "width": []}
    for _ in range(studies):
        sim = m.branches(FACTORS, repeats, rng)
        r = local_critical_interval(sim, tolerance, BASE)
        if r.kind == "none":
            got["none"] += 1
        else:
            got["stated"] += 1
            got["covered"] += covered(r.kind, r.lo, r.hi, truth)
            if r.kind == "interval":
                got["width"].append(r.hi / r.lo)
        kind, lo, hi = grid_bracket({b: v[0] for b, v in sim.items()}, tolerance)
        if kind != "none":
            got["grid_stated"] += 1
            got["grid_covered"] += covered(kind, lo, hi, truth)
    return {"regime": name, "truth": truth, "repeats": repeats, "studies": studies, **got}


def main() -> None:
    studies = int(os.environ.get("LBSCALE_LOCAL_STUDIES", 300))
    print(f"local critical batch on a noisy quadratic model: {studies} studies per regime, factors "
          f"{','.join(map(str, FACTORS))} from batch {BASE}, 90% intervals")
    print("| regime | truth | repeats | covered when stated | not resolved | hi/lo (median) | "
          "single-run bracket covered |")
    print("|---|---|---|---|---|---|---|")
    worst = 1.0
    for i, (name, options, fraction) in enumerate(REGIMES):
        for repeats in (3, 5):
            s = score(name, options, fraction, repeats, studies, seed=1000 * i + repeats)
            rate = s["covered"] / s["stated"] if s["stated"] else math.nan
            worst = min(worst, rate) if s["stated"] else worst
            width = f"{np.median(s['width']):.0f}" if s["width"] else "-"
            grid = s["grid_covered"] / s["grid_stated"] if s["grid_stated"] else math.nan
            print(f"| {name} | {s['truth']:.0f} | {repeats} | {rate:.1%} of {s['stated']} | "
                  f"{s['none'] / studies:.1%} | {width} | {grid:.1%} |", flush=True)
    print(f"local critical batch: lowest coverage when stated {worst:.1%} over {len(REGIMES)} regimes x 2 repeat "
          "counts (target >= 85%)")


if __name__ == "__main__":
    main()
