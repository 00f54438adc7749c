"""A study as data: every trial under one or more results directories in three DataFrames.

`trials` has one row per trial (its grid position, plan, searched hyperparameters `hp_*`, state and summary
figures); `epochs` one row per (trial, epoch) record, partial epochs of diverged runs included; `steps` one row
per evaluation, the step evaluations (`"kind": "step"`) and the epoch records alike (`kind` says which), in the
shape of batch_science's measurements. Trials still running, interrupted, submitted, pruned or never started
(pending) are rows too, with their state: nothing is silently dropped.

    from lbscale.report import load_results
    study = load_results(["results/sat4-lamb"])
    study.trials.groupby(["global_batch", "gpus"]).final_val_top1.mean()
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd

from lbscale.errors import LbscaleError
from lbscale.report.parallel import can_fork, shared
from lbscale.report.trialdir import HP, array, is_metric, is_trial_listing, read_trials
from lbscale.results import CONFIG, SUMMARY, TRIAL_YAML
from lbscale.task import TASKS

__all__ = ["HP", "STEP_KEYS", "Study", "find_trials", "is_number", "is_trial_dir", "load_results"]

STEP_KEYS = ["results", "trial", "global_batch", "gpus", "variant", "warmup", "seed"]
SHARED = 256  # trials from which a forked child shares the reading (below, the fork costs more than it saves)


@dataclass
class Study:
    trials: pd.DataFrame
    epochs: pd.DataFrame
    sources: list[str]
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    _varies: dict = field(default_factory=dict, repr=False)

    @property
    def tuned(self) -> bool:
        """A tuned study: some trial is a point of a hyperparameter search (grid.json's "point" / "search") that
        is a tuning, not an axis (`grid.search.tune: false`: each point its own curve, reported by rule)."""
        t = self.trials
        if "point" not in t:
            return False
        tune = t["tune"] if "tune" in t else pd.Series(True, index=t.index)
        return bool((t["point"].notna() & (tune.astype(object) != False)).any())  # noqa: E712

    def varies(self, axis: str) -> bool:
        """Does the grid vary this axis (variant, warm-up)? Tables ask per row, so it is cached."""
        if axis not in self._varies:
            self._varies[axis] = self.trials[axis].fillna("-").nunique() > 1
        return self._varies[axis]

    @property
    def task(self):
        tasks = [t for t in self.trials["task"].dropna().unique()]
        return TASKS[tasks[0]] if len(tasks) == 1 else None


def is_trial_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (TRIAL_YAML, CONFIG, SUMMARY))


def _candidates(paths) -> list[Path]:
    """The directories that may be trials: each path itself where it is one, else its subdirectories (sorted)."""
    found = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise LbscaleError(f"{p}: no such results directory")
        if is_trial_listing(str(p), os.listdir(p)):
            found.append(p)
            continue
        with os.scandir(p) as entries:  # one listing, not a stat per entry
            found += [p / name for name in sorted(e.name for e in entries if e.is_dir())]
    return found


def find_trials(paths) -> list[Path]:
    """Trial directories: each path is one, or holds them one level down."""
    return [d for d in _candidates(paths) if is_trial_listing(str(d), os.listdir(d))]


def _merged(parts: list[dict], counts: list[int]) -> dict:
    """The columns of consecutive parts of the records as one: keys in the order they first appear, NaN where a
    part's records lack a key (as from_records fills it); a column whose parts' types differ is inferred again
    from all its values, as it would have been from one list."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for k in dict.fromkeys(chain.from_iterable(parts)):
        pieces = [p[k] if k in p else np.full(n, math.nan) for p, n in zip(parts, counts)]
        if all(isinstance(x, np.ndarray) for x in pieces) and len({x.dtype for x in pieces}) == 1:
            out[k] = np.concatenate(pieces)
        else:
            out[k] = array([v for x in pieces for v in (x.tolist() if isinstance(x, np.ndarray) else x)])
    return out


def _frame(columns: dict, rows: int) -> pd.DataFrame:
    """The records' frame from their columns, as DataFrame.from_records builds it from the records themselves."""
    return pd.DataFrame(columns) if columns else pd.DataFrame.from_records([{}] * rows)


class Owners:
    """Each record's trial (`index`: rows of `trials`) and the trials' columns taken row by row for them, each
    taken once: the epoch records and the evaluations of a study without partial epochs or step evaluations have
    the same owners, and taking a string column for 200,000 records costs milliseconds."""

    def __init__(self, trials: pd.DataFrame, index: np.ndarray):
        self.trials, self.index, self._taken = trials, index, {}

    def take(self, columns: list[str]) -> pd.DataFrame:
        for c in columns:
            if c not in self._taken:
                self._taken[c] = self.trials[c].take(self.index).reset_index(drop=True)
        return pd.DataFrame({c: self._taken[c] for c in columns})


def _with_trials(frame: pd.DataFrame, owners: Owners, columns: list[str]) -> pd.DataFrame:
    """`frame` (a row per record) with its trial's results and name in front and `columns` of the trial after, as
    a left merge on (results, trial) gives them, without hashing every row's names; where names repeat (a trial
    given twice) or a record carries such a column, the merge itself."""
    keys = ["results", "trial"]
    trials = owners.trials
    frame = pd.concat([owners.take(keys), frame], axis=1)
    if trials.duplicated(keys).any() or frame.columns.isin(columns).any():
        return frame.merge(trials[keys + columns], on=keys, how="left")
    return pd.concat([frame, owners.take(columns)], axis=1)


def _evaluations(ev: pd.DataFrame, owners: Owners) -> pd.DataFrame:
    """`Study.steps` from the evaluations' columns: one row per evaluation (step evaluations and full epoch
    records; an epoch cut short evaluated nothing), ordered by step within each trial. `epoch` is fractional;
    `samples_seen` the training samples seen (an epoch record's: its epochs' samples summed, else epochs x the
    plan's epoch_samples, else steps x global batch); `elapsed_seconds` the trial's clock as written (training and
    epoch evaluations); `subset`, where a trial evaluated subsets, the images of a subset evaluation (NaN for the
    whole split: only those reach a target)."""
    base = STEP_KEYS + ["step", "epoch", "samples_seen", "elapsed_seconds", "kind"]
    if not len(ev):
        return pd.DataFrame(columns=base)
    ev = _with_trials(ev, owners, STEP_KEYS[2:] + ["epoch_samples"])
    for c in ("step", "epoch", "samples_seen", "elapsed_seconds", "epoch_samples"):
        ev[c] = pd.to_numeric(ev[c], errors="coerce").astype(float) if c in ev else float("nan")
    batch = pd.to_numeric(ev["global_batch"], errors="coerce")
    ev["samples_seen"] = ev["samples_seen"].fillna(ev["epoch"] * ev["epoch_samples"]).fillna(ev["step"] * batch)
    ev["kind"] = ev["kind"].fillna("epoch") if "kind" in ev else "epoch"
    ev = ev[base[:-2] + [c for c in ev if is_metric(c)] + base[-2:]
            + [c for c in ("subset", "check") if c in ev]]
    # as the files hold them, mostly: sorting 200,000 names would change nothing
    if _in_order(ev, owners.index, owners.trials):
        return ev
    return ev.sort_values(["results", "trial", "step", "elapsed_seconds"], kind="stable").reset_index(drop=True)


def _in_order(ev: pd.DataFrame, owners: np.ndarray, trials: pd.DataFrame) -> bool:
    """Whether the evaluations are in the order a stable sort by (results, trial, step, elapsed_seconds) gives:
    trials in strictly increasing (results, trial) order (a trial given twice is sorted), and within each trial
    (step, elapsed_seconds) never decreasing, none missing."""
    names = list(zip(trials["results"], trials["trial"]))
    if any(a >= b for a, b in zip(names, names[1:])):
        return False
    step, elapsed = ev["step"].to_numpy(float), ev["elapsed_seconds"].to_numpy(float)
    if np.isnan(step).any() or np.isnan(elapsed).any():
        return False
    d_step, d_elapsed = np.diff(step), np.diff(elapsed)
    rising = (d_step > 0) | ((d_step == 0) & (d_elapsed >= 0))
    return bool(rising[owners[1:] == owners[:-1]].all())


def _epochs(ep: pd.DataFrame, owners: Owners) -> pd.DataFrame:
    """`Study.epochs` from the epoch records' frame: every epoch record (partial ones flagged) with its trial's
    grid position."""
    if ep.empty:
        return ep
    ep = _with_trials(ep, owners, ["global_batch", "gpus", "variant", "warmup", "seed", "steps_per_epoch"])
    ep["partial"] = ep["partial"].fillna(False).astype(bool) if "partial" in ep else False
    return ep


def load_results(paths, meanwhile=None) -> Study:
    """Every trial under `paths` (results directories or trial directories) as one Study. `meanwhile()`, where
    given, runs in this process before the Study is built; where a forked child shares a large study's reading
    (`parallel.shared`), it runs while the child reads (`lbscale report` imports matplotlib then)."""
    candidates = _candidates(paths)
    if len(candidates) >= SHARED and can_fork():
        parts = shared(read_trials, candidates, first=meanwhile)
    else:
        if meanwhile is not None:
            meanwhile()
        parts = [read_trials(candidates)]
    rows = [row for p in parts for row in p.rows]
    if not rows:
        raise LbscaleError(f"{', '.join(map(str, paths))}: no trials (directories with trial.yaml, config.json "
                           "or summary.json)")
    trials = pd.DataFrame(rows)
    index = np.arange(len(rows))
    epoch_counts = [n for p in parts for n in p.epoch_counts]
    eval_counts = [n for p in parts for n in p.evaluation_counts]
    epochs = _frame(_merged([p.epochs for p in parts], [sum(p.epoch_counts) for p in parts]), sum(epoch_counts))
    evals = _frame(_merged([p.evaluations for p in parts], [sum(p.evaluation_counts) for p in parts]),
                   sum(eval_counts))
    epoch_owners = Owners(trials, np.repeat(index, epoch_counts))
    eval_owners = epoch_owners if epoch_counts == eval_counts else Owners(trials, np.repeat(index, eval_counts))
    return Study(trials, _epochs(epochs, epoch_owners), [str(p) for p in paths], _evaluations(evals, eval_owners))


def is_number(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))
