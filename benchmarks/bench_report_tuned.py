"""`lbscale report` over a large tuned study: 20,000 trials with step evaluations (target: under 30 s).

10 global batches (32 .. 16,384) x 2,000 search points (the LR log-uniform over lr*(B) 2^-3 .. 2^3), one seed
each, in tests/report/make_tuned.py's closed form: a trial is evaluated every S(B) / 8 steps and at the end of each
epoch, and stops at its first evaluation at or past the target. `write_tuned_trial` writes the directory
`make_tuned_trial` writes, file for file (tests/report/test_bench_tuned.py checks it), without make_tuned_trial's
loop over every training step; the time covers `write_report` (loading, the tuned analysis, every table and
figure)."""

import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import report
from lbscale.report import ReportOptions, write_report
from lbscale.task import get_task
from lbscale.train.columns import write_columns
from lbscale.train.summary import summarize
from tests.report.make_tuned import critical_steps, curve, needed_steps, records_at

BATCHES = [2 ** k for k in range(5, 15)]
POINTS = 2000
TARGET_SECONDS = 30.0


def _write(path: Path, obj):
    path.write_text(json.dumps(obj) + "\n")


def _evaluations(last: int, every: int, spe: int):
    """The steps at which make_tuned_trial's loop writes a record (a step evaluation or an epoch's end), in order."""
    return sorted(set(range(every, last + 1, every)) | set(range(spe, last + 1, spe)))


def _records(batch: int, lr: float, spe: int, last: int, every: int, target: float, step_seconds: float, c: float,
             alpha: float, stop: bool):
    """metrics.jsonl's records and the first record at or past the target, as make_tuned_trial's loop makes them."""
    need = needed_steps(batch, lr, c, alpha)
    records, hit, evals = [], None, 0.0
    for t in _evaluations(last, every, spe):
        v = curve(t, need, target)
        new, evals = records_at(t, v, batch, lr, spe, every, step_seconds, evals)
        records += new
        if v >= target and hit is None:
            hit = {"steps_to_target": t, "epochs_to_target": new[0]["epoch"],
                   "seconds_to_target": new[0]["elapsed_seconds"]}
            if stop:
                break
    return records, hit, evals


def write_tuned_trial(results: Path, batch: int, lr: float, point: int, seed: int = 0, *, variant: str = "sgd-none",
                      epochs: int = 10, train_samples: int = 2 ** 18, every: int = 125, target: float = 0.9,
                      momentum: float = 0.9, step_seconds: float = 0.01, c: float = 0.02, alpha: float = 0.5) -> Path:
    """A completed trial of a tuned sweep, as `make_tuned_trial(results, batch, lr, point, seed, ...)` writes it
    (own target, stopped at it), its records made at the evaluated steps only."""
    tid = f"b{batch}-{variant}-p{point}-s{seed}"
    d = Path(results) / tid
    d.mkdir(parents=True)
    _write(d / "grid.json", {"sweep": Path(results).name, "trial": tid, "global_batch": batch, "gpus": 1,
                             "nodes": 1, "variant": variant, "warmup": None, "seed": seed,
                             "search": {"base_lr": lr, "momentum": momentum}, "point": point})
    (d / "trial.yaml").write_text(f"global_batch: {batch}\nseed: {seed}\n")
    spe = train_samples // batch
    _write(d / "config.json", {
        "config": {"data": "x.h5", "out": str(d), "model": "resnet18", "global_batch": batch, "optimizer": "sgd",
                   "base_lr": lr, "momentum": momentum, "ref_batch": batch, "lr_scaling": "none",
                   "warmup_epochs": "0", "schedule": "constant", "epochs": epochs, "seed": seed,
                   "target_metric": "val_top1", "target": target, "prune": "asha"},
        "plan": {"world_size": 1, "global_batch": batch, "local_batch": batch, "accum_steps": 1,
                 "train_samples": train_samples, "steps_per_epoch": spe, "total_steps": spe * epochs,
                 "peak_lr": lr, "warmup_epochs": 0.0, "warmup_steps": 0},
        "world_size": 1, "task": "multiclass", "num_classes": 4, "train_samples": train_samples})
    last = spe * epochs
    records, hit, evals = _records(batch, lr, spe, last, every, target, step_seconds, c, alpha, stop=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    fields = {"steps": records[-1]["step"] if records else 0, "world_size": 1, "global_batch": batch,
              "target_metric": "val_top1", "target": target, "wall_seconds": last * step_seconds + evals,
              **(hit or {"steps_to_target": None, "epochs_to_target": None, "seconds_to_target": None})}
    if hit:
        fields["stopped"] = "target"
    write_columns(d)  # as the trial writes it, just before its summary
    _write(d / "summary.json", summarize([r for r in records if "kind" not in r], get_task("multiclass"),
                                         "completed", **fields))
    return d


def make_study(results: Path, batches=BATCHES, points: int = POINTS, train_samples: int = 2 ** 22,
               c: float = 0.02, alpha: float = 0.5) -> int:
    """The tuned study: per batch, `points` LRs lr*(B) 2^f, f evenly over [-3, 3]; evaluations every S(B) / 8 steps;
    enough epochs for the farthest point (2.5 S(B) steps) to reach the target. Returns the number of trials."""
    for b in batches:
        s = float(critical_steps(b))
        spe = train_samples // b
        every, epochs = max(1, round(s / 8)), math.ceil(3 * s / spe)
        for point, f in enumerate(np.linspace(-3.0, 3.0, points)):
            write_tuned_trial(results, b, c * b ** alpha * 2.0 ** f, point, epochs=epochs, every=every,
                              train_samples=train_samples, c=c, alpha=alpha)
    return len(batches) * points


def main():
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "tuned"
        t0 = time.perf_counter()
        n = make_study(res)
        made = time.perf_counter() - t0
        os.sync()  # the generated files written out before the clock starts, not while the report runs
        t0 = time.perf_counter()
        write_report([res], ReportOptions(out=Path(tmp) / "report", formats=("md", "latex", "csv", "html")))
        seconds = time.perf_counter() - t0
    report(f"tuned report over {n} trials with step records (generated in {made:.0f} s)", seconds, "s",
           f"target < {TARGET_SECONDS:.0f} s")
    report("tuned report target / measured", TARGET_SECONDS / seconds, "x", ">= 1 meets the target")
