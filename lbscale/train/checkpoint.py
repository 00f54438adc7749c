"""Epoch and preemption checkpoints: everything needed to continue a trial bit-for-bit on CPU.

Layout: DIR/checkpoint/model.pt (model, optimizer, scaler, progress; rank 0), rank-R.pt (each rank's RNG
states) and info.json (why and when it was written; small, for launchers). A new checkpoint is written
into a temporary directory by all ranks, then swapped in by rank 0, so a crash at any point leaves the
previous checkpoint or the new one, whole.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from lbscale.errors import LbscaleError
from lbscale.results import CHECKPOINT, CHECKPOINT_INFO, write_json
from lbscale.train import distributed as dist


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


def save(out: Path, env: dist.DistEnv, main_state: dict, rank_state: dict, info: dict) -> None:
    """Collective: every rank calls it at the same step."""
    final, tmp = out / CHECKPOINT, out / f".{CHECKPOINT}.tmp"
    if env.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    torch.save(rank_state, tmp / f"rank-{env.rank}.pt")
    if env.is_main:
        torch.save(main_state, tmp / "model.pt")
        write_json(tmp / CHECKPOINT_INFO, {**info, "written": time.time()})
    dist.barrier()
    if env.is_main:
        old = out / f".{CHECKPOINT}.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def exists(out: Path) -> bool:
    return (out / CHECKPOINT / "model.pt").exists()


def load(out: Path, env: dist.DistEnv, device: torch.device) -> tuple[dict, dict]:
    folder = out / CHECKPOINT
    main = torch.load(folder / "model.pt", map_location=device, weights_only=False)
    if main["world_size"] != env.world_size:
        raise LbscaleError(f"{folder}: written by {main['world_size']} processes, resuming with {env.world_size}")
    rank = torch.load(folder / f"rank-{env.rank}.pt", map_location="cpu", weights_only=False)
    return main, rank
