"""Checks before launch: every data file of a plan is opened once, and each distinct (file, trial shape) is
checked with the trial's own validation (`train.data_checks.check_trial_data`) and resolved against its train split
(`train.plan.resolve_plan`). A wrong path, a missing split or too few samples is then one line naming the spec
field and the file, before anything is written or started, instead of every trial failing on its own, slowly.
Torch-free: it costs the opening of each file.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

from lbscale.train.config import to_dict
from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import PreparedFile
from lbscale.errors import LbscaleError
from lbscale.sweep.plan import SweepTrial
from lbscale.train.data_checks import check_trial_data
from lbscale.train.plan import resolve_plan


def check_plan_data(spec_path: str, plans: list[SweepTrial]) -> dict[str, int]:
    """Check every trial of `plans` against its opened data file and resolve its steps (each `plan` replaced);
    returns the train samples of each file. The first problem is an LbscaleError line naming the spec field."""
    samples: dict[str, int] = {}
    with ExitStack() as stack:
        opened: dict[str, PreparedFile] = {}
        checked: set[str] = set()
        for p in plans:
            path = p.config.data
            if path not in opened:
                opened[path] = stack.enter_context(_open(spec_path, p))
                samples[path] = _train_samples(spec_path, p, opened[path])
            shape = _shape_key(p)
            if shape not in checked:  # the trial's own validation, once per (file, shape)
                try:
                    check_trial_data(p.config, opened[path], p.gpus)
                except LbscaleError as e:
                    where = p.data_field if str(e).startswith(str(path)) else f"trial {p.trial_id}"
                    raise LbscaleError(f"{spec_path}: {where}: {e}") from None
                checked.add(shape)
            p.plan = _resolve(spec_path, p, samples[path])
    return samples


def data_line(samples: dict[str, int]) -> str:
    """'data/a.h5: 560 train samples, data/b.h5: 400 train samples' (the dry-run's closing line)."""
    return ", ".join(f"{path}: {n:,} train samples" for path, n in samples.items())


def _open(spec_path: str, p: SweepTrial) -> PreparedFile:
    path = p.config.data
    if not path:
        raise LbscaleError(f"{spec_path}: {p.data_field}: not given: name the prepared file the trials train on")
    if not Path(path).exists():
        raise LbscaleError(f"{spec_path}: {p.data_field}: {path}: no such prepared file (write it with lbscale "
                           f"prepare DATASET --out {path})")
    try:
        return open_prepared(path)
    except LbscaleError as e:
        raise LbscaleError(f"{spec_path}: {p.data_field}: {e}") from None


def _train_samples(spec_path: str, p: SweepTrial, data: PreparedFile) -> int:
    if not data.has_split("train"):
        raise LbscaleError(f"{spec_path}: {p.data_field}: {p.config.data}: no train split")
    return data.size("train")


def _shape_key(p: SweepTrial) -> str:
    """The trial's options but its seed and directory: what `check_trial_data` may depend on, at its GPUs."""
    options = {k: v for k, v in to_dict(p.config).items() if k not in ("seed", "out")}
    return json.dumps([p.gpus, options], sort_keys=True, default=str)


def _resolve(spec_path: str, p: SweepTrial, train_samples: int):
    g, gpus = p.config.global_batch, p.gpus
    where = f"{spec_path}: {p.batch_field} {g} on {gpus} GPU{'s' if gpus > 1 else ''}"
    if g > train_samples:
        raise LbscaleError(f"{where}: the train split of {p.config.data} has {train_samples:,} samples")
    try:
        plan = resolve_plan(p.config, gpus, train_samples)
        if p.config.batch_schedule:  # its points against each other and the run, and its batches, with the data
            from lbscale.train.batch_schedule import BatchSchedule

            BatchSchedule.parse(p.config.batch_schedule, plan.epoch_samples, first=g).check_plan(p.config.epochs, plan)
        return plan
    except LbscaleError as e:
        raise LbscaleError(f"{where}: {e}") from None
