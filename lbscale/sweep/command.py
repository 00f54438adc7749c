"""`lbscale sweep` and `lbscale status`: plan the grid, then dry-run, launch, or run one array task."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lbscale.config import load_sweep_spec
from lbscale.errors import LbscaleError
from lbscale.results import sweep_states
from lbscale.sweep.launch import LAUNCHERS, SweepRun, run_array_task
from lbscale.sweep.plan import build_plan, plan_table
from lbscale.sweep.systems import get_system


def run_sweep(spec_path, launcher="local", system=None, systems_file=None, results=None, batch=None, gpus=None,
              local_batch=None, seeds=None, epochs=None, account=None, partition=None, time_limit=None,
              dry_run=False, submit=True, wait=False, max_concurrent=None, retry_failed=False, requeue=False,
              array_task=None, trial=None) -> int:
    spec = load_sweep_spec(spec_path)
    if launcher not in LAUNCHERS:
        raise LbscaleError(f"--launcher: {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if max_concurrent is not None and max_concurrent < 1:
        raise LbscaleError("--max-concurrent must be >= 1")
    prof = get_system(system or spec.system, systems_file, account=account, partition=partition, time=time_limit)
    gpn = prof["gpus_per_node"] if launcher == "slurm" or array_task is not None or trial else 1 << 30
    results = Path(results or spec.results or Path("results") / spec.name).resolve()
    plans = build_plan(spec, results, gpn, batch=batch, gpus=gpus, local_batch=local_batch, seeds=seeds,
                       epochs=epochs)
    if dry_run:
        print(plan_table(plans))
        return 0
    plan_args = []
    for flag, value in (("--batch", batch), ("--gpus", gpus), ("--local-batch", local_batch), ("--seeds", seeds),
                        ("--epochs", epochs), ("--account", account), ("--partition", partition),
                        ("--time", time_limit)):
        if value is not None:
            plan_args += [flag, str(value)]
    # absolute paths: array tasks may start in another directory
    run = SweepRun(str(Path(spec_path).resolve()), results, plan_args, prof, systems_file, retry_failed, requeue,
                   max_concurrent, submit, wait)
    if array_task is not None or trial is not None:
        chosen = _pick(plans, array_task, trial)
        return run_array_task(chosen, run)
    return LAUNCHERS[launcher]().launch(plans, run)


def _pick(plans, array_task, trial):
    if trial is not None:
        for p in plans:
            if p.trial_id == trial:
                return p
        raise LbscaleError(f"no trial {trial!r} in this sweep")
    if array_task is None:
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        if task is None:
            raise LbscaleError("--array-task: no task id given and SLURM_ARRAY_TASK_ID is not set")
        array_task = int(task)
    if not 0 <= array_task < len(plans):
        raise LbscaleError(f"--array-task {array_task}: the sweep has {len(plans)} trials (0..{len(plans) - 1})")
    return plans[array_task]


def status_table(results) -> str:
    results = Path(results)
    if not results.is_dir():
        raise LbscaleError(f"{results}: no such results directory")
    states = sweep_states(results)
    if not states:
        raise LbscaleError(f"{results}: no trials (directories with a trial.yaml)")
    head = ["trial", "state", "epoch", "metric", "job", "elapsed"]
    rows = []
    for s in states:
        epoch = f"{s['epoch']}/{s['epochs']}" if s["epochs"] else str(s["epoch"])
        metric = f"{s['metric']}={s['value']:.4f}" if s["metric"] and s["value"] is not None else "-"
        elapsed = time.strftime("%H:%M:%S", time.gmtime(s["elapsed"])) if s["elapsed"] else "-"
        rows.append([s["trial"], s["state"], epoch, metric, s["job"] or "-", elapsed])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    counts = {}
    for s in states:
        counts[s["state"]] = counts.get(s["state"], 0) + 1
    footer = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return "\n".join([fmt.format(*head), *(fmt.format(*r) for r in rows), f"{len(states)} trials: {footer}"])
