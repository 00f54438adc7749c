"""TensorBoard scalars of a trial (`--tensorboard`): the records of metrics.jsonl, drawn as they are written.

Every scalar's x axis is the optimizer step, so epoch and step-evaluation curves share one axis, and one
`tensorboard --logdir results/NAME` shows a whole sweep with the trial ids as run names (each trial writes into
`<trial dir>/tensorboard`). metrics.jsonl stays the record; this is a view of it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lbscale.errors import LbscaleError

TENSORBOARD_DIR = "tensorboard"
# epoch record field -> tag (metrics of an evaluation split: "val_top1" -> "val/top1")
EPOCH_TAGS = {"train_loss": "train/loss", "lr": "lr", "images_per_second": "images_per_second",
              "data_seconds": "time/data_seconds", "compute_seconds": "time/compute_seconds",
              "comm_seconds": "time/comm_seconds", "train_seconds": "time/train_seconds",
              "gns_b_simple": "gns_b_simple"}
SPLITS = ("val_", "test_")


def require_tensorboard() -> None:
    """One line before any output where the optional package is missing."""
    try:
        found = importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or without a spec
        found = False
    if not found:
        raise LbscaleError("--tensorboard: the tensorboard package is not installed "
                           "(pip install 'lbscale[tensorboard]' or pip install tensorboard)")


def metric_tag(name: str, prefix: str = "") -> str:
    """"val_top1" -> "val/top1" (with a prefix such as "subset_": "val_subset/top1")."""
    split, metric = name.split("_", 1)
    return f"{split}_{prefix.rstrip('_')}/{metric}" if prefix else f"{split}/{metric}"


class ScalarLog:
    """A SummaryWriter in `log_dir`, or a no-op where `log_dir` is None (ranks other than 0, no --tensorboard).
    Flushed after every record, so a preempted or killed trial loses nothing it recorded. `purge_step`: a resumed
    trial's first step after its checkpoint; TensorBoard hides what earlier event files hold from that step on (a
    process that died after the checkpoint had written steps the resumed one writes again)."""

    def __init__(self, log_dir: Path | None = None, purge_step: int | None = None):
        self.writer = None
        if log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def epoch(self, record: dict) -> None:
        """An epoch record (a partial one included) at its step: loss, evaluation metrics, LR, pace, timing."""
        scalars = {tag: record.get(key) for key, tag in EPOCH_TAGS.items()}
        scalars.update({metric_tag(k): v for k, v in record.items() if k.startswith(SPLITS)})
        self._add(scalars, record["step"])

    def step(self, record: dict) -> None:
        """A step evaluation (kind "step"): its metrics at its step; on a fixed subset of the split they are
        another estimate than the epoch's whole split, so they go to their own tags (val_subset/top1)."""
        prefix = "subset_" if record.get("subset") is not None else ""
        self._add({metric_tag(k, prefix): v for k, v in record.items() if k.startswith(SPLITS)}, record["step"])

    def _add(self, scalars: dict, step: int) -> None:
        if self.writer is None:
            return
        for tag, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
