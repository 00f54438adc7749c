"""`lbscale bench allreduce`: a real measurement in 2 gloo processes (torchrun), and its option errors."""

import json
import subprocess
import sys

import pytest

from lbscale.studies.allreduce import parse_sizes
from lbscale.errors import LbscaleError
from tests.train.helpers import env


@pytest.mark.slow
def test_real_run_writes_points_for_every_size_and_a_fit(tmp_path):
    out = tmp_path / "allreduce-ci.json"
    r = subprocess.run([sys.executable, "-m", "lbscale.cli", "bench", "allreduce", "--procs", "2",
                        "--sizes", "4K..256K", "--repeats", "3", "--warmup", "1", "--backend", "gloo",
                        "--system", "ci", "--out", str(out)],
                       capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("allreduce fit (gloo, 2 processes): alpha ") and str(out) in last, last
    doc = json.loads(out.read_text())
    assert doc["system"] == "ci" and doc["backend"] == "gloo" and doc["nodes"] == 1
    assert sorted(p["bytes"] for p in doc["points"]) == [4096 * 2 ** i for i in range(7)]
    assert all(p["procs"] == 2 and p["seconds"] > 0 for p in doc["points"])
    fit = doc["fit"]
    alpha, beta = reference_fit(doc["points"])  # the file's fit is the least-squares one of its own points
    assert fit["alpha_seconds"] == pytest.approx(alpha, rel=1e-6, abs=1e-15)
    assert fit["beta_seconds_per_byte"] == pytest.approx(beta, rel=1e-6, abs=1e-20)
    assert fit["fitted_on_procs"] == [2]
    assert "check" not in doc
    assert not list(tmp_path.glob(".allreduce-*"))  # the workers' scratch directory is gone


def test_sizes_parse():
    assert parse_sizes("4K..64K") == [4096, 8192, 16384, 32768, 65536]
    assert parse_sizes("4k,1M,64M") == [4096, 2 ** 20, 64 * 2 ** 20]
    assert parse_sizes("1G") == [2 ** 30]
    for bad in ("", "4K..1K", "3K..8K", "6", "x", "4K..", "0"):
        with pytest.raises(LbscaleError):
            parse_sizes(bad)


@pytest.mark.parametrize("args, message", [
    (["--procs", "1,2"], "--procs"),
    (["--procs", "2,x"], "--procs"),
    (["--sizes", "5"], "multiple of 4"),
    (["--procs", "2", "--fit-procs", "4"], "--fit-procs"),
    (["--repeats", "0"], "--repeats"),
    (["--system", "../x"], "--system"),
    (["--procs", "2", "--sizes", "1M"], "give two or more sizes"),  # refused before measuring
])
def test_bad_options_are_one_line_and_exit_2(run_cli, args, message):
    rc, out, err = run_cli("bench", "allreduce", *args)
    assert rc == 2
    assert err.count("\n") == 1 and message in err, err


def test_refuses_to_run_inside_an_srun_step(monkeypatch, run_cli):
    # each task of the step would start its own srun steps
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    rc, _, err = run_cli("bench", "allreduce", "--procs", "2")
    assert rc == 2 and "srun" in err and err.count("\n") == 1



@pytest.mark.slow
def test_a_failing_worker_is_one_error_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without GPUs (nccl must fail)")
    r = subprocess.run([sys.executable, "-m", "lbscale.cli", "bench", "allreduce", "--procs", "2", "--sizes", "4K,8K",
                        "--backend", "nccl", "--quiet"],
                       capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert r.stderr == ("lbscale: error: all-reduce at 2 processes failed (exit 1): --backend nccl: no GPU visible "
                        "here; measure with --backend gloo\n")
    assert not list(tmp_path.iterdir())  # neither a file nor the scratch directory


def reference_fit(points):
    """The ring fit computed another way: scipy's non-negative least squares of the relative error
    (alpha x1 + beta x2) / t - 1 over the measured points, x1 = 2 (p-1), x2 = 2 (p-1)/p n."""
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([[2.0 * (p["procs"] - 1), 2.0 * (p["procs"] - 1) / p["procs"] * p["bytes"]] for p in points])
    t = np.array([p["seconds"] for p in points])
    scale = np.linalg.norm(a / t[:, None], axis=0)
    u, _ = nnls(a / t[:, None] / scale, np.ones(len(t)))
    return u / scale
