"""The training loop's small state objects: the divergence monitor and the epoch clock, each carried through a
checkpoint by its own `state_dict`; the training loss's tallies and the cross-rank check every few steps; the pace
meter of an epoch's steady steps; and the split of the exposed all-reduce wait into the collective and the wait for
slower ranks."""

from __future__ import annotations

import math
import time

import torch

from lbscale.train import distributed as dist


class DivergenceMonitor:
    """Diverged: the mean train loss since the last check is not finite, or has stayed above `factor` x the
    first check's mean for `window` optimizer steps (counted as the steps between checks, which an early
    end-of-epoch check makes shorter than `check_every`)."""

    def __init__(self, factor: float, window: int):
        self.factor, self.window = factor, window
        self.initial_loss: float | None = None
        self.above_steps = 0
        self.last_step = 0  # the optimizer step of the last check

    def update(self, mean_loss: float, step: int) -> bool:
        """One check at optimizer step `step`; True where the criterion holds."""
        steps, self.last_step = step - self.last_step, step
        if not math.isfinite(mean_loss):
            return True
        if self.initial_loss is None:
            self.initial_loss = mean_loss
        elif mean_loss > self.factor * self.initial_loss:
            self.above_steps += steps
            return self.above_steps >= self.window
        else:
            self.above_steps = 0
        return False

    def state_dict(self) -> dict:
        return {"initial_loss": self.initial_loss, "above_steps": self.above_steps, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        """Also a checkpoint of lbscale before the monitor, whose fields were the checkpoint's own: initial_loss,
        above_steps and the step for the last check."""
        self.initial_loss = state.get("initial_loss")
        self.above_steps = state.get("above_steps", 0)
        self.last_step = state.get("last_step", state.get("step", 0))


class TrainLoss:
    """This rank's training loss as (sum, micro-batches): since the last cross-rank check (`window`) and in this
    epoch (`epoch`, which a checkpoint carries per rank)."""

    def __init__(self, device: torch.device):
        self.window = torch.zeros(2, dtype=torch.float64, device=device)
        self.epoch = torch.zeros(2, dtype=torch.float64, device=device)

    def add(self, loss: torch.Tensor) -> None:
        """A micro-batch's loss (detached, float64)."""
        counted = torch.stack([loss, torch.ones_like(loss)])
        self.window += counted
        self.epoch += counted

    def epoch_mean(self) -> float:
        """The epoch's mean over every rank's micro-batches so far (collective)."""
        loss_sum, count = dist.all_reduce_sum(self.epoch.clone()).tolist()
        return loss_sum / max(count, 1)


class CrossRankCheck:
    """Every few optimizer steps the ranks agree, in one all-reduce: the mean training loss since the last check
    (`loss.window`) goes to the divergence monitor and a branch's average, and one rank's reason to stop (a
    signal, the preemption step) stops all."""

    def __init__(self, cfg, plan, loss: TrainLoss, divergence: DivergenceMonitor, branch):
        self.cfg, self.plan, self.loss, self.divergence, self.branch = cfg, plan, loss, divergence, branch

    def due(self, p) -> bool:
        """After a step: where the loss is judged (`judged`), and at the preemption step."""
        return self.judged(p) or p.step == self.cfg.preempt_after_steps

    def judged(self, p) -> bool:
        """Whether the loss since the last check is judged after this step: every --check-every steps, at an epoch's
        end, and where a branch asks (every step for its average, its window's end). Never for the preemption step
        alone: a check there would move the divergence monitor's windows, and a preemption must not change what
        the trial decides (the window's loss goes through the checkpoint instead)."""
        return (p.step % self.cfg.check_every == 0 or p.batch == self.plan.micro_batches_per_epoch
                or bool(self.branch and self.branch.check_due(p)))

    def __call__(self, p, signalled: bool) -> str | None:
        """The check (collective): 'diverged' (where divergence stops the trial), 'stop' (a signal or the
        preemption step: checkpoint and requeue, also after a divergence the trial carries on from), or None. The
        first divergence is recorded in the progress `p` either way."""
        stop = 1.0 if (signalled or p.step == self.cfg.preempt_after_steps) else 0.0
        window = self.loss.window
        t = torch.stack([window[0], window[1], torch.tensor(stop, dtype=torch.float64, device=window.device)])
        loss_sum, count, stop = dist.all_reduce_sum(t).tolist()
        if not self.judged(p):  # the preemption step: only whether to stop
            return "stop" if stop else None
        window.zero_()
        if self.branch:
            self.branch.observe(loss_sum, count, self.plan.global_batch)
        if self.divergence.update(loss_sum / max(count, 1), p.step):
            if p.diverged_at is None:
                p.diverged_at = {"epoch": p.epoch + 1, "step": p.step}
            if self.cfg.on_divergence != "continue":
                return "diverged"
        return "stop" if stop else None


class EpochClock:
    """Training seconds of the current epoch by kind, and the images trained in it. A preemption checkpoint carries it,
    so the record of a resumed epoch counts the time before the preemption too (time per epoch is a headline
    of every study, and requeued trials must not under-report it). Training time is data + compute + comm:
    the wait for the next batch, the exposed wait for the gradient all-reduce (`commtime.CommTimer`), and the
    rest."""

    # the epoch's evaluation runs after its record is cut, outside the clock; step evaluations inside the epoch
    # are counted apart (step_eval), never in the training time
    KINDS = ("data", "compute", "comm", "step_eval")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.KINDS, 0.0)
        self.images = 0

    def add(self, **seconds: float) -> None:
        for kind, value in seconds.items():
            if kind not in self.seconds:
                raise KeyError(f"unknown kind of time {kind!r}; one of {', '.join(self.KINDS)}")
            self.seconds[kind] += value

    def count(self, images: int) -> None:
        self.images += images

    def timing(self) -> dict:
        """The epoch's training time so far and its split, as metrics.jsonl records it."""
        data, compute, comm = self.seconds["data"], self.seconds["compute"], self.seconds["comm"]
        return {"train_seconds": data + compute + comm, "data_seconds": data, "compute_seconds": compute,
                "comm_seconds": comm, "step_eval_seconds": self.seconds["step_eval"]}

    def state_dict(self) -> dict:
        return {"seconds": dict(self.seconds), "images": self.images}

    def load_state_dict(self, state: dict) -> None:
        # a checkpoint of an earlier lbscale lacks the later kinds (step_eval, comm): none of that time was counted
        self.seconds = {**dict.fromkeys(self.KINDS, 0.0), **state["seconds"]}
        self.images = state["images"]


def split_exposed_wait(ranks: list[dict]) -> dict:
    """One epoch's timing from every rank's own (train, data, compute and comm seconds, comm being the rank's
    exposed all-reduce wait), in the frame of the rank that waited most (the fastest): its data and compute, the
    collective itself as `comm_seconds` (the wait of the rank that waited least, which arrived last: for it the
    all-reduce started at once) and the rest of its wait, for slower ranks, as `imbalance_seconds`. Sums to that
    rank's train_seconds. One rank's own, with no imbalance."""
    fastest = max(ranks, key=lambda r: r["comm_seconds"])
    collective = min(r["comm_seconds"] for r in ranks)
    return {**fastest, "comm_seconds": collective, "imbalance_seconds": fastest["comm_seconds"] - collective}


class PaceMeter:
    """An epoch's steady pace: images per second over this process's steps past the first `warmup_steps` (compile,
    warm caches, DDP's bucket rebuild), step evaluations (`eval_seconds`) and measurements at the target
    (`aside_seconds`) left out; and the first compiled step's extra time, taken once per process. `sync` waits for
    the device (a no-op on the CPU)."""

    def __init__(self, warmup_steps: int, world_size: int, sync, compiled: bool):
        self.warmup_steps, self.world_size, self.sync = warmup_steps, world_size, sync
        self.compile_pending = compiled
        self.compile_seconds: float | None = None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.images, self.steps, self.eval_seconds, self.aside_seconds = 0, 0, 0.0, 0.0
        self.mark = None  # (time, images, eval seconds) once the warm-up steps are done
        self.first_step = None

    def step(self, images: int) -> None:
        """After an optimizer step that trained `images` on this process."""
        self.images += images
        self.steps += 1
        if self.steps == 1 and self.compile_pending:
            self.sync()
            self.first_step = time.perf_counter() - self.t0  # compiles the step (once per process)
        if self.steps == self.warmup_steps:
            self.sync()
            self.mark = (time.perf_counter(), self.images, self.left_out)

    @property
    def left_out(self) -> float:
        """The seconds of this epoch that are not training: step evaluations and measurements at the target."""
        return self.eval_seconds + self.aside_seconds

    def elapsed(self) -> float:
        """Training seconds of this epoch so far in this process (`left_out` left out)."""
        return time.perf_counter() - self.t0 - self.left_out

    def trained(self, clock: EpochClock) -> float:
        """The epoch's training seconds so far: `clock`'s (earlier processes of it) and this process's (waits for the
        device)."""
        self.sync()
        return clock.timing()["train_seconds"] + self.elapsed()

    def close(self, clock: EpochClock, data_seconds: float, take_comm_seconds) -> tuple[float | None, float | None]:
        """The epoch's (or its part's) seconds into `clock`: the wait for data (`data_seconds`), the exposed
        all-reduce wait (`take_comm_seconds()`), compute the rest; step evaluations in their own bucket, measurements
        at the target left out. `finish`'s figures."""
        self.sync()
        end = time.perf_counter()
        comm_seconds = take_comm_seconds()
        trained = end - self.t0 - self.left_out
        clock.add(data=data_seconds, compute=trained - data_seconds - comm_seconds, comm=comm_seconds,
                  step_eval=self.eval_seconds)
        clock.count(self.images)
        return self.finish(end)

    def finish(self, end: float) -> tuple[float | None, float | None]:
        """(steady images/s over all ranks or None, the compile seconds where this epoch compiled or None)."""
        steady = end - self.mark[0] - (self.left_out - self.mark[2]) if self.mark else 0.0
        ips = None
        if self.mark and steady > 0 and self.images > self.mark[1]:
            ips = (self.images - self.mark[1]) * self.world_size / steady
        if self.first_step is None:
            return ips, None
        per_step = steady / max(self.steps - self.warmup_steps, 1) if self.mark else 0.0
        self.compile_seconds, self.compile_pending = max(self.first_step - per_step, 0.0), False
        return ips, self.compile_seconds


class StartupClock:
    """The seconds from a process's launch to its first step (imports, data, network, process group), added once
    to the progress, which sums them over a resumed trial's processes; and this process's own import where it did
    not start warm. The training clock starts after it, so the start-up is never also training time."""

    def __init__(self, env: dist.DistEnv):
        launched = dist.launched_seconds_ago(env)
        self.at = None if launched is None else time.perf_counter() - launched  # unknown: no start-up recorded

    def note(self, progress) -> None:
        from lbscale.train.provenance import started_warm

        if self.at is None:
            return
        progress.startup = (progress.startup or 0.0) + time.perf_counter() - self.at
        self.at = None
        if dist.IMPORTED is not None and not started_warm():
            progress.imports = (progress.imports or 0.0) + dist.IMPORTED
