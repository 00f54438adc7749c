"""`lbscale sweep` and `lbscale status`: plan the grid, then dry-run, launch, or run one array task."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from lbscale.errors import LbscaleError
from lbscale.slurm import SlurmEnv
from lbscale.sweep.launch import LAUNCHERS, run_array_task
from lbscale.sweep.options import SweepOptions, SweepRun
from lbscale.sweep.plan import build_plan, plan_table
from lbscale.sweep.spec import load_sweep_spec
from lbscale.sweep.state import count_line, sweep_states
from lbscale.sweep.systems import get_system


def run_sweep(spec_path, o: SweepOptions) -> int:
    """Plan the grid of `spec_path`, then print it (--dry-run), launch it, or run one of its trials."""
    spec = load_sweep_spec(spec_path)
    if o.launcher not in LAUNCHERS:
        raise LbscaleError(f"--launcher: {o.launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if o.max_concurrent is not None and o.max_concurrent < 1:
        raise LbscaleError("--max-concurrent must be >= 1")
    if o.max_requeues < 0:
        raise LbscaleError("--max-requeues must be >= 0")
    prof = get_system(o.system or spec.system, o.systems_file, account=o.account, partition=o.partition,
                      time=o.time_limit)
    one_task = o.array_task is not None or o.trial is not None
    gpn = prof["gpus_per_node"] if o.launcher == "slurm" or one_task else 1 << 30
    results = Path(o.results or spec.results or Path("results") / spec.name).resolve()
    plans = build_plan(spec, results, gpn, batch=o.batch, gpus=o.gpus, local_batch=o.local_batch, seeds=o.seeds,
                       epochs=o.epochs)
    if o.dry_run:
        print(plan_table(plans))
        return 0
    # absolute paths: array tasks may start in another directory
    if o.systems_file is not None:
        o = replace(o, systems_file=str(Path(o.systems_file).resolve()))
    run = SweepRun(spec_path=str(Path(spec_path).resolve()), results=results, system=prof, options=o)
    if one_task:
        return run_array_task(_pick(plans, o.array_task, o.trial), run)
    return LAUNCHERS[o.launcher]().launch(plans, run)


def _pick(plans, array_task, trial):
    if trial is not None:
        for p in plans:
            if p.trial_id == trial:
                return p
        raise LbscaleError(f"no trial {trial!r} in this sweep")
    if array_task is None:
        array_task = SlurmEnv.current().array_task_id
        if array_task is None:
            raise LbscaleError("--array-task: no task id given and SLURM_ARRAY_TASK_ID is not set")
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
    reasons = [f"{s['trial']}: {s['error']}" for s in states if s["state"] == "failed" and s["error"]]
    return "\n".join([fmt.format(*head), *(fmt.format(*r) for r in rows),
                      *(["failed:", *(f"  {r}" for r in reasons)] if reasons else []),
                      count_line([s["state"] for s in states])])
