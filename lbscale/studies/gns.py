"""`lbscale gns TRIAL`: the gradient noise scale of a trial's checkpointed weights, measured on the train split
(`train.noise_measure.measure_at`, the measurement a trial's `--gns-at-target` makes too) and written to the
trial's gns.json."""

from __future__ import annotations

from pathlib import Path

from lbscale.analysis.gns import GNS_FILE
from lbscale.data.formats import open_prepared
from lbscale.errors import LbscaleError
from lbscale.progress import bar
from lbscale.results import CONFIG, read_json, write_json
from lbscale.task import get_task
from lbscale.train.models import load_trial_model
from lbscale.train.noise_measure import GROUPS, K, MICRO_BATCH, measure_at


def measure_trial(trial_dir: Path, data: str | None = None, micro_batch: int = MICRO_BATCH, k: int = K,
                  groups: int = GROUPS, seed: int = 0, kept: Path | None = None) -> dict:
    """The noise scale of a trial's checkpointed weights on the train split; written to the trial's gns.json (with
    `kept`, one of its kept checkpoints' weights instead, written into that folder)."""
    import torch  # here, with the transforms: the CLI's help needs neither

    from lbscale.data.transforms import Normalize

    trial_dir = Path(trial_dir)
    if micro_batch < 1 or k < 2 or groups < 1:
        raise LbscaleError("--micro-batch >= 1, --k >= 2 and --groups >= 1 are needed")
    config = read_json(trial_dir / CONFIG)
    if not config or "config" not in config:
        raise LbscaleError(f"{trial_dir}: not a trial directory with a checkpoint (config.json, checkpoint/model.pt)")
    cfg = config["config"]
    f = open_prepared(data or cfg["data"])
    task = get_task(f.task)
    num_classes = config.get("num_classes", f.num_classes)
    if micro_batch * k > f.size("train"):
        raise LbscaleError(f"--micro-batch {micro_batch} x --k {k} is more than the train split ({f.size('train')})")
    model, _, saved = load_trial_model(trial_dir, len(f.band_names), num_classes,
                                       weights=Path(kept) / "model.pt" if kept else None)
    normalize = Normalize(f.mean, f.std, torch.device("cpu"))
    progress = bar(total=groups, desc="gradient noise scale", unit="group")
    record = measure_at(model, f, task, cfg.get("label_set", "labels"),
                        lambda b: (normalize(b.images), task.targets(b.labels)), micro_batch, k, groups, seed,
                        saved.get("step"), "checkpoint", progress=progress)
    progress.close()
    write_json((Path(kept) if kept else trial_dir) / GNS_FILE, record)
    return record
