"""Time left: a running trial's from its own pace (its records' elapsed seconds per optimizer step), a trial not
started yet's from the pace of the trials of its shape that ran (else their seconds per sample), a sweep's as
their sum. Estimates, never promises: pruning and stopping at a target end trials sooner."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from lbscale.errors import LbscaleError
from lbscale.results import CONFIG, GRID, METRICS, RUN, TRIAL_YAML, read_json

# the options that change what an optimizer step or an evaluation costs (a seed or a learning rate does not)
COST_KEYS = ("data", "model", "global_batch", "local_batch", "accum_steps", "last_batch", "optimizer", "precision",
             "compile", "compile_mode", "channels_last", "augment", "augmentation", "crop_size", "decode_workers",
             "in_memory", "device", "backend", "eval_split", "eval_batch", "gns_every", "label_set")


def shape_key(options: dict, gpus) -> tuple:
    """What a trial's pace depends on: its cost options (a trial.yaml's or a config's) and its processes."""
    return (gpus, *(str(options.get(k)) for k in COST_KEYS))


@dataclass
class TrialPace:
    """What the estimates know of one trial: its shape, global batch and optimizer steps (None where not yet
    known), and how far its records reached: `step` steps in `trained` seconds."""

    key: tuple
    batch: int
    steps: int | None = None
    step: int = 0
    trained: float = 0.0


def last_pace(records: list[dict]) -> tuple[int, float]:
    """(step, elapsed seconds) of the last record that has both, (0, 0.0) before the first."""
    for r in reversed(records):
        if r.get("step") and r.get("elapsed_seconds") is not None:
            return int(r["step"]), float(r["elapsed_seconds"])
    return 0, 0.0


def own_left(t: TrialPace, since: float = 0.0) -> float | None:
    """A started trial's time left at its own pace, less the `since` seconds since its last record."""
    if not t.step or t.steps is None:
        return None
    return max(0.0, (t.steps - t.step) * t.trained / t.step - since)


def whole(t: TrialPace, ran: list[TrialPace]) -> float | None:
    """A trial's whole time: its steps at the seconds per step of the trials of its shape in `ran`, else at the
    seconds per sample of all of them (larger batches are faster per sample: an overestimate); None without
    either."""
    if t.steps is None:
        return None
    same = [r for r in ran if r.key == t.key and r.step]
    if same:
        return t.steps * sum(r.trained for r in same) / sum(r.step for r in same)
    others = [r for r in ran if r.step]
    if others:
        return t.steps * t.batch * sum(r.trained for r in others) / sum(r.step * r.batch for r in others)
    return None


def trial_left(t: TrialPace, ran: list[TrialPace], since: float = 0.0) -> float | None:
    """A trial's time left: at its own pace once it has a record, else its whole time (`whole`); less the `since`
    seconds it has run since its last record or its start (0 for a trial that is not running)."""
    if t.step:
        return own_left(t, since)
    w = whole(t, ran)
    return None if w is None else max(0.0, w - since)


def sweep_left(ran: list[TrialPace], todo: list[TrialPace], startup: float = 0.0) -> float:
    """The seconds of the trials in `todo` that can be estimated from those in `ran`, each with a process
    start-up of `startup` seconds."""
    return sum(w + startup for w in (whole(t, ran) for t in todo) if w is not None)


def clock(seconds: float | None) -> str:
    """'1:02:03' (hours run past 24), '-' for None."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def pace_of(trial_dir: Path, state: dict, train_samples: dict[str, int]) -> TrialPace:
    """A trial directory's pace: shape from trial.yaml and grid.json, steps from config.json, or for a trial not
    started from its trial.yaml and the train samples of its data file (`train_samples`, from other trials)."""
    trial_dir = Path(trial_dir)
    options = _yaml(trial_dir / TRIAL_YAML)
    gpus = (read_json(trial_dir / GRID) or {}).get("gpus")
    plan = (read_json(trial_dir / CONFIG) or {}).get("plan") or {}
    steps = plan.get("total_steps")
    if steps is None and options.get("data") in train_samples and gpus:
        steps = _resolved_steps(trial_dir / TRIAL_YAML, gpus, train_samples[options["data"]])
    return TrialPace(shape_key(options, gpus), int(options.get("global_batch") or 0), steps,
                     state.get("step") or 0, state.get("trained") or 0.0)


def since_news(trial_dir: Path, now: float | None = None) -> float:
    """Seconds since the trial last wrote a record (or, before its first, since its process started)."""
    now = time.time() if now is None else now
    for name in (METRICS, RUN):
        try:
            return max(0.0, now - (Path(trial_dir) / name).stat().st_mtime)
        except FileNotFoundError:
            continue
    return 0.0


def _yaml(path: Path) -> dict:
    try:
        out = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return out if isinstance(out, dict) else {}


def _resolved_steps(trial_yaml: Path, gpus: int, train_samples: int) -> int | None:
    from lbscale.config import load_config
    from lbscale.train.plan import resolve_plan

    try:
        return resolve_plan(load_config(trial_yaml), gpus, train_samples).total_steps
    except LbscaleError:  # the trial itself will say why
        return None
