"""Pure learning-rate math, in optimizer steps: scaling rules, linear warm-up, decay schedules."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The registries the CLI's choices and help come from: name -> what it does.
SCALING_RULES = {
    "linear": "peak = base x global/ref (Goyal et al. 2017)",
    "sqrt": "peak = base x sqrt(global/ref) (Krizhevsky 2014; You et al. 2019 for LAMB)",
    "none": "peak = base at every batch",
}
SCHEDULES = {
    "poly": "polynomial decay to end-lr (power --poly-power)",
    "multistep": "step decay at --milestones by --milestone-factors",
    "cosine": "cosine decay to end-lr",
    "constant": "the peak LR after warm-up",
}


def peak_lr(base_lr: float, global_batch: int, ref_batch: int, rule: str) -> float:
    """base_lr * f(global_batch / ref_batch): linear (Goyal et al.), sqrt (Krizhevsky; You et al. LAMB), none."""
    k = global_batch / ref_batch
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    if rule == "none":
        return base_lr
    raise ValueError(f"unknown scaling rule {rule!r}; choose one of {', '.join(SCALING_RULES)}")


def auto_warmup_epochs(global_batch: int, ref_batch: int, ref_epochs: float) -> float:
    """Warm-up epochs in proportion to the global batch: `ref_epochs` at `ref_batch`."""
    return ref_epochs * global_batch / ref_batch


@dataclass(frozen=True)
class LRPolicy:
    """The LR at every optimizer step of a run: linear warm-up from `warmup_start_lr` to `peak`, then a schedule.

    Milestones are in epochs; `factors` are cumulative multipliers of the peak (default gamma ** i)."""

    peak: float
    steps_per_epoch: int
    epochs: int
    warmup_epochs: float = 0.0
    schedule: str = "poly"
    warmup_start_lr: float = 0.0
    power: float = 2.0
    end_lr: float = 0.0
    milestones: tuple = ()
    factors: tuple = ()
    gamma: float = 0.1

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.factors and len(self.factors) != len(self.milestones):
            raise ValueError("multistep: give one factor per milestone")

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def warmup_steps(self) -> int:
        return min(self.total_steps, int(round(self.warmup_epochs * self.steps_per_epoch)))

    def lr(self, step: int) -> float:
        """LR used by optimizer step `step` (0-based)."""
        w = self.warmup_steps
        if step < w:
            return self.warmup_start_lr + (self.peak - self.warmup_start_lr) * (step + 1) / w
        decay_steps = max(1, self.total_steps - w)
        t = min(1.0, (step - w) / decay_steps)
        if self.schedule == "constant":
            return self.peak
        if self.schedule == "poly":
            return self.end_lr + (self.peak - self.end_lr) * (1 - t) ** self.power
        if self.schedule == "cosine":
            return self.end_lr + (self.peak - self.end_lr) * 0.5 * (1 + math.cos(math.pi * t))
        epoch = step / self.steps_per_epoch
        factors = self.factors or tuple(self.gamma ** (i + 1) for i in range(len(self.milestones)))
        factor = 1.0
        for milestone, f in zip(self.milestones, factors):
            if epoch >= milestone:
                factor = f
        return self.peak * factor

    def table(self) -> list[tuple[int, float]]:
        """(step, lr) for every step of the run."""
        return [(s, self.lr(s)) for s in range(self.total_steps)]
