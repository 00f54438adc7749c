"""A tuned sweep's best trial at one batch, as its report picks it (the fewest steps to the target): the parent a
branch study of that sweep starts from (`lbscale branch RESULTS --batch B`)."""

from __future__ import annotations

from pathlib import Path

from lbscale.errors import LbscaleError


def best_trial(results: Path, batch: int) -> Path:
    """The directory of the best trial at `batch` of the tuned sweep in `results`; one line where there is none."""
    from lbscale.report import _metric, _targets, load_results, tuned, tuned_tables

    study = load_results([results])
    if not study.tuned:
        raise LbscaleError(f"{results}: not a tuned sweep (no search per batch): give a trial directory")
    metric = tuned_tables.step_metric(study, _metric(study, "auto"))
    targets = _targets(study, metric, None)
    best = tuned.best_trials(study.trials, study.steps, metric, targets[-1] if targets else None,
                             study.task.higher_is_better(metric))
    at = best[best["global_batch"] == batch]
    if at.empty:
        batches = ", ".join(f"{b:,}" for b in sorted(best["global_batch"].unique()))
        raise LbscaleError(f"--batch {batch}: {results} has no trial at that batch (it has {batches})")
    row = at.iloc[0]
    return Path(row["results"]) / row["trial"]
