"""Time left: a running trial's from its own pace (its records' elapsed seconds per training sample), a trial not
started yet's from the pace of the trials of its shape that ran (else of all of them), a sweep's as their sum.
Paces are per sample, not per optimizer step: a trial with a batch schedule takes larger steps as it goes, and
its samples, not its steps, say how far it is. Estimates, never promises: pruning and stopping at a target end
trials sooner."""

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
             "in_memory", "device", "backend", "eval_split", "eval_batch", "gns_every", "label_set", "batch_schedule")


def shape_key(options: dict, gpus) -> tuple:
    """What a trial's pace depends on: its cost options (a trial.yaml's or a config's) and its processes."""
    return (gpus, *(str(options.get(k)) for k in COST_KEYS))


@dataclass
class TrialPace:
    """What the estimates know of one trial: its shape, (first) global batch and optimizer steps (None where not
    yet known; with a batch schedule, the steps it takes as the batch grows), the training samples of its whole
    run (None: its steps x batch), and how far its records reached: `step` steps and `seen` samples (None: step
    x batch, records of an lbscale before they counted samples) in `trained` seconds."""

    key: tuple
    batch: int
    steps: int | None = None
    step: int = 0
    trained: float = 0.0
    samples: int | None = None
    seen: int | None = None

    @property
    def total(self) -> int | None:
        """The training samples of the whole run."""
        if self.samples is not None:
            return self.samples
        return None if self.steps is None else self.steps * self.batch

    @property
    def done(self) -> int:
        """The training samples its records reached."""
        return self.seen if self.seen is not None else self.step * self.batch


def last_pace(records: list[dict], epoch_samples: int | None = None) -> tuple[int, float, int | None]:
    """(step, elapsed seconds, training samples seen) of the last record that has a step and elapsed seconds,
    (0, 0.0, None) before the first. Samples as the trial counts them, from the start of training: a step
    evaluation's `samples_seen`; after an epoch record, its epochs times `epoch_samples` (config.json's plan;
    a partial epoch's own `samples` on top of those before it), else its epochs' `samples` summed (None where an
    epoch lacks them). A branch's records start at its parent's place, and the latter counts from there."""
    out, seen = (0, 0.0, None), 0
    for r in records:
        if r.get("kind", "epoch") == "epoch":
            if epoch_samples and isinstance(r.get("epoch"), int):
                seen = (r["epoch"] - 1) * epoch_samples + (r.get("samples") or 0 if r.get("partial") else epoch_samples)
            else:
                seen = seen + r["samples"] if seen is not None and r.get("samples") is not None else None
        if r.get("step") and r.get("elapsed_seconds") is not None:
            out = (int(r["step"]), float(r["elapsed_seconds"]),
                   r.get("samples_seen") if r.get("kind") == "step" else seen)
    return out


def own_left(t: TrialPace, since: float = 0.0) -> float | None:
    """A started trial's time left at its own pace (seconds per sample so far), less the `since` seconds since its
    last record."""
    if not t.step or t.total is None or not t.done:
        return None
    return max(0.0, (t.total - t.done) * t.trained / t.done - since)


def whole(t: TrialPace, ran: list[TrialPace]) -> float | None:
    """A trial's whole time: its samples at the seconds per sample of the trials of its shape in `ran`, else of
    all of them (larger batches are faster per sample: an overestimate); None without either."""
    if t.total is None:
        return None
    for pool in ([r for r in ran if r.key == t.key and r.step], [r for r in ran if r.step]):
        done = sum(r.done for r in pool)
        if done:
            return t.total * sum(r.trained for r in pool) / done
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
    """A trial directory's pace: shape from trial.yaml and grid.json, steps and samples from config.json (its
    state's steps: `state.trial_state` counts a batch schedule's), or for a trial not started from its trial.yaml
    and the train samples of its data file (`train_samples`, from other trials)."""
    trial_dir = Path(trial_dir)
    options = _yaml(trial_dir / TRIAL_YAML)
    gpus = (read_json(trial_dir / GRID) or {}).get("gpus")
    plan = (read_json(trial_dir / CONFIG) or {}).get("plan") or {}
    steps, samples = state.get("steps") or plan.get("total_steps"), run_samples(plan, options.get("epochs"))
    if steps is None and options.get("data") in train_samples and gpus:
        steps, samples = _resolved(trial_dir / TRIAL_YAML, gpus, train_samples[options["data"]])
    return TrialPace(shape_key(options, gpus), int(options.get("global_batch") or 0), steps,
                     state.get("step") or 0, state.get("trained") or 0.0, samples, state.get("seen"))


def run_samples(plan: dict, epochs) -> int | None:
    """The training samples of a whole run: epochs x the plan's samples per epoch (None where either is unknown:
    the estimates then take steps x batch)."""
    return epochs * plan["epoch_samples"] if epochs and plan.get("epoch_samples") else None


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


def _resolved(trial_yaml: Path, gpus: int, train_samples: int) -> tuple[int | None, int | None]:
    """(steps, samples) of a trial not started, from its options and the train samples of its data."""
    from dataclasses import asdict

    from lbscale.train.config import load_config
    from lbscale.train.batch_schedule import run_steps
    from lbscale.train.plan import resolve_plan

    try:
        cfg = load_config(trial_yaml)
        plan = asdict(resolve_plan(cfg, gpus, train_samples))
        return run_steps(cfg.batch_schedule, cfg.epochs, plan), run_samples(plan, cfg.epochs)
    except LbscaleError:  # the trial itself will say why
        return None, None
