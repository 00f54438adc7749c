"""summary.json of a trial from its epoch records: final and best metrics, timing, steps to target."""

from __future__ import annotations

import numpy as np

from lbscale.task import Task

NO_TARGET = {"steps_to_target": None, "epochs_to_target": None, "seconds_to_target": None}


def summarize(records: list[dict], task: Task, status: str, error: str | None = None, **fields) -> dict:
    """The summary of a trial that ended with `status`; `fields` (steps, world size, ...) are added as they are.

    A partial last record (an epoch cut short by divergence) counts in the time, not in the metrics; where it
    is the only record, the time per epoch is its pace extrapolated to a whole epoch (`epoch_seconds_estimated`)."""
    full = [r for r in records if not r.get("partial")]
    partial = records[-1] if records and records[-1].get("partial") else None
    metrics = sorted({k for r in full for k in r if k.startswith(("val_", "test_"))})
    best = {k: task.best(k, [r[k] for r in full if k in r]) for k in metrics}
    # Time per epoch, the one definition (the report and `lbscale train`'s outcome line read this field): the
    # mean time of a full pass of the train split over the epochs after the first, which carries start-up
    # costs (the first where there is one). Records of lbscale before full_pass_seconds: their train_seconds.
    steady = full[1:] if len(full) > 1 else full
    if full:
        epoch_seconds = float(np.mean([r.get("full_pass_seconds", r["train_seconds"]) for r in steady]))
        ips = None
    elif partial:
        epoch_seconds, ips = partial["epoch_seconds_estimate"], partial["images_per_second"]
    else:
        epoch_seconds, ips = None, None
    return {
        "status": status, "error": error, "epochs_completed": len(full),
        "final": full[-1] if full else None, "best": best, "partial_epoch": partial,
        "mean_epoch_seconds": epoch_seconds, "epoch_seconds_estimated": bool(partial and not full),
        "images_per_second": float(np.mean([r["images_per_second"] for r in steady])) if steady else ips,
        "total_train_seconds": float(sum(r["train_seconds"] for r in records)),
        **fields,
    }
