"""A batch-size schedule from the critical batch measured over training (Merrill, Arora, Groeneveld & Hajishirzi
2025, "Critical Batch Size Revisited": a batch-size warm-up that follows the local critical batch; Smith et al.
2017, "Don't Decay the Learning Rate, Increase the Batch Size"; McCandlish et al. 2018 for what a batch at a
fraction of the critical batch costs). Pure arithmetic, no torch, no files.

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
