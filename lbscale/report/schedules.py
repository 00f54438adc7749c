"""Batch-size schedule arms beside their fixed-batch controls (Merrill et al. 2025, Table 1's shape): steps and
time to the target, the steps saved, and the final metric, per arm."""

from __future__ import annotations

import pandas as pd

from lbscale.results import FINISHED
from lbscale.report.load import Study
from lbscale.report.tables import Table, batch_label, mean_std
from lbscale.train.batch_schedule import SYNTAX_EPOCH, BatchSchedule


def _control(arm_variant: str, variants: list[str]) -> str | None:
    """The fixed-batch variant an arm grew out of: the longest control variant its name extends (an arm is
    VARIANT-NAME)."""
    bases = [v for v in variants if arm_variant.startswith(f"{v}-")]
    return max(bases, key=len) if bases else None


def schedule_table(study: Study, metric: str, target: float, per_trial: pd.DataFrame) -> Table | None:
    """Each arm (its seeds) beside the controls of its variant at its first and its last batch; None where the
    study has no arm."""
    t = study.trials
    if "batch_schedule" not in t or t["batch_schedule"].isna().all():
        return None
    if "state" in t:
        t = t[t["state"].isin(FINISHED)]
    keys = [k for k in ("results", "trial") if k in t and k in per_trial]
    steps = per_trial.set_index(keys)
    final = f"final_{metric}"
    controls = t[t["batch_schedule"].isna()]
    disp, tidy = [], []
    for (variant, text), arm in t.dropna(subset=["batch_schedule"]).groupby(["variant", "batch_schedule"]):
        schedule = BatchSchedule.parse(text, SYNTAX_EPOCH, first=int(arm["global_batch"].iloc[0]),
                                       ordered=False) \
            if not text.startswith("auto:") else None
        base = _control(variant, sorted(controls["variant"].dropna().unique()))
        first = int(arm["global_batch"].iloc[0])
        rows = [("arm", arm)]
        for batch in dict.fromkeys((first, schedule.last if schedule else first)):
            c = controls[(controls["variant"] == base) & (controls["global_batch"] == batch)] if base else controls[:0]
            if len(c):
                rows.append((f"control at {batch_label(batch)}", c))
        arm_mean = None
        for label, g in rows:
            s = steps.reindex(pd.MultiIndex.from_frame(g[keys]) if len(keys) > 1 else g[keys[0]])
            st, mean, _, _ = mean_std(s["steps"], 1)
            tt, _, _, _ = mean_std(s["seconds"], 2)
            ft, _, _, _ = mean_std(g[final] if final in g else [], 3)
            arm_mean = mean if label == "arm" else arm_mean
            saved = (f"{100 * (1 - arm_mean / mean):.0f}%" if label != "arm" and arm_mean and mean else "-")
            reached = int(s["steps"].notna().sum())
            disp.append({"Arm": variant if label == "arm" else f"{base} ({label})", "Schedule": text if label == "arm"
                         else "fixed", "Reached": f"{reached} of {len(g)}", "Steps to target": st,
                         "Arm's steps saved": saved, "Time to target [s]": tt, f"Final {metric}": ft})
            tidy.append({"arm": variant, "row": label, "schedule": text, "reached": reached, "seeds": len(g),
                         "steps_mean": mean, "steps_saved": (1 - arm_mean / mean) if label != "arm" and arm_mean
                         and mean else None})
    return Table("schedules", f"Batch-size schedules beside their controls: steps to {metric} {target:g}",
                 pd.DataFrame(disp), pd.DataFrame(tidy),
                 ["Steps to target: optimizer steps as they were taken (a schedule's larger steps count one each); "
                  "steps saved: 1 - the arm's mean over the control's mean; final: the model each trial ended with "
                  "(a trial stopped at its target ends there)"])
