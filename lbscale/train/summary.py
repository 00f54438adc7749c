"""summary.json of a trial from its epoch records: final and best metrics, timing, steps to target."""

from __future__ import annotations

import numpy as np

from lbscale.task import Task

NO_TARGET = {"steps_to_target": None, "epochs_to_target": None, "seconds_to_target": None}


def summarize(records: list[dict], task: Task, status: str, error: str | None = None, **fields) -> dict:
    """The summary of a trial that ended with `status`; `fields` (steps, world size, ...) are added as they are."""
    metrics = sorted({k for r in records for k in r if k.startswith("val_")})
    best = {k: task.best(k, [r[k] for r in records if k in r]) for k in metrics}
    steady = records[1:] if len(records) > 1 else records  # the first epoch carries start-up costs
    return {
        "status": status, "error": error, "epochs_completed": len(records),
        "final": records[-1] if records else None, "best": best,
        "mean_epoch_seconds": float(np.mean([r["train_seconds"] for r in records])) if records else None,
        "images_per_second": float(np.mean([r["images_per_second"] for r in steady])) if steady else None,
        "total_train_seconds": float(sum(r["train_seconds"] for r in records)),
        **fields,
    }
