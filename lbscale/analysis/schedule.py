"""A batch-size schedule from the critical batch measured over training (Merrill, Arora, Groeneveld & Hajishirzi
2025, "Critical Batch Size Revisited": a batch-size warm-up that follows the local critical batch; Smith et al.
2017, "Don't Decay the Learning Rate, Increase the Batch Size"; McCandlish et al. 2018 for what a batch at a
fraction of the critical batch costs). Pure arithmetic, no torch, no files; `plan` reads the over-training table
and the sweep's best trials as DataFrames.

The schedule follows the local critical batch's interval at the checkpoints of one reference run: at each
checkpoint (its samples) the batch may grow to `fraction` x the interval's lower end (the largest batch whose
excess loss over the window was shown to stay within the tolerance), in doublings of the first batch, never past
the largest batch the study measured an LR for, never shrinking. A checkpoint whose critical batch is only an
upper bound, or not resolved, holds the batch (and says so); past the last checkpoint nothing is extrapolated:
the batch stays."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Checkpoint:
    """The local critical batch at one checkpoint of the reference run: its samples, [lo, hi] with kind interval
    / lower (> lo) / upper (< hi) / none, and its label (for the reasons)."""

    label: str
    samples: int
    lo: float | None
    hi: float | None
    kind: str


@dataclass(frozen=True)
class Switch:
    """One batch of the schedule: from `samples` on, `batch`; `reason` names the measurement behind it."""

    samples: int
    batch: int
    reason: str


def _interval(c: Checkpoint) -> str:
    if c.kind == "interval":
        return f"[{c.lo:,.0f}, {c.hi:,.0f}]"
    if c.kind == "lower":
        return f"> {c.lo:,.0f}"
    if c.kind == "upper":
        return f"< {c.hi:,.0f}"
    return "not resolved"


def derive(checkpoints: list[Checkpoint], first: int, fraction: float, largest: int) -> tuple[list[Switch], list[str]]:
    """The schedule's switches (the first at 0 with `first`) and the checkpoints' notes (why one held the batch).

    At a checkpoint whose interval has a lower end (kind interval or lower) the batch becomes the largest
    first x 2^j at most fraction x lo, capped at `largest` (the study's largest batch with a measured LR): the
    schedule never trains a batch nobody measured; it never shrinks. Kind upper or none holds the batch."""
    if first < 1 or largest < first:
        raise ValueError(f"first batch {first} and largest {largest}: need 1 <= first <= largest")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction {fraction}: in (0, 1]")
    switches = [Switch(0, first, f"the reference run's batch ({first:,}): no checkpoint measured before "
                                 f"{min((c.samples for c in checkpoints), default=0):,} samples")]
    notes, batch = [], first
    for c in sorted(checkpoints, key=lambda c: c.samples):
        if c.kind in ("interval", "lower") and c.lo is not None:
            allowed = fraction * c.lo
            grown = batch
            while grown * 2 <= allowed and grown * 2 <= largest:
                grown *= 2
            capped = grown * 2 <= allowed and grown * 2 > largest
            if grown > batch:
                batch = grown
                cap = f", capped at the study's largest batch {largest:,}" if capped else ""
                switches.append(Switch(c.samples, batch, f"checkpoint {c.label}: local critical batch "
                                       f"{_interval(c)}; {fraction:g} x its lower end {c.lo:,.0f} allows "
                                       f"{fraction * c.lo:,.0f}{cap}"))
            elif capped:
                notes.append(f"checkpoint {c.label}: local critical batch {_interval(c)} allows more than the "
                             f"study's largest batch {largest:,}; the batch stays {batch:,} (no LR measured past it)")
            else:
                notes.append(f"checkpoint {c.label}: local critical batch {_interval(c)}; {fraction:g} x {c.lo:,.0f} "
                             f"does not reach {2 * batch:,}: the batch stays {batch:,}")
        elif c.kind == "upper":
            past = f"; the batch {batch:,} is already at or past it" if c.hi is not None and batch >= c.hi else ""
            notes.append(f"checkpoint {c.label}: local critical batch {_interval(c)} (no batch above the "
                         f"reference shown within): the batch stays {batch:,}{past}")
        else:
            notes.append(f"checkpoint {c.label}: local critical batch not resolved (more repeats would resolve "
                         f"it): the batch stays {batch:,}")
    if checkpoints:
        last = max(c.samples for c in checkpoints)
        notes.append(f"past the last checkpoint ({last:,} samples) nothing was measured: the batch stays "
                     f"{batch:,} (not extrapolated)")
    return switches, notes


def plan(table, best, batch: int, fraction: float) -> tuple[list[Switch], list[str], int, dict]:
    """(switches, notes, the best fixed batch, the peak LR per batch) from the over-training table (`table`: rows
    of method, label, samples, lo, hi, kind) and the sweep's best trial per batch (`best`: global_batch, peak_lr,
    steps_to_target): the schedule that follows the local critical batch's lower ends (`derive`) from `batch` up
    to the largest batch the sweep tuned, each batch at its best trial's LR; one line where a doubling of `batch`
    has no tuned LR."""
    import pandas as pd

    from lbscale.errors import LbscaleError

    local = table[table["method"] == "local critical batch"]
    cps = [Checkpoint(r["label"], int(r["samples"]), None if pd.isna(r["lo"]) else float(r["lo"]),
                      None if pd.isna(r["hi"]) else float(r["hi"]), r["kind"]) for _, r in local.iterrows()]
    largest = int(best[best["global_batch"] >= batch]["global_batch"].max())
    switches, notes = derive(cps, batch, fraction, largest)
    missing = [s.batch for s in switches if s.batch not in set(best["global_batch"])]
    if missing:  # a doubling of the first batch the sweep never tuned (its grid is not in doublings of it)
        raise LbscaleError(f"the schedule reaches batch {missing[0]:,}, where the sweep tuned no LR (its batches: "
                           f"{', '.join(f'{b:,}' for b in best['global_batch'])}): give a --batch whose doublings "
                           "are the sweep's batches")
    at_target = local.loc[local["label"] == "target", "samples"]
    for sw in switches[1:]:
        if len(at_target) and sw.samples >= float(at_target.iloc[0]):
            notes.append(f"the switch to {sw.batch:,} at {sw.samples:,} samples is where the reference reached the "
                         "target: a run to this target gains little from it (a longer run, to a harder target, may)")
    fewest = int(best.loc[best["steps_to_target"].astype(float).idxmin(), "global_batch"])
    lrs = {int(b): float(best.loc[best["global_batch"] == b, "peak_lr"].iloc[0]) for b in best["global_batch"]}
    return switches, notes, fewest, lrs


def cost_at_fraction(f: float) -> tuple[float, float]:
    """(steps / S_min, samples / E_min) of a batch at f x B_crit on McCandlish et al. 2018's curve (eqs. 2.11 -
    2.12: (S / S_min - 1)(E / E_min - 1) = 1 with B_crit = E_min / S_min): 1 + 1 / f and 1 + f. At f = 1 both
    twice their minimum; at f = 1/2 three times the minimum steps and 1.5 times the minimum samples."""
    if not f > 0:
        raise ValueError(f"fraction {f}: must be > 0")
    return 1 + 1 / f, 1 + f


def schedule_text(switches: list[Switch], lrs: dict[int, float] | None = None) -> str:
    """The --batch-schedule of `switches`: BATCH@SAMPLES, each with :LR where `lrs` gives the batch's LR."""
    def lr(b: int) -> str:
        return f":{lrs[b]:.6g}" if lrs and b in lrs else ""
    return ",".join(f"{s.batch}@{s.samples}{lr(s.batch)}" for s in switches)


def log_ratio_interval(a: list[float], b: list[float], level: float = 0.9) -> tuple[float, float, float]:
    """The ratio of geometric means of positive `a` over `b` with a Welch t interval on the logs (independent
    samples, unequal variances; Welch-Satterthwaite degrees of freedom): (ratio, lo, hi); lo = 0, hi = inf where
    either side has fewer than two values."""
    from lbscale.analysis.intervals import t_quantile

    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    ratio = math.exp(ma - mb)
    if len(la) < 2 or len(lb) < 2:
        return ratio, 0.0, math.inf
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return ratio, ratio, ratio
    dof = (va + vb) ** 2 / ((va ** 2 / (len(la) - 1) if va else 0) + (vb ** 2 / (len(lb) - 1) if vb else 0))
    half = t_quantile(dof, level) * se
    return ratio, math.exp(ma - mb - half), math.exp(ma - mb + half)


def bracketed_ratio(a: list[tuple[float, float]], b: list[tuple[float, float]], level: float = 0.9) \
        -> tuple[float | None, float, float, str]:
    """The ratio of geometric means of `a`'s steps over `b`'s where each trial's steps are known to lie in (low,
    high]: the evaluation before its crossing and the one that met the target (low 0: nothing before it; high inf:
    it missed, after `low` steps). (point, lo, hi, kind): the point from the evaluations that met the target, where
    every trial did (None otherwise); lo the Welch interval's lower end of a's lows against b's highs, hi its upper
    end of a's highs against b's lows (`log_ratio_interval`), so the brackets and the misses widen it as far as
    they could go; an end a miss, a crossing at the first evaluation or fewer than two trials leave open is 0 or
    inf; kind interval / lower / upper / none as the ends allow."""
    lows_a, highs_a = [x for x, _ in a], [y for _, y in a]
    lows_b, highs_b = [x for x, _ in b], [y for _, y in b]

    def end(top, bottom, which: int) -> float:
        if not top or not bottom or min(top + bottom) <= 0 or not all(map(math.isfinite, top + bottom)):
            return (0.0, math.inf)[which - 1]
        return log_ratio_interval(top, bottom, level)[which]

    lo, hi = end(lows_a, highs_b, 1), end(highs_a, lows_b, 2)
    reached = all(map(math.isfinite, highs_a + highs_b)) and min(highs_a + highs_b, default=0) > 0
    point = log_ratio_interval(highs_a, highs_b, level)[0] if reached and a and b else None
    kind = ("interval" if lo > 0 and math.isfinite(hi) else "lower" if lo > 0 else "upper" if math.isfinite(hi)
            else "none")
    return point, lo, hi, kind
