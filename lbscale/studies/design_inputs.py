"""`lbscale design`'s inputs: its options (`DesignOptions`) and everything that can be refused before the pilot
runs (`check_inputs`), each in one line: the options themselves, the data (a val split, the metric, the model
running on its images, the chance level a constant prediction scores) and where the spec is written."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lbscale.analysis import pilot as p
from lbscale.errors import LbscaleError

DEFAULT_LR = {"sgd": 0.05, "nesterov": 0.05, "adamw": 1e-3, "lamb": 2e-3, "lars": 1.0}  # at the middle batch


@dataclass
class DesignOptions:
    data: Path
    model: str
    wall: str
    out: Path
    target: float | None = None
    for_target: float | None = None
    metric: str | None = None
    optimizer: str = "sgd"
    lr: float | None = None
    results: Path | None = None
    fresh: bool = False
    force: bool = False
    seed: int = 0


def check_inputs(o: DesignOptions, wall: float) -> p.DataFacts:
    """Everything that can be refused before anything runs, in one line each (`wall`: --wall in seconds)."""
    from lbscale.train.optim import OPTIMIZERS

    if o.out.exists() and not o.force:
        raise LbscaleError(f"--out {o.out}: exists; --force replaces it")
    writable(o.out, "--out")
    if o.optimizer not in OPTIMIZERS:
        raise LbscaleError(f"--optimizer {o.optimizer!r}: one of {', '.join(OPTIMIZERS)}")
    if o.lr is None and o.optimizer not in DEFAULT_LR:
        raise LbscaleError(f"--optimizer {o.optimizer}: give the pilot's middle LR with --lr")
    if o.lr is not None and not (math.isfinite(o.lr) and o.lr > 0):
        raise LbscaleError(f"--lr {o.lr:g}: the pilot's middle learning rate must be a number > 0")
    if wall < 2 * p.pilot_limit(wall):
        raise LbscaleError(f"--wall {o.wall}: too small for a pilot (up to {p.pilot_limit(wall) / 60:g} min) and a "
                           f"study after it; give at least {2 * p.PILOT_FLOOR / 60:g}m")
    if not Path(o.data).exists():
        raise LbscaleError(f"{o.data}: no such prepared file (lbscale prepare writes one)")
    facts = data_facts(o)
    if o.target is not None and not 0 < o.target < 1:
        raise LbscaleError(f"--target {o.target}: a value of {facts.metric} between 0 and 1")
    if o.for_target is not None and not 0 < o.for_target < 1:
        raise LbscaleError(f"--for-target {o.for_target}: a value of {facts.metric} between 0 and 1")
    if o.target is not None and facts.chance is not None and o.target <= facts.chance:
        raise LbscaleError(f"--target {o.target}: at or below chance: a constant prediction scores {facts.metric} "
                           f"{facts.chance:.3f} on the val split; give a target above it")
    return facts


def data_facts(o: DesignOptions) -> p.DataFacts:
    """The data's sizes, task, metric and chance level; one line where the designer cannot place a target on it
    or the model does not run on its images."""
    from lbscale.data.formats import open_prepared
    from lbscale.task import get_task
    from lbscale.train.models import check_model, check_runs

    check_model(o.model)
    with open_prepared(o.data) as data:
        if not data.has_split("val") or data.size("val") == 0:
            raise LbscaleError(f"{o.data}: no val split; the designer measures on it (prepare with --val-fraction "
                               "0.1)")
        task, classes = get_task(data.task), data.num_classes
        metric = o.metric or task.primary_on("val")
        task.check_target_metric(metric, classes, option="--metric")
        if not task.higher_is_better(metric):
            raise LbscaleError(f"--metric {metric}: the designer places targets on a metric where higher is "
                               "better (an accuracy or F1)")
        if data.encoding == "raw":  # JPEG files are cropped to the trial's --crop-size
            check_runs(o.model, data.sample_shape(), classes)
        chance = p.chance_level(task.name, metric, data.labels("val"), classes)
        sizes = (data.size("train"), data.size("val"), data.size("test") if data.has_split("test") else 0)
    if chance is not None and chance >= 1.0:
        raise LbscaleError(f"--metric {metric}: a constant prediction scores 1 on the val split: no target to place "
                           "above it (an F1 weighs both kinds of error)")
    return p.DataFacts(sizes[0], sizes[1], classes, task.name, metric, chance, sizes[2])


def writable(path: Path, option: str) -> None:
    """One line now where `path` could not be written later (a read-only folder): a file is made and removed in
    the nearest folder of it that exists; nothing is left behind."""
    import tempfile

    folder = Path(path).absolute().parent
    while not folder.exists():
        folder = folder.parent
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".lbscale-write-check."):
            pass
    except OSError as e:
        raise LbscaleError(f"{option} {path}: cannot write in {folder} ({e.strerror})") from None
