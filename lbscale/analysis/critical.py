"""The local critical batch (Merrill, Arora, Groeneveld & Hajishirzi 2025, "Critical Batch Size Revisited"):
from one checkpoint, branches at k x B train the same number of samples; the local critical batch is the largest
k x B whose loss after the window stays within `tolerance` of the best loss of the smaller factors. Pure
arithmetic over the branches' losses (no torch)."""

from __future__ import annotations

import math


def local_critical_batch(losses: dict[int, float], tolerance: float, base: int | None = None) \
        -> tuple[int | None, str]:
    """(the local critical batch, why) from {batch: loss after the window}. The smallest batch counts as within
    tolerance of itself; each larger batch is compared with the minimum over all smaller ones, and the largest
    one within `tolerance` of it is the critical batch (a larger one past a failing one counts too, as in the
    paper's rule). A diverged branch (an infinite loss) is never within; one without a loss (None or NaN: failed,
    not run) is left out. None where no batch has a loss, and where `base` (the parent's batch: the k = 1
    branch, the baseline every factor is judged against) has no finite loss: another factor in its place would
    move the answer without a word."""
    batches = sorted(b for b, v in losses.items() if v is not None and not math.isnan(v))
    if base is not None and not (base in losses and losses[base] is not None and math.isfinite(losses[base])):
        return None, (f"the k = 1 branch (batch {base:,}) has no loss: no baseline to judge the larger batches "
                      "against; rerun it")
    if not batches:
        return None, "no branch has a loss"
    finite = {b: losses[b] for b in batches if math.isfinite(losses[b])}
    best, critical = math.inf, None
    for b in batches:
        within = b in finite and (critical is None or finite[b] <= best + tolerance)
        if within:
            critical = b
        if b in finite:
            best = min(best, finite[b])
    if critical is None:
        return None, "no branch ended with a finite loss"
    if critical == batches[-1]:
        return critical, f"every factor within {tolerance:g}: the critical batch is at least {critical:,}"
    return critical, f"the largest batch within {tolerance:g} of the smaller batches' best loss"


def ema_update(state: list, value: float, decay: float) -> list:
    """One step of a bias-corrected exponential moving average: state [weighted sum, weight, tag] (the tag is
    carried); the average is sum / weight (Adam's bias correction: the first value is the average itself). The
    package's one EMA: a trial's loss average for `lbscale branch --ema` and gns.SmoothedNoiseScale step through it."""
    total, weight, tag = state
    return [decay * total + (1 - decay) * value, decay * weight + (1 - decay), tag]
