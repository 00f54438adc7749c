"""Rank and world from torchrun's, horovodrun's or SLURM's environment; process-group init, barrier and teardown
(on Horovod's operations where the trial runs under `--engine horovod`: train/horovod.py)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from lbscale.errors import LbscaleError
from lbscale.slurm import SlurmEnv
from lbscale.train import horovod


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    launcher: str = "single"  # single, torchrun, horovodrun or slurm
    local_world_size: int = 1  # processes of this job on this node

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect_env(environ=None) -> DistEnv:
    """torchrun (RANK, WORLD_SIZE, ...) first; then horovodrun (HOROVOD_RANK, ...); then a multi-task `srun` step;
    else a single process."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistEnv(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                       env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", 29500)), "torchrun",
                       int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])))
    if "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env and "LBSCALE_HOROVOD_HOSTS" not in env:
        return DistEnv(int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"]), int(env.get("HOROVOD_LOCAL_RANK", 0)),
                       launcher="horovodrun", local_world_size=int(env.get("HOROVOD_LOCAL_SIZE", 1)))
    slurm = SlurmEnv.current(env)
    if slurm.in_multitask_step:
        hosts = slurm.hostnames()
        # the address the array task resolved (the profile's rendezvous_suffix), else the first node; never a
        # MASTER_ADDR / MASTER_PORT inherited from the shell that submitted the job
        addr = env.get("LBSCALE_MASTER_ADDR") or (hosts[0] if hosts else "127.0.0.1")
        port = int(env.get("LBSCALE_MASTER_PORT") or slurm.port)
        return DistEnv(slurm.procid, slurm.step_tasks, slurm.localid, addr, port, "slurm",
                       slurm.tasks_per_node or slurm.step_tasks)
    return DistEnv()


def launched_seconds_ago(env: DistEnv) -> float | None:
    """Seconds since the process the user launched started: torchrun's (this rank's parent, which imports torch
    and starts the ranks) under torchrun, else this process's own (a warm-started trial's from its fork); None
    where the system does not say (no /proc)."""
    return process_age(os.getppid() if env.launcher == "torchrun" else os.getpid())


def process_age(pid: int) -> float | None:
    """Seconds since process `pid` started; None where the system does not say (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:
        return None
    # the 22nd field, the start in clock ticks after boot; counted after the name in parentheses, which may
    # hold spaces
    started = int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    return max(uptime - started, 0.0)


# this process's age once torch and the package up to here are imported (a fresh trial's import; a warm-started
# trial's fork inherits the server's value and imports nothing: `monitors.StartupClock` leaves it out)
IMPORTED = process_age(os.getpid())


def check_local_ranks(local_ranks: int, gpus: int) -> None:
    """One GPU per local rank: more ranks than GPUs would share one (NCCL aborts: "Duplicate GPU detected").
    Every rank raises this, before any process group exists, so none waits for the others."""
    if local_ranks > gpus:
        raise LbscaleError(f"{local_ranks} processes on this node but {gpus} visible GPU(s): start at most {gpus} "
                           f"per node (torchrun --nproc_per_node={gpus}, srun --ntasks-per-node={gpus}), "
                           "or train on the CPU with --device cpu")


def pick_device(requested: str, env: DistEnv) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise LbscaleError("--device cuda: no GPU visible")
    gpus = torch.cuda.device_count()
    if env.launcher == "slurm" and gpus == 1:
        index = 0  # srun bound one GPU to each task (--gpus-per-task / --gpu-bind)
    else:
        check_local_ranks(env.local_world_size, gpus)
        index = env.local_rank
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init(env: DistEnv, backend: str | None, device: torch.device, engine: str = "ddp") -> str | None:
    """Join the process group (world size > 1), or Horovod's ranks (`engine` horovod, at any world size: its
    optimizer averages over them); returns the backend used."""
    if engine == "horovod":
        return horovod.init(env, device)
    if env.launcher == "horovodrun":
        raise LbscaleError("started by horovodrun: give --engine horovod (DDP's ranks start under torchrun or srun)")
    if env.world_size == 1:
        return None
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        raise LbscaleError("--backend mpi: this torch was built without MPI")
    if backend == "nccl" and device.type != "cuda":
        raise LbscaleError("--backend nccl needs GPUs; use gloo on CPU")
    if env.launcher == "slurm":  # srun sets neither: ours, not values sbatch copied from the user's shell
        os.environ.update(MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port))
    else:
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
    kwargs = {} if backend == "mpi" else {"rank": env.rank, "world_size": env.world_size, "init_method": "env://"}
    if backend == "nccl":
        kwargs["device_id"] = device
    seconds = os.environ.get("LBSCALE_RENDEZVOUS_TIMEOUT")  # seconds; torch's default (10-30 min) otherwise
    if seconds:
        kwargs["timeout"] = timedelta(seconds=float(seconds))
    try:
        dist.init_process_group(backend, **kwargs)
    except (RuntimeError, ValueError, OSError) as e:  # torch's DistError and DistStoreError are RuntimeErrors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        raise LbscaleError(f"rank {env.rank} of {env.world_size}: the process group did not form at {where} "
                           f"({backend}: {first[:300]}); across nodes check the profile's rendezvous_suffix and "
                           "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME") from None
    return backend


def active() -> bool:
    return horovod.active() or (dist.is_available() and dist.is_initialized())


def barrier() -> None:
    if horovod.active():
        horovod.barrier()
    elif active():
        dist.barrier()


def timed_all_reduce(x: torch.Tensor) -> float:
    """Seconds of one all-reduce (sum) of `x`, the ranks lined up by a barrier first and a GPU synchronised on
    both sides (what `lbscale bench allreduce` and doctor's check time)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    dist.barrier()
    sync()
    start = time.perf_counter()
    dist.all_reduce(x)
    sync()
    return time.perf_counter() - start


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if horovod.active():
        return horovod.all_reduce_sum(t)
    if active():
        dist.all_reduce(t)
    return t


def all_gather_object(obj) -> list:
    if horovod.active():
        return horovod.all_gather_object(obj)
    if not active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_metric_state(tensor: torch.Tensor, group=None) -> list[torch.Tensor]:
    """torchmetrics' state sync (`dist_sync_fn`) on the engine that runs: Horovod's all-gather, else torchmetrics'
    own over the process group."""
    if horovod.active():
        return horovod.all_gather_object(tensor)
    from torchmetrics.utilities.distributed import gather_all_tensors

    return gather_all_tensors(tensor, group)


def teardown(clean: bool = True) -> None:
    """Barrier before destroy (gloo processes otherwise may abort at shutdown); none after a failure,
    where a peer may never reach it."""
    if horovod.active():
        if clean:
            horovod.barrier()
        horovod.shutdown()
    elif active():
        if clean:
            dist.barrier()
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, device: torch.device, comm_hook) -> torch.nn.Module:
    """The DDP wrapper of `model` with `comm_hook` as its one communication hook (DDP takes one)."""
    ids = [device.index] if device.type == "cuda" else None
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    net.register_comm_hook(None, comm_hook)
    return net


def release_ddp(holder, names=("net",)) -> None:
    """Drop `holder`'s DDP wrapper attributes (its reducer holds the Python communication hook and the process
    group) while the interpreter is fully alive: left to interpreter shutdown, their destruction aborted gloo
    processes now and then ("terminate called without an active exception")."""
    import gc

    for name in names:
        if hasattr(holder, name):
            setattr(holder, name, None)
    gc.collect()
