"""summary.json of a trial from its epoch records: final and best metrics, timing, steps to target."""

from __future__ import annotations

import numpy as np

from lbscale.task import Task

NO_TARGET = {"steps_to_target": None, "epochs_to_target": None, "seconds_to_target": None}


def epoch_records(records: list[dict]) -> list[dict]:
    """The per-epoch records of metrics.jsonl (partial ones included), without the step evaluations
    (`kind: step`, from --eval-every and successive halving's rungs)."""
    return [r for r in records if r.get("kind", "epoch") == "epoch"]


def epoch_seconds(records: list[dict]) -> tuple[float | None, bool]:
    """Time per epoch, the one definition (summary.json, `lbscale train`'s outcome line and the report): the
    mean time of a full pass of the train split over the full epochs after the first, which carries start-up
    costs (the first where there is only one); else a partial epoch's pace extrapolated to a full pass
    (estimated: True). Records of lbscale before full_pass_seconds count their train_seconds."""
    records = epoch_records(records)
    full = [r for r in records if not r.get("partial")]
    steady = full[1:] if len(full) > 1 else full
    if steady:
        return float(np.mean([r.get("full_pass_seconds", r["train_seconds"]) for r in steady])), False
    partial = [r for r in records if r.get("partial")]
    if partial:
        return float(partial[-1]["epoch_seconds_estimate"]), True
    return None, False


def summarize(records: list[dict], task: Task, status: str, error: str | None = None, **fields) -> dict:
    """The summary of a trial that ended with `status`; `fields` (steps, world size, ...) are added as they are.

    A partial last record (an epoch cut short by divergence) counts in the time, not in the metrics; where it
    is the only record, the time per epoch is its pace extrapolated to a whole epoch (`epoch_seconds_estimated`).
    Step evaluations count in neither (their figures are in metrics.jsonl; steps to target come from them)."""
    records = epoch_records(records)
    full = [r for r in records if not r.get("partial")]
    partial = records[-1] if records and records[-1].get("partial") else None
    metrics = sorted({k for r in full for k in r if k.startswith(("val_", "test_"))})
    best = {k: task.best(k, [r[k] for r in full if k in r]) for k in metrics}
    steady = full[1:] if len(full) > 1 else full
    seconds, estimated = epoch_seconds(records)
    return {
        "status": status, "error": error, "epochs_completed": len(full),
        "final": full[-1] if full else None, "best": best, "partial_epoch": partial,
        "mean_epoch_seconds": seconds, "epoch_seconds_estimated": estimated,
        "images_per_second": (float(np.mean([r["images_per_second"] for r in steady])) if steady
                              else partial["images_per_second"] if partial else None),
        "total_train_seconds": float(sum(r["train_seconds"] for r in records)),
        **fields,
    }
