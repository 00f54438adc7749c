"""The two engines on one small tuned study: the demo's (experiments/demo-tuned.yaml) at batches 32..128 with 2
processes a trial, run under `--engine ddp` and `--engine horovod` one after the other in this run, here; the
sweep's wall time and its trials' time split (data, compute, exposed communication, evaluation, start-up) side by
side, summed over every trial. Needs Horovod (make horovod).

    .venv/bin/python benchmarks/run.py engines
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "demo-tuned.yaml"
DATA = ROOT / "data" / "demo.h5"
ARGS = ["--gpus", "2", "--batch", "32..128", "--quiet"]
PARTS = ("data_seconds", "compute_seconds", "comm_seconds", "step_eval_seconds", "eval_seconds")


def split(results: Path) -> dict:
    """Seconds summed over the trials' epoch records, and each trial's start-up and wall time (summary.json)."""
    out = dict.fromkeys((*PARTS, "startup_seconds", "wall_seconds"), 0.0)
    out["trials"] = 0
    for trial in sorted(p for p in results.iterdir() if (p / "metrics.jsonl").exists()):
        out["trials"] += 1
        for line in (trial / "metrics.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r.get("kind", "epoch") == "epoch":
                for k in PARTS:
                    out[k] += r.get(k) or 0.0
        summary = json.loads((trial / "summary.json").read_text()) if (trial / "summary.json").exists() else {}
        out["startup_seconds"] += summary.get("startup_seconds") or 0.0
        out["wall_seconds"] += summary.get("wall_seconds") or 0.0
    return out


def run(engine: str, folder: Path) -> tuple[float, dict, str]:
    results = folder / engine
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lbscale.cli", "sweep", str(SPEC), "--engine", engine, "--results",
                    str(results), *ARGS], check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    line = subprocess.run([sys.executable, "-m", "lbscale.cli", "report", str(results), "--out",
                           str(folder / f"report-{engine}"), "--format", "md"], check=True, cwd=ROOT,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return wall, split(results), line


def main():
    if not DATA.exists():
        subprocess.run([sys.executable, "-m", "lbscale.cli", "prepare", "synthetic", "--out", str(DATA), "--count",
                        "6000", "--classes", "10", "--label-noise", "0.2", "--force"], check=True, cwd=ROOT)
    folder = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    try:
        rows = {engine: run(engine, folder) for engine in ("ddp", "horovod")}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{'':<28}{'ddp':>12}{'horovod':>12}{'ratio':>8}")
    (wd, a, _), (wh, b, _) = rows["ddp"], rows["horovod"]
    print(f"{'sweep wall [s]':<28}{wd:>12.1f}{wh:>12.1f}{wh / wd:>8.2f}")
    for k in ("trials", *PARTS, "startup_seconds", "wall_seconds"):
        ratio = f"{b[k] / a[k]:>8.2f}" if a[k] else f"{'-':>8}"
        print(f"{k:<28}{a[k]:>12.1f}{b[k]:>12.1f}{ratio}")
    for engine, (_, _, line) in rows.items():
        print(f"{engine}: {line}")


if __name__ == "__main__":
    main()
