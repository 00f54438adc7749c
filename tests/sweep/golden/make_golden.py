"""The golden sbatch scripts: one per shipped cluster profile, rendered for a fixed two-node trial (the
SAT-4 LAMB study's ResNet-50 at 2048 images per GPU on two full nodes, one seed, --requeue) with fixed paths, as
submitit keeps a rendered script. `python tests/sweep/golden/make_golden.py` rewrites them after a deliberate
change to what `lbscale sweep --launcher slurm` renders; tests/sweep/test_profiles.py fails on any other change."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SPEC = """
name: sat4-lamb
data: /scratch/project/data/sat4.h5
model: resnet50
epochs: 25
trial: {optimizer: lamb, base_lr: 0.00125, ref_batch: 8192, lr_scaling: sqrt, warmup_epochs: auto}
grid:
  batch: [%d]
  gpus: [%d]
  seeds: 1
"""
PYTHON = "/opt/venv/bin/python"  # stands in for the interpreter the sweep runs with
SPEC_PATH = "/project/lbscale/experiments/sat4-lamb.yaml"
RESULTS = Path("/scratch/project/results/sat4-lamb")


def render(system_name: str) -> str:
    from lbscale.sweep.submit import render_array_script
    from lbscale.sweep.options import SweepOptions, SweepRun
    from lbscale.sweep.plan import build_plan
    from lbscale.sweep.spec import load_sweep_spec
    from lbscale.sweep.systems import get_system

    system = get_system(system_name)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "sat4-lamb.yaml"
        gpus = 2 * system["gpus_per_node"]  # two full nodes, 2048 images per GPU
        spec.write_text(SPEC % (2048 * gpus, gpus))
        plans = build_plan(load_sweep_spec(spec), RESULTS, system["gpus_per_node"])
    options = SweepOptions(launcher="slurm", system=system_name, requeue=True)
    run = SweepRun(spec_path=SPEC_PATH, results=RESULTS, system=system, options=options)
    real, sys.executable = sys.executable, PYTHON
    try:
        return render_array_script(run, plans, f"sat4-lamb-g{plans[0].gpus}")
    finally:
        sys.executable = real


def shipped() -> list[str]:
    from lbscale.sweep.systems import load_systems

    return sorted(load_systems())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for name in shipped():
        (HERE / f"{name}.sh").write_text(render(name))
        print(f"wrote {HERE / name}.sh")
