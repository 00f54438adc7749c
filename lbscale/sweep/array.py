"""The SLURM array task's entry: `lbscale sweep SPEC --trial ID` inside a job runs one trial with one srun task
per GPU, requeues it on preemption (--requeue) or while it waits at a rung of synchronous halving, and gives up
in a failed summary where it must. It claims its trial through run.json, never the results directory's lock:
any number of array tasks share one results directory.
"""

from __future__ import annotations

import os
import time

from lbscale import slurm
from lbscale.errors import ERROR_PREFIX, LbscaleError
from lbscale.results import REQUEUE_EXIT, RUN, TASK_PERIODS, read_json, write_failed_summary, write_json
from lbscale.sweep.launch import (LOG, environment_failure, outcome, run_process, select, train_argv, waiting,
                                  write_trial_files)
from lbscale.sweep.options import SweepRun
from lbscale.sweep.plan import SweepTrial
from lbscale.sweep.state import trial_state

RUNG_WAITS = "rung-waits.json"  # how often an array task went back to the queue to wait at a rung
RUNG_WAIT_SECONDS = 30  # an array task waiting at a rung sleeps this long before it requeues itself
MAX_RUNG_WAITS = 500  # then it gives up: a peer that never reports (cancelled, crashed) must not loop forever
# srun: a rank that exits (75 after a preemption checkpoint, or an error) does not end the step at once; the
# others get this many seconds to exit by themselves before srun terminates them. Every rank leaves a
# preemption through the same barriers (checkpoint.save, teardown), so they exit within seconds of each other;
# a rank that failed alone leaves its peers stuck in a collective, and they are ended after this wait.
RANK_EXIT_WAIT = 60


def record_period(p: SweepTrial, start: float, seconds: float) -> None:
    """Add this task's running period to its trial's TASK_PERIODS (only the task running a trial writes there)."""
    periods = (read_json(p.out / TASK_PERIODS) or {}).get("periods", [])
    write_json(p.out / TASK_PERIODS, {"periods": [*periods, {"start": round(start, 3), "seconds": round(seconds, 3)}]})


def run_array_task(p: SweepTrial, run: SweepRun) -> int:
    """Inside a SLURM job: run one trial with one srun task per GPU; requeue on preemption if asked."""
    write_trial_files([p])
    if not select([p], run.options.retry_failed):
        print(f"{p.trial_id}: nothing to do ({trial_state(p.out)['state']}; failed trials run again with "
              "--retry-failed)")
        return 0
    env = slurm.SlurmEnv.current()
    argv, extra, rendezvous = train_argv(p), {}, None
    if env.in_job:
        argv = srun_argv(p, run.system, env.cpus_per_task) + argv
        try:
            extra = slurm.step_env(env, run.system)
            rendezvous = horovod_rendezvous(p, run.system, env, extra)
        except LbscaleError as e:  # the trial's own files say why, not only the job's output
            with open(p.out / LOG, "a") as log:
                log.write(f"{ERROR_PREFIX}{e}\n")
            return _give_up(p, str(e), env.restart_count)
    deadline = None
    if run.wall_seconds is not None:  # the sweep's wall budget: spent, no trial starts; else it stops at 1.1x it
        from lbscale.sweep.budget import GRACE, spent_seconds

        left = run.wall_seconds - spent_seconds(run.results)
        if left <= 0:
            print(f"{p.trial_id}: wall budget spent ({-left:.0f} s past it): not started; a rerun with a larger --wall "
                  "runs it", flush=True)
            return 0
        deadline = time.monotonic() + left + (GRACE - 1) * run.wall_seconds
    started = time.time()
    try:
        code = run_process(p, argv, job=env.job_name, extra_env=extra, deadline=deadline)
    finally:  # the sweep's wall budget counts the time its tasks ran (sweep.budget.array_seconds)
        record_period(p, started, time.time() - started)
        if rendezvous is not None:
            rendezvous.stop()
    print(f"{p.trial_id}: {outcome(p, code)}", flush=True)
    line = environment_failure([p])
    if line is not None:  # a full disk: the one line and exit 2 in the task's output; a rerun retries the trial
        raise LbscaleError(line)
    record = read_json(p.out / RUNG_WAITS) or {}
    waits = record.get("requeues", 0) if record.get("job") == env.job_name else 0  # SLURM counts per job
    if code == REQUEUE_EXIT and waiting(p) and env.job_name:  # synchronous halving: back in the queue
        if waits >= MAX_RUNG_WAITS:
            return _give_up(p, f"waited {waits} times at a rung for peers that did not report (see rungs.json); "
                               "a rerun of the sweep resumes it", env.restart_count)
        write_json(p.out / RUNG_WAITS, {"job": env.job_name, "requeues": waits + 1})  # not preemptions
        time.sleep(RUNG_WAIT_SECONDS)  # the peers train meanwhile: no instant resubmission loop
        if not slurm.requeue(env.job_name):
            print(f"{p.trial_id}: scontrol requeue {env.job_name} failed; the trial waits at its rung until the "
                  "sweep is run again", flush=True)
            return 1
        return 0
    if code == REQUEUE_EXIT and run.options.requeue and env.job_name:
        if env.restart_count - waits >= run.options.max_requeues:
            return _give_up(p, f"preempted {env.restart_count - waits + 1} times; requeue limit "
                               f"{run.options.max_requeues} reached (--max-requeues); its checkpoint resumes with "
                               "--retry-failed", env.restart_count)
        slurm.requeue(env.job_name)
        return 0
    return code


def horovod_rendezvous(p: SweepTrial, system: dict, env: slurm.SlurmEnv, extra: dict):
    """Under `engine: horovod` with several ranks: Horovod's rendezvous server in this task, on the job's first
    node, at the address DDP's ranks would meet at; what the ranks need to reach it is added to `extra`. None
    otherwise."""
    if p.config.engine != "horovod" or p.gpus == 1:
        return None
    from lbscale.train.horovod import Rendezvous, check_available

    check_available()
    hosts = env.hostnames()[:p.nodes]
    r = Rendezvous(p.gpus, min(p.gpus, system["gpus_per_node"]), hosts, extra.get("LBSCALE_MASTER_ADDR") or hosts[0],
                   extra.get("GLOO_SOCKET_IFNAME") or os.environ.get("GLOO_SOCKET_IFNAME"))
    extra.update(r.env)
    return r


def srun_argv(p: SweepTrial, system: dict, cpus_per_task: int | None = None) -> list[str]:
    """One task per GPU of the trial, over its nodes; CPUs per task passed on (srun no longer inherits them
    from the batch script since Slurm 22.05): the job's (`cpus_per_task`, SLURM_CPUS_PER_TASK, so an edited
    #SBATCH line wins), else the profile's."""
    per_node = min(p.gpus, system["gpus_per_node"])
    argv = ["srun", f"--ntasks={p.gpus}", f"--nodes={p.nodes}", f"--ntasks-per-node={per_node}",
            "--kill-on-bad-exit=0", f"--wait={RANK_EXIT_WAIT}"]
    cpus = cpus_per_task or system.get("cpus_per_task")
    if cpus is not None:
        argv.append(f"--cpus-per-task={cpus}")
    return argv + [str(a) for a in system.get("srun_args") or []]


def _give_up(p: SweepTrial, why: str, requeues: int) -> int:
    """An array task that stops requeueing its trial: failed, with why (its checkpoint stays for a retry)."""
    write_failed_summary(p.out, why, requeues=requeues)
    (p.out / RUN).unlink(missing_ok=True)
    print(f"{p.trial_id}: failed: {why}", flush=True)
    return 1


