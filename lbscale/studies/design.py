"""`lbscale design DATA --model M --wall 20m --out my-study.yaml`: a pilot measures what a batch-size study's
choices depend on, and writes the tuned spec `lbscale sweep --until-resolved` runs within the budget.

The pilot (kept in RESULTS-pilot/, reused by a rerun with the same inputs) runs through the normal trial path:
1. a timing run of the middle batch (`sweep --estimate`'s): seconds per step, per evaluation, the start-up; from
   it the pilot's epochs, so that its trials fit max(10% of the budget, 3 minutes); and one of the smallest batch
   the design may choose (SMALLEST), whose steps' fixed cost the larger batches' pace does not show;
2. three LRs (a factor sqrt(10) apart) at the middle batch, evaluated on the whole val split several times an
   epoch (as many as cost half its training, 1 to 8), a fourth past the edge where the best is at one;
3. where the best's curve still rose at its end, that trial trained on from its checkpoint (up to twice its
   epochs, with what the pilot has left past the next stage): the plateau, and so the target, lie further on;
4. three LRs at the largest batch, around the middle batch's best moved by the square-root rule.
From their curves and timings (analysis/design.py): the plateau and the target, the critical batch's guess and
the batch range around it, the LR range, the evaluation subset and spacing, the first rung, the epochs. Every
choice is written with its measured reason as a comment.
"""

from __future__ import annotations

import bisect
import math
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from lbscale.analysis import design as d
from lbscale.errors import LbscaleError
from lbscale.sweep.budget import parse_wall
from lbscale.results import METRICS, SUMMARY, read_json, read_jsonl, write_atomic, write_json

PILOT_FILE = "pilot.json"
PILOT_SHARE, PILOT_FLOOR = 0.10, 180.0  # the pilot takes at most max(10% of the budget, 3 minutes)
# a pilot trial of one epoch shows neither where the curve levels off nor the LRs' order (a Fashion-MNIST pilot of one
# epoch on a loaded machine put the plateau at 0.67 where the curve levels off near 0.87): below two, refuse
MIN_PILOT_EPOCHS = 2
LR_STEP = math.sqrt(10.0)  # the pilot's LRs: a factor sqrt(10) apart, 10x across three
DEFAULT_LR = {"sgd": 0.05, "nesterov": 0.05, "adamw": 1e-3, "lamb": 2e-3, "lars": 1.0}  # at the middle batch
MID_BATCH, SMALLEST = 64, 8
EVAL_SHARE = 0.10  # evaluations inside epochs: at most this share of training time
SPACINGS = (0.15, 0.2, 0.3)  # step evaluations' spacing, finest first (a crossing bracketed within 15%)
SUBSETS = (2000, 1000, 500, 250, 100)  # evaluation subsets tried, largest first (the whole split before them)
EVAL_BATCH = 256  # evaluation keeps no activations: a batch this large costs little memory and far less time
SEARCH_TRIALS, CONFIRM_TOP = 6, 2
EPOCHS_X = 3  # each batch's budget: this many times its predicted samples to the target (a rerun doubles a miss)
GRID_SHARE = 0.5  # the grid and its confirmation may take half the sweep's budget: the rounds get the rest


@dataclass
class DesignOptions:
    data: Path
    model: str
    wall: str
    out: Path
    target: float | None = None
    metric: str | None = None
    optimizer: str = "sgd"
    lr: float | None = None
    results: Path | None = None
    fresh: bool = False
    force: bool = False
    seed: int = 0


def wall_text(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


@dataclass
class DataFacts:
    train: int
    val: int
    classes: int
    task: str
    metric: str
    chance: float | None
    test: int = 0  # the test split each finished trial evaluates once at its end (0: none)


def check_inputs(o: DesignOptions) -> DataFacts:
    """Everything that can be refused before anything runs, in one line each."""
    from lbscale.data.formats import open_prepared
    from lbscale.task import get_task
    from lbscale.train.optim import OPTIMIZERS

    if o.out.exists() and not o.force:
        raise LbscaleError(f"--out {o.out}: exists; --force replaces it")
    if o.optimizer not in OPTIMIZERS:
        raise LbscaleError(f"--optimizer {o.optimizer!r}: one of {', '.join(OPTIMIZERS)}")
    if o.lr is None and o.optimizer not in DEFAULT_LR:
        raise LbscaleError(f"--optimizer {o.optimizer}: give the pilot's middle LR with --lr")
    wall = parse_wall(o.wall)
    if wall < 2 * pilot_limit(wall):
        raise LbscaleError(f"--wall {o.wall}: too small for a pilot (up to {pilot_limit(wall) / 60:g} min) and a "
                           f"study after it; give at least {2 * PILOT_FLOOR / 60:g}m")
    if not Path(o.data).exists():
        raise LbscaleError(f"{o.data}: no such prepared file (lbscale prepare writes one)")
    with open_prepared(o.data) as data:
        if not data.has_split("val") or data.size("val") == 0:
            raise LbscaleError(f"{o.data}: no val split; the designer measures on it (prepare with --val-fraction "
                               "0.1)")
        task, classes = get_task(data.task), data.num_classes
        facts = (data.size("train"), data.size("val"), data.size("test") if data.has_split("test") else 0)
    metric = o.metric or task.primary_on("val")
    task.check_target_metric(metric, classes, option="--metric")
    if not task.higher_is_better(metric):
        raise LbscaleError(f"--metric {metric}: the designer places targets on a metric where higher is better "
                           "(an accuracy or F1)")
    if o.target is not None and not 0 < o.target < 1:
        raise LbscaleError(f"--target {o.target}: a value of {metric} between 0 and 1")
    base = metric.split("_", 1)[1]
    chance = (min(1.0, int(base[3:]) / classes) if task.name == "multiclass" and base.startswith("top")
              and base[3:].isdigit() else None)
    return DataFacts(facts[0], facts[1], classes, task.name, metric, chance, facts[2])


def pilot_limit(wall: float) -> float:
    return max(PILOT_SHARE * wall, PILOT_FLOOR)


def pilot_batches(train: int) -> tuple[int, int]:
    """The middle batch (64, or less where the train split is small) and the largest (an eighth of the split:
    eight steps an epoch), powers of two."""
    largest = max(SMALLEST * 2, d.pow2_floor(train / 8))
    return min(MID_BATCH, largest // 4), largest


def inputs_of(o: DesignOptions, facts: DataFacts) -> dict:
    """What the pilot depends on: the same inputs reuse it."""
    return {"data": str(o.data), "train": facts.train, "val": facts.val, "model": o.model, "wall": o.wall,
            "metric": facts.metric, "optimizer": o.optimizer, "lr": o.lr, "seed": o.seed}


def trial_options(o: DesignOptions, facts: DataFacts, batch: int, lr: float, epochs: int, out: Path,
                  evals: int = 2) -> dict:
    """A pilot trial: constant LR `lr` at `batch`, the whole val split evaluated `evals` times an epoch (the
    last at its end), no target."""
    from lbscale.train.optim import OPTIMIZERS

    extra = {"momentum": 0.9} if OPTIMIZERS[o.optimizer].has_momentum else {}
    return {"data": str(o.data), "model": o.model, "optimizer": o.optimizer, **extra, "base_lr": float(f"{lr:.4g}"),
            "ref_batch": batch, "lr_scaling": "none", "global_batch": batch, "schedule": "constant",
            "augment": False, "last_batch": "keep", "epochs": epochs, "seed": o.seed, "eval_batch": EVAL_BATCH,
            "eval_every_samples": max(1, facts.train // evals), "out": str(out)}


def sweep_trial(options: dict, facts: DataFacts, name: str):
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.config import load_config
    from lbscale.train.plan import resolve_plan

    cfg = load_config(None, **options)
    return SweepTrial(name, 1, 1, cfg, resolve_plan(cfg, 1, facts.train), sweep="pilot")


def lr_name(batch: int, lr: float) -> str:
    return f"b{batch}-lr{lr:.4g}"


def curve_of(trial: Path, metric: str) -> list[tuple[float, float]]:
    """(samples, value) at each evaluation of a trial: its step evaluations and its epoch ends (whole split)."""
    points, seen = {}, 0
    for r in read_jsonl(trial / METRICS):
        if r.get("kind") == "step":
            at = r.get("samples_seen")
        elif "epoch" in r and "samples" in r:
            seen += r["samples"]
            at = seen
        else:
            continue
        v = r.get(metric)
        if at is not None and v is not None and math.isfinite(v):
            points[float(at)] = float(v)
    return sorted(points.items())


def final_value(curve: list[tuple[float, float]]) -> float:
    """How good a pilot trial got: its highest 3-evaluation running mean (-inf for a trial that measured
    nothing); one noisy evaluation does not decide, and of two LRs the one that got higher sooner wins."""
    values = [v for _, v in curve]
    return max(d.running_mean(values)) if values else -math.inf


def run_trials(plans: list, folder: Path) -> int:
    from lbscale.sweep.follow import SweepProgress
    from lbscale.sweep.launch import LocalLauncher, select, write_trial_files
    from lbscale.sweep.lock import sweep_lock

    with sweep_lock(folder, False):
        write_trial_files(plans)
        todo = select(plans, retry_failed=False)
        if todo:
            LocalLauncher().run_rounds(todo, SweepProgress())
    failed = [p.trial_id for p in plans if (read_json(p.out / SUMMARY) or {}).get("status") == "failed"]
    if failed:
        why = (read_json(plans[0].out / SUMMARY) or {}).get("error") or "see its train.log"
        raise LbscaleError(f"design: pilot trial {failed[0]} failed ({why}); fix it, then run design again")
    return len(todo)


def timing_of(o: DesignOptions, facts: DataFacts, folder: Path, batch: int, lr: float) -> dict:
    """The middle batch's pace, timed as `sweep --estimate` times a trial shape (warm-started, as the pilot's
    trials run); one line where the model does not run on this data."""
    from lbscale.sweep.estimate import time_shape

    p = sweep_trial(trial_options(o, facts, batch, lr, 1, folder / "timing"), facts, "timing")
    t, _ = time_shape(p, warm=True)  # the warm-start server's own start is paid once, here: not a trial's
    return {"step_seconds": t.step_seconds, "eval_seconds": t.eval_seconds, "eval_samples": t.eval_samples,
            "startup": t.startup}


def pilot_evals(timing: dict, facts: DataFacts, batch: int) -> int:
    """Whole-split evaluations an epoch in the pilot: as many as cost at most half its training (1 to 8; the
    curves' shape is what the pilot is for)."""
    train = facts.train / batch * timing["step_seconds"]
    one = timing["eval_seconds"] * facts.val / max(timing["eval_samples"], 1)
    return int(min(max(0.5 * train // max(one, 1e-9), 1), 8))


def pilot_epochs(timing: dict, facts: DataFacts, batch: int, seconds_left: float, used: float,
                 trials: int = 7) -> int:
    """Epochs per pilot trial so that `trials` of them fit `seconds_left`: training at the middle batch's pace
    per sample, its evaluations (`pilot_evals`, and one at each epoch's end), a start-up each; at most 12."""
    per_epoch = (facts.train / batch * timing["step_seconds"]
                 + (pilot_evals(timing, facts, batch) + 1) * timing["eval_seconds"] * facts.val
                 / max(timing["eval_samples"], 1))
    epochs = int((seconds_left / trials - timing["startup"]) // per_epoch)
    if epochs < MIN_PILOT_EPOCHS:
        need = trials * (timing["startup"] + MIN_PILOT_EPOCHS * per_epoch) + used
        raise LbscaleError(f"--wall: the pilot needs about {need / 60:.1f} min for {MIN_PILOT_EPOCHS} epochs a trial "
                           "at this pace "
                           f"({timing['step_seconds']:.3g} s a step at batch {batch}); give --wall of at least "
                           f"{math.ceil(need / PILOT_SHARE / 60)}m, or a smaller model or train split")
    return min(epochs, 12)


def pilot_state(o: DesignOptions, facts: DataFacts, folder: Path) -> dict:
    """The kept pilot's record where it measured these inputs (a rerun reuses it); else a new one, timed now."""
    inputs = inputs_of(o, facts)
    if o.fresh and folder.exists():
        shutil.rmtree(folder)
    pilot = read_json(folder / PILOT_FILE)
    if pilot and pilot.get("inputs") != inputs:
        changed = sorted(k for k in inputs if pilot["inputs"].get(k) != inputs[k])
        raise LbscaleError(f"{folder}: holds a pilot of other inputs ({', '.join(changed)} differ); --fresh "
                           "measures again there, or give another --results")
    if pilot:
        return pilot
    folder.mkdir(parents=True, exist_ok=True)
    mid, largest = pilot_batches(facts.train)
    lr = o.lr if o.lr is not None else DEFAULT_LR[o.optimizer]
    t0 = time.monotonic()
    timing = timing_of(o, facts, folder, mid, lr)
    small = small_pace(o, facts, folder, mid, lr)
    used = time.monotonic() - t0
    epochs = pilot_epochs(timing, facts, mid, pilot_limit(parse_wall(o.wall)) - used, used)
    pilot = {"inputs": inputs, "mid": mid, "largest": largest, "lr": lr, "epochs": epochs, "timing": timing,
             "small": small, "host": socket.gethostname(),
             "evals": pilot_evals(timing, facts, mid), "seconds": round(used, 1)}
    write_json(folder / PILOT_FILE, pilot)
    return pilot


def run_stage(o: DesignOptions, facts: DataFacts, folder: Path, pilot: dict, name: str, batch: int,
              lrs: list[float], epochs: int | None = None) -> list[tuple[float, list]]:
    """Train the stage's LRs at `batch` for `epochs` (the pilot's by default; those not yet finished), add the
    wall time where any ran; each LR's curve, in the order given."""
    epochs = epochs or pilot["epochs"]
    plans = [sweep_trial(trial_options(o, facts, batch, lr, epochs, folder / lr_name(batch, lr),
                                       pilot["evals"]), facts, lr_name(batch, lr)) for lr in lrs]
    run_timed(plans, folder, pilot, name)
    return [(float(f"{lr:.4g}"), curve_of(p.out, facts.metric)) for lr, p in zip(lrs, plans)]


def run_timed(plans: list, folder: Path, pilot: dict, name: str) -> None:
    """Train `plans` (those not yet finished) and add the wall time to the pilot's record, as `name`'s, where any
    ran: what the pilot used of the budget."""
    t0 = time.monotonic()
    if run_trials(plans, folder):
        took = time.monotonic() - t0
        pilot["seconds"] = round(pilot["seconds"] + took, 1)
        pilot[f"{name}_seconds"] = round(pilot.get(f"{name}_seconds", 0.0) + took, 1)
        write_json(folder / PILOT_FILE, pilot)


def run_longer(o: DesignOptions, facts: DataFacts, folder: Path, pilot: dict, lr: float,
               epochs: int) -> list[tuple[float, float]]:
    """The middle stage's trial at `lr` trained on from its last epoch's checkpoint to `epochs`, in a folder of its
    own (kept, reused): a constant LR trained on is the longer trial (bit for bit on CPU), so its curve is the
    longer trial's. The checkpoint is copied whole or not at all (an interrupted copy leaves no folder)."""
    from lbscale.results import CHECKPOINT

    source, name = folder / lr_name(pilot["mid"], lr), f"{lr_name(pilot['mid'], lr)}-e{epochs}"
    out = folder / name
    if not out.exists():
        part = folder / f".{name}.part"
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(source / CHECKPOINT, part / CHECKPOINT)
        part.rename(out)
    run_timed([sweep_trial(trial_options(o, facts, pilot["mid"], lr, epochs, out, pilot["evals"]), facts, name)],
              folder, pilot, "long")
    return curve_of(out, facts.metric)


def small_pace(o: DesignOptions, facts: DataFacts, folder: Path, mid: int, lr: float) -> dict | None:
    """A step's seconds at SMALLEST, timed as `timing_of` times the middle batch (at the middle batch's LR moved by
    the square-root rule); None where the middle batch is no larger. make demo-real, 2026-12-06, priced batch 8
    from batches 64 and 256 alone (0.000587 and 0.000586 s a sample, no fixed cost between them) at 0.000596 s a
    sample; its trials took 0.00194 (15.5 ms a step), and the grid ran 1.58x its price."""
    if SMALLEST >= mid:
        return None
    t = timing_of(o, facts, folder, SMALLEST, lr * math.sqrt(SMALLEST / mid))
    return {"batch": SMALLEST, "step_seconds": t["step_seconds"]}


def run_pilot(o: DesignOptions, facts: DataFacts, folder: Path) -> tuple[dict, dict]:
    """The pilot (see the module's note): its record and each stage's (lr, curve) list."""
    pilot = pilot_state(o, facts, folder)
    mid, largest, lr = pilot["mid"], pilot["largest"], pilot["lr"]
    if "small" not in pilot:  # kept from before the smallest batch was timed: timed now, once
        t0 = time.monotonic()
        pilot["small"] = small_pace(o, facts, folder, mid, lr)
        pilot["seconds"] = round(pilot["seconds"] + time.monotonic() - t0, 1)
        write_json(folder / PILOT_FILE, pilot)
    print(f"design: pilot of {pilot['epochs']} epochs a trial at batch {mid}, then batch {largest}, in {folder}",
          flush=True)
    stage = run_stage(o, facts, folder, pilot, "mid", mid, [lr / LR_STEP, lr, lr * LR_STEP])
    best = max(range(len(stage)), key=lambda i: final_value(stage[i][1]))
    if best in (0, len(stage) - 1):  # the best at an edge: one more LR past it
        edge = stage[best][0] * (LR_STEP if best else 1 / LR_STEP)
        stage = run_stage(o, facts, folder, pilot, "mid", mid, [s[0] for s in stage] + [edge])
    lr_mid, curve = max(stage, key=lambda s: final_value(s[1]))
    if "epochs_long" not in pilot:  # its curve still rose: the plateau (and the target) lie further on
        rising = bool(curve) and d.plateau([v for _, v in curve], facts.val).rising
        pilot["epochs_long"] = long_epochs(pilot, len(stage), parse_wall(o.wall)) if rising else 0
        write_json(folder / PILOT_FILE, pilot)
    if pilot["epochs_long"]:
        longer = run_longer(o, facts, folder, pilot, lr_mid, pilot["epochs_long"])
        stage = [(lr, longer if lr == lr_mid else c) for lr, c in stage]
    moved = lr_mid * math.sqrt(largest / mid)
    if "epochs_largest" not in pilot:
        pilot["epochs_largest"] = largest_epochs(pilot, len(stage), parse_wall(o.wall))
        write_json(folder / PILOT_FILE, pilot)
    top = run_stage(o, facts, folder, pilot, "largest", largest, [moved / LR_STEP, moved, moved * LR_STEP],
                    pilot["epochs_largest"])
    return pilot, {"mid": stage, "largest": top}


def mid_pace(pilot: dict, trials: int) -> tuple[float, float]:
    """(seconds a trial, seconds an epoch past its start-up) of the middle stage, whose `trials` took mid_seconds:
    the pace the later stages are planned at."""
    per_trial = pilot.get("mid_seconds", 0.0) / max(trials, 1)
    return per_trial, max(per_trial - pilot["timing"]["startup"], 1e-9) / pilot["epochs"]


def long_epochs(pilot: dict, trials: int, wall: float) -> int:
    """Epochs of the middle batch's best LR trained on where its curve still rose at its end (0: none): what the
    pilot has left once the largest batch's three trials at the middle stage's epochs are set aside, at the middle
    stage's measured pace per epoch (`trials` of them took mid_seconds), at most as many more epochs as it had (a
    curve seen twice as long shows whether it levels off); none where not one more epoch fits."""
    per_trial, per_epoch = mid_pace(pilot, trials)
    left = pilot_limit(wall) - pilot["seconds"] - 3 * per_trial - pilot["timing"]["startup"]
    more = min(int(left / per_epoch + 1e-9), pilot["epochs"]) if left > 0 else 0
    return pilot["epochs"] + more if more >= 1 else 0


def largest_epochs(pilot: dict, trials: int, wall: float) -> int:
    """Epochs of the largest batch's three trials: what the pilot has left, at the middle stage's measured pace
    per epoch (a larger batch costs no more a sample), at least the middle stage's and at most 12. The largest
    batch needs the most samples to a target, and its LRs' order is what the first rung rests on."""
    _, per_epoch = mid_pace(pilot, trials)
    left = pilot_limit(wall) - pilot["seconds"]
    fit = int((left / 3 - pilot["timing"]["startup"]) // per_epoch)
    return min(max(fit, pilot["epochs"]), 12)


def costs_of(folder: Path, pilot: dict, stages: dict, facts: DataFacts) -> dict:
    """Seconds per training sample at the two batches (the trials' own images/s, median) and at the smallest (its
    timing run), per evaluated example, and the start-up."""
    per_sample = {}
    for name, batch in (("mid", pilot["mid"]), ("largest", pilot["largest"])):
        ips = sorted((read_json(folder / lr_name(batch, lr) / SUMMARY) or {}).get("images_per_second") or math.nan
                     for lr, _ in stages[name])
        ips = [x for x in ips if math.isfinite(x) and x > 0]
        per_sample[batch] = 1 / ips[len(ips) // 2] if ips else pilot["timing"]["step_seconds"] / pilot["mid"]
    if pilot.get("small"):  # the smallest batch's timing run
        per_sample[pilot["small"]["batch"]] = pilot["small"]["step_seconds"] / pilot["small"]["batch"]
    t = pilot["timing"]
    return {"per_sample": per_sample, "per_eval_example": t["eval_seconds"] / max(t["eval_samples"], 1),
            "startup": t["startup"]}


@dataclass
class Choice:
    """One decision of the design: its value and the measured reason the spec's comment gives."""

    value: object
    why: str


def fastest(stage: list[tuple[float, list]], target: float) -> tuple[float | None, float | None]:
    """(LR, samples) of the stage's LR that reached `target` in the fewest samples (the study tunes the LR per
    batch: its optimum is the fastest, not the one with the highest plateau); (None, None) where none did."""
    reached = reached_at(stage, target)
    return (min(reached)[1], min(reached)[0]) if reached else (None, None)


def reached_at(stage: list[tuple[float, list]], target: float) -> list[tuple[float, float]]:
    """(samples, LR) of each of the stage's LRs that reached `target`, at the first evaluation at or past it."""
    return [(s, lr) for lr, c in stage if (s := d.samples_to(c, target)) is not None]


def best_of(stage: list[tuple[float, list]]) -> tuple[float, list]:
    return max(stage, key=lambda s: final_value(s[1]))


def predicted_samples(batch: float, guess: tuple[str, float], mid: int, s_mid: float, largest: int,
                      s_top: float) -> float:
    """Samples to the target at `batch` from the pilot's two batches (McCandlish et al.'s E(B)): with a B_crit
    guess through it; past perfect scaling up to the largest batch, as if B_crit were that batch (the cheapest
    assumption that still costs samples above it); with no saving at all, the largest batch's steps at every
    batch."""
    kind, b = guess
    if kind == "value":
        return d.samples_at(batch, mid, s_mid, b)
    if kind == "above":
        return d.samples_at(batch, mid, s_mid, float(largest))
    return s_top * batch / largest


def per_sample_at(costs: dict, batch: float) -> float:
    """Seconds per training sample at `batch`: a step's seconds run straight between the batches the pilot timed
    (a fixed cost per step, the Python and optimizer work a small batch pays as often as a large one, and a cost per
    sample); outside them the nearest two's line a + c B goes on where it has a positive fixed cost, else a sample
    costs what it cost at the nearest timed batch."""
    points = sorted(costs["per_sample"].items())
    if len(points) == 1:
        return points[0][1]
    i = min(max(bisect.bisect_left([b for b, _ in points], batch), 1), len(points) - 1)
    (b1, c1), (b2, c2) = points[i - 1], points[i]  # the segment holding `batch`, or the nearest end's
    slope = (c2 * b2 - c1 * b1) / (b2 - b1)
    fixed = c1 * b1 - slope * b1
    if b1 <= batch <= b2 or (fixed > 0 and slope > 0):
        return (fixed + slope * batch) / batch
    return c1 if batch < b1 else c2


def grid_seconds(batches: list[int], samples: dict, costs: dict, facts: DataFacts, ev: dict,
                 rung: float | None, bowl: dict, ratios: list[float], epochs: dict) -> float:
    """The grid and its confirmation priced from the pilot: per batch, each search point (its LR `ratios` x the
    pilot's best) priced by `estimate.designed_samples` on the pilot's `bowl` (the rule `--estimate` prices the
    designed spec's trials by: one that never reaches the target trains its batch's `epochs`), CONFIRM_TOP reruns at the
    optimum's samples; their step evaluations on the subset and the whole split at each epoch's end; the test split
    once at each trial's end; a start-up each."""
    from lbscale.sweep.estimate import (bowl_factor, check_reads, check_share, designed_samples, near_checks,
                                        spaced_evals)

    total = 0.0
    for b in batches:
        e, budget = samples[b], float(epochs[b] * facts.train)
        searched = [bowl_factor(bowl, r) for r in ratios]
        runs = [(designed_samples(e, rung, f, budget), f) for f in searched] + [(e, 1.0)] * CONFIRM_TOP
        examples = 0.0  # evaluated: the step evaluations' subset, each epoch's end and the checks on the whole split
        for n, f in runs:
            share = check_share(ev["target"], ev["subset"], facts.val)
            checks = (check_reads(near_checks(ev["first"][b], ev["spacing"], n / b, e / b, f, ev["near"]), share)
                      if ev["subset"] < facts.val else 0)
            examples += (spaced_evals(ev["first"][b], ev["spacing"], n / b) * ev["subset"]
                         + (n / facts.train + checks) * facts.val)
        examples += len(runs) * facts.test  # each trial's test split, once at its end
        total += (sum(n for n, _ in runs) * per_sample_at(costs, b) + examples * costs["per_eval_example"]
                  + len(runs) * costs["startup"])
    return total


def search_ratios(lr_range: tuple[float, float], lr_ref: float) -> list[float]:
    """The search's LRs over the pilot's best: the points `sweep` will plan from the spec's base_lr range
    (SEARCH_TRIALS Halton points, log-uniform, seed 0)."""
    from lbscale.sweep.search import SearchSpace

    space = SearchSpace(sampled={"base_lr": ("loguniform", lr_range)}, trials=SEARCH_TRIALS, sampler="halton")
    return [pt["base_lr"] / lr_ref for pt in space.points()]


def bowl_of(stage: list[tuple[float, list]], target: float, s_ref: float, lr_ref: float) -> dict:
    """The pilot's LR bowl at its middle batch for `target`: LR / lr_ref -> samples to the target / s_ref (None
    where that LR did not reach it in the pilot)."""
    out = {}
    for lr, curve in sorted(stage):
        reached = d.samples_to(curve, target)
        out[float(f"{lr / lr_ref:.4g}")] = round(reached / s_ref, 3) if reached else None
    return out


def doubling(lo: int, hi: int) -> list[int]:
    out, b = [], lo
    while b <= hi:
        out.append(b)
        b *= 2
    return out


FIRST_SHARE = 0.25  # a batch's first step evaluation at this share of its predicted steps to the target


def first_step(steps: float) -> int:
    """A batch's first step evaluation: FIRST_SHARE of its predicted steps to the target (each batch evaluated from
    the same share of its training on: with one first step for all, a quarter of the largest batch's, the smallest
    batch was evaluated from a thirtieth of its steps on: digits, 2026-12-05, batch 16 from step 4 of about 130,
    and the subset's evaluations were three quarters of the 11% its evaluations took)."""
    return max(1, int(steps * FIRST_SHARE))


def evaluation_choice(batches: list[int], samples: dict, costs: dict, facts: DataFacts, near: dict,
                      target: float) -> dict:
    """The largest evaluation subset and finest spacing whose evaluations inside epochs take at most EVAL_SHARE of
    training at every batch: the step evaluations on the subset from each batch's first (a quarter of its predicted
    steps to the target, `first_step`) and, on a subset, the whole split wherever a value comes within its noise
    of the target (from `near[subset]` of the steps to the target on: `estimate.near_evals`; a small subset is
    noisy, so it checks more often; the crossing's own check reads all of the split, each miss before it
    `estimate.check_share` of it, since it stops clearly below the target: `estimate.check_reads`). Where none
    fits, the cheapest, with `floor`: (the share the crossing's own whole-split evaluation takes of the optimum's
    training, at the batch where it weighs most)."""
    from lbscale.sweep.estimate import check_reads, check_share, evals_to, near_evals

    first = {b: first_step(samples[b] / b) for b in batches}
    # the crossing's own evaluation of the whole split, which no subset or spacing avoids, over the optimum's
    # training: where it alone takes most of EVAL_SHARE, nothing fits, and the spec says why
    floor = max((facts.val * costs["per_eval_example"] / (samples[b] * per_sample_at(costs, b)), b) for b in batches)
    subsets = [facts.val] + [s for s in SUBSETS if s < facts.val]
    tried = []
    for spacing in SPACINGS:
        for subset in subsets:
            checks = {b: check_reads(near_evals(first[b], spacing, samples[b] / b, near[subset]),
                                     check_share(target, subset, facts.val)) if subset < facts.val else 0
                      for b in batches}
            share, at = max(((len(evals_to(first[b], spacing, samples[b] / b)) * subset + checks[b] * facts.val)
                             * costs["per_eval_example"] / (samples[b] * per_sample_at(costs, b)), b) for b in batches)
            ev = {"subset": subset, "spacing": spacing, "first": first, "share": share, "share_at": at,
                  "near": near[subset], "target": target, "floor": floor}
            if share <= EVAL_SHARE:
                return ev
            tried.append(ev)
    return min(tried, key=lambda e: e["share"])  # none within the share: the cheapest, and the spec says its share


def rung_choice(top: list[tuple[float, list]], facts: DataFacts, batches: list[int], samples: dict,
                largest: int) -> Choice:
    settled = d.settled_samples([c for _, c in top], facts.val)
    if settled is None:
        return Choice(None, f"the pilot's {len(top)} LRs at batch {largest} never led one another by more than "
                            f"{d.Z_SETTLED:g} standard errors on the {facts.val:,}-image val split: no pruning")
    fewest = min(samples[b] for b in batches)
    if settled > fewest / 2:
        return Choice(None, f"the LRs' order at batch {largest} settled after {settled:,.0f} samples, more than half "
                            f"the fewest samples to the target ({fewest:,.0f}): pruning would save little; none")
    return Choice(int(math.ceil(settled)), f"the LRs' order at batch {largest} settled (the best ahead by "
                                           f"> {d.Z_SETTLED:g} SE from then on) after {settled:,.0f} samples")


def plan_for(target: float, stages: dict, pilot: dict, costs: dict, facts: DataFacts, budget: float,
             lr_range: Choice) -> dict:
    """The batches, evaluations, rung and predicted grid time for one target; None where the middle batch never
    reached it in the pilot (the pilot cannot price it)."""
    from lbscale.train.evaluation import NEAR_SE

    mid, largest = pilot["mid"], pilot["largest"]
    lr_ref, s_mid = fastest(stages["mid"], target)
    if s_mid is None:
        return None
    top_curve = best_of(stages["largest"])[1]
    s_top = fastest(stages["largest"], target)[1]
    reached_top = s_top is not None
    if not reached_top:  # not reached at the largest batch: priced at 1.5x what its pilot trained
        s_top = 1.5 * top_curve[-1][0] if top_curve else 1.5 * s_mid * largest / mid
    guess = d.b_crit_from_two(mid, s_mid, largest, s_top)
    lo, hi = d.batch_range(guess, SMALLEST, max(SMALLEST * 2, d.pow2_floor(facts.train / 4)))
    bowl = bowl_of(stages["mid"], target, s_mid, lr_ref)
    curve = dict(stages["mid"])[lr_ref]
    near = {n: d.near_fraction(curve, target, n, NEAR_SE) for n in [facts.val, *SUBSETS] if n <= facts.val}
    ratios = search_ratios(lr_range.value, lr_ref)
    while True:
        batches = doubling(lo, hi)
        samples = {b: predicted_samples(b, guess, mid, s_mid, largest, s_top) for b in batches}
        epochs = {b: max(2, math.ceil(EPOCHS_X * samples[b] / facts.train)) for b in batches}
        ev = evaluation_choice(batches, samples, costs, facts, near, target)
        rung = rung_choice(stages["largest"], facts, batches, samples, largest)
        seconds = grid_seconds(batches, samples, costs, facts, ev, rung.value, bowl, ratios, epochs)
        if seconds <= budget or len(batches) <= 4:
            break
        lo, hi = d.trimmed(lo, hi, guess)  # the budget does not pay for all five
    return {"target": target, "s_mid": s_mid, "s_top": s_top, "reached_top": reached_top, "guess": guess,
            "batches": batches, "samples": samples, "eval": ev, "rung": rung, "seconds": seconds,
            "fits": seconds <= budget, "epochs": epochs, "bowl": bowl, "bowl_lr": lr_ref}


def choose_target(o: DesignOptions, stages: dict, pilot: dict, costs: dict, facts: DataFacts,
                  budget: float, lr_range: Choice) -> tuple[dict, float, float, str]:
    """The user's target, or the hardest fraction of the way from chance to the plateau whose grid fits the
    budget (at least 0.7 of the way); (plan, chance, plateau level, how the target was chosen)."""
    curves = [c for s in stages.values() for _, c in s if c]
    level = max(d.plateau([v for _, v in c], facts.val).level for c in curves)
    rising = d.plateau([v for _, v in best_of(stages["mid"])[1]], facts.val).rising
    chance = facts.chance if facts.chance is not None else min(c[0][1] for c in curves)
    if level - chance <= d.Z_SETTLED * d.binomial_se(chance, facts.val):  # within an evaluation's noise of chance
        raise LbscaleError(f"design: the pilot's trials never rose above chance ({facts.metric} at most {level:.3f}, "
                           f"chance {chance:.3f}): no target to place; give a larger --wall (a longer pilot), another "
                           "--lr, or check the data's labels")
    if o.target is not None:
        plan = plan_for(o.target, stages, pilot, costs, facts, budget, lr_range)
        if plan is None:
            raise LbscaleError(f"--target {o.target}: the pilot's best trial at batch {pilot['mid']} did not reach it "
                               f"in {pilot['epochs']} epochs (its best {level:.3f}); give an easier target or a "
                               "larger --wall")
        return plan, chance, level, "given (--target)"
    plans = [p for f in d.TARGET_FRACTIONS
             if (p := plan_for(d.target_value(chance, level, f), stages, pilot, costs, facts, budget, lr_range))]
    if not plans:
        raise LbscaleError(f"design: the pilot's best trial at batch {pilot['mid']} reached no target "
                           f"{d.TARGET_FRACTIONS[-1]:g} of the way from chance ({chance:.3f}) to its plateau "
                           f"({level:.3f}); give --target, or a larger --wall for a longer pilot")
    fitting = [p for p in plans if p["fits"]]
    plan = fitting[0] if fitting else plans[-1]
    how = ("the hardest the budget pays for" if fitting else
           "the easiest allowed; the budget pays for none (the grid alone is priced past its share)")
    longer = (f"; batch {pilot['mid']}'s best LR trained on to {pilot['epochs_long']} epochs, its curve having "
              f"risen at the end of {pilot['epochs']}") if pilot.get("epochs_long") else ""
    return plan, chance, level, how + longer + ("; the pilot's curve still rose at its end" if rising else "")


def lr_choice(stages: dict, pilot: dict) -> tuple[Choice, Choice]:
    """The LR rule from the pilot's best LRs at its two batches (alpha = ln(lr ratio) / ln(batch ratio): below
    0.25 none, above 0.75 linear, else square root), and the searched base LR at the middle batch: 4x either side
    of the two best LRs (the largest's moved back by the rule), so each batch's optimum lies inside."""
    mid, largest = pilot["mid"], pilot["largest"]
    lr_mid, lr_top = best_of(stages["mid"])[0], best_of(stages["largest"])[0]
    alpha = math.log(lr_top / lr_mid) / math.log(largest / mid)
    rule = "none" if alpha < 0.25 else "linear" if alpha > 0.75 else "sqrt"
    back = lr_top / {"none": 1.0, "sqrt": math.sqrt(largest / mid), "linear": largest / mid}[rule]
    lo, hi = float(f"{min(lr_mid, back) / 4:.3g}"), float(f"{max(lr_mid, back) * 4:.3g}")
    why = (f"the pilot's best LR at batch {mid} was {lr_mid:.4g}, at batch {largest} {lr_top:.4g}: alpha ~ "
           f"{alpha:.2f} on the pilot's sqrt(10) steps")
    return Choice(rule, why), Choice((lo, hi), f"4x either side of {lr_mid:.4g} and {back:.4g} (batch {largest}'s "
                                                 f"best moved to batch {mid} by the {rule} rule)")


def fastest_lrs(stage: list[tuple[float, list]], target: float) -> list[float]:
    """The stage's LRs that reached `target` in the fewest samples, ties included (reached at the same evaluation:
    the pilot cannot tell them apart), in order; [] where none did."""
    reached = reached_at(stage, target)
    return sorted(lr for s, lr in reached if s == min(reached)[0]) if reached else []


def widened(lr_range: Choice, fast: list[float], batch: int) -> Choice:
    """The searched range, widened to 4x past each LR in `fast` (the pilot's fastest to the chosen target at
    `batch`) where it does not reach that far: the range follows the best final value, a constant LR's lowest
    noise, while the study's optimum is the fastest to the target (make demo-real, 2026-12-05: 4x either side of
    0.01581, and the optima at batches 64 and 128 on its top edge, where 0.05 had tied 0.01581 for the fastest).
    The same Choice where it already does."""
    (lo, hi), need_lo, need_hi = lr_range.value, min(fast, default=math.inf) / 4, max(fast, default=0.0) * 4
    if not fast or (lo <= need_lo and hi >= need_hi):
        return lr_range
    names = " and ".join(f"{lr:.4g}" for lr in fast)
    return Choice((min(lo, float(f"{need_lo:.3g}")), max(hi, float(f"{need_hi:.3g}"))),
                  f"{lr_range.why}; widened to 4x past {names}, the pilot's LRs fastest to the target at batch {batch}")


def guess_words(plan: dict, pilot: dict) -> str:
    kind, b = plan["guess"]
    at = (f"samples to the target: {plan['s_mid']:,.0f} at batch {pilot['mid']}, {plan['s_top']:,.0f} at batch "
          f"{pilot['largest']}" + ("" if plan["reached_top"] else " (not reached in the pilot: 1.5x its samples)"))
    return {"value": f"B_crit ~ {b:,.0f} from the pilot's {at}",
            "above": f"B_crit > {b:,.0f} (no more samples at the larger batch) from the pilot's {at}",
            "below": f"B_crit < {b:,.0f} (no fewer steps at the larger batch) from the pilot's {at}"}[kind]


def bowl_text(bowl: dict) -> str:
    """The bowl as a YAML flow mapping (null where the LR did not reach the target)."""
    return "{" + ", ".join(f"{r:g}: {'null' if c is None else f'{c:g}'}" for r, c in bowl.items()) + "}"


def yaml_number(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def spec_text(o: DesignOptions, facts: DataFacts, folder: Path, pilot: dict, plan: dict, level: tuple,
              lrs: tuple[Choice, Choice], wall: float) -> str:
    """The spec, every choice with its measured reason; the same inputs give the same text."""
    from lbscale.train.optim import OPTIMIZERS

    chance, plateau, how = level
    ev, rung, batches = plan["eval"], plan["rung"], plan["batches"]
    frac = (plan["target"] - chance) / (plateau - chance) if plateau > chance else math.nan
    top = batches[-1]
    epochs = plan["epochs"]
    trials = sum(len(s) for s in pilot.get("stages_lrs", {}).values())
    rule, lr_range = lrs
    lines = [
        f"# Designed by `lbscale design` from a pilot of {trials} trials ({folder}) on {o.data}, {o.model}.",
        "# Each value's comment gives the measurement it rests on; `lbscale design` with the same inputs writes",
        "# this file again byte for byte (--fresh measures again). Run: lbscale sweep THIS --until-resolved",
        f"name: {o.out.stem}",
        f"data: {o.data}",
        f"model: {o.model}",
        f"epochs: {{{', '.join(f'{b}: {e}' for b, e in epochs.items())}}}  # each batch's: {EPOCHS_X}x its predicted "
        f"samples to the target (design.samples_to_target) over the {facts.train:,}-image train split, at least 2; "
        "a point that misses the target is run again with twice its epochs",
        f"wall: {o.wall}  # the budget; the sweep spends what the pilot left ({wall - pilot['seconds']:.0f} s)",
        "trial:",
        f"  optimizer: {o.optimizer}",
        *(["  momentum: 0.9"] if OPTIMIZERS[o.optimizer].has_momentum else []),
        f"  lr_scaling: {rule.value}  # {rule.why}",
        f"  ref_batch: {pilot['mid']}",
        "  schedule: constant  # as the pilot trained: the steps to a target measure the batch, not a decay",
        "  augment: false",
        "  last_batch: keep",
        f"  target_metric: {facts.metric}",
        f"  target: {plan['target']:g}  # {how}: {frac:.2f} of the way from chance ({chance:.3f}) to the pilot's "
        f"plateau ({plateau:.3f})",
        "  stop_at_target: true",
        f"  eval_spacing: {ev['spacing']:g}  # a crossing bracketed within {ev['spacing']:.0%} of its steps",
        f"  eval_first: {{{', '.join(f'{b}: {f}' for b, f in ev['first'].items())}}}  # each batch's: a quarter of "
        f"its predicted steps to the target (batch {top}: {plan['samples'][top] / top:,.0f})",
        f"  eval_batch: {EVAL_BATCH}  # evaluation keeps no activations: a large batch is cheap",
        f"  eval_subset: {ev['subset']}  # step evaluations predicted at {ev['share']:.1%} of the optimum's training "
        f"at batch {ev['share_at']}, where they weigh most (at most {EVAL_SHARE:.0%}; "
        f"{pilot['timing']['eval_seconds']:.3g} s for {pilot['timing']['eval_samples']:,} images); a value near the "
        "target is checked on the whole split"
        + ("" if ev["share"] <= EVAL_SHARE else
           f"; none tried fits {EVAL_SHARE:.0%}: the crossing's own check of the whole split costs "
           f"{ev['floor'][0]:.1%} of the optimum's training at batch {ev['floor'][1]}"),
    ]
    if rung.value:
        lines += [f"  prune: asha  # {rung.why}", f"  prune_min_samples: {rung.value}", "  prune_eta: 3"]
    else:
        lines += [f"  prune: none  # {rung.why}"]
    return "\n".join(lines + grid_lines(folder, pilot, plan, lr_range, wall)) + "\n"


def grid_lines(folder: Path, pilot: dict, plan: dict, lr_range: Choice, wall: float) -> list[str]:
    """The spec's grid (batches, the LR search) and its design block (what the pilot measured and used)."""
    from lbscale.train.evaluation import NEAR_SE

    batches, ev = plan["batches"], plan["eval"]
    top = batches[-1]
    return [
        "grid:",
        f"  batch: {batches[0]}..{top}  # {guess_words(plan, pilot)}: from a quarter of it up"
        + ("" if len(batches) >= 5 else f"; the budget pays for {len(batches)} batches"),
        "  gpus: [1]",
        "  search:",
        f"    trials: {SEARCH_TRIALS}",
        "    sampler: halton",
        f"    base_lr: {{loguniform: [{lr_range.value[0]:g}, {lr_range.value[1]:g}]}}  # {lr_range.why}",
        f"    confirm: {{top: {CONFIRM_TOP}, seeds: 1}}",
        "design:  # what the pilot measured and used",
        f"  pilot: {folder}",
        f"  pilot_seconds: {pilot['seconds']:g}",
        f"  wall_seconds: {wall:g}",
        f"  grid_seconds_predicted: {plan['seconds']:.0f}  # the grid and its confirmation, stopped at the target"
        + ("" if plan["fits"] else f"; over its share ({GRID_SHARE:.0%} of what the pilot left)"),
        f"  seconds_per_sample: {{{', '.join(f'{b}: {c:.3g}' for b, c in sorted(pilot['costs'].items()))}}}",
        f"  startup_seconds: {pilot['timing']['startup']:.3g}",
        f"  near_from: {ev['near']:.3g}  # a {ev['subset']:,}-image subset's value comes within {NEAR_SE:g} standard "
        "errors of the target (the whole split checks it) from this share of the steps to it on (the pilot's curve)",
        f"  bowl_lr: {plan['bowl_lr']:.4g}  # the pilot's LR fastest to the target at batch {pilot['mid']}: the "
        "bowl's centre",
        f"  bowl: {bowl_text(plan['bowl'])}  # LR / bowl_lr -> samples to the target / the fastest's, measured by "
        "the pilot (null: not reached there): what --estimate prices each search point by",
        f"  samples_to_target: {{{', '.join(f'{b}: {e:.0f}' for b, e in plan['samples'].items())}}}  # predicted "
        "from the pilot (McCandlish et al.'s E(B) through its two batches): what --estimate prices",
        f"  host: {pilot['host']}  # where the pilot ran: its times hold there",
    ]


def design(o: DesignOptions) -> str:
    """Run (or reuse) the pilot, choose, write the spec atomically; the one-line outcome."""
    facts = check_inputs(o)
    wall = parse_wall(o.wall)
    results = Path(o.results) if o.results else Path("results") / o.out.stem
    folder = results.parent / f"{results.name}-pilot"
    pilot, stages = run_pilot(o, facts, folder)
    costs = costs_of(folder, pilot, stages, facts)
    pilot = {**pilot, "costs": {int(b): c for b, c in costs["per_sample"].items()},
             "stages_lrs": {k: [lr for lr, _ in v] for k, v in stages.items()}}
    budget = GRID_SHARE * max(wall - pilot["seconds"], 0.0)
    lrs = lr_choice(stages, pilot)
    plan, chance, level, how = choose_target(o, stages, pilot, costs, facts, budget, lrs[1])
    wide = widened(lrs[1], fastest_lrs(stages["mid"], plan["target"]), pilot["mid"])
    if wide is not lrs[1]:  # the grid priced again over the wider search, at the chosen target
        lrs = (lrs[0], wide)
        plan = plan_for(plan["target"], stages, pilot, costs, facts, budget, wide) or plan
    text = spec_text(o, facts, folder, pilot, plan, (chance, level, how), lrs, wall)
    o.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(o.out, text)
    b = plan["batches"]
    return (f"design: wrote {o.out}: target {facts.metric} {plan['target']:g}, batches {b[0]}..{b[-1]}, grid "
            f"predicted {plan['seconds'] / 60:.1f} min of the {(wall - pilot['seconds']) / 60:.1f} min the pilot "
            f"left ({pilot['seconds']:.0f} s); next: lbscale sweep {o.out} --until-resolved")
