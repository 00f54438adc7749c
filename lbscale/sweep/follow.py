"""The local sweep's view of its running trial: epoch, step, last metric and time left, read from the trial's own
files while it runs (config.json: its steps; metrics.jsonl: a record per epoch and step evaluation), and the
whole sweep's time left from the trials it has run. A bar on a terminal, a plain line now and then in a log."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict

from lbscale.train.config import to_dict
from lbscale.progress import Board
from lbscale.sweep.eta import TrialPace, clock, run_samples, shape_key, since_news, sweep_left, trial_left, whole
from lbscale.sweep.plan import SweepTrial
from lbscale.sweep.state import trial_state
from lbscale.train.batch_schedule import run_steps

LOG_EVERY = 60.0  # in a log: seconds between two lines with news (a new record)
HEARTBEAT = 600.0  # ... and a line after this long without one


def plan_pace(p: SweepTrial) -> TrialPace:
    """A planned trial as the estimates see it: its shape, (first) batch, steps (as a batch schedule takes them)
    and training samples, nothing run."""
    plan = asdict(p.plan)
    epochs = p.config.epochs
    return TrialPace(shape_key(to_dict(p.config), p.gpus), p.plan.global_batch,
                     run_steps(p.config.batch_schedule, epochs, plan), samples=run_samples(plan, epochs))


class SweepProgress:
    """What the local sweep knows of the pace of its trials: those it ran, and each one's start-up (the
    process's wall time beyond its records' seconds)."""

    def __init__(self):
        self.ran: list[TrialPace] = []
        self.startups: list[float] = []

    @contextmanager
    def trial(self, p: SweepTrial, at: str, rest: list[SweepTrial]):
        """Follow trial `p` while the body runs it: yields the callable the launcher calls now and then."""
        board = Board(f"{at} {p.trial_id}", LOG_EVERY, HEARTBEAT)
        rest_paces = [plan_pace(q) for q in rest]
        seen = [None]
        t0 = time.time()

        def follow() -> None:
            t, state = self.pace(p)
            news = (t.step, state["epoch"]) != seen[0] and t.step > 0
            seen[0] = (t.step, state["epoch"])
            board.show(t.step, t.steps, self.line(t, state, rest_paces, since_news(p.out)), news)

        try:
            yield follow
        finally:
            board.close()
            t, _ = self.pace(p)
            if t.step:
                self.ran.append(t)
                self.startups.append(max(0.0, time.time() - t0 - t.trained))

    def pace(self, p: SweepTrial) -> tuple[TrialPace, dict]:
        """Trial `p` as its files have it now: its pace, and its state (`state.trial_state`)."""
        state = trial_state(p.out)
        t = plan_pace(p)
        t.steps = state["steps"] or t.steps
        t.step, t.trained, t.seen = state["step"], state["trained"], state["seen"]
        state["epochs"] = state["epochs"] or p.config.epochs  # config.json is written once the trial has started
        return t, state

    def line(self, t: TrialPace, state: dict, rest: list[TrialPace], since: float) -> str:
        """'epoch 2/4, step 34/68, val_top1 0.8123, about 0:00:45 left; sweep about 0:05:30 left'."""
        known = self.ran + ([t] if t.step else [])  # the running trial's pace counts for the others
        left = trial_left(t, self.ran, since)
        parts = [f"epoch {state['epoch']}/{state['epochs']}", f"step {t.step}/{t.steps}"]
        if state["metric"] and state["value"] is not None:
            parts.append(f"{state['metric']} {state['value']:.4f}")
        parts.append(f"about {clock(left)} left" if left is not None else "time left unknown yet")
        startup = sum(self.startups) / len(self.startups) if self.startups else 0.0
        unknown = sum(whole(q, known) is None for q in rest)
        if left is None or unknown:
            return ", ".join(parts) + (f"; {len(rest)} more trial{'s' if len(rest) > 1 else ''}" if rest else "")
        return ", ".join(parts) + f"; sweep about {clock(left + sweep_left(known, rest, startup))} left"
