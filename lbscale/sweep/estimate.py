"""`lbscale sweep --dry-run --estimate`: the sweep's expected duration from steps timed here.

For each distinct trial shape (`eta.shape_key`: data, model, batch, processes, precision, ...), its first trial
runs for real in a temporary directory: `lbscale train` with the trial's own options, an evaluation of the whole
evaluation split every W optimizer steps and a preemption after (1 + R) W steps, so it exits 75 with 1 + R step
records. The first W steps (compile, cold caches, the loader's first reads) are not timed; the seconds per step
are the median of the R windows after them, and the fastest and slowest window are printed as its spread (one
window of 5 steps used to decide it, and a disturbed one moved a plan's estimate from 4:21 to 1:53:16). The
start-up is the process's wall time beyond its steady steps and its evaluations: the first window's extra time is
in it, paid once by every trial. The sweep's duration is the sum over the trials still to run, and the
confirmation trials still to come, of steps x seconds per step, their evaluations (the whole split after each
epoch, the step evaluations they ask for, by their subset, and the test split once at the end of each) and one
start-up each, plus the warm-start
server's start once; a trial whose batch grows is priced at its first batch's seconds per sample, an upper bound
(`trial_seconds`).
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from lbscale.analysis.evaluations import check_reads, check_share, geometric_steps, near_checks, spaced_evals
from lbscale.analysis.pricing import OFF_OPTIMUM, bowl_factor, designed_samples
from lbscale.train.config import NO_PRUNING, to_dict
from lbscale.data.formats import open_prepared
from lbscale.errors import LbscaleError, error_line
from lbscale.results import METRICS, REQUEUE_EXIT, read_jsonl
from lbscale.sweep.eta import clock, shape_key
from lbscale.sweep import warm as warm_start
from lbscale.sweep.launch import TRAIN_MODULE, select
from lbscale.sweep.plan import SweepTrial, point_id, trial_yaml

WINDOW_STEPS = 5  # W: the optimizer steps of one window (the first window is not timed)
WINDOWS = 6  # R: the timed windows after it, whose median is the pace
# options of the timing run: no pruning, target, TensorBoard or step subset of the trial's own
TIMING_OFF = {"eval_every_samples": None, "eval_spacing": None, "eval_first": None, "eval_subset": None,
              **NO_PRUNING, "prune_metric": None, "stop_at_target": False, "target_metric": None, "target": None,
              "tensorboard": False}


@dataclass
class ShapeTiming:
    """What one shape's timing run measured."""

    step_seconds: float  # the median window's seconds per step
    eval_seconds: float  # one evaluation of the whole evaluation split (the median)
    eval_samples: int
    startup: float  # the process's wall time beyond its steady steps and evaluations: start-up, first steps, exit
    steps: tuple[int, int]  # timed from this step to that
    step_range: tuple[float, float] = (math.nan, math.nan)  # the fastest and slowest window's seconds per step
    windows: int = 1
    final_samples: int = 0  # the test split a finished trial evaluates once at its end (`Evaluator.test_figures`;
    # 0 where the file has none or it is the evaluation split): not in the timing run, which stops before its end

    def final_seconds(self) -> float:
        """The seconds of that last evaluation, at the evaluation split's pace per example."""
        return self.eval_seconds * self.final_samples / self.eval_samples if self.eval_samples else 0.0

    @property
    def spread(self) -> float:
        """(slowest - fastest window) / median, 0 with one window."""
        lo, hi = self.step_range
        return (hi - lo) / self.step_seconds if self.step_seconds > 0 and lo == lo else 0.0


def median_spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of repeated timings."""
    if not values:
        raise ValueError("no timings")
    v = sorted(values)
    mid = len(v) // 2
    median = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
    return median, v[0], v[-1]


def print_estimate(plans: list[SweepTrial], retry_failed: bool, warm: bool = False,
                   to_come: list[SweepTrial] = (), adaptive: bool = False, design: dict | None = None,
                   wall: float | None = None) -> None:
    """Time each shape of the trials still to run and print one line per shape, then the sweep's expected
    duration and what it rests on. `to_come`: the confirmation trials the sweep will add (stand-ins of their
    shape, `confirm.confirmation_to_come`), priced like the others; `adaptive`: the sweep runs adaptive rounds,
    which no estimate can price before their fits. `warm`: a local sweep's one-process trials start warm
    (sweep/warm.py), and are timed so, the warm-start server's own start (its imports) counted once."""
    todo = select(plans, retry_failed) + list(to_come)
    shapes = _shapes(todo)
    print(f"timing {len(shapes)} trial shapes on {socket.gethostname()}: {WINDOW_STEPS} optimizer steps of each, "
          f"then {WINDOWS} timed windows of {WINDOW_STEPS} (fewer steps a window where a batch schedule's first "
          "epoch is shorter) ...", flush=True)
    total, fastest, slowest, server, timed = 0.0, 0.0, 0.0, 0.0, []
    for group in shapes.values():
        t, started = time_shape(group[0], warm)
        server = max(server, started)
        count = f"{len(group)} trial{'s' if len(group) != 1 else ''}"
        lo, hi = t.step_range
        print(f"shape {_name(group[0], shapes)} ({count}): {t.step_seconds:.4g} s per step (the median of "
              f"{t.windows} windows, steps {t.steps[0]} to {t.steps[1]}; {lo:.4g}..{hi:.4g}, spread "
              f"{t.spread:.0%}), evaluation {t.eval_seconds:.3g} s ({t.eval_samples:,} samples of "
              f"{group[0].config.eval_split}), start-up {t.startup:.3g} s", flush=True)
        timed += [(p, t) for p in group]
        total += sum(trial_seconds(p, t) for p in group)
        fastest += sum(trial_seconds(p, replace(t, step_seconds=lo)) for p in group)
        slowest += sum(trial_seconds(p, replace(t, step_seconds=hi)) for p in group)
    done = len(plans) - len(select(plans, retry_failed))
    if server:
        print(f"the warm-start server's start: {server:.3g} s, once", flush=True)
    confirming = len(to_come)
    print(f"confirmation trials counted: {confirming} still to come"
          f"{' (the best points of each batch again with more seeds, at full length)' if confirming else ''}"
          f"{'; adaptive rounds (--until-resolved) are not in this estimate' if adaptive else ''}", flush=True)
    print(f"expected duration: about {clock(total + server)} ({clock(fastest + server)}..{clock(slowest + server)} "
          f"at the fastest and slowest window's pace) for {len(todo)} trials one after another"
          f"{f' ({done} finished already)' if done else ''}: steps x seconds per step, the evaluations after "
          "every epoch and during training and of the test split at its end, a start-up each (a trial whose batch "
          "grows: its first batch's seconds per "
          "sample, an upper bound); timed here, so another machine (a SLURM node) runs at its own pace; pruning and "
          "stopping at a target end trials sooner")
    if design and design.get("samples_to_target"):
        print(designed_line(timed, design, server, wall), flush=True)


def designed_line(timed: list[tuple[SweepTrial, ShapeTiming]], design: dict, server: float,
                  wall: float | None) -> str:
    """The designed spec's estimate: its trials priced as they will run (`designed_seconds`) at this machine's
    pace, batches the design did not predict at full length; the rounds up to the wall budget; where the pilot
    ran elsewhere, so said."""
    predicted = {int(b): float(s) for b, s in design["samples_to_target"].items()}
    total, full = server, 0
    for p, t in timed:
        samples = predicted.get(p.plan.global_batch)
        full += samples is None
        total += trial_seconds(p, t) if samples is None else designed_seconds(p, t, samples, design)
    host = design.get("host")
    where = ("" if not host or host == socket.gethostname() else
             f"; the pilot ran on {host}, not here: its curves hold, its times may not")
    rounds = f"; the rounds (--until-resolved) run up to the wall budget ({clock(wall)})" if wall else ""
    extra = f" ({full} at full length: batches the design did not predict)" if full else ""
    return (f"designed estimate: about {clock(total)} for {len(timed)} trials{extra}, stopped at the target after the "
            f"samples the pilot predicts per batch (design.samples_to_target), pruned as designed, at this machine's "
            f"pace{rounds}{where}")


def designed_seconds(p: SweepTrial, t: ShapeTiming, samples: float, design: dict | None = None) -> float:
    """A trial of a designed spec (`lbscale design`) priced as it will run: stopped at the target, which its
    batch's optimum reaches after `samples` (the design's prediction from its pilot), the trial's LR priced on the
    pilot's bowl (`design.bowl` about `design.bowl_lr`, `bowl_factor`; without one, OFF_OPTIMUM x), and, with a
    first rung, the search's points as the designer prices them (`designed_samples`); a confirmation trial reruns
    a best point, unpruned; its step evaluations on its subset, the whole split at each epoch's end and where a
    subset's value comes near the target (`near_evals` from `design.near_from`), a start-up."""
    cfg, plan = p.config, p.plan
    budget = plan.total_steps * plan.global_batch
    rung = cfg.prune_min_samples if cfg.prune != "none" else None
    bowl, ref = (design or {}).get("bowl"), (design or {}).get("bowl_lr")
    if bowl and ref and cfg.base_lr:
        factor = bowl_factor(bowl, cfg.base_lr / float(ref))
    else:  # a spec without the pilot's bowl (before it was recorded): the optimum's samples, x OFF_OPTIMUM unpruned
        factor = 1.0 if rung else OFF_OPTIMUM
    optimum = samples
    if p.confirms:  # a confirmation reruns a best point: the optimum's samples, as the designer prices it
        samples = min(samples, budget)
    elif cfg.prune == "none" or rung:
        samples = designed_samples(samples, rung, factor, budget)
    samples = min(samples, budget)
    steps = samples / plan.global_batch
    step_evals = spaced_evals(cfg.eval_first or 1, cfg.eval_spacing, steps) if cfg.eval_spacing else 0
    subset = min(1.0, cfg.eval_subset / t.eval_samples) if cfg.eval_subset and t.eval_samples else 1.0
    near = (design or {}).get("near_from")
    checks = (near_checks(cfg.eval_first or 1, cfg.eval_spacing, steps, optimum / plan.global_batch,
                          1.0 if p.confirms else factor, float(near))
              if near is not None and cfg.eval_spacing and subset < 1.0 else 0)  # the whole split near the target
    if checks:  # near each of the trial's targets (a designed ladder checks each)
        checks = len(cfg.targets) * check_reads(checks, check_share(cfg.targets[-1], cfg.eval_subset, t.eval_samples))
    epochs = samples / max(plan.train_samples or samples, 1)
    return (t.startup + steps * t.step_seconds + (epochs + checks) * t.eval_seconds
            + step_evals * t.eval_seconds * subset + t.final_seconds())


def trial_seconds(p: SweepTrial, t: ShapeTiming) -> float:
    """One trial's expected seconds from its shape's timing (pure: steps and evaluations by hand). A trial whose
    batch grows (`batch_schedule`) takes fewer, larger steps: its training is priced at its first batch's seconds
    per sample over all its samples (the plan's steps at the first batch), an upper bound where a larger batch
    takes fewer seconds per sample, and its step evaluations counted over the steps it takes."""
    from dataclasses import asdict

    from lbscale.train.batch_schedule import run_steps

    cfg, plan = p.config, p.plan
    if cfg.eval_every:
        taken = run_steps(cfg.batch_schedule, cfg.epochs, asdict(plan)) or plan.total_steps
        step_evals = taken // cfg.eval_every
    elif cfg.eval_every_samples:
        step_evals = plan.total_steps * plan.global_batch // cfg.eval_every_samples
    elif cfg.eval_spacing:
        step_evals = len(geometric_steps(cfg.eval_first or 1, cfg.eval_spacing, plan.total_steps))
    else:
        step_evals = 0
    subset = min(1.0, cfg.eval_subset / t.eval_samples) if cfg.eval_subset and t.eval_samples else 1.0
    return (t.startup + plan.total_steps * t.step_seconds + cfg.epochs * t.eval_seconds
            + step_evals * t.eval_seconds * subset + t.final_seconds())


def time_shape(p: SweepTrial, warm: bool = False, what: str | None = None) -> tuple[ShapeTiming, float]:
    """Run trial `p` here for (1 + R) W optimizer steps in a temporary directory and read its records; with
    `warm`, a one-process trial is forked from the warm-start server as a local sweep would start it. Also the
    seconds the server took to start (0 where it ran already or is not used). `what`: whose timing a failure's
    one line names (`--estimate: trial ID` by default)."""
    if p.nodes > 1 or p.gpus > (os.cpu_count() or 1):
        raise LbscaleError(f"--estimate: trial {p.trial_id} needs {p.gpus} processes on {p.nodes} nodes; this "
                           f"machine has {os.cpu_count()} CPUs: estimate inside an allocation of that shape "
                           "(--batch and --gpus select it)")
    w, epochs = timing_steps(p.plan.steps_per_epoch, bool(p.config.batch_schedule))
    with tempfile.TemporaryDirectory(prefix="lbscale-estimate-") as tmp:
        options = {**trial_yaml(p), **TIMING_OFF, "out": tmp, "epochs": epochs, "eval_every": w,
                   "preempt_after_steps": (1 + WINDOWS) * w}
        config = Path(tmp) / "trial.yaml"
        config.write_text(yaml.safe_dump({k: v for k, v in options.items() if v is not None}))
        argv = [sys.executable, "-m", TRAIN_MODULE, "train", "--config", str(config), "--quiet"]
        if p.gpus > 1:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p.gpus}",
                    *argv[1:]]
        code, wall, output, started = _timed_run(argv, Path(tmp) / "train.log", warm and p.gpus == 1)
        records = [r for r in read_jsonl(Path(tmp) / METRICS) if r.get("kind") == "step"]
    if code not in (0, REQUEUE_EXIT) or not records:
        lines = output.splitlines()
        why = error_line(lines) or (lines[-1] if lines else f"exit {code}")
        raise LbscaleError(f"{what or f'--estimate: trial {p.trial_id}'} did not run here: {why}")
    with open_prepared(p.config.data) as data:
        eval_samples = data.size(p.config.eval_split) if data.has_split(p.config.eval_split) else 0
        final = data.size("test") if data.has_split("test") and p.config.eval_split != "test" else 0
    return replace(timing_from(records, wall, eval_samples), final_samples=final), started


def timing_steps(steps_per_epoch: int, batch_schedule: bool) -> tuple[int, int]:
    """(W steps a window, epochs) of a timing run: as many epochs as its (1 + R) W steps need; a batch schedule's
    within its first epoch, where its batch is the first (windows shrink to fit, one step at the least)."""
    if batch_schedule:
        return max(1, min(WINDOW_STEPS, steps_per_epoch // (1 + WINDOWS))), 1
    return WINDOW_STEPS, max(1, math.ceil((1 + WINDOWS) * WINDOW_STEPS / max(steps_per_epoch, 1)))


def _timed_run(argv: list[str], log: Path, warm: bool) -> tuple[int, float, str, float]:
    """(exit code, wall seconds, output, seconds the warm-start server took to start) of the timing run: forked
    warm (the server made ready first, timed apart) or a fresh process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = warm_start.command(argv, TRAIN_MODULE) if warm and warm_start.enabled() else None
    if command is None:
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        return done.returncode, time.perf_counter() - t0, done.stdout + done.stderr, 0.0
    t0 = time.perf_counter()
    warm_start.ready(command[0])
    started = time.perf_counter() - t0
    t0 = time.perf_counter()
    code = warm_start.WarmTrial(*command, str(log), env).wait()
    wall = time.perf_counter() - t0
    return code, wall, log.read_text(errors="replace") if log.exists() else "", started


def timing_from(records: list[dict], wall: float, eval_samples: int) -> ShapeTiming:
    """A shape's timing from its run's step records (elapsed seconds leave evaluations out) and wall time: the
    median window after the first (with one record, the pace from step 0), the median evaluation, and the wall
    time beyond the steady steps and the evaluations as start-up."""
    marks = [{"step": 0, "elapsed_seconds": 0.0}, *records]
    paces = [(b["elapsed_seconds"] - a["elapsed_seconds"]) / (b["step"] - a["step"])
             for a, b in zip(marks, marks[1:]) if b["step"] > a["step"]]
    timed = paces[1:] or paces
    step_seconds, lo, hi = median_spread(timed)
    last = records[-1]
    evals = [r.get("eval_seconds", 0.0) for r in records]
    first = records[0] if len(records) > 1 else marks[0]
    startup = max(0.0, wall - last["elapsed_seconds"] - sum(evals)
                  + max(0.0, first["elapsed_seconds"] - first["step"] * step_seconds))
    return ShapeTiming(step_seconds, median_spread(evals)[0], eval_samples, startup, (first["step"], last["step"]),
                       (lo, hi), len(timed))


def _shapes(plans: list[SweepTrial]) -> dict[tuple, list[SweepTrial]]:
    shapes: dict[tuple, list[SweepTrial]] = {}
    for p in plans:
        shapes.setdefault(shape_key(to_dict(p.config), p.gpus), []).append(p)
    return shapes


def _name(p: SweepTrial, shapes: dict) -> str:
    """'b64-g1', or with the variant where two shapes share batch and GPUs."""
    short = f"b{p.plan.global_batch}-g{p.gpus}"
    same = sum(q[0].plan.global_batch == p.plan.global_batch and q[0].gpus == p.gpus for q in shapes.values())
    return short if same == 1 else point_id(p.trial_id)
