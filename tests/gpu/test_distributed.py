"""NCCL on the GPU: an all-reduce through `lbscale doctor`'s check (one process per visible GPU), more
processes than GPUs on a node refused in one line per rank before any process group exists, and an srun task
bound to one GPU mapped onto it whatever its local rank."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def test_nccl_all_reduce_sums_right(cuda, figure):
    from lbscale.doctor import OK, check_allreduce

    r = check_allreduce()
    assert r.status == OK and r.detail.startswith("nccl"), r.line()
    figure("NCCL all-reduce (doctor)", r.detail)


def test_more_ranks_than_gpus_is_refused_on_every_rank(cuda, tiny, tmp_path):
    import torch

    ranks = torch.cuda.device_count() + 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    out = tmp_path / "two"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                        f"--master_port={port}", "-m", "lbscale.cli", "train", "--data", str(tiny), "--out", str(out),
                        "--global-batch", "32", "--epochs", "1", "--model", "test_resnet", "--device", "cuda",
                        "--quiet"], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode != 0
    refusal = f"lbscale: error: {ranks} processes on this node but {ranks - 1} visible GPU(s)"
    # the first rank to refuse ends the job (torchrun stops the others, which may not have reached the check)
    assert refusal in r.stderr and "exitcode: 2" in r.stderr, r.stderr[-3000:]
    frames = [line for line in r.stderr.splitlines() if line.strip().startswith("File ")]
    assert not [f for f in frames if "lbscale" in f], r.stderr[-3000:]  # torchrun's own report only
    assert "Duplicate GPU" not in r.stderr and not (out / "summary.json").exists()


def test_an_srun_task_bound_to_one_gpu_uses_it_whatever_its_local_rank(cuda):
    import torch

    from lbscale.train.distributed import DistEnv, pick_device

    if torch.cuda.device_count() != 1:
        pytest.skip("the srun binding case is one visible GPU per task")
    env = DistEnv(rank=3, world_size=4, local_rank=1, launcher="slurm", local_world_size=2)
    assert pick_device("cuda", env) == torch.device("cuda", 0)
