"""Running `lbscale train` as a real subprocess (torchrun for several ranks)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_cmd(*args, nproc: int = 1) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "lbscale.cli", "train", *map(str, args)]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            f"--master_port={free_port()}", "-m", "lbscale.cli", "train", *map(str, args)]


def env() -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for k in list(e):  # a test run inside a SLURM job must not look like an srun step
        if k.startswith("SLURM_"):
            del e[k]
    return e


def run_train(*args, nproc: int = 1, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(train_cmd(*args, nproc=nproc), capture_output=True, text=True, timeout=timeout, env=env())


def summary(out: Path) -> dict:
    return json.loads((Path(out) / "summary.json").read_text())
