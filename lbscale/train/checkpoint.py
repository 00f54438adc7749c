"""Epoch and preemption checkpoints: everything needed to continue a trial bit-for-bit on CPU.

Layout: DIR/checkpoint/model.pt (model, optimizer, scaler, progress; rank 0), rank-R.pt (each rank's RNG
states) and info.json (why and when it was written; small, for launchers). A new checkpoint is written
into a temporary directory by all ranks, then swapped in by rank 0, so a crash at any point leaves the
previous checkpoint or the new one, whole.
"""

from __future__ import annotations

import io
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from lbscale.errors import LbscaleError
from lbscale.results import CHECKPOINT, CHECKPOINT_INFO, naming, write_json
from lbscale.train import distributed as dist
from lbscale.train.kept import KEPT, at_target, exists, kept, kept_info  # noqa: F401 (re-exported; torch-free)


MONITORS = ("divergence", "clock", "gns", "pruner", "branch", "grouping")  # the small state objects it carries
OLD_FIELDS = ("divergence", "branch", "grouping")  # an earlier lbscale kept their fields in model.pt's own


@dataclass
class Progress:
    """Where a trial stands: the epoch and the micro-batch within it, optimizer steps, the first evaluation at the
    target, where a divergence first held, the training seconds of earlier processes of this trial, and the
    start-up seconds of each of its processes so far (launch to the first step) with the imports among them."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    target_hit: dict | None = None  # the hardest target's (every target's once all are reached)
    diverged_at: dict | None = None
    elapsed: float = 0.0
    target_hits: dict = field(default_factory=dict)  # target (as text) -> its first full-split evaluation
    startup: float | None = None  # None: no process of it has trained yet, or the system does not say
    imports: float | None = None  # of the start-up: the fresh processes' import of Python, torch and lbscale

    def hit_of(self, targets: tuple) -> None:
        """The hardest target's hit as `targets` name it: a run trained on to a new target has not hit it yet."""
        self.target_hit = self.target_hits.get(f"{targets[-1]:g}") if targets else None


@dataclass
class TrialState:
    """What a checkpoint's model.pt holds, listed once: network, optimizer and grad scaler, the progress, the
    records so far, and each small state object's state_dict (None where the trial has none of that kind)."""

    model: dict
    optimizer: dict
    scaler: dict
    progress: Progress
    records: list
    world_size: int
    monitors: dict = field(default_factory=dict)

    @classmethod
    def of(cls, model, optimizer, scaler, progress: Progress, records: list, world_size: int,
           monitors: dict) -> "TrialState":
        """The state of these objects now; `monitors`: name -> object with a state_dict, or None."""
        return cls(model.state_dict(), optimizer.state_dict(), scaler.state_dict(), progress, records, world_size,
                   {name: m.state_dict() if m is not None else None for name, m in monitors.items()})

    def apply(self, model, optimizer, scaler, monitors: dict) -> None:
        """Load this state into the objects (a monitor the checkpoint has no state for keeps its own)."""
        model.load_state_dict(self.model)
        optimizer.load_state_dict(self.optimizer)
        scaler.load_state_dict(self.scaler)
        for name, monitor in monitors.items():
            if monitor is not None and self.monitors.get(name):
                monitor.load_state_dict(self.monitors[name])

    def to_dict(self) -> dict:
        return {"model": self.model, "optimizer": self.optimizer, "scaler": self.scaler, **asdict(self.progress),
                "records": self.records, "world_size": self.world_size,
                **{name: self.monitors.get(name) for name in MONITORS}}

    @classmethod
    def from_dict(cls, d: dict) -> "TrialState":
        """Also a checkpoint of an earlier lbscale: without a monitor's entry the monitor reads the checkpoint's
        own fields (its load_state_dict knows them), and a missing clock carries no seconds."""
        progress = Progress(**{f.name: d[f.name] for f in fields(Progress) if f.name in d})
        monitors = {name: d.get(name) for name in MONITORS}
        for name in OLD_FIELDS:
            if monitors[name] is None:
                monitors[name] = d
        return cls(d["model"], d["optimizer"], d["scaler"], progress, d["records"], d["world_size"], monitors)


def epoch_loss(rank_state: dict) -> torch.Tensor:
    """A rank's (loss sum, micro-batches) of the current epoch; an earlier lbscale kept the count apart."""
    loss = rank_state["epoch_loss"]
    if loss.dim() == 0:
        return torch.stack([loss.double(), torch.tensor(float(rank_state["epoch_seen"]), dtype=torch.float64)])
    return loss


def window_loss(rank_state: dict) -> torch.Tensor:
    """A rank's (loss sum, micro-batches) since the last cross-rank check, which a resumed trial's next check
    judges; zeros for a checkpoint of an earlier lbscale, which did not keep it."""
    return rank_state.get("window_loss", torch.zeros(2, dtype=torch.float64))


def rng_state(generator: torch.Generator) -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
             "augment": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    generator.set_state(state["augment"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(out: Path, env: dist.DistEnv, main_state: dict, rank_state: dict, info: dict,
         folder: str = CHECKPOINT) -> None:
    """Collective: every rank calls it at the same step. `folder`: relative to `out` (a kept checkpoint's
    kept/<label>)."""
    final = out / folder
    tmp = _beside(final, "tmp")
    if env.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)  # kept/ too, the first time
    dist.barrier()
    try:
        _save(rank_state, tmp / f"rank-{env.rank}.pt")
        if env.is_main:
            _save(main_state, tmp / "model.pt")
            write_json(tmp / CHECKPOINT_INFO, {**info, "written": time.time()})
    except BaseException:  # a full disk: the last whole checkpoint stays, no part of this one
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    dist.barrier()
    if env.is_main:
        old = _beside(final, "old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def _save(state: dict, path: Path) -> None:
    # serialised in memory, then written by Python: a full disk is an OSError naming the file (torch's own writer,
    # given a path or a file, says "unexpected pos" in a RuntimeError when a write falls short)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with naming(path), open(path, "wb") as f:
        f.write(buffer.getbuffer())


def _beside(final: Path, kind: str) -> Path:
    """Where `save` writes a checkpoint's next version (kind tmp) and moves its last one (old) while it renames."""
    return final.parent / f".{final.name}.{kind}"


def remove_partial(out: Path) -> None:
    """What a trial killed while it saved a checkpoint left: the part written, the one it was replacing (of the
    resume checkpoint and of every kept one)."""
    kinds = ("tmp", "old")
    found = [_beside(Path(out) / CHECKPOINT, kind) for kind in kinds]
    if (Path(out) / KEPT).is_dir():  # kept/ holds only the labels' checkpoints and these
        found += [p for kind in kinds for p in (Path(out) / KEPT).glob(f".*.{kind}")]
    for p in found:
        shutil.rmtree(p, ignore_errors=True)


def load(out: Path, env: dist.DistEnv, device: torch.device, folder: Path | None = None) -> tuple[dict, dict]:
    """The checkpoint of `out` (or the one in `folder`, a kept checkpoint): (main state, this rank's state)."""
    folder = Path(folder) if folder is not None else out / CHECKPOINT
    main = torch.load(folder / "model.pt", map_location=device, weights_only=False)
    if main["world_size"] != env.world_size:
        raise LbscaleError(f"{folder}: written by {main['world_size']} processes, resuming with {env.world_size}")
    rank = torch.load(folder / f"rank-{env.rank}.pt", map_location="cpu", weights_only=False)
    return main, rank
