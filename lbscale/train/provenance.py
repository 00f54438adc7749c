"""Provenance of a trial: what ran it (versions, commit, hosts, device) and a digest of its final weights."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import socket
import subprocess
from pathlib import Path

import timm
import torch

import lbscale
from lbscale.train import distributed as dist


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(lbscale.__file__).parent, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def versions() -> dict:
    """The versions a result depends on; Horovod's where the trial ran on it."""
    out = {"lbscale": lbscale.__version__, "torch": torch.__version__, "timm": timm.__version__,
           "python": platform.python_version()}
    if "horovod.torch" in sys.modules:
        out["horovod"] = sys.modules["horovod"].__version__
    return out


def param_digest(model: torch.nn.Module) -> str:
    """A short hash of every parameter: equal digests across ranks show DDP kept them identical."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def environment(device: torch.device, backend: str | None, launcher: str) -> dict:
    """Collective: every rank contributes its host name. `started`: forked from a local sweep's warm-start
    server (lbscale/sweep/warm.py) or a fresh process."""
    return {"launcher": launcher, "backend": backend, "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "hosts": dist.all_gather_object(socket.gethostname()), "versions": versions(),
            "git_commit": git_commit(), "started": "warm" if started_warm() else "fresh",
            "slurm_job": os.environ.get("SLURM_JOB_ID")}


def started_warm() -> bool:
    """Forked from a local sweep's warm-start server (lbscale/sweep/warm.py sets it), torch already imported."""
    return bool(os.environ.get("LBSCALE_STARTED_WARM"))


def describe(cfg, plan, world_size: int, dataset: str, task, augmentation: str, num_classes: int,
             model: torch.nn.Module, device: torch.device, backend: str | None, launcher: str,
             eval_samples: int | None = None) -> dict:
    """config.json: everything resolved (config, plan, task, augmentation, the evaluation split's size, gradient
    size), and what ran it. Collective (host names)."""
    from dataclasses import asdict

    from lbscale.train.config import to_dict
    from lbscale.train.models import gradient_size

    return {"config": to_dict(cfg), "plan": asdict(plan), "world_size": world_size, "dataset": dataset,
            "task": task.name, "augmentation": augmentation, "primary_metric": task.primary_on(cfg.eval_split),
            "eval_split": cfg.eval_split, "num_classes": num_classes, "train_samples": plan.train_samples,
            "eval_samples": eval_samples,
            **gradient_size(model), **environment(device, backend, launcher)}
