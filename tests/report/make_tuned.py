"""Tuned scaling studies built by code: a hyperparameter search per batch, as frames (`tuned_frames`, the shape of
`Study.trials` / `Study.steps`) or as trial directories a sweep with a search axis writes (`make_tuned_trial`:
grid.json with "search" and "point", metrics.jsonl with step evaluations and epoch records, its copy
metrics.columns.json, summary.json, pruned trials included).

Closed form: the optimal LR is lr*(B) = c B^alpha and the best LR needs S(B) = S_min (1 + B_crit / B) steps to
the target; an LR off by d octaves needs S(B) (1 + k |d|). The metric after step t of a trial needing S steps is
target * (t / S), capped at 0.99 (val_loss = 1 - val_top1), so the first evaluation at or past the target is the
first evaluated step >= S. A step trains `step_seconds` seconds.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from lbscale.task import get_task
from lbscale.train.columns import write_columns
from lbscale.train.summary import summarize


def critical_steps(batch, s_min=1000.0, b_noise=256.0):
    """S(B) = S_min (1 + B_crit / B): the steps of the best LR."""
    return s_min * (1 + b_noise / np.asarray(batch, dtype=float))


def needed_steps(batch, lr, c=0.02, alpha=0.5, k=0.5, **law) -> float:
    """Steps to the target of a trial of `batch` and peak `lr`: S(B) (1 + k |log2(lr / lr*(B))|)."""
    return float(critical_steps(batch, **law) * (1 + k * abs(math.log2(lr / (c * batch ** alpha)))))


def curve(step, needed, target=0.9):
    return min(0.99, target * (step / needed))


def tuned_frames(batches, factors, alpha, c=0.02, offsets=None, seeds=1, k=0.5, evals=(0.25, 0.5, 0.75, 1.0, 1.5),
                 target=0.9, step_seconds=0.01, variant="sgd"):
    """(trials, steps) of a search over LRs lr*(B) * 2^(f + offset_B) for f in `factors`; each trial is evaluated
    at the fractions `evals` of its own needed steps (so exactly at it) and its records stop there."""
    offsets = np.zeros(len(batches)) if offsets is None else offsets
    trials, steps = [], []
    for b, off in zip(batches, offsets):
        for point, f in enumerate(factors):
            for seed in range(seeds):
                lr = c * b ** alpha * 2 ** (f + off)
                need = round(needed_steps(b, lr, c, alpha, k))
                name = f"b{b}-p{point}-s{seed}"
                trials.append({"results": "r", "trial": name, "variant": variant, "global_batch": b, "seed": seed,
                               "state": "completed", "peak_lr": lr, "base_lr": lr, "point": point, "hp_base_lr": lr})
                for frac in evals:
                    t = round(frac * need)
                    steps.append({"results": "r", "trial": name, "variant": variant, "global_batch": b, "step": t,
                                  "epoch": t / 100, "elapsed_seconds": t * step_seconds,
                                  "val_top1": curve(t, need, target), "kind": "step"})
    return pd.DataFrame(trials), pd.DataFrame(steps)


def _write(path: Path, obj):
    path.write_text(json.dumps(obj) + "\n")


def records_at(t: int, v: float, batch: int, lr: float, spe: int, every: int, step_seconds: float,
               evals: float) -> tuple[list, float]:
    """The records a trial writes at step `t` with metric value `v` (a step evaluation where t is a multiple of
    `every`, an epoch record where it ends an epoch, in that order) and the epoch evaluations' seconds so far
    (the clock leaves step evaluations out)."""
    new = []
    if t % every == 0:
        new.append({"kind": "step", "step": t, "epoch": t / spe, "samples_seen": t * batch, "val_top1": v,
                    "val_loss": 1 - v, "elapsed_seconds": t * step_seconds + evals, "eval_seconds": 0.5,
                    "subset": None})
    if t % spe == 0:
        evals += 1.0
        new.append({"epoch": t // spe, "step": t, "train_loss": 1.1 - v, "val_top1": v, "val_loss": 1 - v,
                    "train_seconds": spe * step_seconds, "eval_seconds": 1.0, "lr": lr, "samples": spe * batch,
                    "images_per_second": batch / step_seconds, "data_seconds": 0.0,
                    "compute_seconds": spe * step_seconds, "elapsed_seconds": t * step_seconds + evals})
    return new, evals


def make_tuned_trial(results: Path, batch: int, lr: float, point: int | None, seed: int = 0, *,
                     variant: str = "sgd-none", epochs: int = 10, train_samples: int = 2 ** 18, every: int = 125,
                     target: float = 0.9, state: str = "completed", pruned_step: int | None = None,
                     momentum: float = 0.9, step_seconds: float = 0.01, c: float = 0.02, alpha: float = 0.5,
                     own_target: bool = True, pruned_value: float | None = None):
    """One trial directory of a tuned sweep: step evaluations every `every` steps and an epoch record per epoch;
    a completed trial stops at its first evaluation at or past the target (`stopped: target`), a pruned one after
    step `pruned_step` (its rung's value the curve's there, or `pruned_value`); state "pending": grid.json only.
    own_target=False: the trial names no target (its curve is the same) and runs all its epochs. A search point
    runs with successive halving (`prune: asha`), as a sweep's would."""
    tid = f"b{batch}-{variant}-p{point}-s{seed}"
    d = Path(results) / tid
    d.mkdir(parents=True)
    search = {"base_lr": lr, "momentum": momentum} if point is not None else None
    _write(d / "grid.json", {"sweep": Path(results).name, "trial": tid, "global_batch": batch, "gpus": 1,
                             "nodes": 1, "variant": variant, "warmup": None, "seed": seed, "search": search,
                             "point": point})
    (d / "trial.yaml").write_text(f"global_batch: {batch}\nseed: {seed}\n")
    if state == "pending":
        return d
    spe = train_samples // batch
    _write(d / "config.json", {
        "config": {"data": "x.h5", "out": str(d), "model": "resnet18", "global_batch": batch, "optimizer": "sgd",
                   "base_lr": lr, "momentum": momentum, "ref_batch": batch, "lr_scaling": "none",
                   "warmup_epochs": "0", "schedule": "constant", "epochs": epochs, "seed": seed,
                   "target_metric": "val_top1" if own_target else None, "target": target if own_target else None,
                   "prune": "asha" if point is not None else "none"},
        "plan": {"world_size": 1, "global_batch": batch, "local_batch": batch, "accum_steps": 1,
                 "train_samples": train_samples, "steps_per_epoch": spe, "total_steps": spe * epochs,
                 "peak_lr": lr, "warmup_epochs": 0.0, "warmup_steps": 0},
        "world_size": 1, "task": "multiclass", "num_classes": 4, "train_samples": train_samples})
    need = needed_steps(batch, lr, c, alpha)
    last = spe * epochs if pruned_step is None else pruned_step
    records, hit, evals = [], None, 0.0  # evals: epoch evaluations' seconds (the clock leaves step ones out)
    for t in range(1, last + 1):
        v = curve(t, need, target)
        new, evals = records_at(t, v, batch, lr, spe, every, step_seconds, evals)
        records += new
        if new and v >= target and hit is None:  # the first record at the step: the step evaluation comes first
            hit = {"steps_to_target": t, "epochs_to_target": new[0]["epoch"],
                   "seconds_to_target": new[0]["elapsed_seconds"]}
            if pruned_step is None and own_target:
                break
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    epoch_records = [r for r in records if "kind" not in r]
    fields = {"steps": records[-1]["step"] if records else 0, "world_size": 1, "global_batch": batch,
              "target_metric": "val_top1" if own_target else None, "target": target if own_target else None,
              "wall_seconds": last * step_seconds + evals,
              **(hit if hit and own_target else {"steps_to_target": None, "epochs_to_target": None,
                                                 "seconds_to_target": None})}
    if state == "pruned":
        value = curve(last, need, target) if pruned_value is None else pruned_value
        fields["pruned_at"] = {"rung": 1, "step": last, "metric": "val_top1", "value": value}
    elif hit and own_target:
        fields["stopped"] = "target"
    write_columns(d)  # as the trial writes it, just before its summary
    _write(d / "summary.json", summarize(epoch_records, get_task("multiclass"), state, **fields))
    return d


def make_tuned_study(results: Path, batches=(256, 512, 1024, 2048), factors=(-1, 0, 1), prune=((256, 1), (512, 1)),
                     c: float = 0.02, alpha: float = 0.5, pending: bool = True, own_target: bool = True) -> Path:
    """A search over LRs lr*(B) 2^f per batch; the (batch, f) in `prune` pruned at step 500 (rung 1), and one
    pending trial of the next search point."""
    for b in batches:
        for point, f in enumerate(factors):
            lr = c * b ** alpha * 2.0 ** f
            pruned = (b, f) in prune
            make_tuned_trial(results, b, lr, point, state="pruned" if pruned else "completed",
                             pruned_step=500 if pruned else None, c=c, alpha=alpha, own_target=own_target)
    if pending:
        make_tuned_trial(results, batches[0], c * batches[0] ** alpha, len(factors), state="pending")
    return Path(results)
