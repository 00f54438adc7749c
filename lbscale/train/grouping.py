"""Which micro-batches make an optimizer step. The plan's fixed accumulation decides (TrainStep), unless a batch
schedule (`--batch-schedule`) or a branch (`--branch-from`) does: then steps are counted from the trial's
or the branch's own start (a branch may start inside a step of its batch), each step's batch is the schedule's at the
samples and steps before it (or the trial's), and its LR the schedule's at its place in the data. The batch of every
step, as it happened, is carried through a checkpoint (`state_dict`) into summary.json."""

from __future__ import annotations

from lbscale.train.batch_schedule import BatchSchedule
from lbscale.train.checkpoint import Progress
from lbscale.train.plan import Plan
from lbscale.train.policy import LRPolicy


class StepGrouping:
    """The steps of a trial with `plan`: grouped by `schedule` (or by the plan's batch from their own start where
    `grouped` without one: a branch), else by the plan's accumulation."""

    def __init__(self, plan: Plan, schedule: BatchSchedule | None = None, grouped: bool = False):
        self.plan, self.schedule, self.grouped = plan, schedule, bool(schedule or grouped)
        self.micro = 0  # the micro-batches of the current step so far
        self.batch, self.lr_index = plan.global_batch, 0  # the current step's global batch and LR schedule index
        self.changes: list[dict] = []  # {step, samples_seen, global_batch} where the schedule's batch changes

    @classmethod
    def of(cls, cfg, plan: Plan) -> "StepGrouping":
        """The grouping of a trial with options `cfg`; its batch schedule checked against the data and the first
        batch (one line)."""
        schedule = None
        if cfg.batch_schedule:
            schedule = BatchSchedule.parse(cfg.batch_schedule, plan.epoch_samples, cfg.batch_rule, cfg.global_batch)
            schedule.check_plan(cfg.epochs, plan)
        return cls(plan, schedule, bool(cfg.branch_from))

    def next(self, p: Progress) -> tuple[bool, int] | None:
        """For the next micro-batch: (whether it ends its step, the step's samples on this rank), or None where the
        plan decides. A step's batch and LR index are fixed at its first micro-batch (the LR index: the first
        batch's step there), and a change of batch noted."""
        if not self.grouped:
            return None
        plan = self.plan
        if self.micro == 0:
            seen = plan.samples_seen(p.epoch, p.batch)
            self.batch = self.schedule.batch_at(seen, p.step) if self.schedule else plan.global_batch
            if self.schedule and (not self.changes or self.changes[-1]["global_batch"] != self.batch):
                self.changes.append({"step": p.step, "samples_seen": seen, "global_batch": self.batch})
            self.lr_index = p.epoch * plan.steps_per_epoch + p.batch // plan.accum_steps
        accum = self.batch // (plan.local_batch * plan.world_size)
        last = self.micro + 1 == accum or p.batch + 1 == plan.micro_batches_per_epoch
        shard = plan.epoch_samples // plan.world_size
        in_step = min(plan.local_batch * accum, shard - (p.batch - self.micro) * plan.local_batch)
        self.micro = 0 if last else self.micro + 1
        return last, in_step

    def ended(self, p: Progress) -> bool:
        """After a micro-batch (counted in `p`): whether it ended its optimizer step."""
        if self.grouped:
            return self.micro == 0
        return p.batch % self.plan.accum_steps == 0 or p.batch == self.plan.micro_batches_per_epoch

    def lr(self, policy: LRPolicy, in_step: int) -> float | None:
        """A batch schedule's LR for the step just accumulated (`in_step`: its samples on this rank): the policy's at
        its place in the data (in steps of the first batch), times the rule's factor for its batch; None without a
        schedule (the policy's at the step)."""
        if not self.schedule:
            return None
        # a step cut short at an epoch's end (fewer micro-batches than its batch) gets the factor of what it trained
        trained = min(self.batch, in_step * self.plan.world_size)
        return policy.lr(self.lr_index) * self.schedule.lr_factor(trained, self.batch)

    def summary(self) -> dict:
        """summary.json's batch of every step, as it happened (with a schedule)."""
        return {"batch_schedule": self.changes} if self.schedule else {}

    def state_dict(self) -> dict:
        return {"batch_changes": list(self.changes)}

    def load_state_dict(self, state: dict) -> None:
        """Also a checkpoint of an earlier lbscale, whose progress held batch_changes."""
        self.changes = list(state.get("batch_changes") or [])
