"""The training loop's small state objects, each carried through a checkpoint by its own `state_dict`:
the divergence monitor and the epoch clock."""

from __future__ import annotations

import math


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
        self.initial_loss, self.above_steps, self.last_step = (state["initial_loss"], state["above_steps"],
                                                               state["last_step"])


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
