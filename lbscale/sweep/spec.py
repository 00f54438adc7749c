"""Sweep specs: fixed trial options plus a grid (batch x GPUs x variant x warm-up x seed), read from YAML."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lbscale.train.config import FIELDS, read_yaml_mapping
from lbscale.errors import LbscaleError
from lbscale.sweep.budget import parse_wall
from lbscale.sweep.search import SearchSpace, parse_search

SWEEP_KEYS = {"name", "data", "model", "epochs", "trial", "grid", "system", "results", "wall", "design"}
GRID_KEYS = {"batch", "points", "gpus", "local_batch", "datasets", "variants", "warmup", "seeds", "search",
             "batch_schedule"}
POINT_KEYS = {"batch", "gpus", "local_batch"}


@dataclass
class SweepSpec:
    """A grid of trials: fixed trial options plus (batch x GPUs, or paired points) x variant x warm-up x seed."""

    name: str
    trial: dict  # fixed TrialConfig options (data, model, epochs included)
    batch: object  # a range string like "8k..65k", a list, or one value; None with points
    gpus: object = None  # list of GPU (process) counts; or None with local_batch
    local_batch: int | None = None
    variants: dict = field(default_factory=dict)  # name -> TrialConfig options (optimizer, LR policy, ...)
    warmup: list | None = None  # warm-up variants (epochs or 'auto'); None: the trial option stands
    seeds: object = 1  # a count or a list
    points: list | None = None  # explicit (batch, gpus, local_batch) rows instead of batch x gpus
    datasets: dict = field(default_factory=dict)  # name -> prepared file: the data as an axis (full / filtered)
    search: SearchSpace | None = None  # options sampled per (batch, variant): a tuned study
    variant_search: dict = field(default_factory=dict)  # variant -> its own SearchSpace
    batch_schedules: dict = field(default_factory=dict)  # name -> a --batch-schedule: arms beside the batch grid
    system: str = "generic"
    results: str | None = None
    path: str = ""
    wall: float | None = None  # `wall:` the study's wall-clock budget in seconds (lbscale design writes it)
    design: dict = field(default_factory=dict)  # `design:` what the designer's pilot measured and used of `wall`
    epochs_by_batch: dict = field(default_factory=dict)  # `epochs: {batch: epochs}`: each batch's own budget
    first_by_batch: dict = field(default_factory=dict)  # `trial.eval_first: {batch: step}`: each batch's own

    @property
    def sweep_wall(self) -> float | None:
        """The seconds the sweep may run: the spec's wall budget less what the designer's pilot used of it and what
        it set aside for the reference run that predicts B_crit where training ends (`lbscale predict`)."""
        if self.wall is None:
            return None
        used = float(self.design.get("pilot_seconds") or 0.0) + float(self.design.get("reserved_seconds") or 0.0)
        return max(self.wall - used, 0.0)


def _by_batch(value, where: str) -> dict:
    """`epochs: {16: 6, 32: 8}` or `eval_first: {16: 32, 256: 4}` (each batch its own, as `lbscale design` writes
    them): {batch: count}; {} for one value for every batch. `where` names the key and what a value is."""
    if not isinstance(value, dict):
        return {}
    try:
        out = {int(b): int(e) for b, e in value.items()}
    except (TypeError, ValueError, OverflowError):
        out = {}
    if (not out or any(e < 1 for e in out.values()) or any(not float(e).is_integer() for e in value.values())
            or any(not float(b).is_integer() for b in value)):
        raise LbscaleError(where)
    return out


def _schedule_arm(value, where: str) -> dict:
    """A batch-schedule arm: the schedule, or {schedule: ..., and trial options of the arm's own} (an arm that
    raises the batch in place of an LR decay keeps its other decays); the arm's trial options."""
    if isinstance(value, str):
        value = {"schedule": value}
    if not isinstance(value, dict) or not isinstance(value.get("schedule"), str):
        raise LbscaleError(f"{where}: a schedule ('64@0,128@2ep') or {{schedule: ..., trial options}}")
    options = _check_trial_keys({k: v for k, v in value.items() if k != "schedule"}, where)
    return {**options, "batch_schedule": value["schedule"]}


ALIASES = {"targets": "target"}  # a spec may write several targets as `targets: [0.9, 0.95]`


def _check_trial_keys(options: dict, where: str) -> dict:
    out = {}
    for key, value in (options or {}).items():
        name = ALIASES.get(str(key).replace("-", "_"), str(key).replace("-", "_"))
        if name in out:
            raise LbscaleError(f"{where}: {key!r} and {name!r} set the same option; give one")
        if name not in FIELDS or name in ("out", "resume", "preempt_after_steps"):
            raise LbscaleError(f"{where}: unknown trial option {key!r}")
        out[name] = value
    return out


def _wall_of(raw: dict, path: Path) -> tuple[float | None, dict]:
    """The spec's wall-clock budget in seconds (`wall: 20m`) and the designer's record of its pilot (`design:`)."""
    wall = None if raw.get("wall") is None else parse_wall(raw["wall"], f"{path}: wall")
    design = raw.get("design") or {}
    if not isinstance(design, dict):
        raise LbscaleError(f"{path}: design must be a mapping (lbscale design writes it)")
    return wall, design


def _checked_points(points, path) -> list | None:
    """grid.points as given, checked: a list of mappings with batch (and gpus or local_batch)."""
    if points is None:
        return None
    if not isinstance(points, list) or not points:
        raise LbscaleError(f"{path}: grid.points must be a list of rows like {{batch: 8k, gpus: 128}}")
    for i, row in enumerate(points):
        if not isinstance(row, dict) or "batch" not in row:
            raise LbscaleError(f"{path}: grid.points[{i}] must be a mapping with batch (and gpus or local_batch)")
        unknown = sorted(set(row) - POINT_KEYS)
        if unknown:
            raise LbscaleError(f"{path}: grid.points[{i}]: unknown key {unknown[0]!r} "
                               f"(allowed: {', '.join(sorted(POINT_KEYS))})")
    return points


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep YAML (keys: name, data, model, epochs, trial, grid, system, results, wall, design)."""
    path = Path(path)
    raw = read_yaml_mapping(path, "a sweep spec mapping")
    unknown = sorted(set(raw) - SWEEP_KEYS)
    if unknown:
        raise LbscaleError(f"{path}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(SWEEP_KEYS))})")
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict):
        raise LbscaleError(f"{path}: grid must be a mapping")
    unknown = sorted(set(grid) - GRID_KEYS)
    if unknown:
        raise LbscaleError(f"{path}: unknown grid key {unknown[0]!r} (allowed: {', '.join(sorted(GRID_KEYS))})")
    if ("batch" in grid) == ("points" in grid):
        raise LbscaleError(f"{path}: give grid.batch (with gpus or local_batch) or grid.points, one of them")
    points = _checked_points(grid.get("points"), path)
    trial = _check_trial_keys(raw.get("trial"), f"{path}: trial")
    by_batch = _by_batch(raw.get("epochs"), f"{path}: epochs must be a count, or a mapping of batches to counts "
                                            "like {16: 6, 32: 8}")
    first_by_batch = _by_batch(trial.get("eval_first"), f"{path}: trial.eval_first must be a step, or a mapping "
                                                        "of batches to steps like {16: 32, 256: 4}")
    if first_by_batch:  # the trial's own: checked as any trial option is, per batch at planning
        trial["eval_first"] = min(first_by_batch.values())
    for key in ("data", "model", "epochs"):
        if key in raw:
            trial[key] = max(by_batch.values()) if key == "epochs" and by_batch else raw[key]
    variants = grid.get("variants") or {}
    if not isinstance(variants, dict):
        raise LbscaleError(f"{path}: grid.variants must map names to trial options")
    searches = {}  # a variant's own search space (optimizers tuned over their own ranges) replaces grid.search
    for k, v in variants.items():
        if isinstance(v, dict) and "search" in v:
            v = dict(v)
            searches[str(k)] = parse_search(v.pop("search"), f"{path}: variant {k}", FIELDS)
            variants[k] = v
    variants = {str(k): _check_trial_keys(v, f"{path}: variant {k}") for k, v in variants.items()}
    datasets = grid.get("datasets") or {}
    if not isinstance(datasets, dict) or not all(isinstance(v, str) for v in datasets.values()):
        raise LbscaleError(f"{path}: grid.datasets must map names to prepared files, e.g. {{full: data/c.h5}}")
    if datasets and "data" in trial:
        raise LbscaleError(f"{path}: give data or grid.datasets, not both")
    warmup = grid.get("warmup")
    schedules = grid.get("batch_schedule") or {}
    if not isinstance(schedules, dict):
        raise LbscaleError(f"{path}: grid.batch_schedule must map names to schedules, e.g. "
                           "{warmup: '64@0,128@2ep,256@5ep'}")
    schedules = {str(k): _schedule_arm(v, f"{path}: grid.batch_schedule.{k}") for k, v in schedules.items()}
    wall, design = _wall_of(raw, path)
    return SweepSpec(wall=wall, design=design, epochs_by_batch=by_batch, first_by_batch=first_by_batch,
                     name=str(raw.get("name") or path.stem),
                     trial=trial, batch=grid.get("batch"), points=points, batch_schedules=schedules,
                     gpus=grid.get("gpus"),
                     local_batch=grid.get("local_batch"), variants=variants,
                     datasets={str(k): v for k, v in datasets.items()},
                     warmup=None if warmup is None else (warmup if isinstance(warmup, list) else [warmup]),
                     seeds=grid.get("seeds", 1), system=str(raw.get("system", "generic")), results=raw.get("results"),
                     path=str(path), search=parse_search(grid.get("search"), str(path), FIELDS),
                     variant_search=searches)
