"""`lbscale sweep --dry-run --estimate`: the sweep's expected duration from steps timed here.

For each distinct trial shape (`eta.shape_key`: data, model, batch, processes, precision, ...), its first trial
runs for real in a temporary directory: `lbscale train` with the trial's own options but one epoch, an
evaluation of the whole evaluation split every W optimizer steps and a preemption after 2 W, so it exits 75
with two step records. The seconds per step come from between them (past start-up and compile), an evaluation's
seconds from the second, the start-up from the process's wall time beyond both. The sweep's duration is the sum
over the trials still to run of steps x seconds per step, their evaluations (the whole split after each epoch,
and the step evaluations they ask for, by their subset) and one start-up each; a trial whose batch grows is
priced at its first batch's seconds per sample, an upper bound (`trial_seconds`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from lbscale.config import NO_PRUNING, to_dict
from lbscale.data.formats import open_prepared
from lbscale.errors import LbscaleError, error_line
from lbscale.results import METRICS, REQUEUE_EXIT, read_jsonl
from lbscale.sweep.eta import clock, shape_key
from lbscale.sweep import warm as warm_start
from lbscale.sweep.launch import TRAIN_MODULE, select
from lbscale.sweep.plan import TrialPlan, trial_yaml

TIMED_STEPS = 5  # W: steps before the first timing record, and again before the second
# options of the timing run: no pruning, target, TensorBoard or step subset of the trial's own
TIMING_OFF = {"eval_every_samples": None, "eval_subset": None, **NO_PRUNING, "prune_metric": None,
              "stop_at_target": False, "target_metric": None, "target": None, "tensorboard": False}


@dataclass
class ShapeTiming:
    """What one shape's timing run measured."""

    step_seconds: float
    eval_seconds: float  # one evaluation of the whole evaluation split
    eval_samples: int
    startup: float  # the process's wall time beyond its steps and evaluations: start-up, checkpoint, exit
    steps: tuple[int, int]  # timed from this step to that (from 0: start-up and compile included)


def print_estimate(plans: list[TrialPlan], retry_failed: bool, warm: bool = False) -> None:
    """Time each shape of the trials still to run and print one line per shape, then the sweep's expected
    duration and what it rests on. `warm`: a local sweep's one-process trials start warm (sweep/warm.py), and are
    timed so; the warm-start server's own start-up (its imports, once per sweep) is left out."""
    todo = select(plans, retry_failed)
    shapes = _shapes(todo)
    print(f"timing {len(shapes)} trial shapes on {socket.gethostname()}: {TIMED_STEPS} + {TIMED_STEPS} optimizer "
          "steps of each (fewer where an epoch is shorter) ...", flush=True)
    total = 0.0
    for group in shapes.values():
        t = time_shape(group[0], warm)
        count = f"{len(group)} trial{'s' if len(group) != 1 else ''}"
        print(f"shape {_name(group[0], shapes)} ({count}): {t.step_seconds:.4g} s per step (steps {t.steps[0]} to "
              f"{t.steps[1]}), evaluation {t.eval_seconds:.3g} s ({t.eval_samples:,} samples of "
              f"{group[0].config.eval_split}), start-up {t.startup:.3g} s", flush=True)
        total += sum(trial_seconds(p, t) for p in group)
    done = len(plans) - len(todo)
    print(f"expected duration: about {clock(total)} for {len(todo)} trials one after another"
          f"{f' ({done} finished already)' if done else ''}: steps x seconds per step, the evaluations after "
          "every epoch and during training, a start-up each (a trial whose batch grows: its first batch's seconds per "
          "sample, an upper bound); timed here, so another machine (a SLURM node) runs at its own pace; pruning and "
          "stopping at a target end trials sooner")


def trial_seconds(p: TrialPlan, t: ShapeTiming) -> float:
    """One trial's expected seconds from its shape's timing (pure: steps and evaluations by hand). A trial whose
    batch grows (`batch_schedule`) takes fewer, larger steps: its training is priced at its first batch's seconds
    per sample over all its samples (the plan's steps at the first batch), an upper bound where a larger batch
    takes fewer seconds per sample, and its step evaluations counted over the steps it takes."""
    from dataclasses import asdict

    from lbscale.train.batches import run_steps

    cfg, plan = p.config, p.plan
    if cfg.eval_every:
        taken = run_steps(cfg.batch_schedule, cfg.epochs, asdict(plan)) or plan.total_steps
        step_evals = taken // cfg.eval_every
    elif cfg.eval_every_samples:
        step_evals = plan.total_steps * plan.global_batch // cfg.eval_every_samples
    else:
        step_evals = 0
    subset = min(1.0, cfg.eval_subset / t.eval_samples) if cfg.eval_subset and t.eval_samples else 1.0
    return (t.startup + plan.total_steps * t.step_seconds + cfg.epochs * t.eval_seconds
            + step_evals * t.eval_seconds * subset)


def time_shape(p: TrialPlan, warm: bool = False) -> ShapeTiming:
    """Run trial `p` here for 2 W optimizer steps in a temporary directory and read its records; with `warm`, a
    one-process trial is forked from the warm-start server as a local sweep would start it."""
    if p.nodes > 1 or p.gpus > (os.cpu_count() or 1):
        raise LbscaleError(f"--estimate: trial {p.trial_id} needs {p.gpus} processes on {p.nodes} nodes; this "
                           f"machine has {os.cpu_count()} CPUs: estimate inside an allocation of that shape "
                           "(--batch and --gpus select it)")
    w = max(1, min(TIMED_STEPS, p.plan.steps_per_epoch // 2))
    with tempfile.TemporaryDirectory(prefix="lbscale-estimate-") as tmp:
        options = {**trial_yaml(p), **TIMING_OFF, "out": tmp, "epochs": 1, "eval_every": w,
                   "preempt_after_steps": 2 * w}
        config = Path(tmp) / "trial.yaml"
        config.write_text(yaml.safe_dump({k: v for k, v in options.items() if v is not None}))
        argv = [sys.executable, "-m", TRAIN_MODULE, "train", "--config", str(config), "--quiet"]
        if p.gpus > 1:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p.gpus}",
                    *argv[1:]]
        code, wall, output = _timed_run(argv, Path(tmp) / "train.log", warm and p.gpus == 1)
        records = [r for r in read_jsonl(Path(tmp) / METRICS) if r.get("kind") == "step"]
    if code not in (0, REQUEUE_EXIT) or not records:
        lines = output.splitlines()
        why = error_line(lines) or (lines[-1] if lines else f"exit {code}")
        raise LbscaleError(f"--estimate: trial {p.trial_id} did not run here: {why}")
    with open_prepared(p.config.data) as data:
        eval_samples = data.size(p.config.eval_split) if data.has_split(p.config.eval_split) else 0
    return timing_from(records, wall, eval_samples)


def _timed_run(argv: list[str], log: Path, warm: bool) -> tuple[int, float, str]:
    """(exit code, wall seconds, output) of the timing run: forked warm (the server made ready first, untimed)
    or a fresh process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = warm_start.command(argv, TRAIN_MODULE) if warm and warm_start.enabled() else None
    if command is None:
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        return done.returncode, time.perf_counter() - t0, done.stdout + done.stderr
    warm_start.ready(command[0])
    t0 = time.perf_counter()
    code = warm_start.WarmTrial(*command, str(log), env).wait()
    wall = time.perf_counter() - t0
    return code, wall, log.read_text(errors="replace") if log.exists() else ""


def timing_from(records: list[dict], wall: float, eval_samples: int) -> ShapeTiming:
    """A shape's timing from its run's step records (elapsed seconds leave evaluations out) and wall time."""
    last = records[-1]
    first = records[-2] if len(records) > 1 else {"step": 0, "elapsed_seconds": 0.0}
    step_seconds = (last["elapsed_seconds"] - first["elapsed_seconds"]) / (last["step"] - first["step"])
    evals = sum(r.get("eval_seconds", 0.0) for r in records)
    startup = max(0.0, wall - last["elapsed_seconds"] - evals)
    return ShapeTiming(step_seconds, last.get("eval_seconds", 0.0), eval_samples, startup,
                       (first["step"], last["step"]))


def _shapes(plans: list[TrialPlan]) -> dict[tuple, list[TrialPlan]]:
    shapes: dict[tuple, list[TrialPlan]] = {}
    for p in plans:
        shapes.setdefault(shape_key(to_dict(p.config), p.gpus), []).append(p)
    return shapes


def _name(p: TrialPlan, shapes: dict) -> str:
    """'b64-g1', or with the variant where two shapes share batch and GPUs."""
    short = f"b{p.plan.global_batch}-g{p.gpus}"
    same = sum(q[0].plan.global_batch == p.plan.global_batch and q[0].gpus == p.gpus for q in shapes.values())
    return short if same == 1 else p.trial_id.rsplit("-s", 1)[0]
