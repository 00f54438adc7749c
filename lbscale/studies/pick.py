"""A tuned sweep's best trials, as its report picks them (the fewest steps to the target): at one batch, the parent
a branch study of that sweep starts from (`lbscale branch RESULTS --batch B`); at every batch, where each stopped
at its target, the checkpoints `lbscale gns RESULTS --best` measures the noise scale of at the target."""

from __future__ import annotations

from pathlib import Path

from lbscale.errors import LbscaleError


def _best(results: Path):
    from lbscale.report import tuned, tuned_study

    study, metric, target, maximize = tuned_study(results, "give a trial directory")
    return tuned.best_trials(study.trials, study.steps, metric, target, maximize)


def best_at_target(results: Path) -> list[Path]:
    """Each batch's best trial whose checkpoint is where it reached the target (it stopped there), by batch."""
    from lbscale.train.checkpoint import at_target

    best = _best(results).sort_values("global_batch")
    dirs = [Path(r) / t for r, t, reached in zip(best["results"], best["trial"], best["reached"]) if reached]
    return [d for d in dirs if at_target(d) is not None]


def best_trial(results: Path, batch: int) -> Path:
    """The directory of the best trial at `batch` of the tuned sweep in `results`; one line where there is none."""
    best = _best(results)
    at = best[best["global_batch"] == batch]
    if at.empty:
        batches = ", ".join(f"{b:,}" for b in sorted(best["global_batch"].unique()))
        raise LbscaleError(f"--batch {batch}: {results} has no trial at that batch (it has {batches})")
    row = at.iloc[0]
    return Path(row["results"]) / row["trial"]
