"""A trial's options against its opened data, before any process group or output: the label set, the splits the
options evaluate on (an epoch's evaluation, step evaluations, pruning, a target), the evaluation subset against the
processes, and JPEG-only options on pixel data. Torch-free, so `lbscale sweep` runs the same checks on every data
file of its plan before the first trial starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbscale.train.config import TrialConfig
from lbscale.data.formats.base import PreparedFile
from lbscale.errors import LbscaleError
from lbscale.task import Task, get_task
from lbscale.train.plan import resolve_augmentation


@dataclass(frozen=True)
class DataFit:
    """What a trial learns from its data once it fits: the task, the classes of its label set, the augmentation."""

    task: Task
    num_classes: int
    augmentation: str


def evaluation_needs(cfg: TrialConfig) -> list[str]:
    """The options that evaluate the evaluation split inside training (each needs it to exist)."""
    needs = [flag for flag, on in (("--eval-every", cfg.eval_every), ("--eval-every-samples", cfg.eval_every_samples),
                                   ("--eval-spacing", cfg.eval_spacing),
                                   ("--prune", cfg.prune != "none")) if on]
    if cfg.target_metric:
        needs.append(f"--target-metric {cfg.target_metric}")
    return needs


def check_trial_data(cfg: TrialConfig, data: PreparedFile, world_size: int) -> DataFit:
    """The options `cfg` against the opened `data` at `world_size` processes; one LbscaleError line naming the
    file and the option where they do not fit."""
    where = str(data.path)
    if cfg.label_set != "labels" and cfg.label_set not in data.extras("train"):
        raise LbscaleError(f"{where}: no label set {cfg.label_set!r} (--label-set)")
    num_classes = (data.num_classes if cfg.label_set == "labels" else len(data.extra_class_names[cfg.label_set]))
    task = get_task(data.task)
    if data.encoding == "raw" and (cfg.crop_size is not None or cfg.decode_workers is not None):
        raise LbscaleError(f"{where}: --crop-size and --decode-workers apply to JPEG data; this file holds pixels")
    split = cfg.eval_split
    size = data.size(split) if data.has_split(split) else 0
    if not size and split == "test":
        raise LbscaleError(f"{where}: no test split to evaluate (--eval-split test); prepare the data with "
                           "--test-fraction > 0 or evaluate val")
    needs = evaluation_needs(cfg)
    if not size and needs:  # else every evaluation is empty: NaN at every rung, a target never met
        raise LbscaleError(f"{where}: no {split} split, and {needs[0]} evaluates it during training; prepare the "
                           f"data with --val-fraction > 0, or evaluate test (--eval-split test)")
    if size and size < world_size:
        raise LbscaleError(f"{where}: the {split} split has {size} samples, fewer than the {world_size} processes "
                           "that evaluate it")
    if cfg.eval_subset is not None and cfg.eval_subset < world_size:  # a rank without samples would stall
        raise LbscaleError(f"--eval-subset {cfg.eval_subset} is smaller than the {world_size} processes: give "
                           f"every process at least one sample (--eval-subset >= {world_size})")
    if cfg.target_metric:
        task.check_target_metric(cfg.target_metric, num_classes, (split,))
    if cfg.prune != "none" and cfg.prune_metric:
        task.check_target_metric(cfg.prune_metric, num_classes, (split,), option="--prune-metric")
    if cfg.gns_every and world_size < 2:
        raise LbscaleError("--gns-every needs 2 or more processes (each rank's gradient is the small batch); "
                           "on one process, --gns-at-target measures it where the trial reaches its target, or "
                           "run `lbscale gns` on the trial's checkpoint")
    augmentation = resolve_augmentation(cfg.augmentation, data.encoding, data.imagery)
    return DataFit(task, num_classes, augmentation if cfg.augment else "none")  # config.json: the one in effect
