"""The result store: per-trial files written atomically (temp file + rename), read back as records."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

CONFIG, METRICS, SUMMARY, CHECKPOINT = "config.json", "metrics.jsonl", "summary.json", "checkpoint"
REQUEUE_EXIT = 75  # a trial's exit code after SIGTERM / SIGUSR1: checkpointed, run again with --resume
CHECKPOINT_INFO = "info.json"  # inside the checkpoint directory: reason, epoch, step, time written
PREEMPTED = "preempted"  # the reason recorded in checkpoint/info.json by that checkpoint


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a part (rename within one directory is atomic)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_atomic(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


# --- trial states (for sweeps and `lbscale status`) -------------------------------------------------------
RUN, SUBMITTED, TRIAL_YAML = "run.json", "submitted.json", "trial.yaml"
FINISHED = ("completed", "diverged")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _slurm_job_active(job: str) -> bool | None:
    """True/False from squeue; None where SLURM cannot be asked."""
    import subprocess

    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return False if "Invalid job id" in out.stderr else None
    return bool(out.stdout.strip())


def running_here(trial_dir: Path) -> bool:
    """Is a process on this host (or a SLURM job) still working on the trial?"""
    return _run_active(read_json(Path(trial_dir) / RUN) or {})


def _run_active(run: dict) -> bool:
    """The test behind `running_here`, on an already read run.json."""
    import socket

    if not run:
        return False
    if run.get("job"):
        active = _slurm_job_active(run["job"])
        if active is not None:
            return active
    return run.get("host") == socket.gethostname() and _pid_alive(int(run.get("pid", 0)))


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
    elif _run_active(run):
        state = "running"
    elif (trial_dir / CHECKPOINT).exists() or run:
        state = "interrupted"
    elif submitted and _slurm_job_active(submitted.get("job", "")):
        state = "submitted"
    else:
        state = "pending"
    last = records[-1] if records else {}
    metric = next((k for k in ("val_top1", "val_f1_micro", "val_loss") if k in last), None)
    elapsed = summary.get("wall_seconds") if summary else last.get("elapsed_seconds")
    return {"trial": trial_dir.name, "state": state, "epoch": last.get("epoch", 0),
            "epochs": (config.get("config") or {}).get("epochs"), "metric": metric,
            "value": last.get(metric) if metric else None,
            "job": run.get("job") or submitted.get("job"), "elapsed": elapsed,
            "error": summary.get("error") if summary else None}


def sweep_states(results: Path) -> list[dict]:
    """States of every trial directory (those holding a trial.yaml) under `results`."""
    results = Path(results)
    return [trial_state(d) for d in sorted(results.iterdir()) if (d / TRIAL_YAML).exists()] if results.is_dir() else []
