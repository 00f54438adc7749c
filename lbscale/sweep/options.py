"""What a sweep runs with besides its plan: the user's options, and the launch they resolve to."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class SweepOptions:
    """Everything `lbscale sweep` takes besides the spec; None means "as the spec or profile says"."""

    launcher: str = "local"
    system: str | None = None
    systems_file: str | None = None
    results: str | None = None
    batch: str | None = None  # grid overrides, passed on to array tasks so they plan the same grid
    gpus: str | None = None
    local_batch: str | None = None
    seeds: str | None = None
    epochs: int | None = None
    account: str | None = None  # profile overrides
    partition: str | None = None
    time_limit: str | None = None
    dry_run: bool = False
    estimate: bool = False  # with dry_run: time a few steps of each trial shape
    wait_for_lock: bool = False  # wait for another sweep into the same results directory instead of refusing
    submit: bool = True
    wait: bool = False
    max_concurrent: int | None = None
    retry_failed: bool = False
    requeue: bool = False
    max_requeues: int = 3  # after this many requeues a preempted trial is marked failed
    array_task: int | None = None
    trial: str | None = None
    until_resolved: bool = False  # rounds of trials until B_crit is bounded within `ratio` (sweep/rounds.py)
    budget: str | None = None  # with until_resolved: N trials in all, or H GPU-hours ('12h')
    ratio: float = 4.0
    wall: str | None = None  # a wall-clock budget for this sweep ('20m'); else the spec's `wall` less its pilot
    engine: str | None = None  # every trial's data-parallel engine (ddp, horovod); None: the spec's
    follow_up: bool = False  # the SLURM job that plans the next stage: it submits nothing after a full disk

    def plan_args(self) -> list[str]:
        """The overrides as CLI flags, for the array tasks' own `lbscale sweep` call."""
        args = []
        for flag, value in (("--batch", self.batch), ("--gpus", self.gpus), ("--local-batch", self.local_batch),
                            ("--seeds", self.seeds), ("--epochs", self.epochs), ("--account", self.account),
                            ("--partition", self.partition), ("--time", self.time_limit),
                            ("--engine", self.engine)):
            if value is not None:
                args += [flag, str(value)]
        if self.until_resolved:  # the follow-up job decides the next round with the same settings
            args += ["--until-resolved", "--ratio", str(self.ratio)]
            args += ["--budget", self.budget] if self.budget else []
        args += ["--wall", self.wall] if self.wall else []
        return args


@dataclass
class SweepRun:
    """A launch: the spec, results directory and cluster profile resolved (absolute paths: array tasks may
    start in another directory), and the user's options as given."""

    spec_path: str
    results: Path
    system: dict
    options: SweepOptions = field(default_factory=SweepOptions)
    signal_seconds: int = 300  # --signal=USR1@this with --requeue: time to checkpoint before the limit
    more: Callable | None = None  # plans -> the trials that follow once some have finished (sweep.confirm)
    command: list | None = None  # what an array task runs again to plan the same trials (default: lbscale sweep)
    wall: object = None  # sweep.budget.WallBudget where the sweep has a wall-clock budget
    wall_seconds: float | None = None  # that budget in seconds (an array task checks it at its start)

    @property
    def plan_args(self) -> list[str]:
        return self.options.plan_args()
