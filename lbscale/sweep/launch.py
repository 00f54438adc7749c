"""Launchers behind one interface: `local` (trials one after another) and `slurm` (one job array per shape).

Both start from the same plan and the same per-trial files: `<results>/<trial>/trial.yaml` (the resolved
trial config) and the trial's own result files. Nothing is shared and mutable between trials, so any number
of array tasks can write into one results directory at once. A rerun skips finished trials, resumes those
with a checkpoint and re-runs failed ones only with --retry-failed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import yaml

from lbscale.errors import LbscaleError, error_line
from lbscale.results import (ENVIRONMENT, FINISHED, GRID, PEERS, PREEMPTED, REQUEUE_EXIT, RUN, SUMMARY, TRIAL_YAML,
                             SUBMITTED, WAITING, archive_summary, read_json, remove_leftovers, write_atomic,
                             write_failed_summary, write_json)
from lbscale.sweep import warm as warm_start
from lbscale.sweep.budget import budget_warnings
from lbscale.sweep.follow import SweepProgress
from lbscale.sweep.options import SweepRun
from lbscale.sweep.plan import SweepTrial, trial_yaml
from lbscale.sweep.state import checkpoint_info, checkpoint_reason, count_line, running_here, trial_state

IN_FLIGHT_SECONDS = 120  # a sweep's temp file younger than this may be another process's write in flight
LOG = "train.log"  # a trial's output (all ranks), beside its result files
WATCHING_ONLY = {"tensorboard"}  # trial options that change what is logged, not what a trial computes
MAX_REASON = 500  # characters of a failed trial's reason kept in its summary
FOLLOW_SECONDS = 1.0  # how often the local sweep looks at its running trial's files


def same_trial(old_text: str, new: dict) -> bool:
    """Whether a trial.yaml written by an older lbscale describes the trial `new` describes: options it lacks
    must have today's defaults, and a default an upgrade renamed (config.UPGRADED_VALUES) is the same value."""
    from lbscale.train.config import UPGRADED_VALUES, TrialConfig, to_dict

    try:
        old = yaml.safe_load(old_text)
    except yaml.YAMLError:
        return False
    if not isinstance(old, dict):
        return False
    defaults = {k: v for k, v in to_dict(TrialConfig()).items() if v is not None}
    for key in (set(old) | set(new)) - WATCHING_ONLY:
        was, now = old.get(key, defaults.get(key)), new.get(key, defaults.get(key))
        if was != now and (key, was, now) not in UPGRADED_VALUES:
            return False
    return True


def write_trial_files(plans: list[SweepTrial]) -> None:
    """trial.yaml, grid.json and (with pruning) peers.json per trial; a changed config of a trial that already
    has results is an error."""
    for p in plans:
        p.out.mkdir(parents=True, exist_ok=True)
        # a killed sweep's (never a trial's); the sweep and an array task may both be writing here right now
        remove_leftovers(p.out, (TRIAL_YAML, GRID, PEERS, RUN, SUBMITTED), older_than=IN_FLIGHT_SECONDS)
        text = yaml.safe_dump(trial_yaml(p), sort_keys=True)
        path = p.out / TRIAL_YAML
        old = path.read_text() if path.exists() else None
        if old != text:
            if old is not None and trial_state(p.out)["state"] != "pending" and not same_trial(old, trial_yaml(p)):
                raise LbscaleError(f"{path}: the spec changed for a trial that has results; use another --results")
            write_atomic(path, text)
        if read_json(p.out / GRID) != p.axes():
            write_json(p.out / GRID, p.axes())
        if p.config.prune != "none":
            peers = {"group": p.config.prune_group, "members": list(p.peers)}
            if read_json(p.out / PEERS) != peers:
                write_json(p.out / PEERS, peers)


def select(plans: list[SweepTrial], retry_failed: bool) -> list[SweepTrial]:
    """Trials that still need work: not finished, and failed ones with retry_failed or where the disk or the
    folders failed them (cause ENVIRONMENT: the one-line error told the user to run the command again).

    A failed trial keeps its summary.json until its new attempt starts (`run_process` moves it to attempts/),
    so a submission that fails loses nothing."""
    todo = []
    for p in plans:
        summary = read_json(p.out / SUMMARY)
        if summary and (summary.get("status") in FINISHED or not (retry_failed or summary.get("cause") == ENVIRONMENT)):
            continue
        todo.append(p)
    return todo


TRAIN_MODULE = "lbscale.cli"  # what a trial's process runs (`python -m`), and what warm start may fork instead


def train_argv(p: SweepTrial) -> list[str]:
    return [sys.executable, "-m", TRAIN_MODULE, "train", "--config", str(p.out / TRIAL_YAML), "--resume", "--quiet"]


def local_argv(p: SweepTrial) -> list[str]:
    """The trial's command on this machine: one process; torchrun with one process per 'GPU'; under
    `engine: horovod`, horovodrun's Gloo launcher at any count (its ranks and their rendezvous on this host)."""
    argv = train_argv(p)
    if p.config.engine == "horovod":
        return [sys.executable, "-m", "horovod.runner.launch", "--gloo", "-np", str(p.gpus), "-H",
                f"localhost:{p.gpus}", *argv]
    if p.gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p.gpus}",
                *argv[1:]]
    return argv


def _die_with_parent() -> None:
    """Linux: the trial gets SIGTERM (checkpoint, exit 75) if the sweep process is killed, even by -9."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_for_previous_run(p: SweepTrial, timeout: float = 300) -> None:
    """A process from an interrupted sweep may still be checkpointing this trial: let it finish first."""
    deadline = time.time() + timeout
    while running_here(p.out):
        if time.time() > deadline:
            raise LbscaleError(f"{p.out}: another process is still running this trial ({read_json(p.out / RUN)})")
        time.sleep(1)


def failed_for_environment(p: SweepTrial) -> dict | None:
    """The summary of a trial that a full disk or a folder it may not write failed (cause ENVIRONMENT: the next
    sweep retries it), else None."""
    summary = read_json(p.out / SUMMARY) or {}
    return summary if summary.get("status") == "failed" and summary.get("cause") == ENVIRONMENT else None


def environment_failure(plans: list[SweepTrial]) -> str | None:
    """The error line of the first of `plans` that failed for the environment (`failed_for_environment`), None
    where none did: a sweep stops there, since every trial after it would fail the same way."""
    for p in plans:
        summary = failed_for_environment(p)
        if summary is not None:
            return summary.get("error") or f"{p.out}: the disk or its folders failed this trial; run it again"
    return None


def finished(p: SweepTrial) -> bool:
    """Whether the trial has a result of its own (completed, diverged, pruned)."""
    summary = read_json(p.out / SUMMARY)
    return bool(summary) and summary.get("status") in FINISHED


def run_process(p: SweepTrial, argv: list[str], job: str | None = None, extra_env: dict | None = None,
                follow=None, warm: bool = False, deadline: float | None = None) -> int:
    """Run one trial's command, with run.json marking who works on it: the trial process itself, which
    outlives a killed sweep by the few seconds it needs to checkpoint. `follow`, where given, is called about
    once a second while it runs (the sweep's progress).

    A trial that another process has finished meanwhile is not run (0): its summary is its result, never an
    earlier attempt to archive, and its train.log gets no second run's lines.

    Returns REQUEUE_EXIT whenever the trial stopped on a signal with a checkpoint: with several ranks, torchrun
    kills the others as soon as the first exits 75 (srun waits RANK_EXIT_WAIT seconds for them), so the step's
    own code may be a signal's even though every rank had written the preemption checkpoint. A trial that exits with an
    error of its own and no summary (bad data, a crash before its first result) gets a failed summary whose
    reason is its last line of output: else it would look pending, and be rerun, forever.

    With `warm`, a one-process `lbscale train` is forked from the warm-start server (sweep/warm.py)."""
    if finished(p):
        return 0
    started = time.time()
    archive_summary(p.out)  # a retried failed trial: its record moves to attempts/, its checkpoint is resumed
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    log_path = p.out / LOG
    with open(log_path, "a") as log:
        log_start = log.tell()
        command = warm_start.command(argv, TRAIN_MODULE) if warm and warm_start.enabled() else None
        if command is not None:
            proc = warm_start.WarmTrial(*command, str(log_path), env, _die_with_parent)
        else:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        write_json(p.out / RUN, {"host": socket.gethostname(), "pid": proc.pid, "job": job,
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
        code = _wait(proc, follow, deadline)
    info = checkpoint_info(p.out)
    if code != 0 and not (p.out / SUMMARY).exists() and info.get("reason") in (PREEMPTED, WAITING) \
            and info.get("written", 0) >= started:
        code = REQUEUE_EXIT
    if code not in (0, REQUEUE_EXIT) and not (p.out / SUMMARY).exists() and not _stopped_from_outside(code):
        write_failed_summary(p.out, failure_reason(log_path, log_start, code), exit_code=code, log=str(log_path))
    if code != REQUEUE_EXIT:
        (p.out / RUN).unlink(missing_ok=True)
    return code


def _wait(proc, follow, deadline: float | None = None) -> int:
    """The trial's exit code; `follow` called between waits; past `deadline` (monotonic), one SIGTERM, on which
    the trial checkpoints and exits (REQUEUE_EXIT)."""
    while follow is not None or deadline is not None:
        try:
            return proc.wait(timeout=FOLLOW_SECONDS)
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                os.kill(proc.pid, signal.SIGTERM)
                deadline = None
            try:
                if follow is not None:
                    follow()
            except LbscaleError:  # a result file being rewritten: the progress waits, the trial does not
                pass
    return proc.wait()


def waiting(p: SweepTrial) -> bool:
    """Checkpointed at a rung of synchronous successive halving, until its peers get there."""
    return not (p.out / SUMMARY).exists() and checkpoint_reason(p.out) == WAITING


def _stopped_from_outside(code: int) -> bool:
    """Killed by a signal (negative: the process itself; 128 + n: through srun, torchrun or a shell), as by
    scancel, a sweep interrupted with Ctrl-C or the OOM killer: the trial is interrupted, not failed, and the
    next run resumes it."""
    return code < 0 or code - 128 in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGHUP)


def failure_reason(log_path: Path, start: int, code: int) -> str:
    """The last line the trial wrote to its log after byte `start` (its error, one line by the CLI's contract;
    a traceback's last line otherwise), without the CLI's prefix."""
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        lines = []
    if not lines:
        return f"exit {code} without a message"
    return (error_line(lines) or lines[-1])[:MAX_REASON]


def outcome(p: SweepTrial, code: int) -> str:
    """The trial's state after its process exited `code`: 'completed val_top1 0.9312', 'failed: why (...)'."""
    s = trial_state(p.out)
    if s["state"] == "failed":
        return f"failed: {s['error']} (exit {code}, see {p.out / LOG})"
    shown = f" {s['metric']} {s['value']:.4f}" if s["metric"] and s["value"] is not None else ""
    stopped = "" if code in (0, REQUEUE_EXIT) else f" (exit {code}, see {p.out / LOG})"
    return f"{s['state']}{shown}{stopped}"


def next_stage(plans: list[SweepTrial], run: SweepRun, announce: bool = True) -> list[SweepTrial]:
    """The trials that follow `plans` now (`run.more`: the confirmation stage of the cells whose search finished,
    or with --until-resolved a round), those not planned already; a confirmation stage announced."""
    planned = {q.trial_id for q in plans}
    more = [p for p in (run.more(plans) if run.more else []) if p.trial_id not in planned]
    if announce and more and all(p.confirms and not p.round for p in more):
        print(f"confirmation stage: {len(more)} trials (the best points of each batch, more seeds)", flush=True)
    return more


def done_line(plans: list[SweepTrial], results: Path) -> str:
    """A sweep's last line: its trials' states and what to run next."""
    states = count_line([trial_state(p.out)["state"] for p in plans])
    return f"sweep done: {states}; results in {results} (next: lbscale report {results})"


def arrival_order(plans: list[SweepTrial]) -> list[SweepTrial]:
    """The order a local sweep runs its trials in: cells as planned, the search points inside each cell of a
    halving group in a seeded shuffle of their own (a hash of the group), so that asynchronous halving, where the
    first to arrive always goes on, does not favour the same LR point at every batch."""
    groups: dict[str, list[SweepTrial]] = {}
    for p in plans:
        groups.setdefault(p.config.prune_group or p.trial_id, []).append(p)
    out = []
    for name, members in groups.items():
        if len(members) > 1 and members[0].config.prune == "asha":
            order = np.random.default_rng(zlib.crc32(name.encode())).permutation(len(members))
            members = [members[i] for i in order]
        out += members
    return out


class LocalLauncher:
    """Trials one after another on this machine: one process, or torchrun with one process per 'GPU'."""

    name = "local"
    help = "trials one after another on this machine (torchrun for several processes)"
    wall = None  # sweep.budget.WallBudget: no trial starts once it is spent; a running one stops at GRACE x it

    def launch(self, plans: list[SweepTrial], run: SweepRun) -> int:
        self.wall = run.wall
        try:
            return self._launch(plans, run)
        finally:
            if self.wall is not None:
                self.wall.save()

    def _launch(self, plans: list[SweepTrial], run: SweepRun) -> int:
        write_trial_files(plans)
        todo = arrival_order(select(plans, run.options.retry_failed))
        print(f"{len(plans) - len(todo)} of {len(plans)} trials already finished; running {len(todo)}", flush=True)
        failures, progress, warned = 0, SweepProgress(), set()
        while True:  # also with nothing to run: a rerun after the last round's trials decides the next one
            failures += self.run_rounds(todo, progress) if todo else 0
            for line in budget_warnings(plans):  # batches that cannot reach the target within their epochs
                if line not in warned:
                    print(f"warning: {line}", flush=True)
                    warned.add(line)
            if self.wall is not None and self.wall.over():
                print(f"wall budget spent ({self.wall.line()}): no further trial or round; a rerun with a larger "
                      "--wall resumes", flush=True)
                next_stage(plans, run, announce=False)  # the rounds record where the budget left B_crit
                break
            more = next_stage(plans, run)
            if not more:
                break
            write_trial_files(more)
            plans = plans + more
            todo = select(more, run.options.retry_failed)
        print(done_line(plans, run.results))
        return 1 if failures else 0

    def run_rounds(self, todo: list[SweepTrial], progress: SweepProgress) -> int:
        """Run `todo`, and again the trials that wait at a rung of synchronous halving for peers that ran after
        them, until none waits or a round changes nothing (a peer outside this run never reports); the failures."""
        failures, seen = 0, None
        while todo:
            for i, p in enumerate(todo, 1):
                if self.wall is not None and self.wall.over():
                    return failures  # the launch says so; the trials left start on a rerun
                deadline = self.wall.deadline() if self.wall is not None else None
                code = self.run_trial(p, progress, f"[{i}/{len(todo)}]", todo[i:], deadline)
                failures += code not in (0, REQUEUE_EXIT)
                if self.wall is not None:
                    self.wall.save()
            todo = [p for p in todo if waiting(p)]
            now = [(p.trial_id, checkpoint_info(p.out).get("step")) for p in todo]
            if todo and now == seen:
                print(f"{len(todo)} trials still wait at a rung for peers that did not report (see rungs.json)",
                      flush=True)
                return failures + len(todo)
            seen = now
            if todo:
                print(f"next round of synchronous halving: {len(todo)} waiting trials", flush=True)
        return failures

    @staticmethod
    def run_trial(p: SweepTrial, progress: SweepProgress, at: str, rest: list[SweepTrial],
                  deadline: float | None = None) -> int:
        """One trial, followed by `progress` while it runs; its outcome line. Past `deadline` (monotonic) it is
        sent SIGTERM: it checkpoints and stops, and a rerun resumes it."""
        wait_for_previous_run(p)
        if finished(p):  # by another process since the sweep looked (one without the lock: an older lbscale)
            print(f"{at} {p.trial_id}: {outcome(p, 0)} (finished by another process)", flush=True)
            return 0
        argv = local_argv(p)
        try:
            with progress.trial(p, at, rest) as follow:
                code = run_process(p, argv, follow=follow, warm=True, deadline=deadline)
        except KeyboardInterrupt:  # Ctrl-C: the trial checkpoints as it stops (SIGINT reaches it too)
            raise KeyboardInterrupt(f"sweep interrupted in {p.trial_id}; finished trials are kept: run the same "
                                    "command again to resume (this trial from its checkpoint)") from None
        if waiting(p):  # not interrupted: the next round resumes it
            (p.out / RUN).unlink(missing_ok=True)
        print(f"{at} {p.trial_id}: {outcome(p, code)}", flush=True)
        line = environment_failure([p])
        if line is not None:  # a full disk: the one line and exit 2; a rerun retries the trial
            raise LbscaleError(line)
        return code
