"""The check's sweep spec of `lbscale schedule`: the derived batch-size schedule as an arm beside the fixed
batches it must beat, each at the sweep's tuned LR, with a comment per switch naming its measurement."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lbscale.results import CONFIG, read_json


# trial options the spec leaves out: the grid, the search and the sweep set them, or they name this machine
LEFT_OUT = {"out", "global_batch", "seed", "data", "model", "epochs", "resume", "prune", "prune_group",
            "prune_min_steps", "prune_min_samples", "prune_eta", "prune_metric", "keep_checkpoints", "gns_every",
            "preempt_after_steps", "batch_schedule", "branch_from", "branch_samples", "branch_reseed", "branch_ema",
            "gns_at_target"}


def trial_options(config: dict) -> dict:
    """A trial's options that differ from lbscale's defaults (what a spec's trial block writes)."""
    from lbscale.train.config import FIELDS

    def same(a, b):
        return a == b or (isinstance(a, (list, tuple)) and list(a) == list(b or []))
    return {k: v for k, v in config.items() if k in FIELDS and k not in LEFT_OUT
            and not same(v, FIELDS[k].default)}


def lr_of(best: pd.DataFrame, batch: int) -> tuple[float, float]:
    row = best[best["global_batch"] == batch].iloc[0]
    return float(row["peak_lr"]), float(row["base_lr"])


def spec_text(results: Path, o, parts, table: pd.DataFrame, planned, spec: Path, check: Path) -> str:
    """The check's sweep spec: the derived schedule as an arm (a comment per switch naming its measurement), the
    best fixed batch, the schedule's last batch and its first as fixed controls, each at its tuned LR, `--seeds`
    seeds each (fresh seeds: the sweep's best trials were picked at seed 0), stopped at the sweep's target,
    unpruned; `spec` is where it is written, `check` where its trials go."""
    import yaml

    from lbscale.analysis.schedule import cost_at_fraction, schedule_text
    from lbscale.report.over_training import disagreements

    study, metric, target, maximize, best = parts
    switches, notes, fewest, lrs = planned
    row = best[best["global_batch"] == fewest].iloc[0]
    config = (read_json(Path(row["results"]) / row["trial"] / CONFIG) or {})["config"]
    trial = {"optimizer": config["optimizer"], **trial_options(config), "base_lr": lr_of(best, fewest)[1]}
    if "momentum" in config and config["optimizer"] in ("sgd", "lars"):
        trial["momentum"] = config["momentum"]
    trial.update({"stop_at_target": True, "target": target, "target_metric": metric})
    last = switches[-1].batch
    arms = {"derived": {"schedule": schedule_text(switches, lrs), "base_lr": lr_of(best, o.batch)[1]}}
    for b in dict.fromkeys((last, o.batch)):  # its last batch, and its first (Merrill et al.'s comparison)
        if b != fewest:
            arms[f"fixed-{b}"] = {"schedule": f"{b}@0", "base_lr": lr_of(best, b)[1]}
    steps, samples = cost_at_fraction(o.fraction)
    lines = [f"# The batch-size schedule derived by `lbscale schedule {results} --batch {o.batch} --fraction "
             f"{o.fraction:g}`, beside the fixed batches it must beat, {o.seeds} seeds each, stopped at {metric} "
             f"{target:g}:",
             f"#   lbscale sweep {spec} && lbscale report {check}",
             "# The schedule follows the local critical batch of a reference run (batch "
             f"{o.batch}'s best trial again, checkpoints at 1/8, 1/4, 1/2 of its steps to the target): the batch"
             f" doubles where {o.fraction:g} x the interval's lower end allows (Merrill et al. 2025). For comparison, "
             f"on McCandlish et al.'s curve a batch at {o.fraction:g} x B_crit (theirs, another quantity: "
             f"docs/studies.md) takes {steps:g} x the minimum steps and {samples:g} x the minimum samples.",
             "# Every batch at the sweep's best LR there (peak LR; base LR under the sweep's scaling rule)."]
    for s in switches:
        lines.append(f"#   {s.batch:,} from {s.samples:,} samples, LR {lrs[s.batch]:.4g}: {s.reason}")
    lines += [f"#   {n}" for n in notes]
    lines += [f"# Beside it: {d}" for d in disagreements(table)]
    lines.append(f"# Controls: batch {fewest:,} (the sweep's fewest steps to the target, "
                 f"{int(row['steps_to_target'])} at seed {int(row.get('seed', 0) or 0)}), LR {lrs[fewest]:.4g}"
                 + (f"; batch {last:,} (the schedule's last), LR {lrs[last]:.4g}" if last != fewest else "")
                 + (f"; batch {o.batch:,} (its first, the reference's), LR {lrs[o.batch]:.4g}"
                    if o.batch not in (fewest, last) else ""))
    body = {"name": f"{Path(results).name}-schedule", "data": config["data"], "model": config["model"],
            "epochs": config["epochs"], "results": str(check),
            "trial": trial, "grid": {"batch": [fewest], "gpus": [int(row.get("gpus") or 1)],
                                     "seeds": fresh_seeds(study, o.seeds),
                                     "batch_schedule": arms}}
    import textwrap

    wrapped = [w for line in lines for w in textwrap.wrap(line, 116, break_on_hyphens=False, subsequent_indent=
                                                          "#     " if line.startswith("#   ") else "# ")]
    return "\n".join(wrapped) + "\n" + yaml.safe_dump(body, sort_keys=False, width=1000)


def fresh_seeds(study, n: int) -> list[int]:
    """`n` seeds none of the sweep's trials used: its best trials were picked for their steps, partly their seed's
    luck, and a control run at that seed again would keep the luck."""
    used = pd.to_numeric(study.trials.get("seed", pd.Series(dtype=float)), errors="coerce").max()
    start = int(used) + 1 if pd.notna(used) else 1
    return list(range(start, start + n))
