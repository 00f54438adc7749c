"""The scaling model checked on this machine (issue: multi-node): fit the ring all-reduce on 2 processes,
predict 4, with gloo on the CPU.

1. `lbscale bench allreduce --procs 2,4 --fit-procs 2`: all-reduce time at 2 and 4 processes over 4 KiB ..
   16 MiB, alpha and beta fitted on the 2-process points; the median predicted / measured at 4 processes.
2. A weak-scaling sweep (ResNet-18, 32 images per process, 1, 2 and 4 processes, 2 epochs each), reported with
   `lbscale report --allreduce`: the model's time per epoch at 2 and 4 processes (from the 1-process step and
   the fit) over the measured one.

A ratio of 1 is a perfect prediction. This machine has 2 cores: 4 processes share them, so their compute per
step is about twice the 1-process step the model assumes; the 4-process ratios show that, not the network.
Every process runs one thread (OMP_NUM_THREADS=1), the 1-process base too."""

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import report
from lbscale.data.prepare import prepare

LBSCALE = [sys.executable, "-m", "lbscale.cli"]
SPEC = """
name: weak
data: {data}
model: resnet18
epochs: 2
trial: {{optimizer: sgd, base_lr: 0.05, lr_scaling: none, schedule: constant, device: cpu, timing_warmup_steps: 2}}
grid:
  points: [{{batch: 32, gpus: 1}}, {{batch: 64, gpus: 2}}, {{batch: 128, gpus: 4}}]
  seeds: 1
"""


def run(*args) -> str:
    # one thread per process at every count, as torchrun gives each of several processes: else the 1-process
    # base step would use both cores and the 2-process one a core each
    r = subprocess.run([*LBSCALE, *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args[:2]))} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fit = tmp / "allreduce-local.json"
        run("bench", "allreduce", "--procs", "2,4", "--fit-procs", "2", "--sizes", "4K..16M", "--repeats", "10",
            "--out", fit, "--quiet")
        doc = json.loads(fit.read_text())
        report("all-reduce fit on 2 processes: alpha", doc["fit"]["alpha_seconds"] * 1e6, "us")
        report("all-reduce fit on 2 processes: bandwidth", doc["fit"]["bandwidth_GBps"] or 0.0, "GB/s")
        report("all-reduce predicted / measured at 4 processes (median)", doc["check_summary"]["median_ratio"],
               "ratio", "1 = exact")
        data = tmp / "data.h5"
        prepare("synthetic", None, data, count=1600, bands=3, size=32, classes=4, seed=0, command="bench")
        spec = tmp / "weak.yaml"
        spec.write_text(SPEC.format(data=data))
        run("sweep", spec, "--results", tmp / "res", "--quiet")
        run("report", tmp / "res", "--out", tmp / "rep", "--allreduce", fit, "--predict-gpus", "8")
        rows = list(csv.DictReader(open(tmp / "rep" / "tables" / "scaling-model.csv")))
        measured_share = {}
        for trial in (tmp / "res").iterdir():
            if (trial / "summary.json").exists():
                final = json.loads((trial / "summary.json").read_text())["final"]
                measured_share[json.loads((trial / "config.json").read_text())["world_size"]] = (
                    final["comm_seconds"] / final["train_seconds"])
        for r in rows:
            if r["source"] == "measured" and int(float(r["gpus"])) > 1:
                gpus = int(float(r["gpus"]))
                report(f"time per epoch predicted / measured at {gpus} processes", float(r["ratio"]), "ratio",
                       "1 = exact")
                report(f"  measured time per epoch at {gpus} processes", float(r["measured_epoch_seconds"]), "s")
                report(f"  predicted exposed comm share at {gpus} processes", float(r["comm_efficiency_loss"]), "ratio")
                report(f"  measured exposed comm share at {gpus} processes (last epoch)", measured_share[gpus],
                       "ratio")


if __name__ == "__main__":
    main()
