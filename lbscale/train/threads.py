"""A trial's CPU threads on a shared node: its share of the CPUs it may use, and OpenMP threads that sleep while
they wait instead of spinning (OMP_WAIT_POLICY=passive). Spinning threads beside another busy process on the same
cores made a test_resnet epoch 170x slower (issue 43; docs/benchmarks.md, "Threads on a shared node"). Nothing
here imports torch: the wait policy is read once, when torch loads OpenMP, so it must be in the environment of the
process that first imports torch: every lbscale command's (cli.main sets it before any command runs, and the
processes a command starts inherit it) and the warm-start server's (sweep/warm.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping

WAIT_POLICY = {"OMP_WAIT_POLICY": "passive"}


def omp_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to `environ` before torch loads OpenMP: the passive wait policy, where the user set none."""
    return {k: v for k, v in WAIT_POLICY.items() if k not in environ}


def trial_threads(environ: Mapping[str, str], usable_cpus: int, local_processes: int = 1,
                  cpus_per_task: int | None = None, most: int | None = None) -> int | None:
    """The intra-op threads of one trial process, None where OMP_NUM_THREADS is set (the user's, or torchrun's one
    per process): SLURM's CPUs per task inside an srun step (`cpus_per_task`), else its share of the CPUs it may
    use (`usable_cpus`, the affinity mask) among the trial's `local_processes` on this node, at most `most` (torch's
    own default, one per physical core: hyper-threads do not add compute); at least 1."""
    if environ.get("OMP_NUM_THREADS"):
        return None
    if cpus_per_task:
        return cpus_per_task
    share = usable_cpus // max(1, local_processes)
    return max(1, min(share, most) if most else share)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: taskset, a cgroup's cpuset, SLURM's binding)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def prepare_process() -> None:
    """Before torch is imported in this process: the wait policy into its environment (where not set)."""
    os.environ.update(omp_env(os.environ))
