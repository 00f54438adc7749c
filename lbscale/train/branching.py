"""A branch trial (`--branch-from`, which `lbscale branch` runs): the parent's weights, optimizer state, RNG and place
in the data at its kept checkpoint, continued at this trial's batch: the same micro-batches, grouped into larger
steps (grouping.py), the LR this trial's schedule at the mapped step. It trains --branch-samples (its window) and
ends with one evaluation, which with --branch-ema carries the training loss's bias-corrected moving average over the
window. The window's start and the average are carried through a checkpoint (`state_dict`)."""

from __future__ import annotations

from pathlib import Path

from lbscale.analysis.critical import ema_update
from lbscale.errors import LbscaleError
from lbscale.train import checkpoint
from lbscale.train.checkpoint import Progress
from lbscale.train.plan import Plan


def branch_progress(parent: Progress, steps_per_epoch: int, accum: int) -> Progress:
    """Where a branch with `steps_per_epoch` steps of `accum` micro-batches each starts from its parent's progress:
    the same epoch and micro-batch (the same data next), the step of its own schedule at that micro-batch (the LR's
    place: epochs mean the same epochs at every batch), no records, targets or divergence of the parent's."""
    return Progress(epoch=parent.epoch, batch=parent.batch, step=parent.epoch * steps_per_epoch + parent.batch // accum)


def window_start(progress: Progress, plan: Plan) -> list[int]:
    """[epoch, micro-batch] where a branch starting at `progress` begins its window: the next epoch where that
    micro-batch is past this trial's epoch (an epoch of whole larger steps may end sooner)."""
    if progress.batch >= plan.micro_batches_per_epoch:
        return [progress.epoch + 1, 0]
    return [progress.epoch, progress.batch]


def samples_left(start: list[int], plan: Plan, epochs: int) -> int:
    """The samples a branch with `plan` trains from `start` to the end of its `epochs`: what its window may ask."""
    micro = (epochs - start[0]) * plan.micro_batches_per_epoch - start[1]
    return max(micro, 0) * plan.local_batch * plan.world_size


def kept_progress(info: dict, parent: Plan) -> Progress:
    """The epoch and micro-batch of a kept checkpoint (its info.json) in its parent's run `parent`: a checkpoint at
    an epoch's end sits past its last micro-batch."""
    in_epoch = info["samples_seen"] - info["epoch"] * parent.epoch_samples
    batch = (parent.micro_batches_per_epoch if in_epoch >= parent.epoch_samples
             else in_epoch // (parent.local_batch * parent.world_size))
    return Progress(epoch=info["epoch"], batch=batch, step=info["step"])


class Branch:
    """The branch of a trial with options `cfg` and `plan`, checked before any output: its folder a kept checkpoint
    with this trial's micro-batches (one line otherwise)."""

    def __init__(self, cfg, plan: Plan):
        self.folder, self.plan = Path(cfg.branch_from), plan
        self.samples, self.decay = cfg.branch_samples, cfg.branch_ema
        info = checkpoint.kept_info(self.folder)
        if info["local_batch"] != plan.local_batch:
            raise LbscaleError(f"--branch-from {self.folder}: a branch continues its parent's micro-batches of "
                               f"{info['local_batch']} per process; this trial's are {plan.local_batch}")
        self.parent_batch = info["global_batch"]
        self.start: list | None = None  # [epoch, micro-batch] where the window starts (the branch's own steps too)
        self.ema: list | None = None  # --branch-ema: [weighted loss sum, weight, the parent's global batch]

    @classmethod
    def of(cls, cfg, plan: Plan) -> "Branch | None":
        return cls(cfg, plan) if cfg.branch_from else None

    def begin(self, parent: Progress) -> Progress:
        """The branch's progress from its parent's (`branch_progress`); its window starts there."""
        plan = self.plan
        progress = branch_progress(parent, plan.steps_per_epoch, plan.accum_steps)
        self.start = window_start(progress, plan)
        if self.decay:
            self.ema = [0.0, 0.0, self.parent_batch]
        return progress

    def check_due(self, p: Progress) -> bool:
        """Whether the cross-rank check runs after this step: every step for the average, and at the window's end."""
        return self.ema is not None or self.done(p)

    def observe(self, loss_sum: float, count: float, global_batch: int) -> None:
        """A check's loss over all ranks (`count` micro-batches) into the average, decaying per parent batch of
        samples (the same smoothing at every factor)."""
        if self.ema is not None and count:
            self.ema = ema_update(self.ema, loss_sum / count, self.decay ** (global_batch / self.ema[2]))

    def done(self, p: Progress) -> bool:
        """Whether the branch has trained its --branch-samples past its start."""
        if self.start is None or not self.samples:
            return False
        plan = self.plan
        micro = (p.epoch - self.start[0]) * plan.micro_batches_per_epoch + p.batch - self.start[1]
        return micro * plan.local_batch * plan.world_size >= self.samples

    def smoothed(self) -> dict | None:
        """The window's evaluation's extra figures: the average so far (None without one)."""
        return {"train_loss_ema": self.ema[0] / self.ema[1]} if self.ema and self.ema[1] else None

    def state_dict(self) -> dict:
        return {"branch_start": self.start, "branch_ema": self.ema}

    def load_state_dict(self, state: dict) -> None:
        """Also a checkpoint of an earlier lbscale, whose progress held both fields."""
        self.start, self.ema = state.get("branch_start"), state.get("branch_ema")
