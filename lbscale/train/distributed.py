"""Rank and world from torchrun's or SLURM's environment; process-group init, barrier and teardown."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

import torch
import torch.distributed as dist

from lbscale.errors import LbscaleError


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    launcher: str = "single"  # single, torchrun or slurm

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compact node list as host names: `scontrol show hostnames`, or a parser for the usual forms."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pass
    hosts = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{str(i).zfill(len(lo))}")
    return hosts


def port_for_job(job_id: str | int) -> int:
    """A port derived from the SLURM job id, so concurrent jobs on one node do not collide."""
    return 20000 + int(job_id) % 40000


def detect_env(environ=None) -> DistEnv:
    """torchrun (RANK, WORLD_SIZE, ...) first; then a multi-task `srun` step; else a single process."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistEnv(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                       env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", 29500)), "torchrun")
    # Inside `srun`, SLURM_STEP_NUM_TASKS is the step's size; a batch script alone has no step tasks.
    if "SLURM_PROCID" in env and int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1"))) > 1 \
            and "SLURM_STEP_NUM_TASKS" in env:
        hosts = expand_nodelist(env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST", "localhost")))
        return DistEnv(int(env["SLURM_PROCID"]), int(env["SLURM_STEP_NUM_TASKS"]), int(env.get("SLURM_LOCALID", 0)),
                       hosts[0] if hosts else "127.0.0.1", port_for_job(env.get("SLURM_JOB_ID", 0)), "slurm")
    return DistEnv()


def pick_device(requested: str, env: DistEnv) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise LbscaleError("--device cuda: no GPU visible")
    index = env.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init(env: DistEnv, backend: str | None, device: torch.device) -> str | None:
    """Join the process group (world size > 1); returns the backend used."""
    if env.world_size == 1:
        return None
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        raise LbscaleError("--backend mpi: this torch was built without MPI")
    if backend == "nccl" and device.type != "cuda":
        raise LbscaleError("--backend nccl needs GPUs; use gloo on CPU")
    os.environ.setdefault("MASTER_ADDR", env.master_addr)
    os.environ.setdefault("MASTER_PORT", str(env.master_port))
    kwargs = {} if backend == "mpi" else {"rank": env.rank, "world_size": env.world_size, "init_method": "env://"}
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)
    return backend


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    if active():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if active():
        dist.all_reduce(t)
    return t


def all_gather_object(obj) -> list:
    if not active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def teardown(clean: bool = True) -> None:
    """Barrier before destroy (gloo processes otherwise may abort at shutdown); none after a failure,
    where a peer may never reach it."""
    if active():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
