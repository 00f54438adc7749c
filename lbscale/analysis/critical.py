"""The local critical batch (Merrill, Arora, Groeneveld & Hajishirzi 2025, "Critical Batch Size Revisited"):
from one checkpoint, branches at k x B train the same number of samples; the local critical batch is the largest
k x B whose loss after the window stays within `tolerance` of the best loss of the smaller factors. Pure
arithmetic over the branches' losses (no torch).

With repeats (`lbscale branch --repeats R`: the same branches again, the data order and augmentation past the
branch point re-drawn per repeat, repeat r the same order at every factor), each batch's excess over the best
smaller batch is a paired mean over the repeats with a Student t interval, and the local critical batch gets an
interval of its own (`local_critical_interval`): between the largest batch whose excess is within the tolerance at
the stated confidence and the smallest larger one whose excess is past it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbscale.analysis.intervals import t_quantile


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


@dataclass
class LocalCritical:
    """A local critical batch from repeated branches: `value` (the rule on the repeats' mean losses, inside the
    interval), [`lo`, `hi`] with `kind` interval / lower (> lo) / upper (< hi) / none (not resolved: `why` says what
    would resolve it), the repeats it rests on, and per batch its excess's mean and t interval."""

    value: float | None
    lo: float | None
    hi: float | None
    kind: str
    why: str
    repeats: int
    excess: dict


def _excess(diffs: list[float], level: float) -> tuple[float, float, float]:
    """Mean and the two-sided t interval at `level` of paired differences (n >= 2; +-inf for one)."""
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return mean, -math.inf, math.inf
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(n - 1, level) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def local_critical_interval(losses: dict[int, dict[int, float]], tolerance: float, base: int,
                            level: float = 0.9) -> LocalCritical:
    """The local critical batch with an interval from repeated branches: `losses` {batch: {repeat: loss}}.

    Each batch above `base` is compared, repeat by repeat, with the smaller batch of the lowest mean loss (paired:
    repeat r saw the same data at every factor); its excess over that reference has a t interval, each end at
    one-sided (1 + level) / 2 so that the two ends together hold at `level`. A batch is within where the
    interval's upper end is at most `tolerance`, past it where the lower end is above; a diverged repeat puts
    its batch past. lo is the largest batch within (`base` is within by definition), hi the smallest larger one
    past: the batch where the expected excess crosses the tolerance lies in [lo, hi]. Without a batch past, a
    lower bound (none where no batch above the base is within either); without one within, an upper bound."""
    clean = {b: {r: v for r, v in per.items() if v is not None and not math.isnan(v)} for b, per in losses.items()}
    clean = {b: per for b, per in clean.items() if per}
    if base not in clean or not all(math.isfinite(v) for v in clean[base].values()):
        return LocalCritical(None, None, None, "none", f"the k = 1 branch (batch {base:,}) has no finite loss in "
                             "every repeat: no baseline; rerun it", 0, {})
    mean = {b: (sum(per.values()) / len(per) if all(math.isfinite(v) for v in per.values()) else math.inf)
            for b, per in clean.items()}
    batches = sorted(b for b in clean if b >= base)
    within, past, point, excess = [base], [], [base], {}
    for i, b in enumerate(batches[1:], start=1):
        ref = min(batches[:i], key=lambda s: mean[s])
        if not math.isfinite(mean[b]):
            past.append(b)
            excess[b] = (math.inf, math.inf, math.inf)
            continue
        common = sorted(set(clean[b]) & set(clean[ref]))
        e = _excess([clean[b][r] - clean[ref][r] for r in common], level)  # each end one-sided (1 + level) / 2
        excess[b] = e
        if e[2] <= tolerance:
            within.append(b)
        elif e[1] > tolerance:
            past.append(b)
        if mean[b] <= mean[ref] + tolerance:
            point.append(b)
    repeats = min(len(clean[b]) for b in batches)
    lo = max(within)
    above = [b for b in past if b > lo]
    hi = min(above) if above else None
    value = max((b for b in point if b >= lo and (hi is None or b < hi)), default=lo)
    undecided = [b for b in batches if b > lo and (hi is None or b < hi) and b not in within]
    more = f"more repeats (now {repeats}) would decide {', '.join(f'{b:,}' for b in undecided)}" if undecided else ""
    if hi is None and lo == base:
        if len(batches) == 1:
            return LocalCritical(None, None, None, "none", "only the k = 1 branch has a loss", repeats, excess)
        return LocalCritical(None, None, None, "none", "not resolved: no larger batch is within the tolerance or "
                             f"past it at {level:.0%}; " + (more or "more repeats would resolve it"), repeats, excess)
    if hi is None:
        why = (f"every factor within {tolerance:g} at {level:.0%}: at least {lo:,}" if lo == batches[-1] else
               f"within {tolerance:g} up to {lo:,} at {level:.0%}; " + more)
        return LocalCritical(value, float(lo), math.inf, "lower", why, repeats, excess)
    if lo == base:
        return LocalCritical(value, 0.0, float(hi), "upper", f"batch {hi:,} past the tolerance at {level:.0%} and "
                             "no larger batch within: below it (the parent may already train past it)"
                             + (f"; {more}" if more else ""), repeats, excess)
    return LocalCritical(value, float(lo), float(hi), "interval", f"{lo:,} within {tolerance:g} and {hi:,} past it "
                         f"at {level:.0%} ({repeats} repeats per batch)" + (f"; {more}" if more else ""),
                         repeats, excess)


def ema_update(state: list, value: float, decay: float) -> list:
    """One step of a bias-corrected exponential moving average: state [weighted sum, weight, tag] (the tag is
    carried); the average is sum / weight (Adam's bias correction: the first value is the average itself). The
    package's one EMA: a trial's loss average for `lbscale branch --ema` and gns.SmoothedNoiseScale step through it."""
    total, weight, tag = state
    return [decay * total + (1 - decay) * value, decay * weight + (1 - decay), tag]
