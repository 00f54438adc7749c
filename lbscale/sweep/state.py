"""Where each trial of a sweep stands: from its files, and from whether a process or SLURM job still works on it."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from lbscale import slurm
from lbscale.results import (CHECKPOINT, CHECKPOINT_INFO, CONFIG, METRICS, RUN, SUBMITTED, SUMMARY, TRIAL_YAML,
                             WAITING, read_json, read_jsonl)
from lbscale.sweep.eta import last_pace
from lbscale.train.batch_schedule import run_steps
from lbscale.train.summary import epoch_records
from lbscale.task import TASKS

STATES = ("pending", "submitted", "running", "interrupted", "waiting", "completed", "diverged", "pruned", "failed")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def running_here(trial_dir: Path) -> bool:
    """Is a process on this host (or a SLURM job) still working on the trial?"""
    return run_active(read_json(Path(trial_dir) / RUN) or {})


def run_active(run: dict) -> bool:
    """The test behind `running_here`, on an already read run.json."""
    if not run:
        return False
    if run.get("job"):
        active = slurm.job_active(run["job"])
        if active is not None:
            return active
    return run.get("host") == socket.gethostname() and _pid_alive(int(run.get("pid", 0)))


def checkpoint_info(trial_dir: Path) -> dict:
    """The trial's checkpoint/info.json (reason, epoch, step, when written), or {} without a checkpoint."""
    return read_json(Path(trial_dir) / CHECKPOINT / CHECKPOINT_INFO) or {}


def checkpoint_reason(trial_dir: Path) -> str | None:
    """Why the trial's checkpoint was written (`epoch`, `preempted`, `waiting`), or None without one."""
    return checkpoint_info(trial_dir).get("reason")


def primary_metric(config: dict, last: dict) -> str | None:
    """The task's headline metric (from config.json), else the first one the records carry."""
    task = TASKS.get(config.get("task"))
    candidates = [task.primary_metric] if task else [t.primary_metric for t in TASKS.values()]
    if config.get("primary_metric"):  # test_* where the trial evaluates test every epoch
        candidates.insert(0, config["primary_metric"])
    return next((k for k in (*candidates, "val_loss") if k in last), None)


def trial_state(trial_dir: Path) -> dict:
    """pending / submitted / running / interrupted / completed / diverged / failed, with progress."""
    trial_dir = Path(trial_dir)
    summary = read_json(trial_dir / SUMMARY)
    records = read_jsonl(trial_dir / METRICS)
    config = read_json(trial_dir / CONFIG) or {}
    run = read_json(trial_dir / RUN) or {}
    submitted = read_json(trial_dir / SUBMITTED) or {}
    if summary:
        state = summary.get("status", "failed")
    elif run_active(run):
        state = "running"
    elif checkpoint_reason(trial_dir) == WAITING:
        state = "waiting"  # at a rung of synchronous halving, for its peers
    elif (trial_dir / CHECKPOINT).exists() or run:
        state = "interrupted"
    elif submitted and slurm.job_active(submitted.get("job", "")):
        state = "submitted"
    else:
        state = "pending"
    last = next((r for r in reversed(epoch_records(records)) if not r.get("partial")), {})
    # the model the trial ended with (summary.json's final: a trial stopped at its target inside an epoch ends with
    # its whole-split evaluation there); else the last epoch's, else the last step evaluation's
    shown = (summary or {}).get("final") or last or next((r for r in reversed(records) if r.get("kind") == "step"),
                                                         {})
    metric = primary_metric(config, shown)
    elapsed = summary.get("wall_seconds") if summary else last.get("elapsed_seconds")
    plan, options = config.get("plan") or {}, config.get("config") or {}
    # step evaluations included: the pace between epochs
    step, trained, seen = last_pace(records, plan.get("epoch_samples"))
    return {"trial": trial_dir.name, "state": state, "epoch": last.get("epoch", 0),
            "epochs": options.get("epochs"), "metric": metric,
            "value": shown.get(metric) if metric else None,
            "job": run.get("job") or submitted.get("job"), "elapsed": elapsed,
            "error": summary.get("error") if summary else None, "step": step, "trained": trained, "seen": seen,
            "steps": run_steps(options.get("batch_schedule"), options.get("epochs"), plan)}


def trial_dirs(results: Path) -> list[Path]:
    """The trial directories (those holding a trial.yaml) under `results`, in natural order (b128 before b1024);
    `results` itself where it is one (`lbscale status RESULTS/TRIAL`, or a trial `lbscale train` made: its
    config.json, no trial.yaml)."""
    results = Path(results)
    if (results / TRIAL_YAML).exists() or (results / CONFIG).exists():
        return [results]
    found = [d for d in results.iterdir() if (d / TRIAL_YAML).exists()] if results.is_dir() else []
    return sorted(found, key=lambda d: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", d.name)])


def sweep_states(results: Path) -> list[dict]:
    """States of every trial directory under `results`."""
    return [trial_state(d) for d in trial_dirs(results)]


def count_line(states: list[str]) -> str:
    """'6 trials: 4 completed, 2 running' (the closing line of status tables and sweeps)."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return f"{len(states)} trials: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
