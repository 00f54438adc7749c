"""SLURM in one place: the job's environment as one object, and the calls to sbatch / squeue / scontrol.

Everything else asks `SlurmEnv.current()` (job, array task, step, node list, CPUs, requeue count) instead of
reading SLURM_* variables itself, as submitit's JobEnvironment does.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lbscale.errors import LbscaleError


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _most_per_node(value: str | None) -> int | None:
    counts = [_int(part.split("(")[0]) for part in (value or "").split(",")]
    counts = [c for c in counts if c]
    return max(counts) if counts else None


@dataclass(frozen=True)
class SlurmEnv:
    """What SLURM tells a process about its job. All None (restarts 0) outside a job."""

    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    step_tasks: int | None = None  # SLURM_STEP_NUM_TASKS: set inside an srun step only
    procid: int | None = None
    localid: int = 0
    nodelist: str | None = None  # the step's nodes inside a step, else the job's
    cpus_per_task: int | None = None
    restart_count: int = 0  # how often the job was requeued
    tasks_per_node: int | None = None  # the step's most tasks on one node (SLURM_STEP_TASKS_PER_NODE: "4(x2),3")

    @classmethod
    def current(cls, environ=None) -> "SlurmEnv":
        env = os.environ if environ is None else environ
        return cls(job_id=env.get("SLURM_JOB_ID"), array_job_id=env.get("SLURM_ARRAY_JOB_ID"),
                   array_task_id=_int(env.get("SLURM_ARRAY_TASK_ID")),
                   step_tasks=_int(env.get("SLURM_STEP_NUM_TASKS")), procid=_int(env.get("SLURM_PROCID")),
                   localid=_int(env.get("SLURM_LOCALID")) or 0,
                   nodelist=env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"),
                   cpus_per_task=_int(env.get("SLURM_CPUS_PER_TASK")),
                   restart_count=_int(env.get("SLURM_RESTART_COUNT")) or 0,
                   tasks_per_node=_most_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")))

    @property
    def in_job(self) -> bool:
        return self.job_id is not None

    @property
    def in_multitask_step(self) -> bool:
        """One rank of an `srun` step of several tasks (a batch script alone has no step tasks)."""
        return self.procid is not None and (self.step_tasks or 0) > 1

    @property
    def job_name(self) -> str | None:
        """The id squeue and scontrol know this job by: `ARRAY_TASK` for an array task, else the job id."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    def hostnames(self) -> list[str]:
        return expand_nodelist(self.nodelist or "localhost")

    @property
    def port(self) -> int:
        return port_for_job(self.job_id or 0)


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


def rendezvous_address(first_host: str, suffix: str | None = None) -> str:
    """The address the ranks meet at. Without `suffix`: the first node's name, which each rank resolves itself
    (resolving it here could give the first node's own loopback name, 127.0.1.1 on Debian-style hosts). With
    one (on JSC's systems "i", the name on the InfiniBand network; the plain name is the management Ethernet,
    which other nodes may not reach): that name resolved on this machine, the first node, so every rank uses
    the same address; a name that does not resolve is an error."""
    if not suffix:
        return first_host
    name = first_host + suffix
    try:
        return socket.gethostbyname(name)
    except OSError:
        raise LbscaleError(f"rendezvous: {name} (the first node {first_host} + the profile's rendezvous_suffix "
                           f"{suffix!r}) does not resolve on {socket.gethostname()}") from None


def step_env(env: SlurmEnv, system: dict) -> dict:
    """The srun step's additions to the environment: the profile's `environment` (NCCL, Gloo settings; the
    rendered script exports them too, a hand-written one may not) and LBSCALE_MASTER_ADDR, the address every
    rank meets at (`distributed.detect_env` reads it): the profile's MASTER_ADDR where it sets one, else
    `rendezvous_address` of the job's first node, resolved here, on that node, where rank 0 runs. A
    MASTER_ADDR inherited from the submitting shell (sbatch exports the user's environment) is not used."""
    extra = {str(k): str(v) for k, v in (system.get("environment") or {}).items()}
    hosts = env.hostnames()
    addr = extra.get("MASTER_ADDR")
    if addr is None and hosts:
        addr = rendezvous_address(hosts[0], system.get("rendezvous_suffix"))
        if len(hosts) > 1 and _loopback(addr):
            raise LbscaleError(f"rendezvous: {hosts[0]}{system.get('rendezvous_suffix') or ''} resolves to the "
                               f"loopback address {addr} on the first node; the other nodes cannot reach it (set "
                               "the profile's rendezvous_suffix or MASTER_ADDR)")
    if addr is not None:
        extra["LBSCALE_MASTER_ADDR"] = addr
    return extra


def _loopback(addr: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def port_for_job(job_id: str | int) -> int:
    """A port derived from the SLURM job id, so concurrent jobs on one node do not collide."""
    return 20000 + int(job_id) % 40000


# --- the commands -------------------------------------------------------------------------------------
def job_active(job: str) -> bool | None:
    """Is the job (or array task `A_T`) still queued or running? None where SLURM cannot be asked."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return False if "Invalid job id" in out.stderr else None
    return bool(out.stdout.strip())


def submit(script: Path) -> str:
    """sbatch the script; returns the job id. A refusal (or no SLURM here) is one LbscaleError line."""
    try:
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise LbscaleError(f"sbatch {script}: no sbatch on this machine (is SLURM installed here?)") from None
    except subprocess.TimeoutExpired:
        raise LbscaleError(f"sbatch {script}: no answer from SLURM within 120 s") from None
    if out.returncode != 0:
        why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        raise LbscaleError(f"sbatch {script}: {why}")
    return out.stdout.strip().split(";")[0]


def wait_for_jobs(jobs: list[str], poll: float = 2.0) -> None:
    """Poll squeue until the jobs have left the queue (sbatch --wait is unreliable on small setups)."""
    while True:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i"], capture_output=True, text=True)
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(poll)


def requeue(job: str) -> bool:
    return subprocess.run(["scontrol", "requeue", job], check=False).returncode == 0
