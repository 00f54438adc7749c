"""A branch study's folder as `lbscale branch` leaves it, built by code: one trial directory per branch
(CHECKPOINT-xK, grid.json of the sweep "branch", variant xK) and its table critical-batch.csv with the columns
`branch_table` writes. Two checkpoints of a parent trained at batch 32, factors 1, 2 and 4:

- 25pct: batch 64 stays within 0.01 of the best loss, 128 does not: local critical batch 64, in [64, 128);
- 50pct: every factor stays within it: at least 128.
"""

import json
import shutil
from pathlib import Path

import pandas as pd

from tests.fixtures.make_results import make_trial

KEPT = "the largest batch within 0.01 of the smaller batches' best loss"
EVERY = "every factor within 0.01: the critical batch is at least 128"
CHECKPOINTS = {  # label: (parent step, samples, {batch: loss}, local critical batch, why)
    "25pct": (4, 128, {32: 1.50, 64: 1.505, 128: 1.60}, 64, KEPT),
    "50pct": (8, 256, {32: 1.20, 64: 1.19, 128: 1.195}, 128, EVERY),
}


def make_branch_study(folder: Path, parent: str = "parent", table: bool = True) -> Path:
    """The branches' trial directories and (with `table`) critical-batch.csv in `folder`."""
    folder = Path(folder)
    rows = []
    for label, (step, samples, losses, critical, why) in CHECKPOINTS.items():
        for batch, loss in losses.items():
            k = batch // 32
            made = make_trial(folder, batch, 1, 0, variant="sgd-linear", epochs=1)
            name = f"{label}-x{k}"
            shutil.move(made, folder / name)
            grid = json.loads((folder / name / "grid.json").read_text())
            grid.update({"sweep": "branch", "trial": name, "variant": f"x{k}"})
            (folder / name / "grid.json").write_text(json.dumps(grid) + "\n")
            rows.append({"parent": parent, "checkpoint": label, "samples": samples, "parent_step": step,
                         "factor": k, "batch": batch, "lr": 0.05 * k, "loss": loss, "train_loss_ema": None,
                         "status": "completed", "steps": 256 // batch, "critical_batch": critical, "why": why})
    if table:
        pd.DataFrame(rows).to_csv(folder / "critical-batch.csv", index=False)
    return folder
